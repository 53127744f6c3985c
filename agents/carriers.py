"""The ``convert`` agents: real formats on their carrier topics -> native samples and inventory events.

    telemetry.raw.<format>  --convert-->            telemetry.<layer>   batches keyed like native producers
    inventory.raw.<format>  --convert_inventory-->  inventory           keyed by models.inventory.inventory_key
                                                    dlq                 one record per rejection

Operators point an exporter (or Telegraf, Vector, prometheus-kafka-adapter...) at the carrier topic
of its format (:meth:`agents.topics.TopicCatalogue.carrier_topics`; docs/contracts.md, "Real formats
in replay files" and "Connecting exporters"). Each message is converted with
:func:`streams.formats.convert`, the same code path as ``lockstep convert``:

- ``ts`` and ``ingest_ts`` are the collection time: the ``ts`` header when the producer set one
  (replays do: they run long after the record time), else the Kafka record time (formats without
  their own timestamps need it; :func:`collection_time`);
- the Kafka headers are passed through (``source``, ``layer``, ``ts``, ``job_id``, ``device``,
  ``stream``, ``content-type``); without a ``stream`` header the record key is the stream (NCCL
  Inspector v4.3 context is carried per stream), and the record key is the default source: a
  sample whose record and headers name no source takes the key (producers key by host);
- one :class:`streams.formats.AdapterState` per carrier partition lives in memory and is snapshotted
  to the ``carrier_state`` / ``inventory_carrier_state`` table (changelog topics in the catalogue)
  every ``snapshot_interval_s`` of event time and at end of input; after a restart or rebalance the
  snapshot is restored.

Outputs: the samples of one message are grouped per (layer, key) — the key is the source, or the
job for ``step`` samples, exactly as native producers key them (:func:`native_key`) — and sent as
JSON-array batches of at most :data:`MAX_SAMPLES_PER_MESSAGE`; inventory events go one per message
to ``inventory``; every :class:`streams.formats.FormatRejection` becomes a ``dlq`` record (stage
``convert``, the format's reason, the original bytes and topic/partition/offset), at most
:data:`MAX_DEAD_LETTERS_PER_MESSAGE` per message. Unknown metric names are converted and counted
(``lockstep_carrier_unknown_metric_samples_total``), never dropped.

End of input (replays)
----------------------
A native telemetry partition's end-of-input marker (``{"lockstep_control": "eos"}``) means *nobody
will write to this partition again*: the first one finishes that partition for correlation
(``Correlator`` with ``expected_origins``). The convert agents write into every native partition,
next to native producers, so neither a convert agent nor a single carrier partition can say that.
The one who can is whoever owns all producers — ``lockstep replay`` — so the protocol is:

1. the producer sends ``{"lockstep_control": "eos"}`` on every partition of each carrier topic it
   used, after its last message there;
2. a convert agent that reads it **flushes the producer** (everything converted from earlier
   messages of every partition is then acknowledged by the broker) and only then acks the marker,
   so the app's committed offset passes the marker only once its output is durable; the marker is
   not forwarded (it is recorded in the partition's adapter-state snapshot);
3. the producer waits until the app's consumer group (``app_id``) has committed offsets at the
   carrier partitions' end offsets, then sends the native end-of-input markers — which therefore
   land after every converted sample in every native partition.

This is deterministic (no timing guesses) and needs nothing but Kafka: committed offsets, not
in-process state, say that conversion is done.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import Counter

from agents.gaps import in_order
from agents.topics import (
    CARRIER_STATE_TABLE,
    INVENTORY_CARRIER_STATE_TABLE,
    CarrierTopic,
    TopicCatalogue,
)
from models.deadletter import dead_letter_record as dead_letter_record_of
from models.errors import error_class
from models.inventory import inventory_adapter, inventory_key
from models.samples import Layer
from models.settings import LockstepSettings
from streams.formats import AdapterState, Converted, FormatRejection, convert
from streams.formats.base import parse_time_value
from streams.snapshot import snapshot_due

if TYPE_CHECKING:
    from agents.metrics import WorkerMetrics
    from agents.offsets import Offsets
    from agents.stalls import StallWatch

log = logging.getLogger("lockstep.agents.carriers")

#: Samples per produced batch (native producers use the same bound; far below MAX_BATCH_SAMPLES).
MAX_SAMPLES_PER_MESSAGE = 2000
#: Dead letters one carrier message can cause; the last one summarises the rest.
MAX_DEAD_LETTERS_PER_MESSAGE = 100
#: Dead letters of one message that carry its original bytes; later ones point at the first
#: (empty original, ``original_truncated``, ``original_sha256``) so a bad 4 MB scrape is not copied 100x.
FULL_ORIGINALS_PER_MESSAGE = 10
#: Control messages are tiny; a bigger message is never parsed for one.
_MAX_CONTROL_BYTES = 256
#: The reason of a tombstone's dead letter on a topic that is not compacted (carriers, telemetry,
#: anomalies): there a record with no value deletes nothing and carries nothing to process.
TOMBSTONE_REASON = "tombstone: a record with no value (the topic is not compacted: it deletes nothing)"

Send = Callable[[Any, bytes | None, bytes, int | None], Awaitable[None]]
DeadLetter = Callable[[dict[str, Any]], Awaitable[None]]


# -- pure logic (no Faust) ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CarrierMessage:
    """One consumed carrier record: where it came from and its bytes."""

    topic: str
    partition: int
    offset: int | None
    key: bytes | None
    timestamp: float | None  # Kafka record time, Unix seconds
    value: bytes
    headers: Mapping[str, bytes | str] = field(default_factory=dict)
    tombstone: bool = False  # the record had no value at all (``value`` is then empty)

    @property
    def origin(self) -> str:
        return f"{self.topic}:{self.partition}"

    def key_text(self) -> str | None:
        return self.key.decode("utf-8", "replace") if self.key else None


def native_key(sample: Mapping[str, Any]) -> str:
    """Partition key of a native sample: the job for ``step`` samples (``labels.job_id``), else the source.

    >>> native_key({"layer": "step", "source": "gpu001", "labels": {"job_id": "llm-70b"}})
    'llm-70b'
    >>> native_key({"layer": "switch", "source": "leaf03", "labels": {"port": "17"}})
    'leaf03'
    """
    if sample["layer"] == "step":
        job = (sample.get("labels") or {}).get("job_id")
        if isinstance(job, str) and job:
            return job
    return str(sample["source"])


def route_samples(samples: Iterable[dict[str, Any]],
                  max_per_message: int = MAX_SAMPLES_PER_MESSAGE) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Group samples into ``(layer, key, batch)`` messages, keys in order of first appearance.

    Each series keeps its input order inside its (layer, key) group, and a group longer than
    ``max_per_message`` is split into consecutive batches.

    >>> s = [{"layer": "gpu", "source": "a"}, {"layer": "gpu", "source": "b"}, {"layer": "gpu", "source": "a"}]
    >>> [(layer, key, len(batch)) for layer, key, batch in route_samples(s)]
    [('gpu', 'a', 2), ('gpu', 'b', 1)]
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for sample in samples:
        groups.setdefault((sample["layer"], native_key(sample)), []).append(sample)
    out: list[tuple[str, str, list[dict[str, Any]]]] = []
    for (layer, key), batch in groups.items():
        for start in range(0, len(batch), max_per_message):
            out.append((layer, key, batch[start:start + max_per_message]))
    return out


def inventory_messages(events: Iterable[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """``(key, value)`` per converted inventory event: the compaction key and the canonical JSON.

    The adapters already validated every event; it is parsed once more to get the model the key
    and the canonical form come from.
    """
    out = []
    for doc in events:
        event = inventory_adapter.validate_python(doc)
        out.append((inventory_key(event), event.model_dump_json().encode()))
    return out


def control_of(raw: bytes) -> str | None:
    """The control verb of a ``{"lockstep_control": ...}`` message, or None for data.

    >>> control_of(b'{"lockstep_control": "eos"}'), control_of(b"up 1")
    ('eos', None)
    """
    if len(raw) > _MAX_CONTROL_BYTES or b"lockstep_control" not in raw:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(doc, dict) and len(doc) == 1 and "lockstep_control" in doc:
        return str(doc["lockstep_control"])[:40]
    return None


#: Formats whose payload names a better source than a record key would, but only after the default
#: source: Lustre job_stats (the file system of the target: the pool), nccl-tests (rank 0's host).
_PAYLOAD_SOURCE_AFTER_DEFAULT = frozenset({"lustre-jobstats", "nccl-tests"})


def key_source(format_name: str, key: str | None) -> str | None:
    """The default source of a carrier message: its record key (producers key by host), except for
    the formats whose own source would lose to it.

    >>> key_source("prometheus", "gpu001"), key_source("lustre-jobstats", "oss01"), key_source("ethtool", None)
    ('gpu001', None, None)
    """
    return None if format_name in _PAYLOAD_SOURCE_AFTER_DEFAULT else key


def carrier_message(topic: str, partition: int, offset: int | None, key: Any, timestamp: float | None,
                    value: Any, headers: Any) -> CarrierMessage:
    """A consumed record as a :class:`CarrierMessage`, whoever read it (Faust's message, or aiokafka's
    record read around Faust): a key that is not bytes is no key, the headers merged with the key
    (:func:`message_headers`), and a record without a value a tombstone.

    >>> m = carrier_message("t", 3, 7, b"n1", 1.5, None, [("source", b"x")])
    >>> m.origin, m.value, m.tombstone, dict(m.headers)
    ('t:3', b'', True, {'source': b'x', 'stream': b'n1'})
    """
    key_bytes = key if isinstance(key, bytes) else None
    raw = value if isinstance(value, bytes) else bytes(value or b"")
    return CarrierMessage(topic, partition, offset, key_bytes, timestamp, raw, message_headers(headers, key_bytes),
                          value is None)


def message_headers(headers: Any, key: bytes | None) -> dict[str, bytes | str]:
    """Kafka headers (a list of pairs or a mapping) as a dict; the key is the ``stream`` unless one is set."""
    if not headers:
        pairs: list[tuple[str, Any]] = []
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    else:
        pairs = list(headers)
    out: dict[str, bytes | str] = {}
    for name, value in pairs:
        if isinstance(name, str) and isinstance(value, bytes | bytearray | str):
            out[name] = bytes(value) if isinstance(value, bytearray) else value
    if key and not any(name.lower() == "stream" for name in out):
        out["stream"] = key
    return out


def collection_time(headers: Mapping[str, bytes | str], record_ts: float | None) -> float | None:
    """The collection time of a message: a valid ``ts`` header (Unix s/ms/us/ns or RFC 3339), else the record time.

    >>> collection_time({"ts": b"2025-11-30T11:42:10Z"}, 1796023253.8), collection_time({}, 1796023253.8)
    (1764502930.0, 1796023253.8)
    """
    for name, value in headers.items():
        if name.lower() == "ts":
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            try:
                return parse_time_value(text.strip(), "ts header")
            except ValueError:
                break
    return record_ts


def dead_letter_record(msg: CarrierMessage, *, reason: str, error: str, record: str | None,
                       stage: str = "convert", with_original: bool = True) -> dict[str, Any]:
    """A ``dlq`` record (:class:`models.records.DeadLetter`) for a carrier message or one record in it.

    A tombstone's message has the empty value, so its dead letter's original is empty (size 0):

    >>> tomb = dead_letter_record(CarrierMessage("t", 0, 5, b"k", None, b""), reason=TOMBSTONE_REASON,
    ...                           error="ValidationFailed", record=None)
    >>> tomb["original"], tomb["original_size"], tomb["reason"].split(":")[0]
    ('', 0, 'tombstone')
    """
    return dead_letter_record_of(stage=stage, error=error_class(error), reason=reason, original=msg.value,
                                 topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key_text(),
                                 ts=msg.timestamp or 0.0, record=record, include_original=with_original)


def rejection_dead_letters(msg: CarrierMessage, rejections: list[FormatRejection]) -> list[dict[str, Any]]:
    """The ``dlq`` records for a message's rejections, bounded (see the module constants)."""
    out = []
    limit = MAX_DEAD_LETTERS_PER_MESSAGE
    for i, rej in enumerate(rejections[: limit if len(rejections) <= limit else limit - 1]):
        f = rej.dead_letter_fields()
        out.append(dead_letter_record(msg, reason=f["reason"], error=f["error"], record=f["record"],
                                      stage=f["stage"], with_original=i < FULL_ORIGINALS_PER_MESSAGE))
    if len(rejections) > limit:
        rest = rejections[limit - 1:]
        first = rest[0]
        out.append(dead_letter_record(
            msg, reason=f"{first.format}: {len(rest)} more records rejected, the first of them: {first.reason}",
            error=first.error, record=first.record, with_original=False))
    return out


