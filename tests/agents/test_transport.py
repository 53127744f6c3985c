"""The consumer's commit bookkeeping (agents.transport), on Faust's real consumer object (not started).

The case is the one the leaving-worker fault test hit under load: Faust skipped offsets 191..451 of a
partition around a rebalance and saw a gap when the next record arrived; the agent read those offsets
from the broker (agents.gaps) and acknowledged them. The gap and the acknowledgements cover the same
offsets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from faust.types import TP, Message

from agents import transport

TOPIC = "telemetry.gpu"
PART = TP(TOPIC, 0)


def consumer_of(broker: str) -> Any:
    transport.register()
    app = faust.App(f"t-commit-{broker.split(':')[0]}", broker=broker)

    app.topics.add(app.topic(TOPIC))  # subscribed with acks, as the agents' input topics are
    asyncio.get_event_loop().run_until_complete(app.topics._update_indices())
    assert app.topics.acks_enabled_for(TOPIC)
    return app.consumer


def commits(consumer: Any, rounds: int) -> list[int | None]:
    """What ``rounds`` commit intervals would commit, one after the other."""
    out = []
    for _ in range(rounds):
        offset = consumer._new_offset(PART)
        if offset is not None and consumer._should_commit(PART, offset):
            consumer._committed_offset[PART] = offset
        out.append(offset)
    return out


def gap_read_around_faust(consumer: Any, first: int = 191, last: int = 451) -> None:
    consumer._committed_offset[PART] = first
    # as Faust's drainer does on seeing last + 1 after first - 1
    asyncio.get_event_loop().run_until_complete(consumer._add_gap(PART, first, last + 1))
    for offset in range(first, last + 2):  # the hole read and acknowledged, then the record that showed it
        assert consumer.ack(Message(TOPIC, 0, offset, 0.0, 0, None, None, b"", None, tp=PART))


def test_a_gap_also_acknowledged_commits_in_one_step() -> None:
    consumer = consumer_of("lockstep://127.0.0.1:9")
    assert isinstance(consumer, transport.LockstepConsumer)
    gap_read_around_faust(consumer)
    assert commits(consumer, 3) == [453, None, None]
    assert consumer._acked[PART] == [] and not consumer._gap[PART]


def test_stock_faust_crawls_one_offset_per_commit_on_the_same_acks() -> None:
    """Why the override exists; when this fails, Faust fixed it and the override can go."""
    consumer = consumer_of("kafka://127.0.0.1:9")
    assert not isinstance(consumer, transport.LockstepConsumer)
    gap_read_around_faust(consumer)
    assert commits(consumer, 3) == [193, 194, 195]


def test_acknowledgements_alone_and_a_gap_alone_commit_as_faust_does() -> None:
    ours, stock = consumer_of("lockstep://127.0.0.1:9"), consumer_of("kafka://127.0.0.1:9")
    for consumer in (ours, stock):
        consumer._committed_offset[PART] = 10
        for offset in (10, 11, 12, 14, 15):  # 13 is not acknowledged yet: the first run ends before it
            consumer.ack(Message(TOPIC, 0, offset, 0.0, 0, None, None, b"", None, tp=PART))
    assert commits(ours, 1) == commits(stock, 1) == [13]
    for consumer in (ours, stock):
        consumer.ack(Message(TOPIC, 0, 13, 0.0, 0, None, None, b"", None, tp=PART))
    assert commits(ours, 1) == commits(stock, 1) == [16]
    for consumer in (ours, stock):  # a gap (e.g. a compacted range) then one record after it
        asyncio.get_event_loop().run_until_complete(consumer._add_gap(PART, 16, 19))
        consumer.ack(Message(TOPIC, 0, 20, 0.0, 0, None, None, b"", None, tp=PART))
    assert commits(ours, 2) == commits(stock, 2)


class Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class RewindingThread:
    """The consumer thread's :meth:`~agents.transport.FetchTunedConsumerThread.rewind`, recorded."""

    def __init__(self) -> None:
        self.asked: list[dict[Any, int]] = []

    async def rewind(self, targets: dict[Any, int]) -> dict[Any, int]:
        self.asked.append(dict(targets))
        return dict(targets)


def test_a_fetch_dropped_while_flow_is_suspended_is_sought_back_where_nothing_is_committed() -> None:
    """The broker-restart fault test's loss: after the assignment on a rebuilt broker (nothing committed), a
    fetch came back while the rebalance still suspended the flow; Faust dropped it and sought back to the
    committed offsets, which moves no partition without a commit: offsets 0..65 of one partition (and all of
    the others) were never delivered. The partitions without a commit go back to their first dropped record."""
    consumer = consumer_of("lockstep://127.0.0.1:9")
    committed_part, fresh = TP(TOPIC, 1), TP(TOPIC, 2)
    consumer._committed_offset[committed_part] = 40  # Faust's seek takes this one back to its commit
    thread = RewindingThread()
    consumer._thread = thread
    seeks: list[str] = []

    async def fetch(timeout: float) -> tuple[dict[Any, list[Record]], None]:
        return {PART: [Record(o) for o in range(66)], committed_part: [Record(o) for o in range(50, 60)],
                fresh: [Record(o) for o in range(7, 9)]}, None

    async def perform_seek() -> None:
        seeks.append("committed")

    consumer._wait_next_records = fetch
    consumer.perform_seek = perform_seek
    consumer.stop_flow()  # a rebalance under way
    asyncio.get_event_loop().run_until_complete(consumer._hand_over_fetch({}, None))
    assert seeks == ["committed"]
    assert thread.asked == [{PART: 0, fresh: 7}]

