"""One poison value, or one message that trips a bug, never loses the batch around it (real broker).

Before: a counter sample of 1e308 overflowed the rate (x8 for bits) and the percentile sketch raised;
the batch's 5,000 valid samples, and those of the next messages, were neither processed nor
dead-lettered (the retry skipped them: the batch had already moved the partition's offset).

Now: an absurd value is bad input (dead-lettered with its message, the rest processed); and a message
that makes processing raise is retried alone and dead-lettered as ``InternalError`` after the
partition's state was put back to before the batch, so every other sample is processed exactly once.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker
from models.settings import LockstepSettings
from streams.stages import Batch, Rate

from .kit import make_settings

pytestmark = pytest.mark.broker

T0 = 1764502800.0


def scrape(k: int, source: str = "gpu001", ports: int = 5000) -> list[dict[str, Any]]:
    """One NIC scrape: a bytes counter per port (the catalogue scales it x8 to bits/s)."""
    return [{"ts": T0 + k, "layer": "nic", "source": source, "metric": "port_xmit_data", "kind": "counter",
             "value": 1_000_000 * k + p, "labels": {"device": f"mlx5_{p % 8}", "port": str(p)}} for p in range(ports)]


def samples_processed(worker: Worker) -> float:
    return sum(s.value for m in worker.metrics.samples_in.collect() for s in m.samples if s.name.endswith("_total"))


async def run(settings: LockstepSettings, messages: list[bytes], done: Callable[[float, list[Any]], bool],
              before: list[bytes] = ()) -> tuple[float, list[dict[str, Any]], Worker]:
    """Produce ``before`` and wait until it is processed, then ``messages`` in one flush (one ingest batch)."""
    bootstrap = settings.kafka_bootstrap_servers or ""
    await create_topics(settings, bootstrap)
    cat = TopicCatalogue(settings)
    worker = Worker(settings, bootstrap)
    await worker.start()
    producer = await start_producer(settings, bootstrap)
    dlq: list[dict[str, Any]] = []
    try:
        for raw in before:
            await producer.send(cat.telemetry("nic"), raw, key=b"gpu001")
        await producer.flush()
        want = sum(len(orjson.loads(r)) for r in before)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and samples_processed(worker) < want:
            await asyncio.sleep(0.2)
        await asyncio.sleep(0)  # the snapshots of that progress are queued; written after the next flush
        for raw in messages:
            await producer.send(cat.telemetry("nic"), raw, key=b"gpu001")
        await producer.flush()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            dlq = await read_topic(settings, bootstrap, cat.dlq)
            if done(samples_processed(worker), dlq):
                break
            await asyncio.sleep(0.5)
        return samples_processed(worker), dlq, worker
    finally:
        await producer.stop()
        await worker.stop()


def test_a_poison_value_is_dead_lettered_and_its_batch_is_processed(broker: Any) -> None:
    settings = make_settings(broker.bootstrap)
    poisoned = scrape(3)
    poisoned[17]["value"] = 1e308
    messages = [orjson.dumps(scrape(k)) for k in (0, 1, 2)] + [orjson.dumps(poisoned)] + [
        orjson.dumps(scrape(k)) for k in (4, 5)]
    valid = 6 * 5000 - 1
    processed, dlq, _ = asyncio.run(run(settings, messages, lambda n, d: n >= valid and len(d) >= 1))
    assert processed == valid
    assert len(dlq) == 1, dlq
    d = dlq[0]
    assert "beyond +-2^64" in d["reason"] and d["error"] == "ValidationFailed"
    assert base64.b64decode(d["original"]) == messages[3] and d["offset"] == 3


def test_a_message_that_trips_a_bug_is_parked_alone_and_the_rest_processed_once(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug raises after the rate stage has folded the batch into the partition's state."""
    original = Rate.run

    def rate_with_a_bug(self: Rate, batch: Batch) -> None:
        original(self, batch)
        held = [] if batch.msg is None else batch.msg.tolist()  # each sample's message, as normalise left them
        if any(b"bug-trigger" in batch.messages[m][0] for m in set(held)):
            raise RuntimeError("a bug, injected")

    monkeypatch.setattr(Rate, "run", rate_with_a_bug)
    settings = make_settings(broker.bootstrap, snapshot_interval_s=1.0)
    before = [orjson.dumps(scrape(k, ports=200)) for k in range(6)]
    trigger = scrape(8, ports=200)
    trigger[0]["labels"] = {"device": "bug-trigger", "port": "1"}
    messages = [orjson.dumps(scrape(6, ports=200)), orjson.dumps(scrape(7, ports=200)), orjson.dumps(trigger),
                orjson.dumps(scrape(9, ports=200))]
    valid = 6 * 200 + 3 * 200  # the trigger message is parked whole
    processed, dlq, worker = asyncio.run(run(settings, messages, lambda n, d: n >= valid and len(d) >= 1, before))
    assert [d["error"] for d in dlq] == ["InternalError"], dlq
    assert base64.b64decode(dlq[0]["original"]) == messages[2] and "a bug, injected" in dlq[0]["reason"]
    assert processed == valid  # none lost, none counted twice
    retries = sum(s.value for m in worker.metrics.batch_retries.collect() for s in m.samples
                  if s.name.endswith("_total"))
    assert retries >= 1
