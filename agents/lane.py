"""Lanes: the records of some topics handed from the consumer's fetch loop to one agent a fetch at a time.

Faust hands every record to an agent on its own: a ``Message`` and an ``Event`` object, the conductor's
callback, a queue put and get, the stream's processors and an ack under a lock, each with its sensors.
Measured on the bench's batched backlog (28 samples a message): about 55 us a message, a quarter of a
live worker's CPU (py-spy, docs/performance.md), while the ingest agent wants whole batches anyway. And
a Faust stream yields the event loop after every event, so an agent fed that way gets one record each
time the loop comes round: behind a busy ingest agent the correlate agent took one anomalies record per
ingest step and ran seconds behind its input at 80 % of the live maximum (docs/performance.md,
thirteenth session).

Two lanes (agents.app): **ingest** (the telemetry topics) and **correlate** (the anomalies topic).
:meth:`agents.transport.LockstepConsumer._drain_messages` puts each fetch's records of a lane's topics
in it as one list per partition (:meth:`BatchLane.put`, no await); the agent takes batches on its cadence
(:meth:`BatchLane.batches`, the rule of :func:`agents.batching.batch_due`) and the lane acknowledges a
batch's offsets to Faust in bulk once the agent asks for the next one
(:meth:`agents.transport.LockstepConsumer.ack_offsets`). Everything Faust decides stays Faust's: the
subscription and assignment (each agent still subscribes to its topics), read offsets and gaps,
commits, pauses, seeks. Faust's guarantees around a rebalance are kept the way a stream keeps them:

- records handed over and not yet taken are dropped when Faust clears its agents' queues
  (``flow_control.clear()``: the lane is one of the queues it manages) and when taken while flow is
  suspended or from an older consumer generation; Faust seeks back to the committed offsets, so they
  come again;
- a batch being processed is waited for before Faust commits for a rebalance or a stop
  (``Consumer.wait_empty``: :meth:`BatchLane.wait_idle`);
- a batch is acknowledged only when the agent comes back for the next one: one that raised or was
  cancelled is not (at least once; the partition pipelines skip what they already hold).

Backpressure: :meth:`BatchLane.full` past ``capacity`` messages; the fetch loop then waits for room.

Downstream first: the ingest lane's :attr:`BatchLane.downstream` is the correlate lane. A due ingest batch
is taken only once the correlate lane is quiet (nothing handed over and not taken, no batch in hand), for
at most :attr:`BatchLane.downstream_wait_s`. Both agents share one event loop, and an ingest batch holds it
for its whole pipeline run (0.1-0.5 s live); a watermark that reached the correlate lane just after a batch
began waited for all of it, and so did every alert it made due (measured: docs/performance.md, eighteenth
session). The correlate agent's work is a few per cent of the worker's, so the ingest side waits little.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Collection
from typing import Any, Protocol

from faust.types import TP

log = logging.getLogger("lockstep.agents")


class Acker(Protocol):
    def ack_offsets(self, tp: Any, offsets: list[int]) -> None: ...


class Delivered:
    """One record taken from a lane, shaped as the agents read a Faust event (``.message``,
    ``.value``; time in seconds)."""

    __slots__ = ("key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: float | None, key: bytes | None,
                 value: bytes | None) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.timestamp, self.key, self.value = timestamp, key, value

    @property
    def message(self) -> Delivered:
        return self

    @classmethod
    def of(cls, record: Any) -> Delivered:
        """From an aiokafka ``ConsumerRecord`` (its time in milliseconds)."""
        ts = record.timestamp
        return cls(record.topic, record.partition, record.offset, None if ts is None else ts / 1000.0, record.key,
                   record.value)


class BatchLane:
    """Records of ``topics`` between the consumer's fetch loop and one taker (the agent the lane is ``name``d after).

    ``is_active``: whether Faust's flow is active (``app.flow_control.is_active``); ``generation``: the
    consumer generation now (``app.consumer_generation_id``). Both are read when a batch is taken.
    """

    def __init__(self, topics: Collection[str], capacity: int, is_active: Callable[[], bool],
                 generation: Callable[[], int], counted: Callable[[str, int], None] | None = None,
                 name: str = "ingest") -> None:
        self.name = name
        self.topics = frozenset(topics)
        self.capacity = capacity
        self.is_active = is_active
        self.generation = generation
        self.acker: Acker | None = None  # set by the consumer when its fetch loop starts
        self._pending: list[tuple[Any, list[Delivered], int]] = []  # (tp, records in offset order, generation)
        self._count = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        #: set while :meth:`quiet`: :meth:`_settle` after every change of the pending count or the batch in hand
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: a lane whose agent comes first (module docstring: the ingest lane's is the correlate lane)
        self.downstream: BatchLane | None = None
        self.downstream_wait_s = 0.2
        self.dropped = 0  # records handed over and dropped (a rebalance): Faust delivers them again
        self.counted = counted  # (outcome "taken" or "dropped", records): the worker's metric

    # -- the fetch loop's side -------------------------------------------------------------------
    def put(self, tp: Any, records: list[Any], generation: int) -> None:
        """One partition's records of a fetch (aiokafka records, offset order), fetched in ``generation``."""
        self._pending.append((tp, [Delivered.of(r) for r in records], generation))
        self._count += len(records)
        self._arrived.set()
        self._settle()
        if self._count >= self.capacity:
            self._room.clear()

    def full(self) -> bool:
        return self._count >= self.capacity

    async def wait_room(self) -> None:
        await self._room.wait()

    def clear(self) -> None:
        """Drop what was handed over and not taken (Faust's ``flow_control.clear()`` on a rebalance)."""
        if self._count:
            log.info("%s lane: %d records handed over and not yet taken dropped for the rebalance; Faust "
                     "delivers them again from the group's commit", self.name, self._count)
        self._dropped(self._count)
        self._pending.clear()
        self._count = 0
        self._room.set()
        self._settle()

    def __len__(self) -> int:
        return self._count

    def quiet(self) -> bool:
        """Nothing handed over and not yet taken, and no batch in processing."""
        return not self._count and self._idle.is_set()

    def _settle(self) -> None:
        if self.quiet():
            self._quiet.set()
        else:
            self._quiet.clear()

    async def wait_quiet(self, timeout_s: float) -> bool:
        """Until :meth:`quiet`, for at most ``timeout_s``; whether it is."""
        if not self._quiet.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), timeout_s)
        return self.quiet()

    # -- Faust's side of a rebalance or a stop ---------------------------------------------------------
    def idle(self) -> bool:
        return self._idle.is_set()

    def abandon(self) -> None:
        """The taker stopped (its task cancelled or ended) with a batch unacknowledged: nothing is in processing
        any more. An async generator's ``finally`` runs only when it is closed, not when the task iterating
        it is cancelled, so the taker says so itself."""
        self._idle.set()
        self._settle()

    async def wait_idle(self) -> None:
        """Until no batch is being processed (one taken and not yet acknowledged or abandoned)."""
        await self._idle.wait()

    # -- the taker's side ---------------------------------------------------------------------------------
    def _take(self, max_: int) -> list[Delivered]:
        """Up to ``max_`` records, whole partition chunks in hand-over order, the last one split if need be;
        chunks of an older generation, or everything while flow is suspended, are dropped."""
        active, now = self.is_active(), self.generation()
        taken: list[Delivered] = []
        while self._pending and len(taken) < max_:
            tp, records, generation = self._pending[0]
            if not active or generation != now:
                self._pending.pop(0)
                self._count -= len(records)
                self._dropped(len(records))
                continue
            room = max_ - len(taken)
            if len(records) <= room:
                self._pending.pop(0)
                taken += records
            else:
                taken += records[:room]
                self._pending[0] = (tp, records[room:], generation)
            self._count -= min(len(records), room)
        if self._count < self.capacity:
            self._room.set()
        self._settle()
        if taken and self.counted is not None:
            self.counted("taken", len(taken))
        return taken

    def _dropped(self, n: int) -> None:
        if n:
            self.dropped += n
            if self.counted is not None:
                self.counted("dropped", n)

    async def batches(self, max_: int, within: float,
                      clock: Callable[[], float] = time.monotonic) -> AsyncGenerator[list[Delivered], None]:
        """Batches of up to ``max_`` records, closed as :func:`agents.batching.batch_due` closes them
        (``within`` a cadence from the previous hand-over; nothing is queued behind the lane, so a due
        batch closes at once). A batch's offsets are acknowledged when the caller asks for the next."""
        from agents.batching import batch_due

        opened = clock()
        while True:
            if not self._count:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            while not batch_due(clock(), opened, within, self._count, False, max_):
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), max(opened + within - clock(), 0.0))
            if self.downstream is not None:
                await self.downstream.wait_quiet(self.downstream_wait_s)
            batch = self._take(max_)
            if not batch:
                continue
            opened = clock()
            self._idle.clear()
            self._settle()
            try:
                yield batch
                self.ack(batch)
            finally:
                self._idle.set()
                self._settle()

    def ack(self, batch: list[Delivered]) -> None:
        """Acknowledge a handled batch's offsets to the consumer, a partition at a time."""
        acker = self.acker
        if acker is None:
            return
        by_tp: dict[tuple[str, int], list[int]] = {}
        for d in batch:
            by_tp.setdefault((d.topic, d.partition), []).append(d.offset)
        for (topic, partition), offsets in by_tp.items():
            acker.ack_offsets(TP(topic, partition), offsets)
