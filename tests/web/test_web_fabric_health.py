"""Fabric health and placement end to end: the seed incident, replayed through the real broker and agents,
is on the ``fabric-health`` topic (leaf03 port 17 and leaf03: degraded, then recovered), in
``/fabric/health`` with its evidence and GPU-hours, in ``/capacity/heatmap``; ``/placement`` answers
from the live inventory (48 nodes, 44 of them running the seed's three jobs)."""

from __future__ import annotations

import pytest

from agents.topics import TopicCatalogue
from lockstep.replay import read_topic

from .client import get
from .conftest import LiveWorker
from .test_web_capacity import seed_slowdown

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1200)]


def test_the_fabric_health_topic_holds_the_port_and_its_leaf_degraded_then_recovered(seed_worker: LiveWorker) -> None:
    alert, cost = seed_slowdown(seed_worker)
    records = seed_worker.call(read_topic(seed_worker.settings, seed_worker.bootstrap,
                                          TopicCatalogue(seed_worker.settings).fabric_health))
    mine = [r for r in records if r["alert_id"] == alert["alert_id"]]
    by_entity: dict[tuple[str, str], list[str]] = {}
    for r in mine:
        by_entity.setdefault((r["entity"]["kind"], r["entity"]["id"]), []).append(r["state"])
    both = ["degraded", "recovered"]
    assert by_entity == {("port", "leaf03:17"): both, ("leaf", "leaf03"): both}
    fraction = 1 - 1 / alert["symptom"]["ratio"]
    for r in mine:
        assert r["type"] == "entity_health" and r["job_id"] == "llm-70b" and r["gpus"] == 256
        if r["state"] == "degraded":
            assert r["at_stake_gpus"] == pytest.approx(256 * fraction) and r["gpu_seconds"] is None
        else:
            assert r["at_stake_gpus"] == 0.0 and r["gpu_seconds"] == pytest.approx(cost, rel=1e-6)
    port = next(r for r in mine if r["entity"]["kind"] == "port")
    assert port["nodes"] == seed_worker.worker.inventory.nodes_behind_port("leaf03", "17") == ["gpu019"]


def test_fabric_health_api_lists_the_recovered_port_with_its_evidence_and_cost(seed_worker: LiveWorker) -> None:
    alert, cost = seed_slowdown(seed_worker)
    r = get(seed_worker.url, "/fabric/health?window=7d")
    assert r.status == 200, r.body
    d = r.json
    assert [(e["kind"], e["id"], e["state"]) for e in d["entities"]] == [
        ("port", "leaf03:17", "recovered"), ("leaf", "leaf03", "recovered")]
    port, leaf = d["entities"]
    assert port["gpu_seconds"] == pytest.approx(cost, rel=1e-6) and port["at_stake_gpus"] == 0.0
    assert port["nodes"] == ["gpu019"] and len(leaf["nodes"]) == 8 and port["jobs"] == ["llm-70b"]
    (ev,) = port["evidence"]
    assert ev["alert_id"] == alert["alert_id"] and ev["status"] == "resolved" and ev["end_iso"] == alert["resolved_at"]
    assert ev["root_cause"] == {"layer": "switch", "source": "leaf03", "labels": {"port": "17"}}
    assert ev["first_mover"]["source"] == "leaf03" and ev["first_mover"]["labels"].get("port") == "17"
    assert d["drain"] == [] and d["exclude"] == "" and d["degraded"] == 0  # one incident, fixed: nothing to drain
    for bad, says in [("window=7", "window must be"), ("limit=0", "limit"), ("by=leaf", "unknown query")]:
        reply = get(seed_worker.url, f"/fabric/health?{bad}")
        assert reply.status == 400 and says in reply.json["error"], (bad, reply.json)


