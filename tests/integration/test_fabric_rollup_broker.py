"""The fabric rollup is built where the telemetry is ingested and merged by every read model (issue 23),
through the real embedded broker: a worker that ingests none of the NIC and switch partitions answers
``/fabric/report`` exactly as the raw fold of that telemetry would.

Worker A ingests the ``roce-retransmits`` scenario (its ingest publishes the per-port summaries to
``fabric-rollup``) and stops. Worker B then joins the same group with the API: every input is
consumed and committed, so B ingests no sample, and its read model holds no raw telemetry (it does
not read those topics); it answers from the summaries alone. The expected report is computed from
the very messages produced, folded raw into a :class:`FabricRollup` as every read model did before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from lockstep.broker import EmbeddedBroker
from lockstep.replay import batch_messages, read_input, write_simulation
from streams.fabric import FABRIC_LAYERS, FabricRollup, fabric_report
from tests.web.client import get
from tests.web.conftest import _feed_seed_incident, read_model_caught_up, web_settings, worker_in_thread

pytestmark = [pytest.mark.broker]


def _raw_rollup(path: Path) -> FabricRollup:
    """The NIC and switch messages as _feed_seed_incident produces them, folded raw."""
    with open(path, "rb") as fh:
        data = read_input(fh)
    roll = FabricRollup()
    for layer, _, raws in batch_messages(data.samples):
        if layer in FABRIC_LAYERS:
            roll.fold_message(b"[" + b",".join(raws) + b"]")
    return roll


async def _run(settings: Any, bootstrap: str, path: Path) -> tuple[Any, dict[str, Any]]:
    from lockstep.worker import Worker

    ingester, _ = await _feed_seed_incident(settings, bootstrap, path)
    ingested = ingester.state.ingested_samples
    await ingester.stop()
    reader = Worker(settings, bootstrap, serve_web=True)
    await reader.start()
    await read_model_caught_up(reader)
    return reader, {"ingested_by_a": ingested}


@pytest.fixture(scope="module")
def reader(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("fabric-rollup")
    path = tmp / "roce.jsonl"
    write_simulation(path, "roce-retransmits")
    settings = web_settings(broker, tmp)
    with worker_in_thread("fabric-rollup", lambda: _run(settings, broker.bootstrap, path)) as (worker, facts, loop):
        yield worker, loop, path, facts


def test_a_worker_ingesting_no_fabric_partition_answers_the_report_of_the_raw_fold(reader: Any) -> None:
    worker, loop, path, facts = reader
    assert facts["ingested_by_a"] > 10_000  # A ingested the telemetry
    cat = worker.catalogue
    rm = worker.web.readmodel
    assert cat.fabric_rollup in rm.kinds
    assert not any(tp.topic in (cat.telemetry("nic"), cat.telemetry("switch")) for tp in rm.partitions)
    assert worker.state.ingested_samples == 0  # B ingested nothing, of any layer
    merged = rm.metrics.records.labels("fabric", "applied")._value.get()
    assert merged > 0

    async def expected() -> tuple[dict[str, Any], float]:
        store = worker.web.store
        raw = _raw_rollup(path)
        assert raw.latest == store.fabric.latest
        now = max(t for t in (store.fabric.latest, store.event_time) if t is not None)
        return orjson.loads(orjson.dumps(fabric_report(raw, worker.inventory, store, now))), raw.latest

    want, _ = asyncio.run_coroutine_threadsafe(expected(), loop).result(120)
    reply = get(worker.web_url, "/fabric/report")
    assert reply.status == 200, reply.body[:300]
    assert reply.json == want
    # A report with numbers: the faulty RoCE NIC's retransmits lead its group's loss evidence.
    loss = [g for g in reply.json["questions"]["loss"]["groups"] if (g["fabric"], g["tier"]) == ("roce", "host")]
    assert loss[0]["value"] > 0 and loss[0]["evidence"][0]["link"] == "gpu014 mlx5_0 port 1"