@dataclass
class CarrierPartitions:
    """The adapter state of every carrier partition this worker owns (``topic:partition`` keys)."""

    states: dict[str, AdapterState] = field(default_factory=dict)
    last_snapshot: dict[str, float] = field(default_factory=dict)
    eos: set[str] = field(default_factory=set)
    #: the last offset converted per partition, while this worker owns it (holes and redeliveries are
    #: told from it: agents.gaps, agents.stalls)
    last_offset: dict[str, int] = field(default_factory=dict)
    #: messages delivered again (a seek back to the commit, a stall re-read) and skipped as converted
    redelivered: int = 0

    def snapshot(self, origin: str) -> bytes:
        """The table value for ``origin``: its adapter state and whether its end of input was seen."""
        state = self.states[origin]
        return orjson.dumps({"adapter": state.snapshot(), "eos": origin in self.eos})

    def restore(self, origin: str, blob: bytes) -> AdapterState:
        """Rebuild ``origin`` from a :meth:`snapshot` value."""
        data = orjson.loads(blob)
        state = AdapterState.restore(data["adapter"])
        self.states[origin] = state
        self.last_snapshot[origin] = state.watermark if state.watermark is not None else -1.0
        if data.get("eos"):
            self.eos.add(origin)
        return state

    def drop(self, origin: str) -> None:
        self.states.pop(origin, None)
        self.last_snapshot.pop(origin, None)
        self.eos.discard(origin)
        self.last_offset.pop(origin, None)


