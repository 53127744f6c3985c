"""Records Faust never handed to an agent: find the hole in the offsets, read it from the broker.

Faust (faust-streaming 0.15) can lose records between its fetcher and an agent: when flow control
is suspended around a rebalance or a table recovery it clears the agents' queues, and if the fetcher
runs before the seek back to the committed offset, the cleared records are never delivered again
(faust-streaming issues #216 and #596). Faust then either commits over the hole (its fetcher takes
an offset jump for a compacted topic and marks the jump as done) or never commits again (the hole
is at the head of the acknowledged offsets). Seen here: the SIGKILL fault test under load, where the
restarted worker processed a partition to offset 124 with offsets 61..~79 never delivered: their
anomalies were missing and the commit stuck at 61.

So every agent checks that each partition's offsets arrive without a hole: the first offset of a
batch must be one past the last one processed (or the group's committed offset for a partition
with no state yet). A hole is read from the broker with one side consumer (:class:`RangeReader`),
processed before the batch (order kept: rates and detectors see the partition in order), and the
records read are acknowledged to Faust so its commit can pass them. A hole that holds no record
(transaction markers, a compacted topic) costs one read and changes nothing.

:func:`expected_next` and :func:`catch_up_until` are the pure decisions; the reads and acks live in
:mod:`agents.app`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

from agents.kafka import client_kwargs
from models.settings import LockstepSettings

if TYPE_CHECKING:
    from agents.offsets import Offsets

log = logging.getLogger("lockstep.agents")

#: How long the end probe of one partition (:func:`fetched_ends`) waits before keeping the reported end.
END_PROBE_DEADLINE_S = 5.0

TPT = TypeVar("TPT")

#: How long a range read waits for a broker that does not answer before it gives up (IncompleteRead).
READ_DEADLINE_S = 30.0


class IncompleteRead(Exception):
    """A range read that could not reach its end: the broker stopped answering before the deadline.
    ``records``: what was read (a prefix of the range, in order)."""

    def __init__(self, topic: str, partition: int, start: int, stop: int, records: list[Any]) -> None:
        got = records[-1].offset + 1 if records else start
        super().__init__(f"{topic}[{partition}]: read offsets {start}..{got - 1} of {start}..{stop - 1}; the broker "
                         "did not answer for the rest")
        self.records = records


def expected_next(last_processed: int | None, committed: int | None) -> int | None:
    """The offset a partition's next delivered record must have: one past the last processed, else the
    group's committed offset (the next one to read) for a partition with no state; None if unknown.

    >>> expected_next(41, 30), expected_next(None, 30), expected_next(None, None)
    (42, 30, None)
    """
    if last_processed is not None:
        return last_processed + 1
    return committed


async def in_order(last: MutableMapping[str, int], topic: str, partition: int, offset: int | None,
                   offsets: Offsets | None, handle: Callable[[Any], Awaitable[None]]) -> bool:
    """For an agent whose only partition state is the last offset it handled (the convert agents,
    ``forward_annotations``), before it handles the record at ``offset``: False when that record was
    handled already (delivered again by a seek back to the commit or a stall re-read: skip it); else True,
    once the records Faust lost before it were read from the broker (:meth:`agents.offsets.Offsets.read_hole`;
    nothing without a broker, ``offsets`` None), handed to ``handle`` in offset order and acknowledged.
    ``last`` (``topic:partition`` -> offset) is then at ``offset``; the caller drops a partition's entry
    when it is revoked.

    Offsets alone decide. A topic deleted and recreated under a running worker is not told apart here
    (ingest and correlate compare the record's Kafka time for that: :func:`agents.recovery.held`): its new
    records up to the old offset would be skipped until the partition is reassigned or the worker restarts.

    >>> import asyncio
    >>> class Hole:
    ...     acked = []
    ...     async def read_hole(self, topic, partition, last_offset, first):
    ...         return list(range(last_offset + 1, first))
    ...     def ack(self, records):
    ...         self.acked += records
    >>> last, handled, hole = {"t:0": 9}, [], Hole()
    >>> async def handle(record):
    ...     handled.append(record)
    >>> asyncio.run(in_order(last, "t", 0, 5, hole, handle)), last, handled
    (False, {'t:0': 9}, [])
    >>> asyncio.run(in_order(last, "t", 0, 13, hole, handle)), last, handled, hole.acked
    (True, {'t:0': 13}, [10, 11, 12], [10, 11, 12])
    >>> asyncio.run(in_order(last, "t", 1, 0, None, handle)), last
    (True, {'t:0': 13, 't:1': 0})
    """
    if offset is None:
        return True
    origin = f"{topic}:{partition}"
    before = last.get(origin)
    if before is not None and offset <= before:
        return False
    if offsets is not None:
        hole = await offsets.read_hole(topic, partition, before, offset)
        for record in hole:
            await handle(record)
        offsets.ack(hole)
    last[origin] = offset
    return True


def catch_up_until(snapshot_offset: int, committed: int | None, first: int) -> int:
    """Where a restored state's catch-up *for state only* stops, when Faust resumed at ``first``.

    Offsets before the group's commit were processed by the previous owner with their outputs
    flushed (Faust flushes the producer before committing): read again for state only. Offsets from
    the commit up to ``first`` were never handed to anyone: the caller processes them in full.
    Without a known commit, everything before ``first`` is taken as committed (Faust's own view).

    >>> catch_up_until(49, 61, 80)  # snapshot at 49, commit 61, Faust delivered 80 first
    61
    >>> catch_up_until(49, None, 80), catch_up_until(49, 95, 80), catch_up_until(49, 20, 80)
    (80, 80, 50)
    """
    if committed is None:
        return first
    return max(snapshot_offset + 1, min(committed, first))


class RangeReader:
    """One side consumer (no group) that reads offset ranges of any partition, one range at a time.

    Started on first use and kept, so a topic whose offsets legitimately skip (transaction markers)
    costs a fetch per hole, not a consumer start. :meth:`close` stops it.
    """

    def __init__(self, settings: LockstepSettings, bootstrap: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def read(self, topic: str, partition: int, start: int, stop: int, *,
                   max_records: int = 5000, deadline_s: float = READ_DEADLINE_S) -> list[Any]:
        """The records at offsets ``[start, stop)`` of one partition (aiokafka ``ConsumerRecord``s, in order).

        Complete, or raises :class:`IncompleteRead` (holding what was read): the read ends at ``stop`` or
        where the broker's fetch answers say the partition ends (its high-water mark), never because a
        few fetches came back empty. Under load an empty fetch is common (the worker's event loop was
        busy while the fetch waited): stopping at three of them, as this once did, returned part of a
        catch-up and the restored state silently missed the rest. Tansu's ListOffsets misreports the end
        of partitions written in batches; the high-water mark of a fetch answer does not (checked in
        tests/faults/test_range_reads.py)."""
        if stop <= start:
            return []
        async with self._lock:
            return await self._read(topic, partition, start, stop, max_records, deadline_s)

    async def end(self, topic: str, partition: int, near: int = 0, deadline_s: float = READ_DEADLINE_S) -> int | None:
        """The partition's end offset as a fetch answer gives it (the high-water mark), fetching from
        ``near`` (a nearby offset keeps the answer small); None if no fetch answered by the deadline."""
        return (await self.at(topic, partition, near, deadline_s))[1]

    async def at(self, topic: str, partition: int, offset: int,
                 deadline_s: float = READ_DEADLINE_S) -> tuple[Any | None, int | None]:
        """The record at ``offset`` (None: none there) and the partition's end offset from the same fetch
        answer (its high-water mark, as :meth:`end`); ``(None, None)`` if no fetch answered by the deadline."""
        from aiokafka import TopicPartition

        start = max(offset, 0)
        async with self._lock:  # the high-water mark of this read's assignment, not another read's
            try:
                records = await self._read(topic, partition, start, start + 1, 1, deadline_s)
            except IncompleteRead:
                return None, None
            high = self._consumer.highwater(TopicPartition(topic, partition))
        record = records[0] if records and records[0].offset == offset else None
        return record, int(high) if high is not None else None

    async def low(self, topic: str, partition: int, deadline_s: float = READ_DEADLINE_S) -> int | None:
        """The partition's earliest offset still on the broker (its low-water mark, from ListOffsets
        ``earliest``: retention may have trimmed what is before it); None when the broker did not say."""
        from aiokafka import TopicPartition

        tp = TopicPartition(topic, partition)
        async with self._lock:
            try:
                consumer = await self._started()
                offsets = await asyncio.wait_for(consumer.beginning_offsets([tp]), deadline_s)
            except Exception as exc:  # unknown: the caller reads from 0 as before
                log.warning("%s[%d]: no earliest offset from the broker (%r)", topic, partition, exc)
                return None
        value = offsets.get(tp)
        return int(value) if value is not None else None

    async def _started(self) -> Any:
        """The side consumer, started on first use."""
        from aiokafka import AIOKafkaConsumer

        if self._consumer is None:
            consumer = AIOKafkaConsumer(**client_kwargs(self.settings, self.bootstrap), group_id=None,
                                        enable_auto_commit=False, fetch_max_wait_ms=50)
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def _read(self, topic: str, partition: int, start: int, stop: int, max_records: int,
                    deadline_s: float) -> list[Any]:
        """:meth:`read`, with the lock held."""
        from aiokafka import TopicPartition

        consumer = await self._started()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])  # a fresh assignment: no high-water mark until a fetch answers
        consumer.seek(tp, start)
        out: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s
        while await consumer.position(tp) < stop:
            batch = (await consumer.getmany(tp, timeout_ms=500, max_records=max_records)).get(tp, [])
            if batch:
                out.extend(m for m in batch if start <= m.offset < stop)
                if batch[-1].offset >= stop - 1:
                    break
                continue
            high = consumer.highwater(tp)
            if high is not None and await consumer.position(tp) >= high:
                break  # the broker holds nothing more: the rest of the range has no record
            if loop.time() > deadline:
                raise IncompleteRead(topic, partition, start, stop, out)
        return out

    async def chunks(self, topic: str, partition: int, start: int, stop: int,
                     size: int = 4000) -> AsyncIterator[list[Any]]:
        """:meth:`read` of ``[start, stop)`` in consecutive pieces of at most ``size`` offsets (a long range,
        e.g. a rebuilt partition read from offset 0, is never held in memory whole). Raises
        :class:`IncompleteRead` after the pieces that were read."""
        for lo in range(start, stop, size):
            try:
                records = await self.read(topic, partition, lo, min(lo + size, stop), max_records=size)
            except IncompleteRead as e:  # what was read is still in order: hand it on, then say so
                if e.records:
                    yield e.records
                raise
            if records:
                yield records

    async def close(self) -> None:
        async with self._lock:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None
                try:
                    await consumer.stop()
                except Exception:  # stopping must not hide the caller's own shutdown
                    log.exception("stopping the range reader failed")


async def fetched_ends(settings: LockstepSettings, bootstrap: str, reported: Mapping[TPT, int | None],
                       deadline_s: float = END_PROBE_DEADLINE_S) -> dict[TPT, int | None]:
    """The end offsets ``reported`` by ListOffsets (keyed by topic-partitions with ``topic`` and
    ``partition``), each replaced by the high-water mark of a fetch answer for it.

    Faust's table recovery reads a changelog partition up to the end that ListOffsets gives. Tansu's
    can be one short for a partition written in batches: recovery then stopped before the last
    record, and a snapshot that was a partition's only one was never restored (its baselines started
    empty and an incident's episode never ended: the kill-and-restart fault test, 1 run in 3). A
    fetch answer's high-water mark is right (tests/faults/test_range_reads.py).

    One side consumer, every partition assigned at once and positioned just before its reported
    end, so the answers come in one fetch round: recovery runs inside a rebalance, and the longer it
    takes the likelier Faust loses records around it (agents.gaps). Where no fetch answers within
    ``deadline_s`` the reported end is kept, with a warning.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    if not reported:
        return {}
    loop = asyncio.get_running_loop()
    started = loop.time()
    out: dict[TPT, int | None] = dict(reported)
    tps = {TopicPartition(tp.topic, tp.partition): tp for tp in reported}  # type: ignore[attr-defined]
    consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False,
                                fetch_max_wait_ms=20, auto_offset_reset="latest")
    try:
        await asyncio.wait_for(consumer.start(), deadline_s)
        consumer.assign(list(tps))
        for tp, key in tps.items():
            consumer.seek(tp, max((reported[key] or 0) - 1, 0))
        pending = set(tps)
        while pending and loop.time() - started < deadline_s:
            await consumer.getmany(*pending, timeout_ms=100, max_records=1)
            for tp in list(pending):
                high = consumer.highwater(tp)
                if high is not None:
                    pending.discard(tp)
                    out[tps[tp]] = int(high)
    except Exception as exc:  # the reported ends stand: recovery must not fail on the check
        log.warning("end offsets not checked against a fetch (%r); keeping ListOffsets'", exc)
        pending = set()
    finally:
        await consumer.stop()
    for tp in pending:
        log.warning("%s[%s]: no fetch answered for its end; keeping ListOffsets' %s", tp.topic, tp.partition,
                    reported[tps[tp]])
    fixed = {f"{k.topic}[{k.partition}]": (reported[k], v) for k, v in out.items()  # type: ignore[attr-defined]
             if v != reported[k]}
    if fixed:
        log.info("end offsets from a fetch, %.0f ms: %s (ListOffsets said, fetch said)",
                 1000 * (loop.time() - started), fixed)
    return out


async def true_ends(settings: LockstepSettings, bootstrap: str, tps: list[Any]) -> dict[Any, int]:
    """``{TopicPartition: end offset}`` now, each the high-water mark of a fetch answer (``fetched_ends``).

    For anything that waits until it has read a topic "to its end": Tansu's ListOffsets alone can be
    short by more than a batch (45 of 750 records a partition in a probe), and a wait on it returns
    before the last records are read (the any-worker web test failed in CI on exactly that).
    """
    from aiokafka import AIOKafkaConsumer

    if not tps:
        return {}
    consumer = AIOKafkaConsumer(**client_kwargs(settings, bootstrap), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        listed: dict[Any, int | None] = dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()
    return {tp: int(v or 0) for tp, v in (await fetched_ends(settings, bootstrap, listed)).items()}
