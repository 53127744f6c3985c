"""The ingest lane (agents.lane) without a broker: batches, acknowledgements, a rebalance's drops, backpressure.

The broker-side guarantees (a worker killed, restarted, leaving its group with the lane on) are the fault
tests' (tests/faults/test_worker_faults.py), which compare what reached the topics with a reference run.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest
from faust.types import TP

from agents.lane import BatchLane
from agents.transport import LockstepConsumer
from tests.agents.test_transport import PART, commits, consumer_of


@dataclass
class Rec:  # the fields of an aiokafka ConsumerRecord the lane reads
    topic: str
    partition: int
    offset: int
    timestamp: int | None = 1_000
    key: bytes | None = None
    value: bytes | None = b"[]"


class Acks:
    def __init__(self) -> None:
        self.acked: list[tuple[Any, list[int]]] = []

    def ack_offsets(self, tp: Any, offsets: list[int]) -> None:
        self.acked.append((tp, offsets))


class Flow:
    def __init__(self) -> None:
        self.active = True
        self.generation = 1


def lane_of(capacity: int = 100) -> tuple[BatchLane, Flow, Acks]:
    flow, acks = Flow(), Acks()
    lane = BatchLane({"t"}, capacity, lambda: flow.active, lambda: flow.generation)
    lane.acker = acks
    return lane, flow, acks


def recs(partition: int, offsets: range) -> list[Rec]:
    return [Rec("t", partition, o) for o in offsets]


def run(coro: Any) -> Any:
    return asyncio.get_event_loop().run_until_complete(asyncio.wait_for(coro, 10))


def test_batches_keep_offset_order_split_at_max_and_are_acked_when_the_next_is_asked_for() -> None:
    lane, _, acks = lane_of()
    lane.put(TP("t", 0), recs(0, range(0, 3)), 1)
    lane.put(TP("t", 1), recs(1, range(10, 12)), 1)
    lane.put(TP("t", 0), recs(0, range(3, 5)), 1)

    async def go() -> list[list[tuple[int, int]]]:
        seen = []
        batches = lane.batches(4, within=0.0)
        async for batch in batches:
            seen.append([(d.partition, d.offset) for d in batch])
            assert batch[0].message is batch[0] and batch[0].timestamp == 1.0  # read as a Faust event
            if len(seen) == 1:
                assert acks.acked == []  # not before the batch is handled
            if len(seen) == 2:
                break
        return seen

    seen = run(go())
    assert seen == [[(0, 0), (0, 1), (0, 2), (1, 10)], [(1, 11), (0, 3), (0, 4)]]
    # the first batch acked when the second was asked for; the second, abandoned (break), is not
    assert acks.acked == [(TP("t", 0), [0, 1, 2]), (TP("t", 1), [10])]
    assert len(lane) == 0


def test_a_batch_whose_handler_raises_is_not_acknowledged() -> None:
    lane, _, acks = lane_of()
    lane.put(TP("t", 0), recs(0, range(5)), 1)

    async def go() -> None:
        async for _ in lane.batches(10, within=0.0):
            raise RuntimeError("a bug in the handler")

    with pytest.raises(RuntimeError):
        run(go())
    assert acks.acked == []
    run(asyncio.wait_for(lane.wait_idle(), 1))  # and the lane is idle again: a rebalance can go on


def test_what_a_rebalance_makes_stale_is_dropped_not_handed_out() -> None:
    lane, flow, _ = lane_of()
    lane.put(TP("t", 0), recs(0, range(3)), 1)
    lane.clear()  # Faust's flow_control.clear() on a revoke
    assert len(lane) == 0 and lane.dropped == 3
    lane.put(TP("t", 0), recs(0, range(3, 5)), 1)  # fetched in the old generation
    flow.generation = 2
    lane.put(TP("t", 0), recs(0, range(0, 2)), 2)  # fetched again after the seek back

    async def first() -> list[int]:
        async for batch in lane.batches(10, within=0.0):
            return [d.offset for d in batch]
        return []

    assert run(first()) == [0, 1]
    assert lane.dropped == 5
    flow.active = False  # suspended: nothing taken is handed out
    lane.put(TP("t", 0), recs(0, range(2, 4)), 2)
    assert lane._take(10) == [] and lane.dropped == 7


def test_a_full_lane_holds_the_fetch_loop_until_a_batch_is_taken() -> None:
    lane, _, _ = lane_of(capacity=4)
    lane.put(TP("t", 0), recs(0, range(5)), 1)
    assert lane.full()

    async def go() -> bool:
        waiting = asyncio.ensure_future(lane.wait_room())
        await asyncio.sleep(0.01)
        blocked = not waiting.done()
        batches = lane.batches(3, within=0.0)
        await batches.__anext__()  # 3 taken, 2 left: room again
        await asyncio.wait_for(waiting, 1)
        await batches.aclose()
        return blocked

    assert run(go()) is True
    assert not lane.full()


def test_wait_idle_waits_for_the_batch_being_handled() -> None:
    lane, _, acks = lane_of()
    lane.put(TP("t", 0), recs(0, range(2)), 1)
    handled = asyncio.Event()
    release = asyncio.Event()

    async def taker() -> None:
        async for batch in lane.batches(10, within=0.0):
            handled.set()
            await release.wait()
            if batch[0].offset == 0:
                lane.put(TP("t", 0), recs(0, range(2, 3)), 1)  # so that a next batch comes and this one acks

    async def go() -> tuple[bool, list[Any]]:
        task = asyncio.ensure_future(taker())
        await handled.wait()
        idle = asyncio.ensure_future(lane.wait_idle())
        await asyncio.sleep(0.01)
        was_waiting = not idle.done()
        release.set()
        await asyncio.wait_for(idle, 1)
        acked = list(acks.acked)
        task.cancel()
        return was_waiting, acked

    was_waiting, acked = run(go())
    assert was_waiting and acked[0] == (TP("t", 0), [0, 1])


def test_a_cadence_batch_waits_for_within_then_takes_what_arrived() -> None:
    lane, _, _ = lane_of()
    now = [0.0]

    async def go() -> list[int]:
        batches = lane.batches(100, within=0.2, clock=lambda: now[0])
        nxt = asyncio.ensure_future(batches.__anext__())
        lane.put(TP("t", 0), recs(0, range(2)), 1)
        await asyncio.sleep(0.01)
        assert not nxt.done()  # inside the cadence: more may come
        lane.put(TP("t", 0), recs(0, range(2, 4)), 1)
        now[0] = 0.25
        lane.put(TP("t", 1), recs(1, range(1)), 1)  # an arrival wakes the taker; the cadence has passed
        batch = await asyncio.wait_for(nxt, 1)
        await batches.aclose()
        return [d.offset for d in batch]

    assert run(go()) == [0, 1, 2, 3, 0]


def test_the_consumer_acks_offsets_as_faust_acks_messages_and_commits_the_run() -> None:
    consumer = consumer_of("lockstep://127.0.0.1:9")
    assert isinstance(consumer, LockstepConsumer)
    consumer._committed_offset[PART] = 5
    consumer.ack_offsets(PART, [3, 4, 5, 6, 7])  # below the committed offset: not counted again
    consumer.ack_offsets(PART, [7, 8])  # acknowledged twice: once
    assert consumer._acked[PART] == [5, 6, 7, 8] and consumer._n_acked == 4
    assert commits(consumer, 2) == [9, None]


def test_a_cancelled_taker_leaves_the_lane_busy_until_it_says_it_abandoned_the_batch() -> None:
    lane, _, acks = lane_of()
    lane.put(TP("t", 0), recs(0, range(2)), 1)
    handling = asyncio.Event()

    async def taker() -> None:
        async for _ in lane.batches(10, within=0.0):
            handling.set()
            await asyncio.Event().wait()  # stuck in the batch

    async def go() -> tuple[bool, bool]:
        task = asyncio.ensure_future(taker())
        await handling.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        busy = not lane.idle()  # the generator is not closed by the cancellation: its finally has not run
        lane.abandon()  # what agents.ingest does when its agent stops
        return busy, lane.idle()

    assert run(go()) == (True, True)
    assert acks.acked == []


def test_a_due_batch_waits_for_the_downstream_lane_to_be_quiet() -> None:
    """Downstream first: the ingest lane hands over a due batch only once the correlate lane has nothing
    waiting and no batch in hand (their agents share one event loop; an ingest batch holds it)."""
    up, _, _ = lane_of()
    down, _, _ = lane_of()
    up.downstream, up.downstream_wait_s = down, 5.0
    order: list[str] = []
    release = asyncio.Event()

    async def downstream_agent() -> None:
        async for batch in down.batches(10, within=0.0):
            order.append(f"down taken {len(batch)}")
            await release.wait()  # a batch in hand: still not quiet
            order.append("down handled")

    async def go() -> list[str]:
        assert down.quiet()
        down.put(TP("t", 0), recs(0, range(3)), 1)
        assert not down.quiet()
        up.put(TP("t", 0), recs(0, range(2)), 1)
        batches = up.batches(10, within=0.0)
        nxt = asyncio.ensure_future(batches.__anext__())
        agent = asyncio.ensure_future(downstream_agent())
        await asyncio.sleep(0.05)
        assert order == ["down taken 3"] and not nxt.done()  # held while the downstream batch is in hand
        release.set()
        batch = await asyncio.wait_for(nxt, 1)
        order.append(f"up taken {len(batch)}")
        assert down.quiet()
        agent.cancel()
        await batches.aclose()
        return order

    assert run(go()) == ["down taken 3", "down handled", "up taken 2"]


def test_a_downstream_lane_that_never_settles_delays_a_batch_by_its_wait_at_most() -> None:
    up, _, _ = lane_of()
    down, _, _ = lane_of()
    up.downstream, up.downstream_wait_s = down, 0.05
    down.put(TP("t", 0), recs(0, range(3)), 1)  # nobody takes it
    up.put(TP("t", 0), recs(0, range(2)), 1)

    async def go() -> tuple[list[int], bool]:
        batches = up.batches(10, within=0.0)
        batch = await asyncio.wait_for(batches.__anext__(), 1)
        await batches.aclose()
        return [d.offset for d in batch], down.quiet()

    assert run(go()) == ([0, 1], False)


def test_quiet_follows_drops_and_stale_chunks() -> None:
    lane, flow, _ = lane_of()
    lane.put(TP("t", 0), recs(0, range(2)), 1)
    assert not lane.quiet()
    lane.clear()  # a rebalance drops what was handed over
    assert lane.quiet() and run(asyncio.wait_for(lane.wait_quiet(5.0), 0.5))  # at once, not after its wait
    lane.put(TP("t", 0), recs(0, range(2)), 1)
    flow.generation = 2  # stale: dropped when a batch is taken, nothing handed out

    async def stale() -> bool:
        batches = lane.batches(10, within=0.0)
        nxt = asyncio.ensure_future(batches.__anext__())
        await asyncio.sleep(0.02)
        pending = not nxt.done()
        nxt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await nxt
        return pending

    assert run(stale()) and lane.quiet() and run(asyncio.wait_for(lane.wait_quiet(5.0), 0.5))
