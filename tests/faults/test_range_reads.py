"""Side reads around Faust (holes, catch-ups, the record at a snapshot's offset) are complete or say so.

A restored partition reads offsets again from the broker (agents.gaps.RangeReader) to rebuild its
state. Under load these reads used to end after three empty fetches: the worker's event loop was busy
while a fetch waited, the read returned part of the range, and the state silently missed the rest
(the leaving-worker fault test then gave episode ends seconds late, about one full-suite run in
five). And the partition's end was asked with ListOffsets, which Tansu misreports for partitions
written in batches: a snapshot offset below the true end could look like one past it ("the topic
was recreated") and the offsets before it were processed again.

Here the broker is paused (SIGSTOP) in the middle of a read, and a partition is written in batches
so that ListOffsets and the fetch answers disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents.gaps import IncompleteRead, RangeReader
from agents.kafka import start_producer
from agents.metrics import WorkerMetrics
from agents.offsets import Offsets
from agents.recovery import Action, decide
from lockstep.broker import EmbeddedBroker

from .kit import make_settings

pytestmark = [pytest.mark.broker]


def pause(pid: int) -> None:
    """SIGSTOP the broker and return once every one of its threads is stopped. The signal takes effect
    a few milliseconds after ``kill`` returns for a thread busy on the other core (11 runs in 40 here):
    in that window the broker still answered the read's first fetch, which then finished the range."""
    import glob

    os.kill(pid, signal.SIGSTOP)
    while True:
        states = []
        for path in glob.glob(f"/proc/{pid}/task/*/stat"):
            with contextlib.suppress(OSError), open(path) as f:  # OSError: a thread that ended meanwhile
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(state in "tT" for state in states):
            return
        time.sleep(0.0005)  # polling a kernel state: there is no event to wait on


@pytest.fixture()
def own_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:  # paused by the tests: not shared with any other test
        yield b


