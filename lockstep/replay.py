"""``lockstep replay``: push a JSONL file through the real agents via the broker, in event time.

Each line is one telemetry sample (it has ``layer``) or one inventory event (``kind`` job, link,
switch or pool). The file is read whole, ordered by event time (stably), inventory first, and
produced as fast as the broker takes it — one message per source and second, as collectors would.
After the last line an end-of-input marker goes to every telemetry partition; the worker closes
every open window when all markers have arrived, and the alerts are then read back and written as
JSON lines. Bad lines are reported on stderr with their line number and sent to ``dlq``; every good
line is still processed.

A line may also be a **real-format envelope** (docs/contracts.md, "Real formats in replay files"):
``{"carrier": "<format>", "ts": <record time>, "headers": {...}, "payload": "<text>"}`` (or
``payload_b64``; optional ``key``). Envelopes go to their carrier topic (``telemetry.raw.<format>``,
``inventory.raw.<format>``) with ``ts`` as their collection time (the ``ts`` header), interleaved
with the native messages in event-time order, and are converted by the worker's ``convert`` agents. Inventory
envelopes are produced first and waited for (converted and loaded into the worker's inventory)
before any telemetry. End of input with carriers follows the protocol in :mod:`agents.carriers`:
an end-of-input marker on every partition of each carrier topic used, a wait until the worker's
consumer group has committed past them (so every converted sample is on its native partition),
and only then the native markers.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import heapq
import logging
import math
import operator
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from agents.gaps import true_ends
from agents.kafka import client_kwargs, drain, start_producer
from agents.topics import CarrierTopic, TopicCatalogue, carrier_formats, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.worker import Worker
from models.deadletter import dead_letter_record
from models.errors import ValidationFailed
from models.inventory import inventory_key
from models.samples import MAX_ABS_VALUE
from models.settings import LockstepSettings
from models.timeutil import MAX_TS, MIN_TS, TimestampError, parse_ts
from streams.ingest import validate_record

log = logging.getLogger("lockstep.replay")

MAX_SAMPLES_PER_MESSAGE = 2000
_NO_LABELS: dict[str, str] = {}


@dataclass
class BadLine:
    line: int
    reason: str
    raw: bytes


@dataclass(frozen=True)
class Envelope:
    """One real-format message of a replay file (``{"carrier": ..., "ts": ..., "payload": ...}``)."""

    line: int
    carrier: str
    ts: float
    payload: bytes
    headers: dict[str, str] = field(default_factory=dict)
    key: str | None = None

    def kafka_key(self) -> str:
        """The record key: ``key``, else the ``source`` header, else the carrier name (one partition)."""
        return self.key or self.headers.get("source") or self.carrier


@dataclass
class ReplayInput:
    inventory: list[tuple[float, int, Any]] = field(default_factory=list)
    samples: list[tuple[float, int, dict[str, Any], bytes]] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    #: Real-format envelopes, in event-time order.
    envelopes: list[Envelope] = field(default_factory=list)
    #: Operator annotations (``{"type": "annotation", "job_id", "ts", "text", ...}``), as topic records.
    annotations: list[Any] = field(default_factory=list)


def read_input(lines: Iterable[bytes]) -> ReplayInput:
    """Classify and validate every line (the same validation the agents apply).

    Lines of each kind come out in event-time order, lines of equal time in file order. A sample of a
    series already read in full (:func:`_known_sample_ts`) has only its time, value, kind and
    ``ingest_ts`` checked, as the agents' own validate stage does (streams.stages.validate): the same
    samples and the same bad lines as :func:`streams.ingest.validate_record` on every line.
    """
    collecting = gc.isenabled()
    gc.disable()  # nothing read forms a cycle; collections over the growing lists were half the time
    try:
        return _read_input(lines)
    finally:
        if collecting:
            gc.enable()


def _read_input(lines: Iterable[bytes]) -> ReplayInput:
    from agents.inventory_reader import parse_inventory

    out = ReplayInput()
    known: set[tuple[Any, ...]] = set()
    samples = out.samples
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    for number, raw in enumerate(lines, start=1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            doc = loads(raw)
        except decode_error as exc:
            out.bad.append(BadLine(number, f"not JSON: {exc}", raw))
            continue
        if type(doc) is not dict:
            out.bad.append(BadLine(number, f"expected a JSON object, got {type(doc).__name__}", raw))
            continue
        if "layer" in doc:
            ts = _known_sample_ts(doc, known)
            if ts is None:
                try:
                    sample = validate_record(doc)
                except ValueError as exc:
                    out.bad.append(BadLine(number, str(exc), raw))
                    continue
                ts = sample.ts
                known.add((sample.layer, sample.source, sample.metric, tuple(sample.labels.items())))
            samples.append((ts, number, doc, raw))
        elif doc.get("kind") in ("job", "link", "switch", "pool", "node"):
            event, reason = parse_inventory(raw)
            if event is None:
                out.bad.append(BadLine(number, f"inventory {doc.get('kind')}: {reason}", raw))
                continue
            out.inventory.append((event.ts, number, event))
        elif doc.get("type") == "annotation":
            annotation, reason = parse_annotation(doc, raw)
            if annotation is None:
                out.bad.append(BadLine(number, f"annotation: {reason}", raw))
                continue
            out.annotations.append(annotation)
        elif "carrier" in doc:
            envelope, reason = parse_envelope(doc, number)
            if envelope is None:
                out.bad.append(BadLine(number, f"carrier envelope: {reason}", raw))
                continue
            out.envelopes.append(envelope)
        else:
            out.bad.append(BadLine(number, "neither a sample (no 'layer') nor an inventory event "
                                           "(kind job|link|switch|pool) nor a carrier envelope ('carrier') "
                                           "nor an annotation (type annotation)", raw))
    # Each list was filled in line order and the sort is stable: by time alone is by (time, line).
    by_time = operator.itemgetter(0)
    out.inventory.sort(key=by_time)
    samples.sort(key=by_time)
    out.envelopes.sort(key=operator.attrgetter("ts"))
    return out


def _known_sample_ts(doc: dict[str, Any], known: set[tuple[Any, ...]]) -> float | None:
    """The event time of a sample whose series (layer, source, metric, labels) is in ``known``, when
    everything else :func:`streams.ingest.validate_record` checks is in its plain form: a numeric
    ``ts`` and ``ingest_ts`` (absent) in range, a finite value within +-2^64, kind absent, gauge, or
    counter with a value >= 0. Otherwise None: the caller validates in full (and so gets the reason)."""
    try:
        key = (doc["layer"], doc["source"], doc["metric"], tuple(doc.get("labels", _NO_LABELS).items()))
        if key not in known:
            return None
        ts, value = doc["ts"], doc["value"]
    except (KeyError, TypeError, AttributeError):
        return None
    tt, tv = type(ts), type(value)
    if not ((tt is float or tt is int) and MIN_TS <= ts < MAX_TS
            and (tv is float or tv is int) and -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE):
        return None
    kind = doc.get("kind")
    if not (kind is None or kind == "gauge" or (kind == "counter" and value >= 0)):
        return None
    ingest = doc.get("ingest_ts")
    ti = type(ingest)
    if not (ingest is None or ((ti is float or ti is int) and MIN_TS <= ingest < MAX_TS)):
        return None
    return float(ts)


def parse_annotation(doc: dict[str, Any], raw: bytes) -> tuple[Any | None, str | None]:
    """An annotation line: ``job_id``, ``ts`` and ``text`` (``kind``, ``author`` optional). Its id is a
    hash of the line, so a replay of the same file gives the same records."""
    import hashlib

    from pydantic import ValidationError

    from models.operator import AnnotationRecord, AnnotationRequest

    try:
        req = AnnotationRequest.model_validate({k: v for k, v in doc.items() if k != "type"})
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    if req.ts is None:
        return None, "ts: an annotation in a replay file needs its event time"
    return AnnotationRecord(annotation_id=hashlib.sha1(raw).hexdigest()[:16], job_id=req.job_id, ts=req.ts,
                            kind=req.kind, text=req.text, author=req.author, created_at=req.ts), None


_ENVELOPE_FIELDS = frozenset({"carrier", "ts", "headers", "payload", "payload_b64", "key"})


def parse_envelope(doc: dict[str, Any], line: int) -> tuple[Envelope | None, str | None]:
    """Validate a carrier envelope: ``(envelope, None)`` or ``(None, reason)``.

    >>> env, _ = parse_envelope({"carrier": "prometheus", "ts": 1764502930, "payload": "up 1"}, 1)
    >>> env.carrier, env.payload, env.kafka_key()
    ('prometheus', b'up 1', 'prometheus')
    >>> parse_envelope({"carrier": "dcgm-exporter", "ts": 1764502930, "payload": "x"}, 1)[1]
    "'dcgm-exporter' scrapes ride the 'prometheus' carrier"
    """
    from agents.topics import CARRIED_AS

    unknown = sorted(set(doc) - _ENVELOPE_FIELDS)
    if unknown:
        return None, f"unknown field(s) {', '.join(repr(u) for u in unknown)}"
    carrier = doc.get("carrier")
    formats = carrier_formats()
    if not isinstance(carrier, str) or carrier not in formats:
        if isinstance(carrier, str) and carrier in CARRIED_AS:
            return None, f"{carrier!r} scrapes ride the {CARRIED_AS[carrier]!r} carrier"
        return None, f"unknown carrier {str(carrier)[:40]!r}; carriers: {', '.join(sorted(formats))}"
    if "ts" not in doc:
        return None, "missing field 'ts' (the record time)"
    try:
        ts = parse_ts(doc["ts"])
    except TimestampError as exc:
        return None, f"ts: {exc}"
    headers = doc.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return None, "headers must be an object of strings"
    key = doc.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        return None, "key must be a non-empty string"
    if ("payload" in doc) == ("payload_b64" in doc):
        return None, "exactly one of 'payload' (text) and 'payload_b64' (base64 bytes) is required"
    if "payload" in doc:
        if not isinstance(doc["payload"], str):
            return None, "payload must be a string (use payload_b64 for bytes)"
        payload = doc["payload"].encode()
    else:
        try:
            payload = base64.b64decode(doc["payload_b64"], validate=True)
        except (TypeError, ValueError) as exc:
            return None, f"payload_b64 is not base64: {exc}"
    return Envelope(line, carrier, ts, payload, dict(headers), key), None


def message_key(doc: dict[str, Any]) -> str:
    """Partition key of a sample: the job for step samples, otherwise the source (as the convert agents key)."""
    from agents.carriers import native_key

    return native_key(doc)


def batch_messages(samples: list[tuple[float, int, dict[str, Any], bytes]]) -> Iterable[tuple[str, str, list[bytes]]]:
    """Group samples (in event-time order) into one message per (layer, key) and second.

    A second's messages come in order of their first sample, each holding its samples in input order;
    a group reaching :data:`MAX_SAMPLES_PER_MESSAGE` goes out at once and the rest of that second's
    samples start a new one. No message is empty.
    """
    for _, layer, key, raws in _batches(samples):
        yield layer, key, raws


def _batches(samples: list[tuple[float, int, dict[str, Any], bytes]]) -> Iterator[tuple[int, str, str, list[bytes]]]:
    """:func:`batch_messages`, each message with its second."""
    from agents.carriers import native_key

    floor, most = math.floor, MAX_SAMPLES_PER_MESSAGE
    pending: dict[tuple[str, str], list[bytes]] = {}
    bucket = -1  # the second of the pending messages (event times are after 2000)
    for ts, _, doc, raw in samples:
        sec = floor(ts)
        if sec != bucket:
            for (layer, key), raws in pending.items():
                if raws:
                    yield bucket, layer, key, raws
            pending = {}
            bucket = sec
        layer = doc["layer"]
        group_key = (layer, native_key(doc))
        group = pending.get(group_key)
        if group is None:
            group = pending[group_key] = []
        group.append(raw)
        if len(group) >= most:
            yield sec, layer, group_key[1], group
            pending[group_key] = []
    for (layer, key), raws in pending.items():
        if raws:
            yield bucket, layer, key, raws


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
    # A replay's worker reads exactly the carriers its file uses, whatever the deployment enables.
    file_carriers = ",".join(sorted({e.carrier for e in data.envelopes})) or "none"
    settings = settings.model_copy(update={"topic_prefix": f"{settings.topic_prefix}replay-{run_id}.",
                                           "app_id": f"{settings.app_id}-replay-{run_id}",
                                           "carrier_formats": file_carriers})
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
            await producer.send(cat.dlq, orjson.dumps(dead_letter_record(
                stage="replay", error=ValidationFailed, reason=bad.reason, original=bad.raw, topic=str(input_path),
                partition=None, offset=None, record=f"line {bad.line}")))
        for _, _, event in data.inventory:
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        for annotation in data.annotations:
            await producer.send(cat.annotations, annotation.model_dump_json().encode(),
                                key=annotation.job_id.encode())
        carriers = {c.format: c for c in cat.carrier_topics()}
        inventory_envelopes = [e for e in data.envelopes if carriers[e.carrier].produces == "inventory"]
        telemetry_envelopes = [e for e in data.envelopes if carriers[e.carrier].produces == "samples"]
        for envelope in inventory_envelopes:
            await send_envelope(producer, carriers[envelope.carrier], envelope)
        inventory_carriers = await end_carriers(producer, carriers, inventory_envelopes)
        await producer.flush()

        finished: set[int] = set()
        done = asyncio.Event()

        def on_finished(partition: int) -> None:
            finished.add(partition)
            if len(finished) >= settings.partitions:
                done.set()

        worker = Worker(settings, bootstrap, expected_origins=cat.telemetry_origins(), on_finished=on_finished)
        await worker.start()

        def left() -> float:
            return max(timeout_s - (time.monotonic() - started), 1.0)

        if inventory_carriers:  # converted jobs/links must be in the worker's inventory before telemetry
            await wait_converted(settings, bootstrap, inventory_carriers, left())
            await wait_inventory_loaded(worker, settings, bootstrap, cat.inventory, left())
        messages = 0
        for item in event_time_order(data.samples, telemetry_envelopes):
            if isinstance(item, Envelope):
                await send_envelope(producer, carriers[item.carrier], item)
                continue
            layer, key, raws = item
            await producer.send(cat.telemetry(layer), b"[" + b",".join(raws) + b"]", key=key.encode())
            messages += 1
        if telemetry_envelopes:  # native end-of-input only once every converted sample is on its partition
            used = await end_carriers(producer, carriers, telemetry_envelopes)
            await producer.flush()
            await wait_converted(settings, bootstrap, used, left())
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
            "messages": messages, "envelopes": len(data.envelopes), "alerts": len(alerts),
            "annotations": len(data.annotations), "topic_prefix": settings.topic_prefix,
            "seconds": round(time.monotonic() - started, 2),
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


# -- real formats (carrier envelopes) ---------------------------------------------------------------

def event_time_order(samples: list[tuple[float, int, dict[str, Any], bytes]],
                     envelopes: list[Envelope]) -> Iterator[tuple[str, str, list[bytes]] | Envelope]:
    """Native batches (:func:`batch_messages`, at their second) and envelopes (at their ``ts``), merged
    in event time; at equal times the native batches of that second go first."""
    if not envelopes:
        for _, layer, key, raws in _batches(samples):
            yield layer, key, raws
        return

    def native() -> Iterator[tuple[float, int, int, tuple[str, str, list[bytes]]]]:
        for seq, (sec, layer, key, raws) in enumerate(_batches(samples)):
            yield float(sec), 0, seq, (layer, key, raws)

    carried = ((e.ts, 1, e.line, e) for e in envelopes)
    merged: Iterator[tuple[float, int, int, tuple[str, str, list[bytes]] | Envelope]] = heapq.merge(
        native(), carried, key=lambda item: item[:3])
    for item in merged:
        yield item[3]


async def send_envelope(producer: Any, carrier: CarrierTopic, envelope: Envelope) -> None:
    """Produce one envelope to its carrier topic.

    The record time is the wall clock (a replay of an old incident must not produce records that
    retention deletes at once); the envelope's ``ts`` travels as the ``ts`` header, which the
    convert agents take as the collection time (an explicit ``ts`` header in the envelope wins).
    """
    headers = {"ts": repr(envelope.ts), **envelope.headers}
    await producer.send(carrier.topic, envelope.payload, key=envelope.kafka_key().encode(),
                        headers=[(name, value.encode()) for name, value in headers.items()])


async def end_carriers(producer: Any, carriers: dict[str, CarrierTopic],
                       envelopes: list[Envelope]) -> list[CarrierTopic]:
    """An end-of-input marker on every partition of each carrier topic the envelopes used; those topics."""
    used = [carriers[name] for name in sorted({e.carrier for e in envelopes})]
    eos = orjson.dumps({"lockstep_control": "eos"})
    for carrier in used:
        for partition in range(carrier.partitions):
            await producer.send(carrier.topic, eos, partition=partition)
    return used


async def wait_converted(settings: LockstepSettings, bootstrap: str, carriers: list[CarrierTopic],
                         timeout_s: float) -> None:
    """Wait until the worker's consumer group has committed every carrier partition to its end offset.

    The convert agents flush their producer before acking an end-of-input marker (agents.carriers),
    so a committed offset past the marker means everything converted before it is on the broker.
    """
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    tps = [TopicPartition(c.topic, p) for c in carriers for p in range(c.partitions)]
    end = await true_ends(settings, bootstrap, tps)  # not ListOffsets alone: Tansu's can be short
    admin = AIOKafkaAdminClient(**client_kwargs(settings, bootstrap))
    await admin.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            committed = await admin.list_consumer_group_offsets(settings.app_id, partitions=tps)
            behind = [f"{tp.topic}:{tp.partition}" for tp in tps
                      if end[tp] > 0 and (tp not in committed or committed[tp].offset < end[tp])]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the convert agents did not finish {', '.join(behind[:5])}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def wait_inventory_loaded(worker: Worker, settings: LockstepSettings, bootstrap: str, topic: str,
                                timeout_s: float) -> None:
    """Wait until the worker's inventory reader has taken in every record now in ``topic``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        # inside the try: aiokafka's consumer.stop() with no await since start() raises CancelledError
        end = await true_ends(settings, bootstrap, [TopicPartition(topic, p) for p in parts])
    finally:
        await consumer.stop()
    total = sum(end.values())  # replays write no tombstones: every record is applied or rejected
    deadline = time.monotonic() + timeout_s
    reader = worker.reader
    assert reader is not None
    while reader.applied + reader.rejected < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the inventory reader took in {reader.applied + reader.rejected} of {total} events")
        await asyncio.sleep(0.05)


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
        out: list[Any] = []

        def keep(batches: dict[Any, list[Any]]) -> None:
            for msgs in batches.values():
                out.extend(orjson.loads(m.value) for m in msgs if m.value is not None)

        await drain(consumer, tps, timeout_s, keep)
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
