"""The ``ingest`` agent: telemetry batches through each input partition's pipeline, and their progress.

    telemetry.<layer>  --ingest-->  anomalies (episodes, clock records, job points, watermarks), dlq,
                                    fabric-rollup (per-port NIC and switch summaries: FabricSummaries)

One :class:`streams.pipeline.PartitionPipeline` per input partition (plain objects, numpy state),
snapshotted to ``detector_state`` every ``snapshot_interval_s`` of event time and restored after a
restart or rebalance (the recovery decisions: agents.recovery). A batch that raises is retried
message by message after the partition's state was put back to before it; the message that raises
alone is dead-lettered. A timer broadcasts each owned input partition's event-time progress to
every ``anomalies`` partition, after the records it covers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faust
import orjson

from agents.batching import take_batches
from agents.deadletters import dead_letter_of, raw_bytes
from agents.lane import BatchLane
from agents.offsets import facts
from agents.recovery import NOTHING_HELD, Action, decide, held, rebuild_range
from agents.runtime import Runtime
from agents.snapshots import read_snapshot
from agents.topics import DETECTOR_STATE_TABLE
from models.errors import InternalError
from streams.detect import DetectorBank
from streams.fabric import FabricConfig
from streams.pipeline import Origin, PartitionPipeline, PipelineOutput, merged_points_records, run_together
from streams.snapshot import snapshot_due

log = logging.getLogger("lockstep.agents")

#: Side reads (catch-up after a restore, a rebuild) take this many messages per pipeline call.
INGEST_BATCH_MESSAGES = 4000


@dataclass
class Processed:
    """One input partition's share of an ingest batch, processed (``out`` None: nothing new in it)."""

    name: str
    partition: int
    pipe: PartitionPipeline
    out: PipelineOutput | None
    hole: list[Any]


@dataclass
class Prepared:
    """One input partition's share of an ingest batch, ready for its pipeline (agents.ingest.Ingest.prepare)."""

    topic: str
    partition: int
    name: str
    pipe: PartitionPipeline
    #: the pipeline items: the hole read around Faust, then the messages not already in the state
    items: list[tuple[bytes, Origin]]
    hole: list[Any]
    #: the batch's events of the partition
    events: list[Any]


def items_of(records: list[Any]) -> list[tuple[bytes, Origin]]:
    """Pipeline items of aiokafka records read around Faust (Kafka time in milliseconds)."""
    return [(raw_bytes(m.value), Origin(m.topic, m.partition, m.offset, m.timestamp / 1000.0, m.key))
            for m in records]


