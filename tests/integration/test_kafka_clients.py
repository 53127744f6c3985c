"""A librdkafka client against the embedded broker: telemetry in and alerts out of a real worker.

``confluent-kafka`` (a dev extra; its wheel bundles a current librdkafka) produces a small incident
(the ``xid`` scenario on its 16-node cluster: inventory, every sample, then end-of-input markers)
and consumes the ``alerts`` topic in a consumer group, as a third-party tool at a site would.
docs/operations.md lists the clients known to work with the embedded broker.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import event_time_order, read_input, wait_inventory_loaded, write_simulation
from lockstep.worker import Worker
from models.inventory import inventory_key
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev extra: pip install -e '.[dev]'")


def produce_all(bootstrap: str, records: list[tuple[str, bytes, bytes | None, int | None]]) -> None:
    """Produce ``(topic, value, key, partition)`` records with librdkafka; raise on any delivery error."""
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for topic, value, key, partition in records:
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value, key=key, on_delivery=report)
                else:
                    producer.produce(topic, value, key=key, partition=partition, on_delivery=report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(60)
    assert left == 0 and errors == [], (left, errors[:5])


def consume_alerts(bootstrap: str, topic: str, group: str, want: int, timeout_s: float) -> list[dict[str, Any]]:
    """Alerts read in a consumer group (subscribe, join, fetch, commit) until ``want`` came or time ran out."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(orjson.loads(msg.value()))
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(420)  # a 16-node scenario through a real worker: ~50 s here, more on a loaded machine
def test_confluent_kafka_produces_telemetry_and_consumes_alerts(settings: LockstepSettings, tmp_path: Path) -> None:
    assert settings.kafka_bootstrap_servers
    bootstrap = settings.kafka_bootstrap_servers
    path = tmp_path / "xid.jsonl"
    write_simulation(path, "xid")
    with path.open("rb") as fh:
        data = read_input(fh)
    cat = TopicCatalogue(settings)

    async def go() -> list[dict[str, Any]]:
        await create_topics(settings, bootstrap)
        loop = asyncio.get_running_loop()
        inventory = [(cat.inventory, e.model_dump_json().encode(), inventory_key(e).encode(), None)
                     for _, _, e in data.inventory]
        await loop.run_in_executor(None, produce_all, bootstrap, inventory)
        worker = Worker(settings, bootstrap, expected_origins=cat.telemetry_origins())
        await worker.start()
        try:
            await wait_inventory_loaded(worker, settings, bootstrap, cat.inventory, 60)
            telemetry: list[tuple[str, bytes, bytes | None, int | None]] = []
            for item in event_time_order(data.samples, []):
                layer, key, raws = item  # type: ignore[misc]
                telemetry.append((cat.telemetry(layer), b"[" + b",".join(raws) + b"]", key.encode(), None))
            eos = orjson.dumps({"lockstep_control": "eos"})
            telemetry += [(t, eos, None, p) for t in cat.telemetry_topics for p in range(settings.partitions)]
            await loop.run_in_executor(None, produce_all, bootstrap, telemetry)
            return await loop.run_in_executor(None, consume_alerts, bootstrap, cat.alerts,
                                              f"site-tool-{uuid.uuid4().hex[:6]}", 2, 180.0)
        finally:
            await worker.stop()

    alerts = asyncio.run(go())
    assert [(a["status"], a["type"], a["job_id"], a["root_cause"]["source"], a["root_cause"]["labels"].get("gpu"))
            for a in alerts] == [("firing", "job_slowdown", "train-a", "gpu005", "3"),
                                 ("resolved", "job_slowdown", "train-a", "gpu005", "3")]
    # The wheel's own librdkafka, not Debian's 2.0.2, which the embedded broker refuses (docs/operations.md).
    assert tuple(int(x) for x in ck.libversion()[0].split(".")[:2]) >= (2, 1)
