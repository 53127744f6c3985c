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
from collections.abc import AsyncIterator
from typing import Any

from agents.kafka import client_kwargs
from models.settings import LockstepSettings

log = logging.getLogger("lockstep.agents")


def expected_next(last_processed: int | None, committed: int | None) -> int | None:
    """The offset a partition's next delivered record must have: one past the last processed, else the
    group's committed offset (the next one to read) for a partition with no state; None if unknown.

    >>> expected_next(41, 30), expected_next(None, 30), expected_next(None, None)
    (42, 30, None)
    """
    if last_processed is not None:
        return last_processed + 1
    return committed


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
                   max_records: int = 5000) -> list[Any]:
        """The records at offsets ``[start, stop)`` of one partition (aiokafka ``ConsumerRecord``s, in
        order); fewer where the range holds no record or the broker stops answering (then logged)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        if stop <= start:
            return []
        async with self._lock:
            if self._consumer is None:
                self._consumer = AIOKafkaConsumer(**client_kwargs(self.settings, self.bootstrap), group_id=None,
                                                  enable_auto_commit=False, fetch_max_wait_ms=50)
                await self._consumer.start()
            consumer = self._consumer
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            out: list[Any] = []
            empty = 0
            while empty < 3:
                if await consumer.position(tp) >= stop:
                    break
                batch = (await consumer.getmany(tp, timeout_ms=500, max_records=max_records)).get(tp, [])
                if not batch:
                    empty += 1
                    continue
                empty = 0
                out.extend(m for m in batch if start <= m.offset < stop)
                if batch[-1].offset >= stop - 1:
                    break
            return out

    async def chunks(self, topic: str, partition: int, start: int, stop: int,
                     size: int = 4000) -> AsyncIterator[list[Any]]:
        """:meth:`read` of ``[start, stop)`` in consecutive pieces of at most ``size`` offsets (a long range,
        e.g. a rebuilt partition read from offset 0, is never held in memory whole)."""
        for lo in range(start, stop, size):
            records = await self.read(topic, partition, lo, min(lo + size, stop), max_records=size)
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
