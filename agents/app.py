"""The Faust app: thin agents around the pure stages in :mod:`streams`.

    telemetry.<layer>  --ingest-->  anomalies  --correlate-->  alerts
         (decode, validate, normalise,          (per-job timeline,
          rate, detect, map to jobs)             first mover, verdict)

- ``ingest`` keeps one :class:`streams.pipeline.PartitionPipeline` per input partition (plain
  objects, numpy state) and snapshots it to the ``detector_state`` table every
  ``snapshot_interval_s`` of event time; after a restart or rebalance the snapshot is restored.
- A timer broadcasts each owned input partition's event-time progress (a watermark record) to
  every ``anomalies`` partition, after the anomalies it covers.
- ``correlate`` keeps one :class:`streams.correlate.Correlator` per ``anomalies`` partition and
  snapshots it to ``correlator_state``.

Bad input never stops an agent: it becomes a dead letter on ``dlq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson

from agents import transport
from agents.batching import take_batches
from agents.carriers import attach_carriers
from agents.gaps import RangeReader, catch_up_until, expected_next
from agents.kafka import client_kwargs, faust_credentials
from agents.metrics import WorkerMetrics
from agents.stalls import StallWatch
from agents.topics import CORRELATOR_STATE_TABLE, DETECTOR_STATE_TABLE, MAX_RECORD_BYTES, TopicCatalogue
from models.settings import LockstepSettings
from streams.correlate import CorrelatorConfig
from streams.detect import DetectorConfig
from streams.health import ProgressWatch
from streams.inventory import InventoryIndex
from streams.jobs import JobPartition
from streams.lanes import SignalsConfig
from streams.pipeline import Origin, PartitionPipeline, PipelineOutput, merged_points_records
from streams.rules import Rules
from streams.series import SeriesLimits
from streams.snapshot import snapshot_due

log = logging.getLogger("lockstep.agents")

#: Side consumers (catch-up after a restore) read this many messages per pipeline call.
INGEST_BATCH_MESSAGES = 4000
#: Snapshots larger than this are split over several table keys (records are limited to 8 MiB).
SNAPSHOT_CHUNK_BYTES = 4 * 1024 * 1024
_CHUNKED = b"LOCKSTEP-CHUNKED:"


def detector_config(settings: LockstepSettings) -> DetectorConfig:
    return DetectorConfig(
        window=settings.baseline_window, min_samples=settings.baseline_min_samples,
        z_threshold=settings.z_threshold, score_threshold=settings.score_threshold,
        confirm=settings.confirm_samples, clear=settings.clear_samples,
        min_relative_change=settings.min_relative_change,
        limits=SeriesLimits(settings.max_series_per_partition, settings.max_series_per_source, settings.series_idle_s),
    )


def correlator_config(settings: LockstepSettings) -> CorrelatorConfig:
    return CorrelatorConfig(
        allowed_lateness_s=settings.allowed_lateness_s, grace_s=settings.grace_s, lookback_s=settings.lookback_s,
        resolve_after_s=settings.resolve_after_s, critical_gpus=settings.critical_gpus,
        critical_ratio=settings.critical_ratio, idle_s=settings.watermark_idle_s, public_url=settings.public_url,
        orphan_hold_s=settings.watermark_orphan_hold_s,
        symptom_hold_s=settings.symptom_hold_s,
    )


def signals_config(settings: LockstepSettings) -> SignalsConfig:
    return SignalsConfig(allowed_lateness_s=settings.allowed_lateness_s,
                         annotation_window_s=settings.annotation_window_s,
                         peer_bucket_s=settings.straggler_bucket_s, peer_idle_s=settings.straggler_idle_s)


class LockstepApp(faust.App):
    """The Faust app with Lockstep's per-process state attached (typed, for the worker and tests)."""

    lockstep_fetch_max_wait_ms: int | None = None
    lockstep_state: WorkerState
    lockstep_metrics: WorkerMetrics


Emit = Callable[[str, bytes | None, bytes, int | None], Awaitable[None]]


@dataclass
class WorkerState:
    """Everything the agents of one worker process hold in memory."""

    inventory: InventoryIndex
    pipelines: dict[str, PartitionPipeline] = field(default_factory=dict)
    correlators: dict[int, JobPartition] = field(default_factory=dict)
    correlator_resume_check: set[int] = field(default_factory=set)
    last_correlator_snapshot: dict[int, float] = field(default_factory=dict)
    published_wm: dict[str, float] = field(default_factory=dict)
    eos: set[str] = field(default_factory=set)
    wm_dirty: bool = False
    last_broadcast: float = 0.0
    #: wall time the ingest agent last received a message of each input partition, and when the batch
    #: it is working on started (None between batches): what tells an idle partition from a busy worker
    last_message: dict[str, float] = field(default_factory=dict)
    batch_started: float | None = None
    last_snapshot_wm: dict[str, float] = field(default_factory=dict)
    finished_partitions: set[int] = field(default_factory=set)
    # ingest (issue 8)
    resume_check: set[str] = field(default_factory=set)
    offset_resets: set[str] = field(default_factory=set)
    resume_skipped: int = 0
    resume_caught_up: int = 0
    redelivered: int = 0  # messages delivered again at or before the offset already processed (skipped)
    #: when each assigned input partition (telemetry, anomalies) last delivered (see agents.stalls)
    stalls: StallWatch = field(default_factory=StallWatch)
    #: snapshots taken, waiting for the producer flush that must precede them (drain_snapshots): (still owned?, write)
    snapshot_queue: list[tuple[Callable[[], bool], Callable[[], None]]] = field(default_factory=list)
    snapshot_writer: asyncio.Future[None] | None = None
    #: reads holes in the offsets an agent was handed (agents.gaps); None in the agent test context
    ranges: RangeReader | None = None
    ingested_messages: int = 0
    ingested_samples: int = 0
    #: input partition -> offsets that raised alone (dead-lettered): a rebuild's catch-up skips them
    poison: dict[str, set[int]] = field(default_factory=dict)
    #: when ingest and correlation last made progress (the readiness rule, streams.health)
    progress: ProgressWatch = field(default_factory=lambda: ProgressWatch(60.0))