class CarrierMetrics:
    """Counters of the convert agents, on the worker's registry (one set per :class:`WorkerMetrics`)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        r = metrics.registry
        self.messages = Counter("lockstep_carrier_messages_total", "Carrier messages converted", ["format"],
                                registry=r)
        self.samples = Counter("lockstep_carrier_samples_total", "Native samples converted from carriers",
                               ["format", "layer"], registry=r)
        self.inventory = Counter("lockstep_carrier_inventory_events_total",
                                 "Inventory events converted from carriers", ["format"], registry=r)
        self.rejections = Counter("lockstep_carrier_rejections_total", "Carrier records rejected (to dlq)",
                                  ["format", "error"], registry=r)
        self.unknown = Counter("lockstep_carrier_unknown_metric_samples_total",
                               "Converted samples whose metric name the catalogue does not know (kept, "
                               "meaning unknown)", ["format"], registry=r)
        self.skipped = Counter("lockstep_carrier_skipped_total",
                               "Documented non-measurements left out (NaN, N/A, _created...)", ["format", "reason"],
                               registry=r)


_CARRIER_METRICS: weakref.WeakKeyDictionary[Any, CarrierMetrics] = weakref.WeakKeyDictionary()


def carrier_metrics(metrics: WorkerMetrics) -> CarrierMetrics:
    """The carrier counters of ``metrics``' registry (created once: a registry refuses duplicates)."""
    found = _CARRIER_METRICS.get(metrics)
    if found is None:
        found = _CARRIER_METRICS[metrics] = CarrierMetrics(metrics)
    return found