def test_the_heatmap_puts_the_incident_on_leaf03_in_its_hour(seed_worker: LiveWorker) -> None:
    _, cost = seed_slowdown(seed_worker)
    d = get(seed_worker.url, "/capacity/heatmap?by=leaf&window=1d&bucket=1h").json
    assert d["bucket_s"] == 3600 and len(d["starts"]) in (24, 25)
    (row,) = d["rows"]
    assert row["id"] == "leaf03" and row["gpu_hours"] == pytest.approx(cost / 3600, abs=1e-3)
    hot = [i for i, v in enumerate(row["values"]) if v > 0]
    assert len(hot) in (1, 2) and sum(row["values"]) == pytest.approx(cost / 3600, abs=1e-3)
    assert get(seed_worker.url, "/capacity/heatmap?bucket=1w&window=1d").status == 400


def test_placement_answers_from_the_live_inventory(seed_worker: LiveWorker) -> None:
    d = get(seed_worker.url, "/placement?gpus=32").json
    assert d["busy"] == 44 and d["free_gpus"] == 32 and d["exclude"] == ""  # gpu045-048 are the free ones
    first = d["candidates"][0]
    assert first["rank"] == 1 and first["hostlist"] == "gpu[045-048]" and first["leaves"] == ["leaf06"]
    assert first["reason"] == "32 GPUs on 4 nodes under 1 leaf (leaf06): no spine hop"
    assert get(seed_worker.url, "/placement?gpus=64").json["reason"] == "only 32 GPUs are free and healthy; 64 asked"
    loader = get(seed_worker.url, "/placement?gpus=16&class=data-loader-heavy").json
    assert loader["class"] == "data-loader-heavy" and loader["candidates"][0]["gpus"] == 16
    for bad, says in [("gpus=0", "gpus"), ("", "gpus is required"), ("gpus=8&class=bursty", "class must be one of")]:
        reply = get(seed_worker.url, f"/placement?{bad}")
        assert reply.status == 400 and says in reply.json["error"], (bad, reply.json)


def test_fabric_health_answers_conform_to_the_openapi_document(seed_worker: LiveWorker) -> None:
    from agents.openapi import openapi_document

    from .test_web_openapi import conforms

    doc = openapi_document()
    for path, template in [("/fabric/health", "/fabric/health"), ("/fabric/health?window=x", "/fabric/health"),
                           ("/placement?gpus=32", "/placement"), ("/placement?gpus=999", "/placement"),
                           ("/placement?gpus=x", "/placement"), ("/capacity/heatmap", "/capacity/heatmap"),
                           ("/capacity/heatmap?by=port&window=2h&bucket=10m", "/capacity/heatmap")]:
        conforms(doc, get(seed_worker.url, path), template)


def test_before_and_after_the_seed_incident_step_time_and_the_ports_errors_fall_back(seed_worker: LiveWorker) -> None:
    alert, _ = seed_slowdown(seed_worker)
    r = get(seed_worker.url, "/capacity/effects?window=7d")
    assert r.status == 200, r.body
    (inc,) = r.json["incidents"]
    assert inc["alert_id"] == alert["alert_id"] and inc["held"] and inc["cause_lane"] == "fabric_errors"
    st, cause = inc["step_time"], inc["cause"]
    # the slowest rank's step time roughly doubled during the incident, and came back after it
    assert st["during"]["n"] >= 50 and st["after"]["n"] >= 10 and st["baseline"]["n"] >= 30
    assert st["during"]["mean"] > 1.5 * st["after"]["mean"]
    assert st["change"] < 0 and st["ci95"][1] < 0 and st["significant"]
    assert abs(st["vs_baseline"]["relative"]) < 0.1  # back within 10% of before the incident
    # the port's symbol errors (the job's worst fabric entity) stopped
    assert cause["during"]["mean"] > 10 * max(cause["after"]["mean"], 0.1) and cause["significant"]
    for bad in ("limit=0", "window=7", "limit=201"):
        assert get(seed_worker.url, f"/capacity/effects?{bad}").status == 400


def test_before_and_after_conforms_to_the_openapi_document(seed_worker: LiveWorker) -> None:
    from agents.openapi import openapi_document

    from .test_web_openapi import conforms

    doc = openapi_document()
    for path in ("/capacity/effects", "/capacity/effects?window=1h", "/capacity/effects?limit=x"):
        conforms(doc, get(seed_worker.url, path), "/capacity/effects")
