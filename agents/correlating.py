"""The ``correlate`` agent (and ``forward_annotations``): per-job correlation of the ``anomalies`` topic.

    anomalies  --correlate-->  alerts, timelines, stats, dlq
    annotations  --forward_annotations-->  anomalies (keyed by job, in order with its evidence)

One :class:`streams.jobs.JobPartition` per ``anomalies`` partition, snapshotted to ``correlator_state``
after the outputs it produced (agents.snapshots) and restored after a restart or rebalance (the
recovery decisions: agents.recovery). A timer advances idle partitions (the watermark moves as wall
time passes).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson

from agents.carriers import TOMBSTONE_REASON
from agents.deadletters import dead_letter_of
from agents.gaps import in_order
from agents.lane import BatchLane
from agents.offsets import facts
from agents.recovery import NOTHING_HELD, Action, alert_key, decide, held, unsent
from agents.runtime import Runtime
from agents.snapshots import read_snapshot
from agents.topics import CORRELATOR_STATE_TABLE
from models.errors import InternalError, ValidationFailed
from streams.fabric_health import health_records
from streams.jobs import JobPartition, PartitionResult
from streams.ledger import LedgerEntry, entry_of
from streams.snapshot import wall_due

log = logging.getLogger("lockstep.agents")

#: How far before the first caught-up record's Kafka time the ``alerts`` topic is searched for what the
#: previous owner sent (its clock and the producer's of the ``anomalies`` record may disagree).
SENT_SEARCH_MARGIN_S = 300.0
#: Records read at a time while searching the ``alerts`` topic backwards from its end.
SENT_SEARCH_CHUNK = 500


@dataclass
class Decided:
    """What a state-only fold decided but did not send: its alert records in order, and a Kafka time before
    which none of them can have been sent (the snapshot's last record's, else the first folded record's)."""

    first_ts: float | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)