class Ingest:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.state = rt.state
        self.metrics = rt.metrics
        self.resumes = ingest_resume_counter(rt.metrics)
        self.telemetry_topics = set(rt.catalogue.telemetry_topics)
        self.fabric = FabricSummaries(rt)
        #: One detector bank for all the worker's input partitions: their rounds are scored together
        #: (streams.pipeline.run_together), each pipeline holding its rows of it until it is dropped.
        self.bank = state_bank(rt)
        #: agents.lane: the records a fetch at a time from the consumer (a worker on a broker), or None: the
        #: agent's Faust stream (Faust's test context, ``ingest_lane`` off)
        self.lane: BatchLane | None = None

    # -- the agent ------------------------------------------------------------------------------
    async def run(self, stream: faust.StreamT[bytes]) -> None:
        """Many messages at once: one pipeline call per input partition per batch, so the array work is
        paid per batch, not per message. Every record of a batch is acknowledged once it is handled. Up to
        ingest_batch_messages (all partitions), every ingest_batch_within_s, or at once with what queued
        up while a longer batch was handled (agents.batching). On a broker the records come through the
        ingest lane a fetch at a time (agents.lane); in Faust's test context, through the agent's stream."""
        settings = self.rt.settings
        batches = take_batches(stream, settings.ingest_batch_messages, settings.ingest_batch_within_s) \
            if self.lane is None else self.lane.batches(settings.ingest_batch_messages, settings.ingest_batch_within_s)
        try:
            await self._run(batches)
        finally:
            if self.lane is not None:
                self.lane.abandon()  # a stopped agent holds no batch: a stop or rebalance need not wait for it

    async def _run(self, batches: Any) -> None:
        state = self.state
        async for events in batches:
            # rows of pipelines dropped since the last batch are free again: no batch holds those now
            recycled = self.bank.recycle()
            if recycled:
                log.info("detector bank: %d rows of dropped input partitions cleared for reuse (%d in use)",
                         recycled, self.bank.rows_in_use)
            groups: dict[tuple[str, int], list[Any]] = {}
            now = time.monotonic()
            state.batch_started = now
            for event in events:
                msg = event.message
                groups.setdefault((msg.topic, msg.partition), []).append(event)
            for topic, partition in groups:
                state.last_message[f"{topic}:{partition}"] = now
                state.stalls.delivered(f"{topic}:{partition}", now)
            done = await self.process_groups(groups)
            await self.finish_batch([p for p in done if p.out is not None])
            state.batch_started = None
            state.progress.ingest(time.monotonic(), state.ingested_samples)

    async def process_groups(self, groups: dict[tuple[str, int], list[Any]]) -> list[Processed]:
        """Each input partition's messages of a batch, run together (streams.pipeline.run_together: one
        ``score`` stage for all, their pipelines sharing :attr:`bank`), then their outputs sent partition by
        partition. A partition whose processing raises (a bug) is retried message by message from its state
        before the batch (:meth:`retry`): the message that raises alone is dead-lettered, nothing else is
        lost; a raise in the shared ``score`` stage retries every partition scored with it."""
        prepared: list[tuple[Prepared, int | None]] = []
        done: list[Processed] = []
        #: (topic, partition, its events, its state's last offset before the batch, what was raised)
        failed: list[tuple[str, int, list[Any], int | None, Exception]] = []
        for (topic, partition), group in groups.items():
            name = f"{topic}:{partition}"
            before = self.last_offset_of(name)
            try:
                ready = await self.prepare(topic, partition, group)
            except Exception as exc:
                failed.append((topic, partition, group, before, exc))
                continue
            if ready.items:
                prepared.append((ready, before))
            else:
                done.append(Processed(name, partition, ready.pipe, None, []))
        # From here to the outputs, no await: the pipelines run together as they are now.
        started = time.perf_counter()
        outs = run_together([(r.pipe, r.items) for r, _ in prepared], timer=time.perf_counter)
        self.metrics.stage_seconds.labels("ingest_batch").observe(time.perf_counter() - started)
        for (ready, before), out in zip(prepared, outs, strict=True):
            try:
                if isinstance(out, Exception):
                    raise out
                done.append(await self.emit(ready, out))
            except Exception as exc:  # (outputs that failed to go out are produced again, as before)
                failed.append((ready.topic, ready.partition, ready.events, before, exc))
        for topic, partition, group, before, error in failed:
            log.error("ingest batch failed on %s[%s]; retrying its %d messages one by one", topic, partition,
                      len(group), exc_info=error)
            done += await self.retry(topic, partition, group, before)
        return done

    async def retry(self, topic: str, partition: int, group: list[Any], before: int | None) -> list[Processed]:
        """A partition's messages of a batch whose processing raised (a bug), one by one from the state
        before the batch: the message that raises alone is dead-lettered."""
        name = f"{topic}:{partition}"
        self.metrics.batch_retries.labels(topic).inc()
        await self.rebuild(topic, partition, before)
        done = []
        for event in group:
            try:
                done.append(await self.process_partition(topic, partition, [event]))
            except Exception as exc:
                log.exception("ingest failed on %s[%s]@%s; dead-lettered", topic, partition, event.message.offset)
                await self.rt.dead_letter(dead_letter_of("ingest", InternalError, f"internal error: {exc!r}", event))
                self.state.poison.setdefault(name, set()).add(event.message.offset)
                await self.rebuild(topic, partition, event.message.offset, event.message.timestamp)
        return done

    def last_offset_of(self, origin: str) -> int | None:
        """The last input offset the partition's state holds (None: no state here, or none processed)."""
        pipe = self.state.pipelines.get(origin)
        return None if pipe is None else pipe.last_offset

    def new_pipeline(self, origin: str) -> PartitionPipeline:
        return PartitionPipeline(origin, self.rt.detector, self.rt.inventory, fabric=self.fabric.config,
                                 fabric_interval_s=self.rt.settings.fabric_publish_interval_s, bank=self.bank)

    def pipeline_for(self, origin: str) -> PartitionPipeline:
        state, rt = self.state, self.rt
        pipe = state.pipelines.get(origin)
        if pipe is None:
            pipe = self.new_pipeline(origin)
            blob = read_snapshot(rt.detector_table, origin.encode())
            if blob:
                try:
                    pipe.restore(blob)
                    self.metrics.restores.labels(DETECTOR_STATE_TABLE).inc()
                    state.resume_check.add(origin)
                    log.info("restored %s: %d series, watermark %s, input offset %s", origin, len(pipe.registry),
                             pipe.watermark, pipe.last_offset)
                except Exception:
                    log.exception("snapshot of %s unusable; starting from an empty baseline", origin)
                    pipe.release()
                    pipe = self.new_pipeline(origin)
            elif rt.offsets is not None:  # first ever, or a snapshot not recovered: said, so a restart shows it
                # A previous owner may have processed records and the group committed them without a
                # snapshot (it died or left before one was written, or the snapshot was lost): they are
                # read again for state before going on (resume), else its baselines start cold and an
                # episode it opened never ends.
                log.info("%s: no snapshot; its baselines are learned from the committed records still on the "
                         "broker (if any), then from its first message here", origin)
                state.resume_check.add(origin)
            else:
                log.info("%s: no snapshot; its baselines are learned from its first message here", origin)
            state.pipelines[origin] = pipe
        return pipe

    async def prepare(self, topic: str, partition: int, events: list[Any]) -> Prepared:
        """One input partition's messages of a batch as pipeline items: its pipeline (restored if new here,
        made consistent with where Faust resumed it), less what it already holds (delivered again), plus
        the hole read around Faust before them."""
        rt, state = self.rt, self.state
        name = f"{topic}:{partition}"
        pipe = self.pipeline_for(name)
        items = [(raw_bytes(e.value), Origin(topic, partition, e.message.offset, e.message.timestamp, e.message.key))
                 for e in events]
        if name in state.resume_check:
            state.resume_check.discard(name)
            items = await self.resume(pipe, topic, partition, items)
        elif pipe.last_offset is not None and items[0][1].offset is not None \
                and items[0][1].offset <= pipe.last_offset:
            # Delivered again (at least once: a seek back to the committed offset): already in the state,
            # unless the topic was rebuilt under us (the record at the state's last offset is another one).
            same = await self.rt.same_record(topic, partition, pipe.last_offset, pipe.last_record_ts,
                                             {it[1].offset: it[1].timestamp for it in items})
            kept = [it for it in items if not held(it[1].offset, pipe.last_offset, same, it[1].timestamp,
                                                   pipe.last_record_ts)]
            state.redelivered += len(items) - len(kept)
            items = kept
        hole: list[Any] = []
        if items:
            hole = await rt.offsets.read_hole(topic, partition, pipe.last_offset, items[0][1].offset) \
                if rt.offsets is not None else []
            if hole:  # processed first, in offset order; acknowledged to Faust once their outputs are out
                items = items_of(hole) + items
        return Prepared(topic, partition, name, pipe, items, hole, events)

    async def process_partition(self, topic: str, partition: int, events: list[Any]) -> Processed:
        """Process one input partition's messages of a batch alone and send their anomalies, clocks and dead
        letters; what is per batch (points, progress, snapshots) is left to :meth:`finish_batch`."""
        ready = await self.prepare(topic, partition, events)
        if not ready.items:
            return Processed(ready.name, partition, ready.pipe, None, [])
        started = time.perf_counter()
        out = ready.pipe.process_many(ready.items, timer=time.perf_counter)
        self.metrics.stage_seconds.labels("ingest_batch").observe(time.perf_counter() - started)
        return await self.emit(ready, out)

    async def emit(self, ready: Prepared, out: PipelineOutput) -> Processed:
        """One partition's processed messages: their metrics, dead letters, anomaly episodes and clocks."""
        rt, state, metrics = self.rt, self.state, self.metrics
        topic, name, pipe, items = ready.topic, ready.name, ready.pipe, ready.items
        for stage, seconds in out.stage_seconds.items():  # streams.pipeline.INGEST_STAGES, by name
            metrics.stage_seconds.labels(stage).observe(seconds)
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
            await rt.dead_letter(dl.to_record())
        await self.send_episodes(out)
        return Processed(name, ready.partition, pipe, out, ready.hole)

    async def send_episodes(self, out: PipelineOutput) -> None:
        """Anomaly episodes keyed by job; clock records keyed by source (one partition raises the clock_skew
        alert) and a ``retime_only`` copy to every partition (each re-times the source's evidence on the
        timelines of its own jobs)."""
        rt = self.rt
        for rec in out.anomalies:
            self.metrics.anomalies.labels(rec["layer"], rec["phase"]).inc()
            await rt.send(rt.topics.anomalies, rec["job_id"].encode(), orjson.dumps(rec))
        for rec in out.clocks:
            await rt.send(rt.topics.anomalies, rec["source"].encode(), orjson.dumps(rec))
            copy = orjson.dumps(dict(rec, retime_only=True))
            for partition in range(rt.settings.partitions):
                await rt.send(rt.topics.anomalies, None, copy, partition)

    async def finish_batch(self, done: list[Processed]) -> None:
        """The per-batch outputs, in this order: one points record per job for all input partitions of the
        batch (streams.pipeline.merged_points_records), then progress (watermarks), acknowledgements of
        holes read around Faust, and the snapshots due. Progress and snapshots come after every output
        of the messages they cover (a watermark never overtakes its points; a restore never skips them).
        Progress goes at once (not at the broadcast timer's next turn, which a busy loop delays by up to
        a second): the watermark is what an alert waits for.
        """
        rt, state = self.rt, self.state
        for rec in merged_points_records([(p.name, p.out) for p in done if p.out is not None]):
            await rt.send(rt.topics.anomalies, rec["job_id"].encode(),
                          orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
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
            if rt.offsets is not None:
                rt.offsets.ack(p.hole)
        await self.fabric.publish([(p.pipe, p.out is not None and p.out.control == "eos") for p in done])
        if eos or state.wm_dirty:  # at once, not at the timer's next turn (up to a second later on a busy loop)
            await self.broadcast_watermarks()
        now = time.monotonic()
        for p in done:
            pipe, name = p.pipe, p.name
            # Snapshots are staggered across the worker's partitions and wait the wall floor in a
            # catch-up (streams.snapshot.snapshot_due).
            if pipe.watermark is not None and snapshot_due(
                    name, pipe.watermark, state.last_snapshot_wm.get(name), rt.settings.snapshot_interval_s,
                    now=now, last_wall=state.last_snapshot_wall.get(name),
                    wall_floor_s=rt.settings.snapshot_wall_floor_s):
                self.write_snapshot(pipe, p.partition)
                state.last_snapshot_wm[name] = pipe.watermark
                state.last_snapshot_wall[name] = now

    def write_snapshot(self, pipe: PartitionPipeline, partition: int) -> None:
        """Snapshot ``pipe`` (state after input offset ``pipe.last_offset``) into ``detector_state``, written
        after everything sent before it is on the broker (agents.snapshots)."""
        self.rt.snapshots.put(self.rt.detector_table, DETECTOR_STATE_TABLE, pipe.origin, pipe.snapshot(), partition,
                              owned=lambda: self.state.pipelines.get(pipe.origin) is pipe)

    # -- recovery -------------------------------------------------------------------------------
    async def resume(self, pipe: PartitionPipeline, topic: str, partition: int,
                     items: list[tuple[bytes, Origin]]) -> list[tuple[bytes, Origin]]:
        """Make a restored pipeline consistent with where Faust resumed the partition (agents.recovery). A
        pipeline with no snapshot is caught up too, from the partition's earliest offset on the broker
        (agents.recovery.NOTHING_HELD), with its outputs left out: they went out before the commit. Either
        catch-up reads at most ``ingest_catch_up_max_messages``, the last ones before the commit."""
        state = self.state
        first = items[0][1]
        empty = pipe.last_offset is None  # no snapshot, or one taken before any record: holds nothing
        r = decide(await facts(self.rt.offsets, topic, partition, NOTHING_HELD if empty else pipe.last_offset,
                               pipe.last_record_ts, first.offset, first.timestamp, with_end=True),
                   most=self.rt.settings.ingest_catch_up_max_messages)
        if empty and r.action is not Action.CATCH_UP:
            log.info("%s: nothing committed before offset %s: its baselines are learned from here", pipe.origin,
                     first.offset)
            return items
        if r.action is Action.CONTINUE:
            if pipe.last_offset is not None and first.offset is not None and first.offset > pipe.last_offset + 1:
                log.warning("%s: %s", pipe.origin, r.why)
            return items
        if r.action is Action.SKIP_HELD:
            snap = pipe.last_offset
            kept = [it for it in items if it[1].offset is None or snap is None or it[1].offset > snap]
            state.resume_skipped += len(items) - len(kept)
            self.resumes.labels(pipe.origin, "skipped_in_snapshot").inc()
            log.info("%s: resumed at offset %s; %s: skipped %d", pipe.origin, first.offset, r.why,
                     len(items) - len(kept))
            return kept
        if r.action in (Action.REBUILT, Action.REBUILT_REFILLED):
            refilled = r.action is Action.REBUILT_REFILLED
            log.warning("%s: %s; keeping the learned baselines%s and processing every message from offset %s",
                        pipe.origin, r.why, f", reading the rebuilt partition's offsets {r.start}.."
                        f"{(r.stop or 0) - 1} (their anomaly episodes sent, not their job points)" if refilled else "",
                        first.offset)
            self.resumes.labels(pipe.origin, "offsets_reset").inc()
            state.offset_resets.add(pipe.origin)
            if refilled and r.start is not None and r.stop is not None:
                await self.catch_up(pipe, topic, partition, r.start, r.stop)
            return items
        assert r.action is Action.CATCH_UP and r.start is not None and r.stop is not None
        if r.skipped_from is not None:
            log.warning("%s: offsets %d..%d are not read back: %s", pipe.origin, r.skipped_from, r.start - 1, r.why)
        started = time.monotonic()
        n = await self.catch_up(pipe, topic, partition, r.start, r.stop, outputs=not empty)
        state.resume_caught_up += n
        self.resumes.labels(pipe.origin, "no_snapshot" if empty else "caught_up").inc()
        log.info("%s: %s caught up over offsets %d..%d (%d messages, state only, %.1f s)", pipe.origin,
                 "state with no snapshot" if empty else "restored state", r.start, r.stop - 1, n,
                 time.monotonic() - started)
        return items

    async def rebuild(self, topic: str, partition: int, last: int | None, last_ts: float | None = None) -> None:
        """Put an input partition's pipeline back to its state after offset ``last`` once processing raised
        half-way through (the pipeline may hold part of the failed messages): the last snapshot written,
        then the offsets after it up to ``last`` read again for state only (this worker processed them and
        sent their outputs), skipping the offsets that raised alone (:attr:`WorkerState.poison`).

        Without a broker to read from or a snapshot to start at, the pipeline is kept as it is: the retry
        then sees samples the failed attempt had folded in as duplicates (dropped and counted).
        """
        rt, state = self.rt, self.state
        name = f"{topic}:{partition}"
        if rt.offsets is None or last is None or name not in state.pipelines:
            return
        blob = read_snapshot(rt.detector_table, name.encode())
        if not blob:
            return
        pipe = self.new_pipeline(name)
        pipe.restore(blob)
        snap = pipe.last_offset
        span = rebuild_range(snap, last)
        if snap is None or span is None:
            return
        poison = state.poison.get(name, set())
        poison.difference_update({o for o in poison if o <= snap})  # in the snapshot: never read again
        n = await self.catch_up(pipe, topic, partition, *span, skip=poison)
        if pipe.last_offset is None or pipe.last_offset < last:  # the last offsets were skipped (poison)
            pipe.last_offset = last
            if last_ts is not None:
                pipe.last_record_ts = last_ts
        old = state.pipelines.get(name)
        state.pipelines[name] = pipe
        if old is not None and old is not pipe:
            old.release()
        log.warning("%s: state rebuilt from the snapshot at offset %d and %d messages read again (state only) up "
                    "to offset %d", name, snap, n, last)

    async def catch_up(self, pipe: PartitionPipeline, topic: str, partition: int, start: int, stop: int,
                       skip: set[int] | None = None, outputs: bool = True) -> int:
        """Feed offsets ``[start, stop)`` of one partition to ``pipe`` to rebuild its state (``skip``: offsets
        left out, dead-lettered before).

        Their outputs were produced before the commit (Faust flushes the producer before it commits); the
        anomaly episodes and clock records among them are produced again anyway unless ``outputs`` is
        False (correlation takes a repeated episode once), so nothing depends on the previous worker
        having flushed them. A state rebuilt with no snapshot leaves them out: it reads the partition's
        whole retained history, and repeating every episode of it would re-send long-closed ones. Job
        points are never repeated (they would count twice)."""
        offsets = self.rt.offsets
        assert offsets is not None  # only called with a broker
        n = 0
        try:
            async for records in offsets.ranges.chunks(topic, partition, start, stop, INGEST_BATCH_MESSAGES):
                if skip:
                    records = [m for m in records if m.offset not in skip]
                out = pipe.process_many(items_of(records))
                n += len(records)
                if outputs:
                    await self.send_episodes(out)
        except Exception:
            log.exception("%s: catching up over %d..%d failed after %d messages; the baselines miss the rest",
                          pipe.origin, start, stop - 1, n)
        return n

    # -- progress -------------------------------------------------------------------------------
    async def broadcast_watermarks(self) -> None:
        """Each owned input partition's event-time progress, to every ``anomalies`` partition."""
        rt, state = self.rt, self.state
        if not state.published_wm and not state.eos:
            return  # nothing to say: partitions without data are mentioned with progress, never alone
        # An input partition is idle only when this worker is keeping up (not inside a long batch, a
        # restore or a catch-up) and has fetched nothing for it for watermark_idle_s: then it has no data.
        now = time.monotonic()
        busy = state.batch_started is not None and now - state.batch_started > 1.0
        offsets = rt.offsets

        def waiting(origin: str) -> bool:
            pipe = state.pipelines.get(origin)
            if offsets is None or pipe is None:
                return False
            topic, _, partition = origin.rpartition(":")
            return offsets.waiting(topic, int(partition), pipe.last_offset)

        idle = idle_inputs(state.published_wm, state.last_message, now, rt.settings.watermark_idle_s, busy, waiting)
        if offsets is not None:  # owned, nothing to process: idle (else correlation waits for an owner)
            idle += offsets.without_data(self.telemetry_topics, state.published_wm, now,
                                         rt.settings.watermark_idle_s)
        value = orjson.dumps({"type": "watermark", "origins": state.published_wm, "eos": sorted(state.eos),
                              "idle": idle})
        state.wm_dirty = False
        state.last_broadcast = time.monotonic()
        for partition in range(rt.settings.partitions):
            await rt.send(rt.topics.anomalies, None, value, partition)

    async def watermark_tick(self) -> None:
        """Progress when it moved (each batch sends its own at its end: :meth:`finish_batch`); otherwise a
        heartbeat every second, so correlation can tell an idle input partition (mentioned, not advancing)
        from one between owners (not mentioned at all)."""
        now = time.monotonic()
        if self.state.wm_dirty or now - self.state.last_broadcast >= 1.0:
            await self.broadcast_watermarks()
            for origin, pipe in list(self.state.pipelines.items()):
                self.metrics.late_sources.labels(origin).set(len(pipe.clocks.late_sources()))
            await self.fabric.publish_idle(now)


class FabricSummaries:
    """The fabric rollup's summaries (issue 23; streams/fabric_publish.py): each input partition's
    pipeline folds its NIC and switch samples (the ``fabric`` stage); here its changed ports go to
    ``fabric-rollup``, keyed by the input partition, every ``fabric_publish_interval_s`` of its event
    time, at the end of the input (``eos``), and when the partition has had no data for
    ``watermark_idle_s`` (what a lull left pending). They go before the snapshot that covers them is
    written, so a restore never lacks them; one published twice adds nothing on the read side."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.config = FabricConfig() if rt.settings.fabric_report else None
        self.topic: Any = None

    async def publish(self, pipes: list[tuple[PartitionPipeline, bool]]) -> None:
        """Each pipeline's summaries that are due (all it holds with ``True``: the end of its input)."""
        for pipe, force in pipes:
            if pipe.fabric is None:
                continue
            for value in pipe.fabric.publish(pipe.watermark, pipe.origin, force=force):
                if self.topic is None:
                    self.topic = self.rt.app.topic(self.rt.catalogue.fabric_rollup, key_serializer="raw",
                                                   value_serializer="raw", partitions=self.rt.settings.partitions)
                await self.rt.send(self.topic, pipe.origin.encode(), value)

    async def publish_idle(self, now: float) -> None:
        """What the partitions without data for ``watermark_idle_s`` (wall time) still hold unpublished."""
        state, idle_s = self.rt.state, self.rt.settings.watermark_idle_s
        idle = [(pipe, True) for origin, pipe in list(state.pipelines.items())
                if pipe.fabric is not None and pipe.fabric.changed
                and now - state.last_message.get(origin, now) > idle_s]
        if idle:
            await self.publish(idle)


def idle_inputs(published: dict[str, float], last_message: dict[str, float], now: float, idle_s: float,
                busy: bool, waiting: Callable[[str], bool]) -> list[str]:
    """The input partitions this worker reports idle: it keeps up (not inside a long batch), has been handed
    nothing for them for ``idle_s``, and the broker holds nothing more for them (``waiting``: records
    beyond the last offset processed, as the consumer last saw the partition's end). An input that is
    merely slow to be fetched under load keeps holding the watermark, so its evidence is not made late.

    >>> pub, seen = {"t:0": 100.0, "t:1": 100.0, "t:2": 100.0}, {"t:0": 0.0, "t:1": 0.0, "t:2": 9.0}
    >>> idle_inputs(pub, seen, 12.0, 10.0, False, lambda o: o == "t:1")
    ['t:0']
    >>> idle_inputs(pub, seen, 12.0, 10.0, True, lambda o: False)
    []
    """
    if busy:
        return []
    return sorted(o for o in published if now - last_message.get(o, now) > idle_s and not waiting(o))


def ingest_resume_counter(metrics: Any) -> Any:
    """``lockstep_ingest_resumes_total{origin, how}``: how restored partitions were made consistent."""
    counter = getattr(metrics, "_ingest_resumes", None)
    if counter is None:
        from prometheus_client import Counter

        counter = Counter("lockstep_ingest_resumes_total",
                          "Restored input partitions made consistent with the committed offset: caught_up (read "
                          "again for state), no_snapshot (no snapshot: the committed records read again for "
                          "state), skipped_in_snapshot, offsets_reset (topic recreated)",
                          ["origin", "how"], registry=metrics.registry)
        metrics._ingest_resumes = counter
    return counter


def state_bank(rt: Runtime) -> DetectorBank:
    """The worker's shared detector bank (kept with its state, so that dropping a pipeline gives its rows
    back: agents.runtime.WorkerState.forget)."""
    if rt.state.bank is None:
        rt.state.bank = DetectorBank(rt.detector)
    return rt.state.bank