# -- wiring (Faust) --------------------------------------------------------------------------------

def attach_carriers(app: Any, settings: LockstepSettings, catalogue: TopicCatalogue, send: Send,
                    dead_letter: DeadLetter, metrics: WorkerMetrics, *, to_kafka: bool = True,
                    offsets: Offsets | None = None, stalls: StallWatch | None = None) -> CarrierPartitions:
    """Add the ``convert`` and ``convert_inventory`` agents (and their tables) to ``app``.

    ``send(topic, key, value, partition)`` and ``dead_letter(record)`` are the app's own output
    paths (``build_app``). ``to_kafka=False`` when ``send`` does not use the app's producer (Faust's
    agent test context): there is then nothing to flush at end of input. Returns the in-memory
    partition states (also ``app.lockstep_carriers``, for tests and introspection).

    As the ingest and correlate agents, the convert agents read around Faust's lost records
    (faust-streaming #216/#596): with ``offsets`` (a worker on a broker), a message whose offset is
    past the one expected (the last converted + 1, or the group's commit) has the records between
    read from the broker and converted first (:meth:`agents.offsets.Offsets.read_hole`), and a
    message delivered again is skipped as converted; ``stalls`` is told of every delivery, so a carrier
    partition that stops with records waiting is re-read (:mod:`agents.stalls`).
    """
    import faust

    cm = carrier_metrics(metrics)
    parts = CarrierPartitions()
    carriers = {c.topic: c for c in catalogue.carrier_topics()}
    raw: dict[str, Any] = {"key_serializer": "raw", "value_serializer": "raw"}
    raw_schema: Any = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    telemetry_out = {layer.value: app.topic(catalogue.telemetry(layer), partitions=settings.partitions, **raw)
                     for layer in Layer}
    inventory_out = app.topic(catalogue.inventory, partitions=settings.inventory_partitions, **raw)
    seen_unknown: set[str] = set()

    async def flush_producer() -> None:
        if to_kafka:
            await app.producer.flush()

    def state_for(origin: str, table: Any) -> AdapterState:
        state = parts.states.get(origin)
        if state is None:
            blob = table.get(origin.encode())
            if blob:
                try:
                    state = parts.restore(origin, blob)
                    metrics.restores.labels(table.name).inc()
                    log.info("restored %s (adapter watermark %s)", origin, state.watermark)
                except Exception:
                    log.exception("adapter snapshot of %s unusable; starting from an empty state", origin)
                    state = None
            if state is None:
                state = parts.states[origin] = AdapterState()
        return state

    def save(origin: str, table: Any) -> None:
        table[origin.encode()] = parts.snapshot(origin)
        wm = parts.states[origin].watermark
        parts.last_snapshot[origin] = wm if wm is not None else -1.0
        metrics.snapshots.labels(table.name).inc()

    async def convert_one(event: Any, table: Any) -> None:
        """One delivered message: first the records Faust lost before it (a hole: agents.gaps), then it;
        a message delivered again (a seek back to the commit, a stall re-read) is already converted."""
        m = event.message
        msg = carrier_message(m.topic, m.partition, m.offset, m.key, m.timestamp or None, event.value, m.headers)
        if stalls is not None:
            stalls.delivered(msg.origin, time.monotonic())
        async def lost(r: Any) -> None:  # a record Faust never handed over (aiokafka's: its time in ms)
            await convert_message(carrier_message(r.topic, r.partition, r.offset, r.key, r.timestamp / 1000.0,
                                                  r.value, r.headers), table)

        if not await in_order(parts.last_offset, m.topic, m.partition, m.offset, offsets, lost):
            parts.redelivered += 1
            return
        await convert_message(msg, table)

    async def convert_message(msg: CarrierMessage, table: Any) -> None:
        value = msg.value
        if msg.tombstone:
            await dead_letter(dead_letter_record(msg, reason=TOMBSTONE_REASON, error="ValidationFailed", record=None))
            return
        carrier: CarrierTopic | None = carriers.get(msg.topic)
        if carrier is None:  # cannot happen: the agents only subscribe to catalogue carriers
            await dead_letter(dead_letter_record(msg, reason=f"{msg.topic} is not a carrier topic",
                                                 error="UnsupportedFormat", record=None))
            return
        origin = msg.origin
        state = state_for(origin, table)
        control = control_of(value)
        if control == "eos":
            # Everything converted so far must be durable before this marker is acked (module docstring).
            await flush_producer()
            parts.eos.add(origin)
            save(origin, table)
            log.info("end of input on %s: conversion flushed", origin)
            return
        if control is not None:
            await dead_letter(dead_letter_record(msg, reason=f"unknown control {control!r}", error="ValidationFailed",
                                                 record=None))
            return
        started = time.perf_counter()
        headers = dict(msg.headers)
        collected = collection_time(headers, msg.timestamp)
        out: Converted = convert(carrier.format, value, headers=headers, state=state, ts=collected,
                                 ingest_ts=collected, default_source=key_source(carrier.format, msg.key_text()))
        metrics.stage_seconds.labels("convert").observe(time.perf_counter() - started)
        cm.messages.labels(carrier.format).inc()
        for layer, key, batch in route_samples(out.samples):
            await send(telemetry_out[layer], key.encode(), orjson.dumps(batch), None)
            cm.samples.labels(carrier.format, layer).inc(len(batch))
        for key, doc in inventory_messages(out.inventory):
            await send(inventory_out, key.encode(), doc, None)
        if out.inventory:
            cm.inventory.labels(carrier.format).inc(len(out.inventory))
        for rej in out.rejections:
            cm.rejections.labels(carrier.format, rej.error).inc()
        for rec in rejection_dead_letters(msg, out.rejections):
            await dead_letter(rec)
        if out.unknown_metrics:
            cm.unknown.labels(carrier.format).inc(out.unknown_metrics)
            for name in sorted(out.unknown_names - seen_unknown)[: max(0, 1000 - len(seen_unknown))]:
                seen_unknown.add(name)
                log.info("%s: metric name %r is not in the catalogue (kept with meaning 'unknown')",
                         carrier.format, name)
        for reason, n in out.skipped.items():
            cm.skipped.labels(carrier.format, reason).inc(n)
        wm = state.watermark
        if wm is not None and snapshot_due(origin, wm, parts.last_snapshot.get(origin), settings.snapshot_interval_s):
            save(origin, table)

    def agent_body(name: str, table: Any) -> Callable[[Any], Awaitable[None]]:
        async def body(stream: Any) -> None:
            async for event in stream.events():
                try:
                    await convert_one(event, table)
                except Exception as exc:  # a bug must not lose the message: park it, keep going
                    m = event.message
                    log.exception("%s failed on %s[%s]@%s", name, m.topic, m.partition, m.offset)
                    msg = carrier_message(m.topic, m.partition, m.offset, m.key, m.timestamp or None, event.value,
                                          None)
                    await dead_letter(dead_letter_record(msg, reason=f"internal error: {exc!r}",
                                                         error="InternalError", record=None))
        body.__name__ = name
        return body

    telemetry_carriers = [c.topic for c in carriers.values() if c.produces == "samples"]
    inventory_carriers = [c.topic for c in carriers.values() if c.produces == "inventory"]
    if telemetry_carriers:
        table = app.Table(CARRIER_STATE_TABLE, default=None, partitions=settings.partitions, schema=raw_schema,
                          key_type=bytes, value_type=bytes)
        topic = app.topic(*telemetry_carriers, partitions=settings.partitions, **raw)
        app.agent(topic, name="convert")(agent_body("convert", table))
    if inventory_carriers:
        inv_table = app.Table(INVENTORY_CARRIER_STATE_TABLE, default=None, partitions=settings.inventory_partitions,
                              schema=raw_schema,
                              key_type=bytes, value_type=bytes)
        inv_topic = app.topic(*inventory_carriers, partitions=settings.inventory_partitions, **raw)
        app.agent(inv_topic, name="convert_inventory")(agent_body("convert_inventory", inv_table))

    async def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        for tp in revoked:
            if tp.topic in carriers:
                parts.drop(f"{tp.topic}:{tp.partition}")

    app.on_partitions_revoked.connect(on_revoked)
    app.lockstep_carriers = parts
    return parts
