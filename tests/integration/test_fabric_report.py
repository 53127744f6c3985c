"""The fabric report through the real embedded broker: a simulated scenario fed to a real worker,
then ``GET /fabric/report`` and ``lockstep fabric`` against its API.

The ``roce-retransmits`` scenario runs the 16-node lab cluster (InfiniBand gpu001-012, RoCE
gpu013-016): gpu014's RoCE NIC starts retransmitting and roce-c slows down. The simulator's
inventory gives hosts' links 200 Gb/s (as ``ibnetdiscover`` gives ``4x HDR``) and switch-to-switch
ports 400 Gb/s (a switch event's ``ports``), and every switch port, the spines' too, reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.openapi import openapi_document
from lockstep.broker import EmbeddedBroker
from lockstep.cli import main
from lockstep.replay import batch_messages, read_input, write_simulation
from streams.fabric import FABRIC_LAYERS, QUESTIONS, FabricRollup, fabric_report
from tests.web.client import get
from tests.web.conftest import _feed_seed_incident, web_settings, worker_in_thread
from tests.web.test_web_openapi import conforms


def _line_rates(path: Path) -> tuple[set[float], set[float]]:
    """The line rates the replay file's inventory gives: hosts' links, switch-to-switch ports."""
    hosts: set[float] = set()
    switches: set[float] = set()
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec.get("kind") == "link":
            hosts.add(rec["speed_gbps"])
        elif rec.get("kind") == "switch":
            switches |= {p["speed_gbps"] for p in rec["ports"].values()}
    return hosts, switches


@pytest.fixture(scope="module")
def fabric_worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("fabric")
    path = tmp / "roce.jsonl"
    write_simulation(path, "roce-retransmits")
    assert _line_rates(path) == ({200.0}, {400.0})
    settings = web_settings(broker, tmp)
    with worker_in_thread("fabric-worker", lambda: _feed_seed_incident(settings, broker.bootstrap, path)) as (
            worker, _, loop):
        worker.test_loop, worker.test_path = loop, path  # for the raw-fold comparison below
        yield worker


def _group(report: dict[str, Any], question: str, fabric: str, tier: str) -> dict[str, Any]:
    found = [g for g in report["questions"][question]["groups"] if (g["fabric"], g["tier"]) == (fabric, tier)]
    assert len(found) == 1, (question, fabric, tier, report["questions"][question]["groups"])
    return found[0]


def test_every_fabric_question_has_a_number_and_its_evidence(fabric_worker: Any) -> None:
    reply = get(fabric_worker.web_url, "/fabric/report")
    assert reply.status == 200, reply.body[:300]
    conforms(openapi_document(), reply, "/fabric/report")
    report = reply.json
    assert report["fabrics"] == ["infiniband", "roce"]
    for q in QUESTIONS:
        answered = [g for g in report["questions"][q]["groups"] if g["value"] is not None and g["evidence"]]
        assert answered, f"{q}: no group with a number and evidence: {report['questions'][q]}"

    # Bandwidth: the simulated IB NICs send ~2.5e9 B/s = 20 Gb/s on 200 Gb/s links.
    ib = _group(report, "bandwidth", "infiniband", "host")
    assert ib["links_measured"] == 12 and ib["links_without_line_rate"] == 0
    assert 0.08 < ib["p50"] < 0.12 and ib["p50"] <= ib["p99"] < 0.15
    # ... and so do the RoCE NICs (tx_bytes_phy), and the leaves' and spines' switch-to-switch ports
    # (~19.2 Gb/s on 400 Gb/s, measured against the switch events' port speeds).
    roce = _group(report, "bandwidth", "roce", "host")
    assert roce["links_measured"] == 4 and roce["links_without_line_rate"] == 0 and 0.08 < roce["p50"] < 0.12
    for tier in ("leaf", "spine"):  # a leaf's uplinks are rated too (none without a line rate)
        sw = _group(report, "bandwidth", "infiniband", tier)
        assert sw["links_without_line_rate"] == 0 and sw["value"] is not None, sw
    spine = _group(report, "bandwidth", "infiniband", "spine")["evidence"]
    assert spine and all(r["speed_gbps"] == 400.0 and 0.04 < r["p50"] < 0.06 for r in spine), spine
    # Congestion: every IB NIC reports XmitWait; the RoCE NICs CNPs.
    assert set(_group(report, "congestion", "infiniband", "host")["by_kind"]) == {"xmit_wait"}
    assert set(_group(report, "congestion", "roce", "host")["by_kind"]) == {"cnp"}
    # Loss: the faulty RoCE NIC leads its group's evidence.
    roce_loss = _group(report, "loss", "roce", "host")
    assert roce_loss["value"] > 0 and roce_loss["evidence"][0]["link"] == "gpu014 mlx5_0 port 1"
    assert roce_loss["ports_with_errors"] == 1
    # Coverage: every NIC of the inventory reported up to the end of the scenario.
    for fabric, nics in (("infiniband", 12), ("roce", 4)):
        cov = _group(report, "telemetry", fabric, "host")
        assert (cov["value"], cov["expected"], cov["silent"]) == (1.0, nics, [])
    spines = _group(report, "telemetry", "infiniband", "spine")
    assert spines["value"] == 1.0 and spines["silent"] == [], spines
    # Placement: the lab jobs, each against the fewest leaves its size allows.
    jobs = {j["job_id"] for g in report["questions"]["placement"]["groups"] for j in g["evidence"]}
    assert "roce-c" in jobs
    # Diagnosability: roce-c's slowdown names the NIC as its first mover.
    diag = _group(report, "diagnosability", "roce", "all")
    assert diag["incidents"] >= 1 and diag["share_named"] == 1.0 and diag["value"] > 0
    assert any(r["first_mover"] == "nic gpu014" and r["job_id"] == "roce-c" for r in diag["evidence"])


def test_the_fabric_command_prints_the_six_questions(fabric_worker: Any) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["fabric", "--url", fabric_worker.web_url])
    text = out.getvalue()
    assert code == 0, text
    for q in QUESTIONS:
        assert f"\n{q}: " in text
    assert "gpu014 mlx5_0 port 1" in text


def _raw_rollup(path: Path) -> FabricRollup:
    """The NIC and switch messages as _feed_seed_incident produces them, folded raw (as every read model
    did before the rollup moved to ingest)."""
    with open(path, "rb") as fh:
        data = read_input(fh)
    roll = FabricRollup()
    for layer, _, raws in batch_messages(data.samples):
        if layer in FABRIC_LAYERS:
            roll.fold_message(b"[" + b",".join(raws) + b"]")
    return roll


def test_the_report_from_the_published_summaries_is_the_raw_folds(fabric_worker: Any) -> None:
    """The fabric rollup is folded where the telemetry is ingested and merged by every read model from
    ``fabric-rollup`` (issue 23): the read model does not read ``telemetry.nic`` or ``telemetry.switch``
    at all, so whichever worker answers, ``/fabric/report`` comes from the summaries alone, and it is
    exactly the report of the produced messages folded raw."""
    worker, loop = fabric_worker, fabric_worker.test_loop
    cat, rm = worker.catalogue, worker.web.readmodel
    assert cat.fabric_rollup in rm.kinds
    assert not any(tp.topic in (cat.telemetry("nic"), cat.telemetry("switch")) for tp in rm.partitions)
    assert rm.metrics.records.labels("fabric", "applied")._value.get() > 0

    async def expected() -> dict[str, Any]:
        store = worker.web.store
        raw = _raw_rollup(fabric_worker.test_path)
        assert raw.latest == store.fabric.latest
        now = max(t for t in (store.fabric.latest, store.event_time) if t is not None)
        return orjson.loads(orjson.dumps(fabric_report(raw, worker.inventory, store, now)))  # type: ignore[no-any-return]

    want = asyncio.run_coroutine_threadsafe(expected(), loop).result(120)
    reply = get(worker.web_url, "/fabric/report")
    assert reply.status == 200, reply.body[:300]
    assert reply.json == want
