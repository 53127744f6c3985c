"""``LOCKSTEP_CARRIER_FORMATS`` through the real broker: a worker creates, subscribes to and converts only
the carriers it enables, says which existing carrier topics it leaves unread, and still reads native
telemetry with none enabled.

The setting exists because every subscribed topic is listed in each of the worker's fetch requests,
data or not (docs/performance.md, "Twenty-first session"); what it must never do is lose input
silently, hence the warning and the errors for names that are not formats (agents/topics.py doctests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
import pytest

from agents.carriers import carrier_metrics
from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.worker import Worker
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

T0 = 1764502800.0
SCRAPE = (b"# TYPE SymbolErrorCounter counter\n"
          b'SymbolErrorCounter{port="17"} 5 1764502800000\n'
          b'SymbolErrorCounter{port="18"} 0 1764502800000\n')


def native(k: int) -> bytes:
    return orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL",
                          "value": 90.0, "labels": {"gpu": str(g)}} for g in range(4)])


def counted(metric: Any, **labels: str) -> float:
    """The ``_total`` of a prometheus_client counter, over the children whose labels include ``labels``."""
    return sum(s.value for m in metric.collect() for s in m.samples
               if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))


async def assigned_topics(worker: Worker, want: str, timeout_s: float = 60.0) -> set[str]:
    """The topics of the worker's Faust consumer's assignment, once it includes ``want``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topics = {tp.topic for tp in worker.app.consumer.assignment()}
        if want in topics:
            return topics
        await asyncio.sleep(0.2)
    raise AssertionError(f"{want} never assigned; got {sorted(topics)}")


async def wait_for(check: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_reads_only_the_carriers_it_enables_and_names_the_ones_it_leaves(
        settings: LockstepSettings, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lockstep.topics")
    every = TopicCatalogue(settings)
    only = settings.model_copy(update={"carrier_formats": "prometheus, slurm-squeue"})
    cat = TopicCatalogue(only)
    ufm = every._n("telemetry.raw.ufm")

    async def go() -> tuple[list[str], set[str], float, float]:
        assert settings.kafka_bootstrap_servers
        bootstrap = settings.kafka_bootstrap_servers
        created = await create_topics(only, bootstrap)
        # a deployment that used UFM before: its carrier topic exists, and now nobody reads it
        admin_created = await create_topics(settings.model_copy(update={"carrier_formats": "ufm"}), bootstrap)
        assert admin_created == [ufm]
        worker = Worker(only, bootstrap)
        await create_topics(only, bootstrap)  # what `lockstep worker` does before it starts
        await worker.start()
        producer = await start_producer(only, bootstrap)
        try:
            topics = await assigned_topics(worker, cat._n("telemetry.raw.prometheus"))
            await producer.send(cat._n("telemetry.raw.prometheus"), SCRAPE, key=b"leaf03")
            await producer.send(ufm, SCRAPE, key=b"ufm01")  # left where it is, unconverted
            for k in range(3):
                await producer.send(cat.telemetry("gpu"), native(k), key=b"gpu001")
            await producer.flush()
            cm = carrier_metrics(worker.metrics)
            await wait_for(lambda: counted(cm.messages, format="prometheus") >= 1
                           and counted(worker.metrics.samples_in) >= 12 + 2, "the scrape and the native samples")
            return created, topics, counted(cm.messages, format="prometheus"), counted(cm.messages, format="ufm")
        finally:
            await producer.stop()
            await worker.stop()

    created, topics, prometheus, ufm_converted = asyncio.run(go())
    raw = {t for t in topics if ".raw." in t}
    assert raw == {cat._n("telemetry.raw.prometheus"), cat._n("inventory.raw.slurm-squeue")}
    assert cat.telemetry("gpu") in topics
    assert [t for t in created if ".raw." in t] == [cat._n("telemetry.raw.prometheus"),
                                                    cat._n("inventory.raw.slurm-squeue")]
    assert ufm not in created and every._n("telemetry.raw.vector") not in created
    assert prometheus == 1 and ufm_converted == 0
    warned = [r.getMessage() for r in caplog.records if "=prometheus, slurm-squeue does not read" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith(f"unconverted): {ufm}"), warned
    # and the other way round: the UFM-only creation named the two carriers it leaves
    assert any(r.getMessage().endswith(f"unconverted): {cat._n('inventory.raw.slurm-squeue')}, "
                                       f"{cat._n('telemetry.raw.prometheus')}") for r in caplog.records)


def test_with_no_carriers_a_worker_runs_no_convert_agent_and_still_reads_native_telemetry(
        settings: LockstepSettings) -> None:
    none = settings.model_copy(update={"carrier_formats": "none"})
    cat = TopicCatalogue(none)

    async def go() -> tuple[list[str], set[str], float]:
        assert settings.kafka_bootstrap_servers
        bootstrap = settings.kafka_bootstrap_servers
        created = await create_topics(none, bootstrap)
        worker = Worker(none, bootstrap)
        await worker.start()
        producer = await start_producer(none, bootstrap)
        try:
            topics = await assigned_topics(worker, cat.telemetry("gpu"))
            for k in range(5):
                await producer.send(cat.telemetry("gpu"), native(k), key=b"gpu001")
            await producer.flush()
            await wait_for(lambda: counted(worker.metrics.samples_in) >= 20, "20 native samples")
            agents = {a.name for a in worker.app.agents.values()}
            assert not any("convert" in a for a in agents), agents
            return created, topics, counted(worker.metrics.samples_in)
        finally:
            await producer.stop()
            await worker.stop()

    created, topics, samples = asyncio.run(go())
    assert samples == 20
    assert not [t for t in created if ".raw." in t or "carrier_state" in t]
    assert not [t for t in topics if ".raw." in t or "carrier_state" in t]
