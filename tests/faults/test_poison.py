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
              before: list[bytes] = (), partition_of: Callable[[bytes], int] | None = None
              ) -> tuple[float, list[dict[str, Any]], Worker]:
    """Produce ``before`` and wait until it is processed, then ``messages`` in one flush (one ingest batch);
    each message to ``partition_of(message)`` when given, else by its key."""
    bootstrap = settings.kafka_bootstrap_servers or ""
    await create_topics(settings, bootstrap)
    cat = TopicCatalogue(settings)
    worker = Worker(settings, bootstrap)
    await worker.start()
    producer = await start_producer(settings, bootstrap)
    dlq: list[dict[str, Any]] = []
    try:
        def where(raw: bytes) -> int | None:
            return None if partition_of is None else partition_of(raw)

        for raw in before:
            await producer.send(cat.telemetry("nic"), raw, key=b"gpu001", partition=where(raw))
        await producer.flush()
        want = sum(len(orjson.loads(r)) for r in before)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and samples_processed(worker) < want:
            await asyncio.sleep(0.2)
        await asyncio.sleep(0)  # the snapshots of that progress are queued; written after the next flush
        for raw in messages:
            await producer.send(cat.telemetry("nic"), raw, key=b"gpu001", partition=where(raw))
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
    assert retries >= 1  # 2 when both partitions came in one batch (as in every run here): both were retried


def test_a_bug_in_the_score_shared_by_two_partitions_parks_one_message_and_loses_nothing(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker scores its input partitions together (one detector bank): a bug there raises for every
    partition of the batch. Each is put back to its snapshot and retried message by message; the message
    that trips the bug alone is parked, every other sample of both partitions is processed once."""
    import streams.pipeline as pipeline
    from streams.stages.score import Score, score_together

    def tripped(batches: list[Batch]) -> bool:
        return any(b"bug-trigger" in raw for b in batches for raw, _ in b.messages)

    def together_with_a_bug(batches: list[Batch], timer: Any = None) -> None:
        if tripped(batches):
            raise RuntimeError("a bug in the shared score, injected")
        score_together(batches, timer)

    alone = Score.run

    def alone_with_a_bug(self: Score, batch: Batch) -> None:
        if tripped([batch]):
            raise RuntimeError("a bug in the shared score, injected")
        alone(self, batch)

    monkeypatch.setattr(pipeline, "score_together", together_with_a_bug)
    monkeypatch.setattr(Score, "run", alone_with_a_bug)
    settings = make_settings(broker.bootstrap, snapshot_interval_s=1.0)
    sources = ("gpu001", "gpu002")

    def partition_of(raw: bytes) -> int:  # the two sources on two input partitions
        return 0 if b'"gpu001"' in raw else 1

    before = [orjson.dumps(scrape(k, source=src, ports=100)) for k in range(6) for src in sources]
    trigger = scrape(8, source="gpu001", ports=100)
    trigger[0]["labels"] = {"device": "bug-trigger", "port": "1"}
    messages = [orjson.dumps(scrape(k, source=src, ports=100)) for k in (6, 7) for src in sources]
    messages += [orjson.dumps(trigger), orjson.dumps(scrape(8, source="gpu002", ports=100))]
    messages += [orjson.dumps(scrape(9, source=src, ports=100)) for src in sources]
    valid = 2 * 6 * 100 + 7 * 100  # the trigger message is parked whole
    processed, dlq, worker = asyncio.run(run(settings, messages, lambda n, d: n >= valid and len(d) >= 1, before,
                                             partition_of))
    assert [d["error"] for d in dlq] == ["InternalError"], dlq
    assert base64.b64decode(dlq[0]["original"]) == orjson.dumps(trigger) and "shared score" in dlq[0]["reason"]
    assert processed == valid  # none lost, none counted twice, in either partition
    retries = sum(s.value for m in worker.metrics.batch_retries.collect() for s in m.samples
                  if s.name.endswith("_total"))
    assert retries >= 1  # 2 when both partitions came in one batch (as in every run here): both were retried