class Correlate:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.state = rt.state
        self.metrics = rt.metrics
        self.capacity_topic: Any = None  # made at the first costed alert (issue 22)
        self.health_topic: Any = None  # made at the first costed alert with a fabric root cause
        #: agents.lane: the anomalies records a fetch at a time (a worker on a broker), or None: the agent's
        #: Faust stream (Faust's test context, ``correlate_lane`` off)
        self.lane: BatchLane | None = None
        #: one a partition: a record's fold, its outputs and its snapshot, or a tick's, never interleave (a
        #: snapshot taken while the other path had decided alerts and not yet sent them would hold them)
        self._turns: dict[int, asyncio.Lock] = {}

    # -- the agents -----------------------------------------------------------------------------
    async def run(self, stream: faust.StreamT[bytes]) -> None:
        """Every anomalies record in offset order per partition. On a broker they come through the correlate
        lane: whatever arrived since the agent last had the loop, at once (up to ``correlate_batch_records``),
        acknowledged when the agent comes back for more; in Faust's test context, through the stream."""
        if self.lane is None:
            async for event in stream.events():
                await self.guarded(event)
            return
        try:
            async for batch in self.lane.batches(self.rt.settings.correlate_batch_records, 0.0):
                for event in batch:
                    await self.guarded(event)
        finally:
            self.lane.abandon()  # a stopped agent holds no batch: a stop or rebalance need not wait for it

    async def guarded(self, event: Any) -> None:
        """:meth:`one`, with a failure (a bug) dead-lettered: the record is kept and the agent goes on."""
        try:
            await self.one(event)
        except Exception as exc:
            log.exception("correlate failed on partition %s@%s", event.message.partition, event.message.offset)
            await self.rt.dead_letter(dead_letter_of("correlate", InternalError, f"internal error: {exc!r}", event))

    async def forward_annotations(self, stream: faust.StreamT[bytes]) -> None:
        """Operator annotations join their job's correlation partition, in order with its evidence."""
        from pydantic import ValidationError

        from models.operator import AnnotationRecord

        rt, state = self.rt, self.state

        async def forward(value: bytes | None, event: Any) -> None:
            try:
                rec = AnnotationRecord.model_validate_json(value or b"")
            except ValidationError as exc:
                await rt.dead_letter(dead_letter_of("forward_annotations", ValidationFailed,
                                                    f"not an annotation: {exc.errors()[0]['msg']}", event))
                return
            await rt.send(rt.topics.anomalies, rec.job_id.encode(), rec.model_dump_json().encode())

        async for event in stream.events():
            m = event.message
            state.stalls.delivered(f"{m.topic}:{m.partition}", time.monotonic())
            # Records Faust lost around a rebalance are read from the broker and forwarded first; one
            # delivered again is forwarded already (agents.gaps.in_order).
            if not await in_order(state.relay_last_offset, m.topic, m.partition, m.offset, rt.offsets,
                                  lambda r: forward(r.value, r)):
                state.redelivered += 1
                continue
            await forward(event.value, event)

    def turn(self, partition: int) -> asyncio.Lock:
        """The partition's lock between the record path and the tick (see ``_turns``)."""
        lock = self._turns.get(partition)
        if lock is None:
            lock = self._turns[partition] = asyncio.Lock()
        return lock

    async def tick(self) -> None:
        """Advance every partition as wall time passes (idle inputs drop out of the watermark); when that
        sent alerts or stats, snapshot the partition after them, as the record path does: else a restart
        from the snapshot before would decide them again (a second ``firing`` on the topic) or, when the
        catch-up reached another verdict, not at all (a ``resolved`` nobody was paged for)."""
        for partition, corr in list(self.state.correlators.items()):
            async with self.turn(partition):
                if self.state.correlators.get(partition) is not corr:
                    continue  # revoked while waiting for its turn
                out = corr.tick(time.monotonic())
                await self.emit_results(out)
                if out.changed:
                    self.snapshot(partition, corr, time.monotonic())
            self.state.progress.correlation(partition, time.monotonic(), corr.watermark)

    # -- one record -----------------------------------------------------------------------------
    def correlator_for(self, partition: int) -> JobPartition:
        rt, state = self.rt, self.state
        corr = state.correlators.get(partition)
        if corr is None:
            corr = self.new_partition()
            blob = read_snapshot(rt.correlator_table, str(partition).encode())
            if blob:
                try:
                    corr.restore(blob, time.monotonic())
                    self.metrics.restores.labels(CORRELATOR_STATE_TABLE).inc()
                    state.correlator_resume_check.add(partition)
                    log.info("restored correlation partition %d: %d jobs, input offset %s", partition,
                             len(corr.correlator.jobs), corr.last_offset)
                    if corr.correlator.repaired_watermark:
                        log.warning("correlation partition %d: the snapshot held an infinite watermark (an older "
                                    "version's); recomputed from the inputs' progress: %s", partition, corr.watermark)
                except Exception:
                    log.exception("correlator snapshot of partition %d unusable; starting empty", partition)
                    corr = self.new_partition()
            else:  # first ever, or a snapshot not recovered: said, so a restart that lost one shows it
                log.info("correlation partition %d: no snapshot; starting empty", partition)
                if rt.offsets is not None:
                    # A previous owner may have folded records in, and the group committed them, without
                    # ever writing a snapshot (its watermark never moved: nothing due). Those records are
                    # read again for state before going on (resume), else their evidence is lost.
                    state.correlator_resume_check.add(partition)
            state.correlators[partition] = corr
        return corr

    def new_partition(self) -> JobPartition:
        """Correlation state for one ``anomalies`` partition. Live it knows every input partition (one no
        worker mentions is between owners: streams.correlation.watermark); a replay waits for its own.
        Without a broker (the agent test context) the ingest side cannot mention its partitions that have
        no data, so the inputs are not known either."""
        rt = self.rt
        live = rt.expected_origins is None and rt.offsets is not None
        inputs = rt.catalogue.telemetry_origins() if live else None
        return JobPartition(rt.correlator, rt.inventory, rt.expected_origins, rt.signals, rt.rules, inputs=inputs)

    async def one(self, event: Any) -> None:
        """One ``anomalies`` record, its partition's turn held (:meth:`turn`) from the restore check to the
        snapshot after its outputs."""
        partition = event.message.partition
        self.state.stalls.delivered(f"{event.message.topic}:{partition}", time.monotonic())
        corr = self.correlator_for(partition)
        async with self.turn(partition):
            await self.take(corr, partition, event)

    async def take(self, corr: JobPartition, partition: int, event: Any) -> None:
        """:meth:`one` with the turn held: resume after a restore, skip what was folded in, fold a hole in
        first, then the record (:meth:`fold_one`)."""
        rt, state = self.rt, self.state
        if partition in state.correlator_resume_check:
            if not await self.resume(corr, partition, event.message.offset, event.message.timestamp):
                return  # already in the restored state; its outputs were flushed before the snapshot
            state.correlator_resume_check.discard(partition)
        elif corr.last_offset is not None and event.message.offset is not None \
                and event.message.offset <= corr.last_offset:
            same = await rt.same_record(event.message.topic, partition, corr.last_offset, corr.last_record_ts,
                                        {event.message.offset: event.message.timestamp})
            if held(event.message.offset, corr.last_offset, same, event.message.timestamp, corr.last_record_ts):
                state.redelivered += 1  # delivered again (a seek back to the committed offset): already folded in
                return
        if rt.offsets is not None:
            hole = await rt.offsets.read_hole(rt.catalogue.anomalies, partition, corr.last_offset,
                                              event.message.offset)
            if hole:  # records Faust never handed over: folded in first, in offset order
                await self.fold(corr, hole, outputs=True)
                rt.offsets.ack(hole)
        if event.value is None:
            await rt.dead_letter(dead_letter_of("correlate", ValidationFailed, TOMBSTONE_REASON, event))
            return
        try:
            rec = orjson.loads(event.value)
        except orjson.JSONDecodeError as exc:
            await rt.dead_letter(dead_letter_of("correlate", ValidationFailed, f"not JSON: {exc}", event))
            return
        if not isinstance(rec, dict):
            await rt.dead_letter(dead_letter_of("correlate", ValidationFailed, "record is not an object", event))
            return
        await self.fold_one(corr, partition, rec, event)

    async def fold_one(self, corr: JobPartition, partition: int, rec: dict[str, Any], event: Any) -> None:
        """One record into ``corr``: its outputs sent, then a snapshot when one is due (the partition's turn
        held: :meth:`turn`)."""
        rt, state, metrics = self.rt, self.state, self.metrics
        try:
            out = corr.on_record(rec, time.monotonic(), event.message.offset, event.message.timestamp)
        except (KeyError, TypeError, ValueError) as exc:
            await rt.dead_letter(dead_letter_of("correlate", ValidationFailed, f"malformed record: {exc!r}", event))
            return
        if out.late:
            metrics.late.inc(len(out.late))
        for alert in out.inhibited:
            metrics.inhibited.labels(alert["type"]).inc()
        await self.emit_results(out)
        wm = corr.watermark
        now = time.monotonic()
        state.progress.correlation(partition, now, wm)
        if math.isfinite(wm):
            metrics.watermark.labels(str(partition)).set(wm)
        last = state.last_correlator_snapshot.get(partition, -math.inf)
        # Due after outputs went out (a restart must not repeat them), else every snapshot_interval_s of event
        # time and at most once a cell of snapshot_wall_floor_s of wall time (streams.snapshot.wall_due: a
        # catch-up runs event time faster).
        if out.changed or out.finished or (
                math.isfinite(wm) and wm - last >= rt.settings.snapshot_interval_s
                and wall_due(f"correlation:{partition}", now, state.last_correlator_snapshot_wall.get(partition),
                             rt.settings.snapshot_wall_floor_s)):
            self.snapshot(partition, corr, now)
        if out.finished:
            state.finished_partitions.add(partition)
            if rt.on_finished is not None:
                rt.on_finished(partition)

    def snapshot(self, partition: int, corr: JobPartition, now: float) -> None:
        """Snapshot ``corr`` after the outputs it sent: a crash never leaves a snapshot whose alerts were lost
        (a restart skips what a snapshot holds; docs/performance.md). Taken now, written after the producer
        flush, off the caller's path."""
        state, wm = self.state, corr.watermark
        self.rt.snapshots.put(self.rt.correlator_table, CORRELATOR_STATE_TABLE, str(partition), corr.snapshot(),
                              partition, owned=lambda: state.correlators.get(partition) is corr)
        state.last_correlator_snapshot[partition] = (
            wm if math.isfinite(wm) else state.last_correlator_snapshot.get(partition, -math.inf))
        state.last_correlator_snapshot_wall[partition] = now

    async def emit_results(self, res: Any) -> None:
        rt = self.rt
        for alert in res.alerts:
            self.metrics.alerts.labels(alert["type"], alert["severity"], alert["status"]).inc()
            log.info("alert %s %s %s %s (started %s, due %s)", alert["status"], alert["type"], alert.get("job_id"),
                     alert["alert_id"], alert["started_at"], alert["detected_at"])
            await rt.send(rt.topics.alerts, (alert.get("job_id") or "").encode(), orjson.dumps(alert))
            await self.send_cost(alert)
        for rec in res.timelines:
            await rt.send(rt.topics.timelines, rec["job_id"].encode(), orjson.dumps(rec))
        for rec in res.stats:
            await rt.send(rt.topics.stats, rec["job_id"].encode(), orjson.dumps(rec))

    # -- the GPU-time lost ledger (issue 22) -----------------------------------------------------
    async def send_cost(self, alert: dict[str, Any]) -> None:
        """The incident's ``capacity`` record (streams.ledger), right after its alert: computed from the
        alert alone, so a snapshot holds nothing more and a replayed alert gives the same record. Keyed by
        ``alert_id``: every version of an incident lands on one partition, in order."""
        rt = self.rt
        try:
            entry = entry_of(alert, rt.inventory.tiers)
        except (KeyError, TypeError, ValueError):
            log.exception("no capacity record for alert %s", alert.get("alert_id"))
            return
        if entry is None:
            return
        if self.capacity_topic is None:
            self.capacity_topic = rt.app.topic(rt.catalogue.capacity, key_serializer="raw", value_serializer="raw",
                                               partitions=rt.settings.alerts_partitions)
        await rt.send(self.capacity_topic, entry.alert_id.encode(), orjson.dumps(entry.to_record()))
        await self.send_health(entry)

    async def send_health(self, entry: LedgerEntry) -> None:
        """The incident's ``fabric-health`` records (streams.fabric_health), one per fabric entity of its
        root cause, keyed ``kind:id`` (every record of an entity on one partition, in order)."""
        rt = self.rt
        records = health_records(entry, rt.inventory)
        if records and self.health_topic is None:
            self.health_topic = rt.app.topic(rt.catalogue.fabric_health, key_serializer="raw",
                                             value_serializer="raw", partitions=rt.settings.alerts_partitions)
        for key, rec in records:
            await rt.send(self.health_topic, key.encode(), orjson.dumps(rec))

    # -- recovery -------------------------------------------------------------------------------
    async def resume(self, corr: JobPartition, partition: int, first: int | None,
                     first_ts: float | None = None) -> bool:
        """Make a restored correlation partition consistent with where Faust resumed (agents.recovery, as for
        ingest, without the end-offset check): returns False for an offset the snapshot already holds. A
        partition with no snapshot is caught up too, from offset 0 (agents.recovery.NOTHING_HELD)."""
        # A state that holds no record (no snapshot, or one taken before any) holds everything before offset 0.
        held_upto = corr.last_offset if corr.last_offset is not None else NOTHING_HELD
        r = decide(await facts(self.rt.offsets, self.rt.catalogue.anomalies, partition, held_upto,
                               corr.last_record_ts, first, first_ts, with_end=False))
        if r.action is Action.SKIP_HELD:
            return False
        if r.action is Action.REBUILT_REFILLED and r.start is not None and r.stop is not None:
            # Rebuilt and refilled past the snapshot before we resumed: the records before ``first`` were
            # never correlated; correlate them now, outputs included.
            log.warning("correlation partition %d: %s; correlating offsets %d..%d too", partition, r.why, r.start,
                        r.stop - 1)
            await self.fold_range(corr, partition, r.start, r.stop)
        elif r.action is Action.REBUILT:
            log.warning("correlation partition %d: %s; processing it whole", partition, r.why)
        elif r.action is Action.CATCH_UP and r.start is not None and r.stop is not None:
            decided = Decided(corr.last_record_ts)  # the snapshot's last record: what came after went out after it
            n = await self.fold_range(corr, partition, r.start, r.stop, outputs=False, decided=decided)
            log.info("correlation partition %d: restored state caught up over offsets %d..%d (%d records, state "
                     "only)", partition, r.start, r.stop - 1, n)
            if decided.alerts:
                await self.send_unsent(partition, decided)
        return True

    async def send_unsent(self, partition: int, decided: Decided) -> None:
        """Send the alerts a state-only catch-up decided that the ``alerts`` topic does not hold
        (agents.recovery.unsent: the previous owner's verdicts on the same records can differ, the
        watermark moving on wall time too)."""
        sent: set[tuple[str, str, str]] | None
        try:
            sent = await self.sent_alerts(None if decided.first_ts is None else decided.first_ts - SENT_SEARCH_MARGIN_S)
        except Exception as exc:  # IncompleteRead, a broker gone: unknown, as below
            log.warning("correlation partition %d: reading the alerts topic failed: %r", partition, exc)
            sent = None
        if sent is None:  # unknown: send them all (delivery's ledger drops a duplicate; nothing finds a loss)
            log.warning("correlation partition %d: the alerts topic could not be read; sending again the %d alert "
                        "records the catch-up decided", partition, len(decided.alerts))
        missing = unsent(decided.alerts, sent)
        for alert in missing:
            log.warning("correlation partition %d: alert %s %s %s (started %s) was decided while catching up and "
                        "never sent by the previous owner; sending it now", partition, alert["status"],
                        alert["type"], alert["alert_id"], alert["started_at"])
            self.metrics.alerts_recovered.labels(alert["type"], alert["status"]).inc()
        if missing:
            await self.emit_results(PartitionResult(alerts=missing))

    async def sent_alerts(self, since: float | None) -> set[tuple[str, str, str]] | None:
        """:func:`agents.recovery.alert_key` of the ``alerts`` records written at or after Kafka time ``since``
        (every one when None), read backwards from each partition's end; None when a partition's end is
        unknown (no fetch answered)."""
        offsets = self.rt.offsets
        assert offsets is not None
        topic = self.rt.catalogue.alerts
        out: set[tuple[str, str, str]] = set()
        for p in range(self.rt.settings.alerts_partitions):
            hi = await offsets.ranges.end(topic, p)
            if hi is None:
                return None
            while hi > 0:
                lo = max(0, hi - SENT_SEARCH_CHUNK)
                records = await offsets.ranges.read(topic, p, lo, hi, max_records=SENT_SEARCH_CHUNK)
                for m in records:
                    try:
                        rec = orjson.loads(m.value or b"")
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(rec, dict):
                        out.add(alert_key(rec))
                if since is not None and records and records[0].timestamp / 1000.0 < since:
                    break
                hi = lo
        return out

    async def fold_range(self, corr: JobPartition, partition: int, start: int, stop: int,
                         outputs: bool = True, decided: Decided | None = None) -> int:
        """Correlate offsets ``[start, stop)`` of an ``anomalies`` partition; emit what they produce unless
        ``outputs`` is False (state only: their outputs went out before; the alerts are kept in ``decided``).
        Returns the records folded in."""
        offsets = self.rt.offsets
        if offsets is None:
            return 0
        n = 0
        try:
            async for records in offsets.ranges.chunks(self.rt.catalogue.anomalies, partition, start, stop):
                n += await self.fold(corr, records, outputs, decided)
        except Exception:
            log.exception("correlation partition %d: correlating %d..%d failed after %d records", partition, start,
                          stop - 1, n)
        return n

    async def fold(self, corr: JobPartition, records: list[Any], outputs: bool, decided: Decided | None = None) -> int:
        """Fold records read around Faust into ``corr``, emitting what they produce when ``outputs`` (and then
        dead-lettering the ones it cannot use; state only, they were dead-lettered when first read, and the
        alerts they decide are kept in ``decided``)."""
        n = 0
        for m in records:
            if decided is not None and decided.first_ts is None and m.timestamp is not None:
                decided.first_ts = m.timestamp / 1000.0
            if m.value is None:
                if outputs:
                    await self.rt.dead_letter(dead_letter_of("correlate", ValidationFailed, TOMBSTONE_REASON, m))
                continue
            try:
                res = corr.on_record(orjson.loads(m.value), time.monotonic(), m.offset, m.timestamp / 1000.0)
            except (KeyError, TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
                if outputs:
                    await self.rt.dead_letter(dead_letter_of("correlate", ValidationFailed,
                                                             f"malformed record: {exc!r}", m))
                continue
            n += 1
            if outputs:
                await self.emit_results(res)
            elif decided is not None:
                decided.alerts += res.alerts
        return n
