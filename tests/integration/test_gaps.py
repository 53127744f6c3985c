"""Records Faust never hands to an agent are read from the broker, in order, and acknowledged (agents.gaps).

The hole is made the way Faust makes it (faust-streaming #216/#596): the partition's records are in the
broker, and the consumer's position moves past some of them before they reach the agent. Here the
partition is paused in Faust while records arrive, then sought forward, so the agent is handed offset
20 right after offset 9. Without the hole check offsets 10..19 are never processed and the group
commit stays at 10 for ever (Faust commits only a contiguous run of acknowledged offsets).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.worker import Worker
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

T0 = 1764502800.0


def scrape(k: int) -> bytes:
    return orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL",
                          "value": 90.0 + k % 3, "labels": {"gpu": str(g)}} for g in range(4)])


def annotation(k: int) -> bytes:
    return orjson.dumps({"type": "annotation", "annotation_id": f"a{k}", "job_id": "j1", "ts": T0 + 10_000 + k,
                         "kind": "config", "text": f"change {k}", "created_at": T0})


def counter(worker: Worker, name: str, **labels: str) -> float:
    for metric in worker.metrics.registry.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


async def until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.1)
    return check()


async def group_commit(settings: LockstepSettings, topic: str, partition: int) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=settings.app_id,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        return int(await consumer.committed(TopicPartition(topic, partition)) or 0)
    finally:
        await consumer.stop()


async def with_hole(settings: LockstepSettings, topic: str, make: Callable[[int], bytes],
                    processed: Callable[[Worker], int | None],
                    after: Callable[[Worker], Awaitable[Any]]) -> Any:
    """Send offsets 0..9, let them be processed, pause the partition, send 10..29, seek Faust to 20, resume."""
    from faust.types import TP

    await create_topics(settings, settings.kafka_bootstrap_servers or "")
    worker = Worker(settings, settings.kafka_bootstrap_servers or "")
    await worker.start()
    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "")
    try:
        for k in range(10):
            await producer.send(topic, make(k), key=b"k", partition=0)
        await producer.flush()
        assert await until(lambda: processed(worker) == 9, 60), processed(worker)
        tp = TP(topic, 0)
        worker.app.consumer.pause_partitions([tp])
        for k in range(10, 30):
            await producer.send(topic, make(k), key=b"k", partition=0)
        await producer.flush()
        await worker.app.consumer.seek(tp, 20)  # offsets 10..19 will never come from Faust
        worker.app.consumer.resume_partitions([tp])
        assert await until(lambda: processed(worker) == 29, 60), processed(worker)
        deadline = time.monotonic() + 30
        while await group_commit(settings, topic, 0) < 30 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        return await after(worker), await group_commit(settings, topic, 0)
    finally:
        await producer.stop()
        await worker.stop()


def test_a_hole_in_the_offsets_handed_to_ingest_is_read_from_the_broker_in_order(settings: LockstepSettings) -> None:
    topic = TopicCatalogue(settings).telemetry("gpu")

    def last(worker: Worker) -> int | None:
        pipe = worker.state.pipelines.get(f"{topic}:0") if worker.state else None
        return pipe.last_offset if pipe is not None else None

    async def figures(worker: Worker) -> dict[str, float]:
        return {name: counter(worker, name, topic=topic) for name in
                ("lockstep_samples_in_total", "lockstep_out_of_order_total", "lockstep_messages_in_total")} | {
            "filled": counter(worker, "lockstep_input_gaps_total", topic=topic, outcome="filled"),
            "lane": counter(worker, "lockstep_lane_records_total", lane="ingest", outcome="taken")}

    got, commit = asyncio.run(with_hole(settings, topic, scrape, last, figures))
    assert got["lockstep_samples_in_total"] == 30 * 4  # every sample, the hole's included
    assert got["lockstep_messages_in_total"] == 30
    assert got["lockstep_out_of_order_total"] == 0  # the hole was processed before offsets 20..29
    assert got["filled"] == 1
    assert got["lane"] == 20  # offsets 0..9 and 20..29 came a fetch at a time (agents.lane), the hole around it
    assert commit == 30  # the hole was acknowledged: the group commit passed it


def test_a_hole_in_the_offsets_handed_to_correlate_is_folded_in(settings: LockstepSettings) -> None:
    topic = TopicCatalogue(settings).anomalies

    def last(worker: Worker) -> int | None:
        corr = worker.state.correlators.get(0) if worker.state else None
        return corr.last_offset if corr is not None else None

    async def annotations(worker: Worker) -> tuple[list[str], float, float]:
        assert worker.state is not None
        ids = [a["annotation_id"] for a in worker.state.correlators[0].signals.annotations]
        return (ids, counter(worker, "lockstep_input_gaps_total", topic=topic, outcome="filled"),
                counter(worker, "lockstep_lane_records_total", lane="correlate", outcome="taken"))

    (ids, filled, lane), commit = asyncio.run(with_hole(settings, topic, annotation, last, annotations))
    assert ids == [f"a{k}" for k in range(30)]  # in offset order, none lost
    assert filled == 1
    assert lane == 20  # offsets 0..9 and 20..29 came through the correlate lane (agents.lane), the hole around it
    assert commit == 30


def load_scrape(k: int) -> bytes:
    """A Prometheus scrape of one gauge at T0 + k (the carrier's format; its own timestamp)."""
    return f"# TYPE node_load1 gauge\nnode_load1 {k}.5 {int((T0 + k) * 1000)}\n".encode()


def test_a_hole_in_the_offsets_handed_to_convert_is_converted_first(settings: LockstepSettings) -> None:
    """The convert agent reads around Faust's lost records as ingest and correlate do: before this, a
    rebalance could leave a carrier's records unconverted until a restart (seen in
    tests/faults/test_carrier_formats_rolling.py about one run in six)."""
    from lockstep.replay import read_topic

    settings = settings.model_copy(update={"carrier_formats": "prometheus"})
    cat = TopicCatalogue(settings)
    topic = cat._n("telemetry.raw.prometheus")

    def last(worker: Worker) -> int | None:
        return worker.app.lockstep_carriers.last_offset.get(f"{topic}:0") if worker.app is not None else None

    async def outputs(worker: Worker) -> tuple[list[float], float, float]:
        await worker.flush()
        converted = [float(s["ts"]) for rec in await read_topic(settings, settings.kafka_bootstrap_servers or "",
                                                                 cat.telemetry("host"))
                     for s in (rec if isinstance(rec, list) else [rec]) if s.get("metric") == "node_load1"]
        return (converted, counter(worker, "lockstep_input_gaps_total", topic=topic, outcome="filled"),
                counter(worker, "lockstep_carrier_messages_total", format="prometheus"))

    (converted, filled, messages), commit = asyncio.run(with_hole(settings, topic, load_scrape, last, outputs))
    assert converted == [T0 + k for k in range(30)]  # every scrape, once, the hole's before offsets 20..29
    assert filled == 1 and messages == 30
    assert commit == 30  # the hole was acknowledged: the group commit passed it


def test_a_hole_in_the_offsets_handed_to_forward_annotations_is_forwarded_first(settings: LockstepSettings) -> None:
    """The operators' annotations (the API's topic) reach correlation whole and in order across Faust's holes."""
    from lockstep.replay import read_topic

    cat = TopicCatalogue(settings)
    topic = cat.annotations

    def last(worker: Worker) -> int | None:
        return worker.state.relay_last_offset.get(f"{topic}:0") if worker.state is not None else None

    async def forwarded(worker: Worker) -> tuple[list[str], float]:
        await worker.flush()
        ids = [r["annotation_id"] for r in await read_topic(settings, settings.kafka_bootstrap_servers or "",
                                                             cat.anomalies) if r.get("type") == "annotation"]
        return ids, counter(worker, "lockstep_input_gaps_total", topic=topic, outcome="filled")

    def operator_annotation(k: int) -> bytes:  # as the API writes it (models.operator.AnnotationRecord)
        return orjson.dumps({"type": "annotation", "annotation_id": f"a{k}", "job_id": "j1", "ts": T0 + k,
                             "kind": "change", "text": f"change {k}", "created_at": T0})

    (ids, filled), commit = asyncio.run(with_hole(settings, topic, operator_annotation, last, forwarded))
    assert ids == [f"a{k}" for k in range(30)]  # every annotation once, the hole's before a20..a29
    assert filled == 1
    assert commit == 30