@dataclass
class Processed:
    """One input partition's share of an ingest batch, processed (``out`` None: nothing new in it)."""

    name: str
    partition: int
    pipe: PartitionPipeline
    out: PipelineOutput | None
    hole: list[Any]


def build_app(
    settings: LockstepSettings,
    bootstrap: str,
    inventory: InventoryIndex,
    *,
    metrics: WorkerMetrics | None = None,
    expected_origins: set[str] | None = None,
    on_finished: Callable[[int], None] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    emit: Emit | None = None,
    rules: Rules | None = None,
) -> tuple[LockstepApp, WorkerState]:
    """Build the Faust app and its agents.

    ``expected_origins`` (replay) makes correlation wait for every input partition instead of
    skipping idle ones, and ``on_finished(partition)`` is called once a correlation partition has
    seen the end of every input. ``emit(topic_name, key, value, partition)`` replaces sending to
    Kafka (Faust's agent test context uses it; production leaves it None).
    """
    transport.register()
    cat = TopicCatalogue(settings)
    metrics = metrics or WorkerMetrics()
    state = WorkerState(inventory, progress=ProgressWatch(settings.correlation_stall_s))
    if emit is None:
        state.ranges = RangeReader(settings, bootstrap)
    dcfg = detector_config(settings)
    ccfg = correlator_config(settings)
    scfg = signals_config(settings)
    session = settings.kafka_session_timeout_s or (10.0 if settings.embedded_broker else 30.0)
    servers = [b.strip() for b in bootstrap.split(",") if b.strip()]
    app = LockstepApp(
        settings.app_id,
        broker=[f"lockstep://{server}" for server in servers],
        broker_credentials=faust_credentials(settings),
        store="memory://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.kafka_replication_factor,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        producer_linger_ms=settings.kafka_producer_linger_ms,
        broker_session_timeout=session,
        broker_heartbeat_interval=session / 10,
        broker_rebalance_timeout=session,
        broker_request_timeout=max(90.0, session * 3),
        broker_commit_interval=1.0,
        producer_max_request_size=MAX_RECORD_BYTES,
        web_enabled=False,
        table_cleanup_interval=3600.0,
        loop=loop,
    )
    app.lockstep_fetch_max_wait_ms = settings.kafka_fetch_max_wait_ms  # read by agents.transport

    telemetry_topic = app.topic(*cat.telemetry_topics, key_serializer="raw", value_serializer="raw",
                                partitions=settings.partitions)
    anomalies_topic = app.topic(cat.anomalies, key_serializer="raw", value_serializer="raw",
                                partitions=settings.partitions)
    alerts_topic = app.topic(cat.alerts, key_serializer="raw", value_serializer="raw",
                             partitions=settings.alerts_partitions)
    dlq_topic = app.topic(cat.dlq, key_serializer="raw", value_serializer="raw",
                          partitions=settings.inventory_partitions)
    stats_topic = app.topic(cat.stats, key_serializer="raw", value_serializer="raw",
                            partitions=settings.alerts_partitions)
    timelines_topic = app.topic(cat.timelines, key_serializer="raw", value_serializer="raw",
                                partitions=settings.partitions)
    raw_schema: Any = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    detector_table = app.Table(DETECTOR_STATE_TABLE, default=None, partitions=settings.partitions,
                               schema=raw_schema, key_type=bytes, value_type=bytes)
    correlator_table = app.Table(CORRELATOR_STATE_TABLE, default=None, partitions=settings.partitions,
                                 schema=raw_schema, key_type=bytes, value_type=bytes)

    async def send(topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        if emit is not None:
            await emit(topic.get_topic_name(), key, value, partition)
        else:
            await topic.send(key=key, value=value, partition=partition)

    async def dead_letter(record: dict[str, Any]) -> None:
        metrics.dead_letters.labels(record["stage"], record["error"]).inc()
        key = record.get("key")
        await send(dlq_topic, key.encode() if key else None, orjson.dumps(fit_dead_letter(record)))

    # --- ingest (issue 8: batches, snapshots that carry their input offset) -------------------------
    resumes = ingest_resume_counter(metrics)

    def pipeline_for(origin: str, partition: int) -> PartitionPipeline:
        pipe = state.pipelines.get(origin)
        if pipe is None:
            pipe = PartitionPipeline(origin, dcfg, inventory)
            blob = read_snapshot(detector_table, origin.encode())
            if blob:
                try:
                    pipe.restore(blob)
                    metrics.restores.labels(DETECTOR_STATE_TABLE).inc()
                    state.resume_check.add(origin)
                    log.info("restored %s: %d series, watermark %s, input offset %s", origin, len(pipe.registry),
                             pipe.watermark, pipe.last_offset)
                except Exception:
                    log.exception("snapshot of %s unusable; starting from an empty baseline", origin)
                    pipe = PartitionPipeline(origin, dcfg, inventory)
            state.pipelines[origin] = pipe
        return pipe

    @app.agent(telemetry_topic, name="ingest")
    async def ingest(stream: faust.StreamT[bytes]) -> None:
        # Many messages at once: one pipeline call per input partition per batch, so the array work
        # is paid per batch, not per message. Faust acks every event of a batch once it is handled.
        # Up to ingest_batch_messages (all partitions), every ingest_batch_within_s, or at once with what
        # queued up while a longer batch was handled (agents.batching).
        batches = take_batches(stream, settings.ingest_batch_messages, settings.ingest_batch_within_s)
        async for events in batches:
            groups: dict[tuple[str, int], list[Any]] = {}
            now = time.monotonic()
            state.batch_started = now
            for event in events:
                msg = event.message
                groups.setdefault((msg.topic, msg.partition), []).append(event)
            for topic, partition in groups:
                state.last_message[f"{topic}:{partition}"] = now
                state.stalls.delivered(f"{topic}:{partition}", now)
            done: list[Processed] = []
            for (topic, partition), group in groups.items():
                name = f"{topic}:{partition}"
                before = state.pipelines[name].last_offset if name in state.pipelines else None
                try:
                    done.append(await ingest_partition(topic, partition, group))
                except Exception:  # a bug must not lose messages: retry one by one, park the one that fails
                    log.exception("ingest batch failed on %s[%s]; retrying its %d messages one by one", topic,
                                  partition, len(group))
                    metrics.batch_retries.labels(topic).inc()
                    await rebuild(topic, partition, before)
                    for event in group:
                        try:
                            done.append(await ingest_partition(topic, partition, [event]))
                        except Exception as exc:
                            log.exception("ingest failed on %s[%s]@%s; dead-lettered", topic, partition,
                                          event.message.offset)
                            await dead_letter(_dl("ingest", f"internal error: {exc!r}", event, error="InternalError"))
                            state.poison.setdefault(name, set()).add(event.message.offset)
                            await rebuild(topic, partition, event.message.offset, event.message.timestamp)
            await finish_batch([p for p in done if p.out is not None])
            state.batch_started = None
            state.progress.ingest(time.monotonic(), state.ingested_samples)

    async def ingest_partition(topic: str, partition: int, events: list[Any]) -> Processed:
        """Process one input partition's messages of a batch and send their anomalies, clocks and dead
        letters; what is per batch (points, progress, snapshots) is left to :func:`finish_batch`."""
        name = f"{topic}:{partition}"
        pipe = pipeline_for(name, partition)
        items = [(_raw(e.value), Origin(topic, partition, e.message.offset, e.message.timestamp, e.message.key))
                 for e in events]
        if name in state.resume_check:
            state.resume_check.discard(name)
            items = await resume(pipe, topic, partition, items)
        elif _seen(items[0][1].offset, items[0][1].timestamp, pipe.last_offset, pipe.last_record_ts):
            # Delivered again (at least once: a seek back to the committed offset): already in the state,
            # unless written after the state's last message (a topic rebuilt under us: processed).
            kept = [it for it in items if not _seen(it[1].offset, it[1].timestamp, pipe.last_offset,
                                                     pipe.last_record_ts)]
            state.redelivered += len(items) - len(kept)
            items = kept
        if not items:
            return Processed(name, partition, pipe, None, [])
        hole = await read_hole(topic, partition, pipe.last_offset, items[0][1].offset)
        if hole:  # processed first, in offset order; acknowledged to Faust once their outputs are out
            items = _items(hole) + items
        started = time.perf_counter()
        out = pipe.process_many(items)
        metrics.stage_seconds.labels("ingest_batch").observe(time.perf_counter() - started)
        metrics.messages_in.labels(topic).inc(len(items))
        state.ingested_messages += len(items)
        state.ingested_samples += out.samples
        for layer, n in out.by_layer.items():
            metrics.samples_in.labels(topic, layer).inc(n)
        if out.out_of_order:
            metrics.out_of_order.labels(topic).inc(out.out_of_order)
        if out.duplicates:
            metrics.duplicates.labels(topic).inc(out.duplicates)
        if out.resets:
            metrics.counter_resets.labels(topic).inc(out.resets)
        if out.unknown_metrics:
            metrics.unknown_metrics.labels(topic).inc(out.unknown_metrics)
        if out.unmapped_anomalies:
            metrics.unmapped.inc(out.unmapped_anomalies)
        for cap, n in out.refused.items():
            metrics.series_refused.labels(name, cap).inc(n)
        if out.evicted:
            metrics.series_evicted.labels(name).inc(out.evicted)
        metrics.series.labels(name).set(len(pipe.registry))
        for dl in out.dead_letters:
            await dead_letter(dl.to_record())
        for rec in out.anomalies:
            metrics.anomalies.labels(rec["layer"], rec["phase"]).inc()
            await send(anomalies_topic, rec["job_id"].encode(), orjson.dumps(rec))
        for rec in out.clocks:  # keyed by source: one partition raises the clock_skew alert
            await send(anomalies_topic, rec["source"].encode(), orjson.dumps(rec))
        return Processed(name, partition, pipe, out, hole)

    async def finish_batch(done: list[Processed]) -> None:
        """The per-batch outputs, in this order: one points record per job for all input partitions of the
        batch (streams.pipeline.merged_points_records), then progress (watermarks), acknowledgements of
        holes read around Faust, and the snapshots due. Progress and snapshots come after every output
        of the messages they cover (a watermark never overtakes its points; a restore never skips them).
        """
        for rec in merged_points_records([(p.name, p.out) for p in done if p.out is not None]):
            await send(anomalies_topic, rec["job_id"].encode(), orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
        eos = False
        for p in done:
            out, pipe, name = p.out, p.pipe, p.name
            assert out is not None
            if out.max_ts is not None and pipe.watermark is not None:
                state.published_wm[name] = pipe.watermark
                state.wm_dirty = True
            if out.control == "eos":
                state.eos.add(name)
                eos = True
            ack_read(p.hole)
        if eos:
            await broadcast_watermarks()
        for p in done:
            pipe, name = p.pipe, p.name
            # Snapshots are staggered across the worker's partitions (streams.snapshot.snapshot_due).
            if pipe.watermark is not None and snapshot_due(name, pipe.watermark, state.last_snapshot_wm.get(name),
                                                           settings.snapshot_interval_s):
                await write_snapshot(pipe, p.partition)
                state.last_snapshot_wm[name] = pipe.watermark

    async def rebuild(topic: str, partition: int, last: int | None, last_ts: float | None = None) -> None:
        """Put an input partition's pipeline back to its state after offset ``last`` once processing raised
        half-way through (the pipeline may hold part of the failed messages): the last snapshot written,
        then the offsets after it up to ``last`` read again for state only (this worker processed them and
        sent their outputs), skipping the offsets that raised alone (:attr:`WorkerState.poison`).

        Without a broker to read from or a snapshot to start at, the pipeline is kept as it is: the retry
        then sees samples the failed attempt had folded in as duplicates (dropped and counted).
        """
        name = f"{topic}:{partition}"
        if state.ranges is None or last is None or name not in state.pipelines:
            return
        blob = read_snapshot(detector_table, name.encode())
        if not blob:
            return
        pipe = PartitionPipeline(name, dcfg, inventory)
        pipe.restore(blob)
        snap = pipe.last_offset
        if snap is None or snap > last:
            return
        poison = state.poison.get(name, set())
        poison.difference_update({o for o in poison if o <= snap})  # in the snapshot: never read again
        n = await catch_up(pipe, topic, partition, snap + 1, last + 1, skip=poison)
        if pipe.last_offset is None or pipe.last_offset < last:  # the last offsets were skipped (poison)
            pipe.last_offset = last
            if last_ts is not None:
                pipe.last_record_ts = last_ts
        state.pipelines[name] = pipe
        log.warning("%s: state rebuilt from the snapshot at offset %d and %d messages read again (state only) up "
                    "to offset %d", name, snap, n, last)

    async def write_snapshot(pipe: PartitionPipeline, partition: int) -> None:
        """Snapshot ``pipe`` (state after input offset ``pipe.last_offset``) into ``detector_state``.

        The snapshot is taken now and written by :func:`drain_snapshots` once everything sent before
        it is on the broker, so a snapshot that reached the changelog never covers outputs that did not
        (see docs/performance.md, "Restart"), and the ingest agent does not wait for that flush.
        """
        metrics.series.labels(pipe.origin).set(len(pipe.registry))
        blob = pipe.snapshot()
        queue_snapshot(lambda: state.pipelines.get(pipe.origin) is pipe,
                       lambda: put_snapshot(detector_table, DETECTOR_STATE_TABLE, pipe.origin, blob, partition))

    def queue_snapshot(owned: Callable[[], bool], write: Callable[[], None]) -> None:
        """Write a snapshot (taken already) once everything sent before it is on the broker, without
        holding up the agent that took it (:func:`drain_snapshots`); at once in the agent test context,
        which has no producer to wait for."""
        if emit is not None:
            write()
            return
        state.snapshot_queue.append((owned, write))
        if state.snapshot_writer is None or state.snapshot_writer.done():
            state.snapshot_writer = asyncio.ensure_future(drain_snapshots())

    async def drain_snapshots() -> None:
        """Write the queued snapshots after one producer flush that covers every output sent before
        them, in the order they were taken; a snapshot whose owner was revoked (or replaced) meanwhile is
        dropped: the next owner restores the last one written and writes its own."""
        while state.snapshot_queue:
            queued, state.snapshot_queue = state.snapshot_queue, []
            try:
                await app.producer.flush()
            except Exception:
                log.exception("producer flush before %d snapshots failed; they are not written", len(queued))
                continue
            for owned, write in queued:
                if owned():
                    write()

    def put_snapshot(table: Any, name: str, key: str, blob: bytes, partition: int) -> None:
        """Write ``blob`` under ``key`` into ``table`` (changelog partition ``partition``), in chunks."""
        for chunk_key, value in snapshot_records(key.encode(), blob):
            table_put(table, chunk_key, value, partition)
        metrics.snapshots.labels(name).inc()

    async def resume(pipe: PartitionPipeline, topic: str, partition: int,
                     items: list[tuple[bytes, Origin]]) -> list[tuple[bytes, Origin]]:
        """Make a restored pipeline consistent with where Faust resumed the partition.

        The snapshot holds the state after input offset ``S``; Faust resumes at the committed offset
        ``C``. ``C > S + 1``: the messages in between are read again for state only (their outputs were
        produced before the commit). ``C <= S``: the messages up to ``S`` are already in the state and
        their outputs were flushed before the snapshot was written: they are skipped.
        """
        snap = pipe.last_offset
        first = items[0][1].offset
        if snap is None or first is None:
            return items
        if first == snap + 1:
            if pipe.last_record_ts is None or emit is not None:
                return items
            # The usual continuation, unless the topic was rebuilt under us with at least ``first``
            # messages already in it (a broker that lost its data, refilled before this worker came
            # back): then the record at the snapshot's offset is not the one the state holds.
            seen = await record_time(topic, partition, snap)
            if seen is not None and abs(seen - pipe.last_record_ts) < 0.001:
                return items
            log.warning("%s: the record at the snapshot's input offset %d is not the one the restored state "
                        "holds: the topic was recreated or truncated (a broker that lost its data?); keeping the "
                        "learned baselines and processing offsets 0..%d too", pipe.origin, snap, snap)
            resumes.labels(pipe.origin, "offsets_reset").inc()
            state.offset_resets.add(pipe.origin)
            await catch_up(pipe, topic, partition, 0, first)
            return items
        end = await partition_end(topic, partition)
        if end is not None and snap >= end:
            log.warning("%s: the snapshot's input offset %d is at or beyond the partition's end %d: the topic was "
                        "recreated or truncated (a broker that lost its data?); keeping the learned baselines and "
                        "processing every message from offset %d", pipe.origin, snap, end, first)
            resumes.labels(pipe.origin, "offsets_reset").inc()
            state.offset_resets.add(pipe.origin)
            return items
        first_ts = items[0][1].timestamp
        if first <= snap and first_ts is not None and pipe.last_record_ts is not None \
                and first_ts > pipe.last_record_ts:
            # Offsets the state claims to hold, but written after the state's last message: the topic
            # was rebuilt under us (a broker that lost its data). Nothing of it is in the state.
            log.warning("%s: offset %d was written after the restored state's last message (offset %d): the topic "
                        "was recreated or truncated (a broker that lost its data?); keeping the learned baselines "
                        "and processing every message from offset %d", pipe.origin, first, snap, first)
            resumes.labels(pipe.origin, "offsets_reset").inc()
            state.offset_resets.add(pipe.origin)
            return items
        if first <= snap:
            kept = [it for it in items if it[1].offset is None or it[1].offset > snap]
            state.resume_skipped += len(items) - len(kept)
            resumes.labels(pipe.origin, "skipped_in_snapshot").inc()
            log.info("%s: resumed at offset %d; offsets up to %d are already in the restored state: skipped %d",
                     pipe.origin, first, snap, len(items) - len(kept))
            return kept
        if emit is not None:
            log.warning("%s: %d messages between the snapshot (%d) and the commit (%d) cannot be read here",
                        pipe.origin, first - snap - 1, snap, first)
            return items
        # Up to the group's commit the outputs went out before (state only); a hole between the commit
        # and ``first`` is processed in full by ingest_partition (agents.gaps).
        upto = catch_up_until(snap, committed_of(topic, partition), first)
        n = await catch_up(pipe, topic, partition, snap + 1, upto)
        state.resume_caught_up += n
        resumes.labels(pipe.origin, "caught_up").inc()
        log.info("%s: restored state caught up over offsets %d..%d (%d messages, state only)", pipe.origin,
                 snap + 1, upto - 1, n)
        return items

    def committed_of(topic: str, partition: int) -> int | None:
        """The group's committed offset (the next to read) of a partition, as Faust last knew it."""
        if emit is not None:
            return None
        from faust.types import TP

        consumer: Any = app.consumer
        try:
            committed = consumer._committed_offset.get(TP(topic, partition))
        except Exception:  # the consumer is not started
            return None
        return committed if isinstance(committed, int) else None

    async def read_hole(topic: str, partition: int, last: int | None, first: int | None) -> list[Any]:
        """The records an agent was not handed before ``first`` although it processed up to ``last`` (or, with
        no state, although the group committed before them): records Faust lost between its fetcher and the
        agent (agents.gaps). Empty when there is no hole."""
        if state.ranges is None or first is None:
            return []
        expected = expected_next(last, committed_of(topic, partition) if last is None else None)
        if expected is None or first <= expected:
            return []
        records = await state.ranges.read(topic, partition, expected, first)
        metrics.gaps.labels(topic, "filled" if records else "empty").inc()
        log.warning("%s:%d: offsets %d..%d never reached the agent (lost inside Faust between its fetcher and the "
                    "agent); read %d records from the broker and processing them first", topic, partition, expected,
                    first - 1, len(records))
        return records

    def ack_read(records: list[Any]) -> None:
        """Acknowledge records read around Faust (a hole), so the group's commit can pass them."""
        if not records:
            return
        from faust.types import TP, Message

        consumer: Any = app.consumer
        for m in records:
            consumer.ack(Message(m.topic, m.partition, m.offset, m.timestamp / 1000.0, m.timestamp_type, None,
                                 m.key, m.value, None, tp=TP(m.topic, m.partition)))

    async def partition_end(topic: str, partition: int) -> int | None:
        if emit is not None:
            return None
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            return int((await consumer.end_offsets([tp]))[tp])
        except Exception:
            log.exception("could not read the end offset of %s[%d]", topic, partition)
            return None
        finally:
            await consumer.stop()

    async def record_time(topic: str, partition: int, offset: int) -> float | None:
        """Kafka time (seconds) of the record at ``offset``; None if there is none or it cannot be read."""
        assert state.ranges is not None  # only called with a broker (emit is None)
        try:
            records = await state.ranges.read(topic, partition, offset, offset + 1)
        except Exception:
            log.exception("could not read %s[%d] at offset %d", topic, partition, offset)
            return None
        return records[0].timestamp / 1000.0 if records else None

    async def catch_up(pipe: PartitionPipeline, topic: str, partition: int, start: int, stop: int,
                       skip: set[int] | None = None) -> int:
        """Feed offsets ``[start, stop)`` of one partition to ``pipe`` to rebuild its state (``skip``: offsets
        left out, dead-lettered before).

        Their outputs were produced before the commit; the anomaly episodes among them are produced
        again anyway (correlation takes a repeated episode once), so nothing depends on the previous
        worker having flushed them. Job points are not repeated (they would count twice)."""
        assert state.ranges is not None  # only called with a broker (emit is None)
        n = 0
        try:
            async for records in state.ranges.chunks(topic, partition, start, stop, INGEST_BATCH_MESSAGES):
                if skip:
                    records = [m for m in records if m.offset not in skip]
                out = pipe.process_many(_items(records))
                n += len(records)
                for rec in out.anomalies:
                    await send(anomalies_topic, rec["job_id"].encode(), orjson.dumps(rec))
                for rec in out.clocks:
                    await send(anomalies_topic, rec["source"].encode(), orjson.dumps(rec))
        except Exception:
            log.exception("%s: catching up over %d..%d failed after %d messages; the baselines miss the rest",
                          pipe.origin, start, stop - 1, n)
        return n

    async def broadcast_watermarks() -> None:
        if not state.published_wm and not state.eos:
            return
        # An input partition is idle only when this worker is keeping up (not inside a long batch, a
        # restore or a catch-up) and has fetched nothing for it for watermark_idle_s: then it has no data.
        now = time.monotonic()
        busy = state.batch_started is not None and now - state.batch_started > 1.0
        idle = [] if busy else sorted(o for o in state.published_wm
                                      if now - state.last_message.get(o, now) > settings.watermark_idle_s)
        value = orjson.dumps({"type": "watermark", "origins": state.published_wm, "eos": sorted(state.eos),
                              "idle": idle})
        state.wm_dirty = False
        for partition in range(settings.partitions):
            await send(anomalies_topic, None, value, partition)

    @app.timer(settings.watermark_interval_s, name="broadcast_watermarks")  # type: ignore[untyped-decorator]
    async def watermark_timer() -> None:
        # Progress when it moved; otherwise a heartbeat every second, so correlation can tell an idle
        # input partition (mentioned, not advancing) from one between owners (not mentioned at all).
        now = time.monotonic()
        if state.wm_dirty or now - state.last_broadcast >= 1.0:
            state.last_broadcast = now
            await broadcast_watermarks()

    def correlator_for(partition: int) -> JobPartition:
        corr = state.correlators.get(partition)
        if corr is None:
            corr = JobPartition(ccfg, inventory, expected_origins, scfg, rules)
            blob = read_snapshot(correlator_table, str(partition).encode())
            if blob:
                try:
                    corr.restore(blob, time.monotonic())
                    metrics.restores.labels(CORRELATOR_STATE_TABLE).inc()
                    state.correlator_resume_check.add(partition)
                    log.info("restored correlation partition %d: %d jobs, input offset %s", partition,
                             len(corr.correlator.jobs), corr.last_offset)
                except Exception:
                    log.exception("correlator snapshot of partition %d unusable; starting empty", partition)
                    corr = JobPartition(ccfg, inventory, expected_origins, scfg, rules)
            state.correlators[partition] = corr
        return corr

    async def emit_results(res: Any) -> None:
        await emit_alerts(res.alerts)
        for rec in res.timelines:
            await send(timelines_topic, rec["job_id"].encode(), orjson.dumps(rec))
        for rec in res.stats:
            await send(stats_topic, rec["job_id"].encode(), orjson.dumps(rec))

    async def emit_alerts(alerts: list[dict[str, Any]]) -> None:
        for alert in alerts:
            metrics.alerts.labels(alert["type"], alert["severity"], alert["status"]).inc()
            log.info("alert %s %s %s %s (started %s, due %s)", alert["status"], alert["type"], alert.get("job_id"),
                     alert["alert_id"], alert["started_at"], alert["detected_at"])
            await send(alerts_topic, (alert.get("job_id") or "").encode(), orjson.dumps(alert))

    annotations_topic = app.topic(cat.annotations, key_serializer="raw", value_serializer="raw",
                                  partitions=settings.inventory_partitions)

    @app.agent(annotations_topic, name="forward_annotations")
    async def forward_annotations(stream: faust.StreamT[bytes]) -> None:
        """Operator annotations join their job's correlation partition, in order with its evidence."""
        from pydantic import ValidationError

        from models.operator import AnnotationRecord

        async for event in stream.events():
            try:
                rec = AnnotationRecord.model_validate_json(event.value)
            except ValidationError as exc:
                await dead_letter(_dl("forward_annotations", f"not an annotation: {exc.errors()[0]['msg']}", event))
                continue
            await send(anomalies_topic, rec.job_id.encode(), rec.model_dump_json().encode())

    @app.agent(anomalies_topic, name="correlate")
    async def correlate(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            try:
                await correlate_one(event)
            except Exception as exc:
                log.exception("correlate failed on partition %s@%s", event.message.partition, event.message.offset)
                await dead_letter(_dl("correlate", f"internal error: {exc!r}", event, error="InternalError"))

    async def correlator_resume(corr: JobPartition, partition: int, first: int | None,
                                first_ts: float | None = None) -> bool:
        """Make a restored correlation partition consistent with where Faust resumed (as for ingest):
        offsets the snapshot already holds are skipped (returns False for them); a gap between the
        snapshot and the commit is read again for state only; a rebuilt topic is processed whole."""
        snap = corr.last_offset
        if snap is None or first is None:
            return True
        if first == snap + 1:
            if corr.last_record_ts is None or emit is not None:
                return True
            seen = await record_time(cat.anomalies, partition, snap)
            if seen is not None and abs(seen - corr.last_record_ts) < 0.001:
                return True
            # Rebuilt and refilled past the snapshot before we resumed (see ``resume``): the records
            # before ``first`` were never correlated; correlate them now, outputs included.
            log.warning("correlation partition %d: the record at the snapshot's offset %d is not the one the "
                        "restored state holds: the topic was recreated or truncated; correlating offsets 0..%d "
                        "too", partition, snap, snap)
            await correlate_range(corr, partition, 0, first)
            return True
        if first <= snap and first_ts is not None and corr.last_record_ts is not None \
                and first_ts > corr.last_record_ts:
            log.warning("correlation partition %d: offset %d was written after the restored state's last record "
                        "(offset %d): the topic was recreated or truncated; processing it whole", partition, first,
                        snap)
            return True
        if first <= snap:
            return False
        if emit is not None:
            return True
        upto = catch_up_until(snap, committed_of(cat.anomalies, partition), first)  # the rest: a hole
        n = await correlate_range(corr, partition, snap + 1, upto, outputs=False)
        log.info("correlation partition %d: restored state caught up over offsets %d..%d (%d records, state only)",
                 partition, snap + 1, upto - 1, n)
        return True

    async def correlate_range(corr: JobPartition, partition: int, start: int, stop: int,
                              outputs: bool = True) -> int:
        """Correlate offsets ``[start, stop)`` of an ``anomalies`` partition; emit what they produce unless
        ``outputs`` is False (state only: their outputs went out before). Returns the records folded in."""
        if state.ranges is None:
            return 0
        n = 0
        try:
            async for records in state.ranges.chunks(cat.anomalies, partition, start, stop):
                n += await correlate_records(corr, records, outputs)
        except Exception:
            log.exception("correlation partition %d: correlating %d..%d failed after %d records", partition, start,
                          stop - 1, n)
        return n

    async def correlate_records(corr: JobPartition, records: list[Any], outputs: bool) -> int:
        """Fold records read around Faust into ``corr`` (emitting what they produce when ``outputs``)."""
        n = 0
        for m in records:
            if m.value is None:
                continue
            with contextlib.suppress(KeyError, TypeError, ValueError):  # JSONDecodeError is a ValueError
                res = corr.on_record(orjson.loads(m.value), time.monotonic(), m.offset, m.timestamp / 1000.0)
                n += 1
                if outputs:
                    await emit_results(res)
        return n

    async def correlate_one(event: Any) -> None:
        partition = event.message.partition
        state.stalls.delivered(f"{event.message.topic}:{partition}", time.monotonic())
        corr = correlator_for(partition)
        if partition in state.correlator_resume_check:
            if not await correlator_resume(corr, partition, event.message.offset, event.message.timestamp):
                return  # already in the restored state; its outputs were flushed before the snapshot
            state.correlator_resume_check.discard(partition)
        elif _seen(event.message.offset, event.message.timestamp, corr.last_offset, corr.last_record_ts):
            state.redelivered += 1  # delivered again (a seek back to the committed offset): already folded in
            return
        hole = await read_hole(cat.anomalies, partition, corr.last_offset, event.message.offset)
        if hole:  # records Faust never handed over: folded in first, in offset order
            await correlate_records(corr, hole, outputs=True)
            ack_read(hole)
        try:
            rec = orjson.loads(event.value)
        except orjson.JSONDecodeError as exc:
            await dead_letter(_dl("correlate", f"not JSON: {exc}", event))
            return
        if not isinstance(rec, dict):
            await dead_letter(_dl("correlate", "record is not an object", event))
            return
        try:
            out = corr.on_record(rec, time.monotonic(), event.message.offset, event.message.timestamp)
        except (KeyError, TypeError, ValueError) as exc:
            await dead_letter(_dl("correlate", f"malformed record: {exc!r}", event))
            return
        if out.late:
            metrics.late.inc(len(out.late))
        for alert in out.inhibited:
            metrics.inhibited.labels(alert["type"]).inc()
        await emit_results(out)
        wm = corr.watermark
        state.progress.correlation(partition, time.monotonic(), wm)
        if math.isfinite(wm):
            metrics.watermark.labels(str(partition)).set(wm)
        last = state.last_correlator_snapshot.get(partition, -math.inf)
        if out.changed or out.finished or (math.isfinite(wm) and wm - last >= settings.snapshot_interval_s):
            # Outputs first, then the state that produced them: a crash never leaves a snapshot whose
            # alerts were lost (restart skips what a snapshot holds; see docs/performance.md). The
            # snapshot is taken now and written after the producer flush, off this agent's path.
            blob = corr.snapshot()
            queue_snapshot(lambda: state.correlators.get(partition) is corr,
                           lambda: put_snapshot(correlator_table, CORRELATOR_STATE_TABLE, str(partition), blob,
                                                partition))
            state.last_correlator_snapshot[partition] = wm if math.isfinite(wm) else last
        if out.finished:
            state.finished_partitions.add(partition)
            if on_finished is not None:
                on_finished(partition)

    @app.timer(5.0, name="stall_watch")  # type: ignore[untyped-decorator]
    async def stall_watch() -> None:
        """Resume and re-read an input partition that stopped delivering with records waiting (agents.stalls)."""
        if emit is not None:
            return
        consumer: Any = app.consumer  # faust.transport.consumer.Consumer: its flow-control sets are read here
        try:
            assigned = {tp for tp in consumer.assignment()
                        if tp.topic in cat.telemetry_topics or tp.topic == cat.anomalies}
        except Exception:  # not started, or between assignments
            return
        now = time.monotonic()
        by_name = {f"{tp.topic}:{tp.partition}": tp for tp in assigned}
        state.stalls.assigned(by_name, now)
        busy = state.batch_started is not None or bool(state.resume_check) or bool(state.correlator_resume_check)
        suspects, silent = {}, {}
        for name in state.stalls.suspects(now, busy):
            tp = by_name[name]
            silent[tp] = state.stalls.silent_for(name, now)
            state.stalls.healed(name, now)
            # The last offset this worker processed (Faust may have read further: a stall seen here was
            # records read by the consumer that never reached the agent); else where the group committed.
            owner = state.pipelines.get(name) if tp.topic != cat.anomalies else state.correlators.get(tp.partition)
            processed = owner.last_offset if owner is not None else None
            committed = consumer._committed_offset.get(tp)
            if processed is not None and committed is not None and committed < processed:
                # Processed further than the group's commit, which no longer moves: a message was never
                # acknowledged. Read again from the commit (what is already in the state is skipped).
                await reread(tp, committed, f"committed offset {committed} stuck behind the processed offset "
                                            f"{processed}", silent[tp])
            elif processed is not None:
                suspects[tp] = processed + 1
            elif committed is not None:
                suspects[tp] = committed  # at most one message read twice (a duplicate)
        if not suspects:
            return
        for tp in sorted(await records_at(suspects)):
            await reread(tp, suspects[tp], f"nothing processed although offset {suspects[tp]} is on the broker",
                         silent[tp])

    async def reread(tp: Any, offset: int, why: str, idle_s: float) -> None:
        """Log a stalled partition with Faust's view of it, count it, resume it and read it again from ``offset``."""
        consumer: Any = app.consumer
        log.warning("%s:%d: %s (idle %.0f s; Faust: read up to %s, committed %s, active=%s buffered=%s paused=%s); "
                    "resuming it and reading again from %d", tp.topic, tp.partition, why, idle_s,
                    consumer._read_offset.get(tp), consumer._committed_offset.get(tp),
                    tp in (consumer._active_partitions or ()), tp in consumer._buffered_partitions,
                    tp in consumer._paused_partitions, offset)
        metrics.stalls.labels(tp.topic).inc()
        consumer.resume_partitions([tp])
        consumer._buffered_partitions.discard(tp)
        await consumer.seek(tp, offset)

    async def records_at(offsets: dict[Any, int]) -> set[Any]:
        """The partitions of ``offsets`` that hold a record at (or after) their offset, read by a side consumer."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False,
                                    fetch_max_wait_ms=50)
        await consumer.start()
        found: set[Any] = set()
        try:
            tps = {TopicPartition(tp.topic, tp.partition): tp for tp in offsets}
            consumer.assign(list(tps))
            for ktp, tp in tps.items():
                consumer.seek(ktp, offsets[tp])
            for _ in range(4):
                batch = await consumer.getmany(timeout_ms=250)
                for ktp, msgs in batch.items():
                    if msgs and msgs[-1].offset >= offsets[tps[ktp]]:
                        found.add(tps[ktp])
                if len(found) == len(tps):
                    break
        except Exception:
            log.exception("could not probe %d partitions for waiting records", len(offsets))
        finally:
            await consumer.stop()
        return found

    @app.timer(1.0, name="tick_correlators")  # type: ignore[untyped-decorator]
    async def tick_correlators() -> None:
        for partition, corr in list(state.correlators.items()):
            await emit_results(corr.tick(time.monotonic()))
            state.progress.correlation(partition, time.monotonic(), corr.watermark)

    async def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        for tp in revoked:
            state.pipelines.pop(f"{tp.topic}:{tp.partition}", None)
            state.published_wm.pop(f"{tp.topic}:{tp.partition}", None)
            state.last_snapshot_wm.pop(f"{tp.topic}:{tp.partition}", None)
            if tp.topic == cat.anomalies:
                state.correlators.pop(tp.partition, None)
                state.progress.forget(tp.partition)
                state.correlator_resume_check.discard(tp.partition)

    attach_carriers(app, settings, cat, send, dead_letter, metrics, to_kafka=emit is None)  # issue 3: real formats
    app.on_partitions_revoked.connect(on_revoked)
    app.lockstep_state = state
    app.lockstep_metrics = metrics
    return app, state


def _seen(offset: int | None, ts: float | None, last_offset: int | None, last_ts: float | None) -> bool:
    """Whether a record is one already processed: at or before the last offset processed, and not written
    after the last record processed (a topic rebuilt under us starts its offsets again with newer records).

    >>> _seen(5, 100.0, 9, 120.0), _seen(10, 130.0, 9, 120.0), _seen(5, 130.0, 9, 120.0), _seen(5, None, 9, None)
    (True, False, False, True)
    """
    if offset is None or last_offset is None or offset > last_offset:
        return False
    return ts is None or last_ts is None or ts <= last_ts


def _items(records: list[Any]) -> list[tuple[bytes, Origin]]:
    """Pipeline items of aiokafka records read around Faust (Kafka time in milliseconds)."""
    return [(_raw(m.value), Origin(m.topic, m.partition, m.offset, m.timestamp / 1000.0, m.key)) for m in records]


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else bytes(value) if isinstance(value, bytearray | memoryview) else (
        str(value).encode())


def snapshot_records(key: bytes, blob: bytes, chunk: int = SNAPSHOT_CHUNK_BYTES) -> list[tuple[bytes, bytes]]:
    """Table records for one snapshot: the blob itself, or its chunks (``key#i``) then a manifest at ``key``.

    >>> [(k, len(v)) for k, v in snapshot_records(b"t:0", b"x" * 5, chunk=2)]
    [(b't:0#0', 2), (b't:0#1', 2), (b't:0#2', 1), (b't:0', 18)]
    >>> read_snapshot(dict(snapshot_records(b"t:0", b"abcde", chunk=2)), b"t:0")
    b'abcde'
    """
    if len(blob) <= chunk:
        return [(key, blob)]
    parts = [blob[i: i + chunk] for i in range(0, len(blob), chunk)]
    out = [(key + b"#%d" % i, part) for i, part in enumerate(parts)]
    out.append((key, _CHUNKED + orjson.dumps(len(parts))))
    return out


def read_snapshot(table: Any, key: bytes) -> bytes | None:
    """The snapshot at ``key`` (joining its chunks); None when there is none or a chunk is missing."""
    value = table.get(key)
    if not value or not value.startswith(_CHUNKED):
        return value  # type: ignore[no-any-return]
    n = int(orjson.loads(value[len(_CHUNKED):]))
    parts = [table.get(key + b"#%d" % i) for i in range(n)]
    if any(p is None for p in parts):
        log.error("snapshot %r misses chunks; starting from an empty baseline", key)
        return None
    return b"".join(parts)


def table_put(table: Any, key: bytes, value: bytes, partition: int) -> None:
    """``table[key] = value`` with its changelog record on ``partition`` (the input partition it
    describes), from anywhere: a batch of events has no single current event to take it from."""
    table.data[key] = value
    table.send_changelog(partition, key, value)


def ingest_resume_counter(metrics: WorkerMetrics) -> Any:
    """``lockstep_ingest_resumes_total{origin, how}``: how restored partitions were made consistent."""
    counter = getattr(metrics, "_ingest_resumes", None)
    if counter is None:
        from prometheus_client import Counter

        counter = Counter("lockstep_ingest_resumes_total",
                          "Restored input partitions made consistent with the committed offset: caught_up (read "
                          "again for state), skipped_in_snapshot, offsets_reset (topic recreated)",
                          ["origin", "how"], registry=metrics.registry)
        metrics._ingest_resumes = counter  # type: ignore[attr-defined]
    return counter


def fit_dead_letter(record: dict[str, Any], limit: int = MAX_RECORD_BYTES - 64 * 1024) -> dict[str, Any]:
    """Keep a dead letter under the record size limit: a too-large original is cut to its first MiB,
    flagged, and fingerprinted (the whole message stays at its topic/partition/offset)."""
    import base64
    import hashlib

    if len(record.get("original", "")) <= limit:
        return record
    raw = base64.b64decode(record["original"])
    out = dict(record)
    out["original"] = base64.b64encode(raw[: 1024 * 1024]).decode("ascii")
    out["original_truncated"] = True
    out["original_sha256"] = hashlib.sha256(raw).hexdigest()
    return out


def _dl(stage: str, reason: str, event: Any, error: str = "ValidationFailed") -> dict[str, Any]:
    import base64

    msg = event.message
    raw = event.value if isinstance(event.value, bytes | bytearray) else bytes(str(event.value), "utf-8")
    return {
        "stage": stage, "reason": reason, "error": error, "topic": msg.topic,
        "partition": msg.partition, "offset": msg.offset, "record": None,
        "original": base64.b64encode(raw).decode("ascii"), "original_size": len(raw),
        "key": msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else None,
        "ts": msg.timestamp or 0.0, "retryable": False,
    }
