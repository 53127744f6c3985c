"""``lockstep replay``: push a JSONL file through the real agents via the broker, in event time.

Each line is one telemetry sample (it has ``layer``) or one inventory event (``kind`` job, link,
switch or pool). The file is read whole, ordered by event time (stably), inventory first, and
produced as fast as the broker takes it — one message per source and second, as collectors would.
After the last line an end-of-input marker goes to every telemetry partition; the worker closes
every open window when all markers have arrived, and the alerts are then read back and written as
JSON lines. Bad lines are reported on stderr with their line number and sent to ``dlq``; every good
line is still processed.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from agents.kafka import client_kwargs, start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.worker import Worker
from models.inventory import inventory_key
from models.settings import LockstepSettings
from streams.ingest import validate_record

log = logging.getLogger("lockstep.replay")

MAX_SAMPLES_PER_MESSAGE = 2000


@dataclass
class BadLine:
    line: int
    reason: str
    raw: bytes


@dataclass
class ReplayInput:
    inventory: list[tuple[float, int, Any]] = field(default_factory=list)
    samples: list[tuple[float, int, dict[str, Any], bytes]] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)


def read_input(lines: Iterable[bytes]) -> ReplayInput:
    """Classify and validate every line (the same validation the agents apply)."""
    from agents.inventory_reader import parse_inventory

    out = ReplayInput()
    for number, raw in enumerate(lines, start=1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            out.bad.append(BadLine(number, f"not JSON: {exc}", raw))
            continue
        if not isinstance(doc, dict):
            out.bad.append(BadLine(number, f"expected a JSON object, got {type(doc).__name__}", raw))
            continue
        if "layer" in doc:
            try:
                sample = validate_record(doc)
            except ValueError as exc:
                out.bad.append(BadLine(number, str(exc), raw))
                continue
            out.samples.append((sample.ts, number, doc, raw))
        elif doc.get("kind") in ("job", "link", "switch", "pool"):
            event, reason = parse_inventory(raw)
            if event is None:
                out.bad.append(BadLine(number, f"inventory {doc.get('kind')}: {reason}", raw))
                continue
            out.inventory.append((event.ts, number, event))
        else:
            out.bad.append(BadLine(number, "neither a sample (no 'layer') nor an inventory event "
                                           "(kind job|link|switch|pool)", raw))
    out.inventory.sort(key=lambda t: (t[0], t[1]))
    out.samples.sort(key=lambda t: (t[0], t[1]))
    return out


def message_key(doc: dict[str, Any]) -> str:
    """Partition key of a sample: the job for step samples, otherwise the source."""
    if doc["layer"] == "step":
        job = (doc.get("labels") or {}).get("job_id")
        if isinstance(job, str) and job:
            return job
    return str(doc["source"])


def batch_messages(samples: list[tuple[float, int, dict[str, Any], bytes]]) -> Iterable[tuple[str, str, list[bytes]]]:
    """Group samples into one message per (layer, key) and second, in event-time order."""
    pending: dict[tuple[str, str], list[bytes]] = {}
    bucket: float | None = None
    for ts, _, doc, raw in samples:
        sec = math.floor(ts)
        if bucket is not None and sec != bucket:
            for (layer, key), raws in pending.items():
                yield layer, key, raws
            pending = {}
        bucket = sec
        group = pending.setdefault((doc["layer"], message_key(doc)), [])
        group.append(raw)
        if len(group) >= MAX_SAMPLES_PER_MESSAGE:
            yield doc["layer"], message_key(doc), group
            pending[(doc["layer"], message_key(doc))] = []
    for (layer, key), raws in pending.items():
        if raws:
            yield layer, key, raws


def _alert_order(alert: dict[str, Any]) -> tuple[str, str, str, int]:
    when = alert.get("resolved_at") or alert.get("detected_at") or ""
    return (when, alert.get("job_id") or "", alert.get("dedup_key", ""), 0 if alert["status"] == "firing" else 1)


async def replay(settings: LockstepSettings, input_path: Path, output: TextIO, *, stderr: TextIO = sys.stderr,
                 timeout_s: float = 600.0) -> dict[str, Any]:
    """Run the replay; return a summary. Raises ``TimeoutError`` if the pipeline does not finish."""
    started = time.monotonic()
    with open(input_path, "rb") as fh:
        data = read_input(fh)
    for bad in data.bad:
        print(f"{input_path}:{bad.line}: {bad.reason}", file=stderr)
    run_id = uuid.uuid4().hex[:8]
    settings = settings.model_copy(update={"topic_prefix": f"{settings.topic_prefix}replay-{run_id}.",
                                           "app_id": f"{settings.app_id}-replay-{run_id}"})
    broker = None
    bootstrap = settings.kafka_bootstrap_servers
    if bootstrap is None:
        broker = await EmbeddedBroker().astart()
        bootstrap = broker.bootstrap
    worker: Worker | None = None
    producer = None
    try:
        cat = TopicCatalogue(settings)
        await create_topics(settings, bootstrap)
        producer = await start_producer(settings, bootstrap)
        for bad in data.bad:
            await producer.send(cat.dlq, orjson.dumps({
                "stage": "replay", "reason": bad.reason, "error": "ValidationFailed", "topic": str(input_path),
                "partition": None, "offset": None, "record": f"line {bad.line}",
                "original": base64.b64encode(bad.raw).decode("ascii"), "original_size": len(bad.raw), "key": None,
                "ts": 0.0, "retryable": False}))
        for _, _, event in data.inventory:
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        await producer.flush()

        finished: set[int] = set()
        done = asyncio.Event()

        def on_finished(partition: int) -> None:
            finished.add(partition)
            if len(finished) >= settings.partitions:
                done.set()

        worker = Worker(settings, bootstrap, expected_origins=cat.telemetry_origins(), on_finished=on_finished)
        await worker.start()
        messages = 0
        for layer, key, raws in batch_messages(data.samples):
            await producer.send(cat.telemetry(layer), b"[" + b",".join(raws) + b"]", key=key.encode())
            messages += 1
        eos = orjson.dumps({"lockstep_control": "eos"})
        for topic in cat.telemetry_topics:
            for partition in range(settings.partitions):
                await producer.send(topic, eos, partition=partition)
        await producer.flush()
        remaining = timeout_s - (time.monotonic() - started)
        await asyncio.wait_for(done.wait(), timeout=max(remaining, 1.0))
        await worker.flush()
        alerts = await read_topic(settings, bootstrap, cat.alerts)
        alerts.sort(key=_alert_order)
        for alert in alerts:
            output.write(orjson.dumps(alert).decode() + "\n")
        output.flush()
        summary = {
            "samples": len(data.samples), "inventory": len(data.inventory), "bad_lines": len(data.bad),
            "messages": messages, "alerts": len(alerts), "seconds": round(time.monotonic() - started, 2),
        }
        log.info("replay done: %s", summary)
        return summary
    finally:
        if worker is not None:
            await worker.stop()
        if producer is not None:
            await producer.stop()
        if broker is not None:
            broker.stop()


async def read_topic(settings: LockstepSettings, bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Any]:
    """Every record currently in ``topic`` (all partitions, beginning to end), decoded as JSON."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while not await _caught_up(consumer, tps, end):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
            batches = await consumer.getmany(timeout_ms=500)
            for msgs in batches.values():
                out.extend(orjson.loads(m.value) for m in msgs if m.value is not None)
        return out
    finally:
        await consumer.stop()


def write_simulation(path: Path, scenario: str, seed: int = 7, start_ts: float | None = None) -> int:
    """Write a scenario as a replay file (inventory events and samples as JSON lines)."""
    from lockstep.simulate import DEFAULT_START_TS, SCENARIOS, Simulator

    sim = Simulator(SCENARIOS[scenario], start_ts=DEFAULT_START_TS if start_ts is None else start_ts, seed=seed)
    n = 0
    with open(path, "wb") as fh:
        for msg in sim.run():
            items = msg.value if isinstance(msg.value, list) else [msg.value]
            for item in items:
                fh.write(orjson.dumps(item) + b"\n")
                n += 1
    return n


async def _caught_up(consumer: Any, tps: list[Any], end: dict[Any, int]) -> bool:
    for tp in tps:
        if await consumer.position(tp) < end[tp]:
            return False
    return True
