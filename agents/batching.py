"""Batches of events for the ingest agent, on a cadence instead of a wait after each batch.

Faust's ``Stream.take_events(max_, within)`` waits ``within`` seconds *after* the previous batch was
handled before it hands over the next (its background drainer is held while a batch is processed, so
the buffer starts empty every time). Under live load that wait is added to every cycle: a worker whose
batches take 0.4 s of processing hands over a batch every 0.6 s, and each record waits on average half
a cycle more than it needs to (measured: the alert latency chain in docs/performance.md).

:func:`take_batches` is the same machinery (the same processor, the same passive drainer, the same
acks after the batch is handled) with a different closing rule, :func:`batch_due`: ``within`` is a
cadence measured from the previous hand-over. A worker keeping up still gets batches about every
``within`` seconds; one whose last batch took longer than ``within`` gets what queued up meanwhile at
once, without a further wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from mode.utils.futures import notify

#: Event-loop turns without the drainer moving a queued event after which a due batch is handed over
#: as it is (or, when empty, waits for an event instead of spinning).
STALLED_TURNS = 100


def batch_due(now: float, opened: float, within: float, buffered: int, queued: bool, max_: int) -> bool:
    """Whether a batch holding ``buffered`` events closes now.

    ``opened``: when the previous batch was handed over (or when waiting for this one began);
    ``queued``: whether more events are waiting to be moved into the buffer right now.

    A full batch closes at once; an empty one never; otherwise the batch closes once ``within`` has
    passed since ``opened`` and nothing more is queued (what is already waiting rides along).

    >>> batch_due(10.0, 9.9, 0.2, buffered=5, queued=False, max_=100)  # inside the cadence
    False
    >>> batch_due(10.0, 9.5, 0.2, buffered=5, queued=True, max_=100)   # due, but more is waiting
    False
    >>> batch_due(10.0, 9.5, 0.2, buffered=5, queued=False, max_=100)
    True
    >>> batch_due(10.0, 10.0, 0.2, buffered=100, queued=True, max_=100)
    True
    """
    if buffered >= max_:
        return True
    if buffered == 0:
        return False
    return now - opened >= within and not queued


async def take_batches(stream: Any, max_: int, within: float,
                       clock: Callable[[], float] = time.monotonic) -> AsyncIterator[list[Any]]:
    """Yield lists of up to ``max_`` events of ``stream`` (a ``faust.Stream``), closed by :func:`batch_due`.

    Same contract as ``Stream.take_events``: events are acknowledged once the consumer of a batch
    returns to this generator (so the group's commit never passes an event not yet handled), the
    background drainer never adds more than ``max_`` events to one batch, and a stream that stops
    hands over what it buffered as a last batch.
    """
    buffer: list[Any] = []
    arrived = asyncio.Event()
    full = asyncio.Event()
    consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    channel_queue = stream.channel.queue

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        if consuming is not None:  # a batch is being handled: wait for it (and its acks)
            try:
                await consuming
            finally:
                consuming = None
        event = stream.current_event
        if event is None:
            raise RuntimeError("take_batches: no current event")
        buffer.append(event)
        arrived.set()
        if len(buffer) >= max_:
            full.set()
            consumed.clear()
            await stream.wait(consumed)  # never more than max_ in one batch
        return value

    acks_were = stream.enable_acks
    stream.enable_acks = False  # acked here, after the batch is handled
    stream.add_processor(add_to_buffer)
    stream._enable_passive(aiter(stream.channel))  # Faust's background drainer, as take_events starts it
    opened = clock()
    try:
        while not stream.should_stop:
            remaining = opened + within - clock()
            if remaining > 0 and not full.is_set():
                await stream.wait_for_stopped(full, timeout=remaining)
            if not buffer and channel_queue.empty() and not stream.should_stop:  # wait for the first event
                arrived.clear()
                await stream.wait_for_stopped(arrived)
                continue
            idle = 0  # turns in which the drainer moved nothing although events are queued
            while not stream.should_stop and not batch_due(clock(), opened, within, len(buffer),
                                                           not channel_queue.empty(), max_):
                before = len(buffer)
                await asyncio.sleep(0)  # let the drainer move what is queued (one event per turn)
                idle = idle + 1 if len(buffer) == before else 0
                if idle >= STALLED_TURNS:  # it is not moving them (flow suspended?): do not spin
                    if buffer:
                        break
                    arrived.clear()
                    await stream.wait_for_stopped(arrived, timeout=within)
                    idle = 0
            if not buffer:
                continue
            opened = clock()
            consuming = stream.loop.create_future()
            events = list(buffer)
            try:
                yield events
            finally:
                buffer.clear()
                for event in events:
                    await stream.ack(event)
                notify(consuming)
                full.clear()
                consumed.set()
    finally:
        stream.enable_acks = acks_were
        stream._processors.remove(add_to_buffer)
