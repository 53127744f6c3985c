"""The GPU-time lost ledger end to end: the seed incident, replayed through the real broker and agents,
is on the ``capacity`` topic, in ``/capacity`` and in ``lockstep capacity``, costed by the formula from
the alert itself (GPUs x (1 - 1/ratio) x (resolved_at - onset)) and charged to leaf03 port 17."""

from __future__ import annotations

from typing import Any

import pytest

from agents.topics import TopicCatalogue
from lockstep.replay import read_topic
from models.timeutil import parse_ts

from .client import get
from .conftest import LiveWorker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1200)]

JOB = "llm-70b"


def seed_slowdown(w: LiveWorker) -> tuple[dict[str, Any], float]:
    """The seed incident's resolved slowdown on the ``alerts`` topic, and its cost by the formula."""
    alerts = w.call(read_topic(w.settings, w.bootstrap, TopicCatalogue(w.settings).alerts))
    resolved = [a for a in alerts if a["type"] == "job_slowdown" and a["status"] == "resolved"]
    assert len(resolved) == 1, alerts
    a = resolved[0]
    ratio = a["symptom"]["value"] / a["symptom"]["baseline"]
    assert ratio > 1.5  # the step time roughly doubled
    duration = parse_ts(a["resolved_at"]) - parse_ts(a["symptom"]["onset"])
    assert duration > 0
    return a, a["gpus"] * (1 - 1 / a["symptom"]["ratio"]) * duration


def test_the_capacity_topic_holds_the_seed_incident_costed_and_attributed(seed_worker: LiveWorker) -> None:
    alert, cost = seed_slowdown(seed_worker)
    records = seed_worker.call(read_topic(seed_worker.settings, seed_worker.bootstrap,
                                          TopicCatalogue(seed_worker.settings).capacity))
    mine = [r for r in records if r["alert_id"] == alert["alert_id"]]
    assert [r["status"] for r in mine] == ["firing", "resolved"]  # one per alert record, in order
    assert all(r["type"] == "incident_cost" and r["job_id"] == JOB and r["gpus"] == 256 for r in mine)
    final = mine[-1]
    assert final["entities"] == [{"kind": "port", "id": "leaf03:17"}, {"kind": "leaf", "id": "leaf03"}]
    assert final["domain"] == "network" and final["end_iso"] == alert["resolved_at"]
    assert final["gpu_seconds"] == pytest.approx(cost, rel=1e-6)
    assert mine[0]["gpu_seconds"] is None and mine[0]["end"] is None  # while firing it depends on when you ask
    assert {r["alert_type"] for r in records} <= {"job_slowdown", "straggler"}


def test_capacity_api_ranks_the_port_and_its_leaf_first_and_says_they_are_fixed(seed_worker: LiveWorker) -> None:
    _, cost = seed_slowdown(seed_worker)
    r = get(seed_worker.url, "/capacity?by=entity&window=7d")
    assert r.status == 200, r.body
    d = r.json
    assert d["by"] == "entity" and d["window"] == "7d" and d["window_s"] == 7 * 86400
    top = {(row["kind"], row["id"]): row for row in d["rows"][:2]}
    assert set(top) == {("port", "leaf03:17"), ("leaf", "leaf03")}
    for row in top.values():
        assert row["gpu_seconds"] == pytest.approx(cost, rel=1e-6) and row["gpu_hours"] == pytest.approx(
            cost / 3600, abs=1e-4)
        assert row["fixed"] and row["open"] == 0 and row["jobs"] == [JOB] and row["domains"] == ["network"]
    assert d["gpu_seconds"] == pytest.approx(cost, rel=1e-6)  # the total counts the incident once
    by_job = get(seed_worker.url, "/capacity?by=job&window=day").json
    assert [(row["id"], row["incidents"]) for row in by_job["rows"]] == [(JOB, 1)]
    assert [row["id"] for row in get(seed_worker.url, "/capacity?by=domain").json["rows"]] == ["network"]
    assert get(seed_worker.url, "/capacity?by=leaf&limit=1").json["rows"][0]["id"] == "leaf03"
    for bad, says in [("by=rack", "by must be one of"), ("window=7", "window must be"), ("limit=0", "limit"),
                      ("since=1", "since")]:
        reply = get(seed_worker.url, f"/capacity?{bad}")
        assert reply.status == 400 and says in reply.json["error"], (bad, reply.json)


def test_lockstep_capacity_prints_the_ledger_from_the_api_and_from_the_topic(
        seed_worker: LiveWorker, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep.cli import main

    _, cost = seed_slowdown(seed_worker)
    assert main(["capacity", "--by", "leaf", "--url", seed_worker.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU-time lost by leaf over 7d to ") and f"{cost / 3600:,.2f} GPU-hours in 1 incident" in out
    line = out.splitlines()[2].split()
    assert line[:2] == ["leaf", "leaf03"] and line[5] == "yes" and line[6] == JOB
    # The same figures with no worker: the topic, rolled up by the command itself.
    monkeypatch.setenv("LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", seed_worker.bootstrap)
    monkeypatch.setenv("LOCKSTEP_TOPIC_PREFIX", seed_worker.settings.topic_prefix)
    assert main(["capacity", "--by", "port", "--kafka", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert [(row["id"], row["fixed"]) for row in d["rows"]] == [("leaf03:17", True)]
    assert d["rows"][0]["gpu_seconds"] == pytest.approx(cost, rel=1e-6)
    assert main(["capacity", "--url", "http://127.0.0.1:9", "--timeout", "2"]) == 2


def test_capacity_answers_conform_to_the_openapi_document(seed_worker: LiveWorker) -> None:
    from agents.openapi import openapi_document

    from .test_web_openapi import conforms

    doc = openapi_document()
    for path in ("/capacity?by=entity&window=7d", "/capacity?by=pool", "/capacity?window=1h", "/capacity?by=x"):
        conforms(doc, get(seed_worker.url, path), "/capacity")