async def write(settings: Any, topic: str, n: int, flush_every: int = 7) -> None:
    """``n`` records into each of the topic's two partitions. The paused reads read partition 1 after a
    warm-up read of partition 0: the consumer is connected and knows the topic, and nothing of
    partition 1 was prefetched before the broker stopped (a prefetch would let the read finish without
    the broker)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    producer = await start_producer(settings, settings.kafka_bootstrap_servers)
    try:
        for i in range(n):
            for partition in (0, 1):
                await producer.send(topic, b"r%d" % i, partition=partition)
            if i % flush_every == 0:
                await producer.flush()  # batches of several records: what Tansu's ListOffsets misreports
        await producer.flush()
    finally:
        await producer.stop()


def test_a_read_waits_out_a_broker_that_stops_answering_and_returns_the_whole_range(
        own_broker: EmbeddedBroker) -> None:
    settings = make_settings(own_broker.bootstrap, partitions=2)
    pid = own_broker.pid
    assert pid is not None

    async def go() -> tuple[list[int], list[int]]:
        await write(settings, "t.pause", 3000)
        reader = RangeReader(settings, own_broker.bootstrap)
        try:
            warm = [m.offset for m in await reader.read("t.pause", 0, 0, 10)]  # connected, metadata known
            pause(pid)
            resumed = asyncio.get_running_loop().call_later(2.5, os.kill, pid, signal.SIGCONT)
            try:
                got = [m.offset for m in await reader.read("t.pause", 1, 10, 3000, max_records=200)]
            finally:
                resumed.cancel()
                os.kill(pid, signal.SIGCONT)
            return warm, got
        finally:
            await reader.close()

    warm, got = asyncio.run(go())
    assert warm == list(range(10))
    # Before: three empty 500 ms fetches ended the read, and it returned [] (or a prefix) as if complete.
    assert got == list(range(10, 3000)), f"{len(got)} of 2990 records, first {got[:3]}, last {got[-3:]}"


def test_a_read_that_cannot_finish_says_so_with_what_it_read(own_broker: EmbeddedBroker) -> None:
    settings = make_settings(own_broker.bootstrap, partitions=2)
    pid = own_broker.pid
    assert pid is not None

    async def go() -> IncompleteRead | None:
        await write(settings, "t.gone", 50)
        reader = RangeReader(settings, own_broker.bootstrap)
        try:
            await reader.read("t.gone", 0, 0, 1)
            pause(pid)
            try:
                await reader.read("t.gone", 1, 1, 50, deadline_s=1.5)
            except IncompleteRead as e:
                return e
            finally:
                os.kill(pid, signal.SIGCONT)
            return None
        finally:
            await reader.close()

    err = asyncio.run(go())
    assert err is not None, "a read against a stopped broker returned as if the range were complete"
    assert all(1 <= m.offset < 50 for m in err.records)
    assert "did not answer" in str(err)


def test_a_snapshot_below_the_true_end_is_not_taken_for_a_recreated_topic(own_broker: EmbeddedBroker) -> None:
    """Faust hands a restored partition an offset at or before its snapshot's (the group's commit lags the
    snapshot): the offsets up to the snapshot are skipped (SKIP_HELD). The end offset decides whether the
    topic was recreated; read from ListOffsets it was low, and the snapshot looked past the end."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    settings = make_settings(own_broker.bootstrap, partitions=2)

    async def go() -> tuple[int, int | None, Action]:
        await write(settings, "t.end", 50)
        consumer = AIOKafkaConsumer(bootstrap_servers=own_broker.bootstrap, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition("t.end", 0)
            listed = int((await consumer.end_offsets([tp]))[tp])
        finally:
            await consumer.stop()
        offsets = Offsets(None, settings, own_broker.bootstrap, WorkerMetrics())
        try:
            snap = 48  # the restored state holds offsets up to 48; Faust resumes at the commit, 40
            at_snap = await offsets.record_time("t.end", 0, snap)
            first_ts = await offsets.record_time("t.end", 0, 40)
            facts = await offsets.facts("t.end", 0, snap, at_snap, 40, first_ts, with_end=True)
        finally:
            await offsets.ranges.close()
        return listed, facts.end, decide(facts).action

    listed, end, action = asyncio.run(go())
    assert end == 50, f"end read as {end} (ListOffsets said {listed})"
    assert action is Action.SKIP_HELD, (action, listed, end)


def test_table_recovery_reads_every_changelog_partition_to_its_true_end(own_broker: EmbeddedBroker) -> None:
    """Faust recovers a table's changelog partition up to the end ListOffsets gives, through
    ``FetchTunedConsumerThread._highwaters``. Tansu's was one short for partitions written in batches,
    and the last snapshot written there was never restored (the kill-and-restart fault test: nccl:2's
    only snapshot lost, its baselines empty, an episode end never produced). The ends recovery uses
    are the records' real ends, whatever ListOffsets says."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from agents.gaps import fetched_ends

    settings = make_settings(own_broker.bootstrap, partitions=2)

    async def go() -> tuple[dict[Any, int | None], dict[Any, int | None], dict[Any, int]]:
        real: dict[Any, int] = {}
        for n, topic in enumerate(("t.cl1", "t.cl2", "t.cl3"), start=1):
            await write(settings, topic, 5 * n + 1, flush_every=3)
            real.update({TopicPartition(topic, p): 5 * n + 1 for p in (0, 1)})
        consumer = AIOKafkaConsumer(bootstrap_servers=own_broker.bootstrap, group_id=None)
        await consumer.start()
        try:
            listed = {tp: int(v) for tp, v in (await consumer.end_offsets(list(real))).items()}
        finally:
            await consumer.stop()
        ends = await fetched_ends(settings, own_broker.bootstrap, dict(listed))
        # an end reported too high, or not at all, is put right as well
        odd = await fetched_ends(settings, own_broker.bootstrap,
                                 {TopicPartition("t.cl1", 0): 40, TopicPartition("t.cl1", 1): None})
        return ends | odd, listed, real

    ends, listed, real = asyncio.run(go())
    assert ends == real, f"recovery ends {ends}; records end at {real}; ListOffsets said {listed}"


def test_a_wait_for_the_end_of_a_topic_waits_for_its_last_record(own_broker: EmbeddedBroker) -> None:
    """``true_ends`` is what every "read it to the end" wait uses (the read model's catch-up in the web
    tests, replay's converted/inventory waits, the fault kit): each partition's end is the offset after
    its last record. ListOffsets alone was short on partitions written in batches, a wait on it
    returned early, and a second worker's read model was compared before it held the job lanes (the
    any-worker web test, in CI)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from agents.gaps import true_ends

    settings = make_settings(own_broker.bootstrap, partitions=2)

    async def go() -> tuple[dict[Any, int], dict[Any, int], dict[Any, int]]:
        await write(settings, "t.wait", 301, flush_every=4)
        tps = [TopicPartition("t.wait", p) for p in (0, 1)]
        consumer = AIOKafkaConsumer(bootstrap_servers=own_broker.bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            listed = {tp: int(v) for tp, v in (await consumer.end_offsets(tps)).items()}
            consumer.assign(tps)
            read: dict[Any, int] = dict.fromkeys(tps, 0)
            while sum(read.values()) < 2 * 301:
                for tp, msgs in (await consumer.getmany(timeout_ms=1000)).items():
                    read[tp] = msgs[-1].offset + 1
        finally:
            await consumer.stop()
        return await true_ends(settings, own_broker.bootstrap, tps), listed, read

    ends, listed, read = asyncio.run(go())
    assert ends == read, f"true ends {ends}; the last records end at {read}; ListOffsets said {listed}"
