"""Offsets around Faust: what the group committed, records Faust never handed over, stalled partitions.

Everything here needs a broker (the agent test context has none: its agents get no :class:`Offsets`,
and the recovery decisions then carry on with what was handed over). The decisions themselves are
pure (agents.recovery, agents.gaps, agents.stalls); this module gathers their facts and carries
them out. It reads some of Faust's consumer state (``_committed_offset`` and the flow-control sets),
in this one place.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.gaps import IncompleteRead, RangeReader, expected_next
from agents.kafka import client_kwargs
from agents.metrics import WorkerMetrics
from agents.recovery import Facts, needs_broker_ts, stall_reread
from models.settings import LockstepSettings

log = logging.getLogger("lockstep.agents")


class Offsets:
    def __init__(self, app: Any, settings: LockstepSettings, bootstrap: str, metrics: WorkerMetrics) -> None:
        self.app = app
        self.settings = settings
        self.bootstrap = bootstrap
        self.metrics = metrics
        #: reads offset ranges of any partition (holes, catch-ups), one side consumer
        self.ranges = RangeReader(settings, bootstrap)
        #: owned partitions seen with nothing beyond their commit, since when (monotonic): without_data
        self._quiet_since: dict[str, float] = {}

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset (the next to read) of a partition, as Faust last knew it."""
        from faust.types import TP

        try:
            committed = self.app.consumer._committed_offset.get(TP(topic, partition))
        except Exception:  # the consumer is not started (or no app: side reads only)
            return None
        return committed if isinstance(committed, int) else None

    async def read_hole(self, topic: str, partition: int, last: int | None, first: int | None) -> list[Any]:
        """The records an agent was not handed before ``first`` although it processed up to ``last`` (or, with
        no state, although the group committed before them): records Faust lost between its fetcher and the
        agent (agents.gaps). Empty when there is no hole."""
        if first is None:
            return []
        expected = expected_next(last, self.committed(topic, partition) if last is None else None)
        if expected is None or first <= expected:
            return []
        try:
            records = await self.ranges.read(topic, partition, expected, first)
        except IncompleteRead as e:
            self.metrics.gaps.labels(topic, "incomplete").inc()
            log.error("%s:%d: offsets %d..%d never reached the agent and could not all be read: %s; processing the %d "
                      "read", topic, partition, expected, first - 1, e, len(e.records))
            return e.records
        self.metrics.gaps.labels(topic, "filled" if records else "empty").inc()
        log.warning("%s:%d: offsets %d..%d never reached the agent (lost inside Faust between its fetcher and the "
                    "agent); read %d records from the broker and processing them first", topic, partition, expected,
                    first - 1, len(records))
        return records

    def waiting(self, topic: str, partition: int, processed: int | None) -> bool:
        """Whether the broker holds records of the partition beyond offset ``processed``, as the consumer
        last saw the partition's end (its high-water mark); False when that is not known."""
        from faust.types import TP

        try:
            high = self.app.consumer.highwater(TP(topic, partition))
        except Exception:  # not started, or not assigned
            return False
        if not isinstance(high, int):
            return False
        return high > (processed + 1 if processed is not None else 0)

    def without_data(self, topics: set[str], known: set[str] | dict[str, Any], now: float,
                     idle_s: float) -> list[str]:
        """The partitions of ``topics`` assigned to this worker, not in ``known`` (``topic:partition``: the
        ones it reports progress for), with nothing to process (:func:`settled_without_data`: never any
        record, or nothing beyond the group's commit for ``idle_s`` of ``now``, a monotonic clock). Mentioned
        idle in the watermark records, so correlation does not wait for them as for inputs between owners
        (streams.correlation.watermark). Empty when the consumer is not started."""
        from faust.types import TP

        try:
            consumer: Any = self.app.consumer
            assigned = [tp for tp in consumer.assignment() if tp.topic in topics]
        except Exception:  # not started, or between assignments
            return []
        seen: dict[str, tuple[int | None, int | None]] = {}
        for tp in assigned:
            name = f"{tp.topic}:{tp.partition}"
            if name not in known:
                high = consumer.highwater(TP(tp.topic, tp.partition))
                seen[name] = (high if isinstance(high, int) else None, self.committed(tp.topic, tp.partition))
        return settled_without_data(seen, self._quiet_since, now, idle_s)

    def ack(self, records: list[Any]) -> None:
        """Acknowledge records read around Faust (a hole), so the group's commit can pass them."""
        if not records:
            return
        from faust.types import TP, Message

        consumer: Any = self.app.consumer
        for m in records:
            consumer.ack(Message(m.topic, m.partition, m.offset, m.timestamp / 1000.0, m.timestamp_type, None,
                                 m.key, m.value, None, tp=TP(m.topic, m.partition)))

    async def end(self, topic: str, partition: int, near: int = 0) -> int | None:
        """The partition's end offset, from a fetch answer's high-water mark (Tansu's ListOffsets misreports
        the end of partitions written in batches); None when no fetch answered."""
        try:
            return await self.ranges.end(topic, partition, near)
        except Exception:
            log.exception("could not read the end offset of %s[%d]", topic, partition)
            return None

    async def record_time_and_end(self, topic: str, partition: int, offset: int) -> tuple[float | None, int | None]:
        """Kafka time (seconds) of the record at ``offset`` (None: none there) and the partition's end offset
        (as :meth:`end`), from one fetch; ``(None, None)`` when no fetch answered."""
        try:
            record, high = await self.ranges.at(topic, partition, offset)
        except Exception:
            log.exception("could not read offset %d and the end offset of %s[%d]", offset, topic, partition)
            return None, None
        return (record.timestamp / 1000.0 if record is not None else None), high

    async def record_time(self, topic: str, partition: int, offset: int) -> float | None:
        """Kafka time (seconds) of the record at ``offset``; None if the broker holds none there. Raises
        :class:`IncompleteRead` when the broker did not answer (unknown, which is not "none there")."""
        records = await self.ranges.read(topic, partition, offset, offset + 1)
        return records[0].timestamp / 1000.0 if records else None

    async def facts(self, topic: str, partition: int, snap: int | None, snap_ts: float | None, first: int | None,
                    first_ts: float | None, with_end: bool) -> Facts:
        """What agents.recovery.decide needs, read from the broker only where the decision needs it."""
        at_snap = end = low = None
        unread = False
        if snap is not None and first is not None and first > snap + 1:  # a catch-up is likely: from where?
            low = await self.ranges.low(topic, partition)
        if snap is not None and first is not None:
            if needs_broker_ts(snap, first):
                if snap_ts is not None:
                    try:
                        at_snap = await self.record_time(topic, partition, snap)
                    except IncompleteRead as e:
                        log.warning("%s:%d: the record at the snapshot's offset could not be read (%s)", topic,
                                    partition, e)
                        unread = True
            elif snap_ts is not None and snap >= 0 and (with_end or first > snap + 1) \
                    and (low is None or low <= snap):
                # A catch-up (or, for ingest, a redelivery): the records after (or up to) S are the ones the
                # state continued from only if the record at S is still the one it holds (a recreated topic
                # refilled past S has another there). Read with the end offset, in one fetch.
                at_snap, high = await self.record_time_and_end(topic, partition, snap)
                end = high if with_end else None
            elif with_end:
                end = await self.end(topic, partition, near=snap)
        return Facts(snap, snap_ts, first, first_ts, self.committed(topic, partition), end, at_snap, True,
                     snapshot_record_unread=unread, low=low)

    async def heal_stalls(self, watched: set[str], state: Any) -> None:
        """Resume and re-read an input partition that stopped delivering with records waiting (agents.stalls).

        ``watched``: the topics whose partitions are checked; ``state``: the worker state (its stall watch,
        and the owners of each partition, for the last offset processed)."""
        consumer: Any = self.app.consumer  # faust.transport.consumer.Consumer: its flow-control sets are read here
        try:
            assigned = {tp for tp in consumer.assignment() if tp.topic in watched}
        except Exception:  # not started, or between assignments
            return
        import time

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
            processed = state.last_processed(tp.topic, tp.partition)
            committed = consumer._committed_offset.get(tp)
            action = stall_reread(processed, committed)
            if action is not None and action[0] == "reread":
                # Processed further than the group's commit, which no longer moves: a message was never
                # acknowledged. Read again from the commit (what is already in the state is skipped).
                await self.reread(tp, action[1], f"committed offset {committed} stuck behind the processed offset "
                                                 f"{processed}", silent[tp])
            elif action is not None:
                suspects[tp] = action[1]
        if not suspects:
            return
        for tp in sorted(await self.records_at(suspects)):
            await self.reread(tp, suspects[tp], f"nothing processed although offset {suspects[tp]} is on the broker",
                              silent[tp])

    async def reread(self, tp: Any, offset: int, why: str, idle_s: float) -> None:
        """Log a stalled partition with Faust's view of it, count it, resume it and read it again from ``offset``."""
        consumer: Any = self.app.consumer
        log.warning("%s:%d: %s (idle %.0f s; Faust: read up to %s, committed %s, active=%s buffered=%s paused=%s); "
                    "resuming it and reading again from %d", tp.topic, tp.partition, why, idle_s,
                    consumer._read_offset.get(tp), consumer._committed_offset.get(tp),
                    tp in (consumer._active_partitions or ()), tp in consumer._buffered_partitions,
                    tp in consumer._paused_partitions, offset)
        log.warning("%s:%d: the client's view: %s", tp.topic, tp.partition, client_view(consumer, tp))
        self.metrics.stalls.labels(tp.topic).inc()
        consumer.resume_partitions([tp])
        consumer._buffered_partitions.discard(tp)
        await consumer.seek(tp, offset)

    async def records_at(self, offsets: dict[Any, int]) -> set[Any]:
        """The partitions of ``offsets`` that hold a record at (or after) their offset, read by a side consumer."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(**client_kwargs(self.settings, self.bootstrap), group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=50)
        found: set[Any] = set()
        try:
            await consumer.start()
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


def client_view(consumer: Any, tp: Any) -> str:
    """What aiokafka (under Faust) holds for ``tp``: its fetch position, whether it is paused, fetched
    records not yet handed to Faust, and a fetch in flight. A diagnostic for the stall watch's log
    (read across threads without a lock: a snapshot, not a contract); "unknown" when it cannot be read."""
    try:
        client = consumer._thread._ensure_consumer()
        state = client._subscription.subscription.assignment.state_value(tp)
        fetcher = client._fetcher
        held = fetcher._records.get(tp)
        return (f"position={state.position if state.has_valid_position else None} paused={state.paused} "
                f"fetched={held!r} in_flight={sorted(fetcher._in_flight)} "
                f"assigned={len(client._subscription.subscription.assignment.tps)}")
    except Exception as e:  # a diagnostic only
        return f"unknown ({type(e).__name__}: {e})"


async def facts(offsets: Offsets | None, topic: str, partition: int, snap: int | None, snap_ts: float | None,
                first: int | None, first_ts: float | None, with_end: bool) -> Facts:
    """:meth:`Offsets.facts`, or what is known without a broker."""
    if offsets is None:
        return Facts(snap, snap_ts, first, first_ts, broker=False)
    return await offsets.facts(topic, partition, snap, snap_ts, first, first_ts, with_end)


def settled_without_data(seen: dict[str, tuple[int | None, int | None]], quiet_since: dict[str, float],
                         now: float, idle_s: float) -> list[str]:
    """Of the owned partitions in ``seen`` (``name -> (high-water mark, committed offset)``, as the
    worker's consumer last saw them), those with nothing to process: no record ever (the high-water
    mark is 0: an input no exporter writes to), idle at once; or nothing beyond the commit since
    ``idle_s`` ago (``quiet_since``, updated here, remembers since when). Not at once: right after a
    rebalance a partition with data has often been processed up to its commit while the next records
    are on their way, and mentioning it idle let correlation run ahead of its evidence (the
    leaving-worker fault test fired the GPU-utilisation alert without the step-time and switch
    evidence, 1 run in 6).

    >>> since = {}
    >>> settled_without_data({"a:0": (0, None), "b:0": (40, 40), "c:0": (50, 40)}, since, 100.0, 10.0)
    ['a:0']
    >>> settled_without_data({"b:0": (40, 40), "c:0": (50, 40)}, since, 111.0, 10.0), sorted(since)
    (['b:0'], ['b:0'])
    >>> settled_without_data({"b:0": (41, 40)}, since, 112.0, 10.0), since
    ([], {})
    """
    out = []
    for name in [n for n in quiet_since if n not in seen]:
        del quiet_since[name]  # processed here now, or no longer owned
    for name, (high, committed) in sorted(seen.items()):
        if high is None or high > (committed or 0):
            quiet_since.pop(name, None)
            continue
        if high == 0 or now - quiet_since.setdefault(name, now) >= idle_s:
            out.append(name)
    return out
