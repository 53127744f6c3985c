"""The broker restarted under a running worker: it reconnects, resumes, and says what happened.

The embedded Tansu broker keeps everything in memory, so a restart is the harshest case: topics,
committed offsets and changelogs are gone. The operator recreates the topics (``lockstep topics
create``, as after any broker rebuild); the worker must reconnect on its own, keep its learned
baselines, process the new traffic, and log that the input was recreated.

Two ways it lost the new traffic, each 1 run in 12-16 under a CPU hog (once in CI): a fetch that came
back while the rebalance on the new broker still suspended the flow was dropped, and with nothing
committed there Faust's seek back left the partitions past the dropped records (agents.transport); and
the one partition that got more records afterwards, restored from its snapshot at 49 and handed 66
first, read 50..65 of the new topic "state only" as if they followed its snapshot (agents.recovery).
The last two tests here take each on its own, deterministically.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.metrics import WorkerMetrics
from agents.offsets import Offsets
from agents.recovery import Action, decide
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec
from lockstep.replay import read_topic

from .kit import WorkerProcess, end_offsets, make_settings, send_inventory, send_scrapes, wait_until, web_url
from .test_catch_up_snapshots import snapshots_written
from .test_range_reads import write

pytestmark = pytest.mark.broker

SPEC = LoadSpec(gpus=32, nodes_per_job=4, incidents=((0, 30),), incident_s=20.0, seed=5)


def test_a_broker_restart_under_a_worker_is_survived_and_reported(workers: list[WorkerProcess]) -> None:
    broker = EmbeddedBroker()
    broker.start()
    try:
        # Tansu auto-creates a topic that a reconnecting client asks for, with 4 partitions: give every
        # topic 4, so what it creates before `topics create` runs matches the catalogue (a production
        # Kafka has auto-creation off, see docs/operations.md).
        settings = make_settings(broker.bootstrap, inventory_partitions=4, alerts_partitions=4)

        async def phase_one() -> None:
            await create_topics(settings, broker.bootstrap)
            gen = LoadGenerator(SPEC)
            await send_inventory(settings, gen)
            await send_scrapes(settings, gen, range(0, 25), pace_s=0.05)

        asyncio.run(phase_one())
        with_data = sum(1 for end in asyncio.run(end_offsets(settings, TopicCatalogue(settings).telemetry_topics))
                        .values() if end > 0)
        worker = WorkerProcess(settings, "worker")
        workers.append(worker)
        # Every input partition with data processed and snapshotted before the broker goes, so the restart
        # always finds restored states to check against the rebuilt topics. (This waited for the worker's
        # start line alone: the broker went within a second of the first batch, and on a slow start it
        # could go before any, leaving no snapshot and nothing recreated to report.)
        assert asyncio.run(wait_until(lambda: _snapshotted(worker, with_data), 90)), worker.log()[-3000:]

        broker.kill()  # no goodbye: connections drop, memory storage is gone
        broker2 = EmbeddedBroker(port=broker.port)
        broker2.start()
        try:
            async def phase_two() -> list[dict[str, Any]]:
                await create_topics(settings, broker2.bootstrap)
                gen = LoadGenerator(SPEC)
                await send_inventory(settings, gen)
                await send_scrapes(settings, gen, range(25, 70), pace_s=0.05)

                async def alert_out() -> bool:  # the alert asserted below (another kind may come out first)
                    alerts = await read_topic(settings, broker2.bootstrap, TopicCatalogue(settings).alerts)
                    return any(a["type"] == "job_slowdown" and a["status"] == "firing" for a in alerts)

                await wait_until(alert_out, 120, every_s=1.0)
                return await read_topic(settings, broker2.bootstrap, TopicCatalogue(settings).alerts)

            alerts = asyncio.run(phase_two())
            log = worker.log()
            assert worker.alive, log[-3000:]
            # The worker kept going on the rebuilt broker: the incident in the new traffic was alerted.
            assert any(a["type"] == "job_slowdown" and a["status"] == "firing" for a in alerts), log[-4000:]
            # ... and it said what happened, in plain words.
            assert "recreated or truncated" in log or "offsets reset" in log, log[-4000:]
        finally:
            broker2.stop()
    finally:
        broker.stop()


async def _snapshotted(worker: WorkerProcess, at_least: int) -> bool:
    url = web_url(worker)
    if url is None:
        return False
    try:
        return snapshots_written(url) >= at_least
    except OSError:  # the API not answering yet
        return False


def test_records_dropped_in_a_rebalance_with_nothing_committed_are_fetched_again() -> None:
    """What Faust does with a fetch that comes back while a rebalance suspends the flow, on a real consumer
    of a group with nothing committed (a new group, or any group on a rebuilt broker): it drops the records
    and seeks back to the committed offsets; aiokafka's seek moves no partition without a commit, so the
    records dropped were never fetched again. agents.transport.rewind_consumer seeks those back."""
    from aiokafka import AIOKafkaConsumer
    from faust.types import TP

    from agents.transport import rewind_consumer

    with EmbeddedBroker() as broker:
        settings = make_settings(broker.bootstrap, partitions=2)

        async def go() -> tuple[list[int], int, dict[Any, int], dict[Any, int], list[int]]:
            from aiokafka import TopicPartition

            await write(settings, "t.dropped", 20)
            consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=settings.app_id,
                                        enable_auto_commit=False, auto_offset_reset="earliest")
            await consumer.start()
            try:
                tp = TopicPartition("t.dropped", 0)
                consumer.assign([tp])
                fetched = [m.offset for m in (await consumer.getmany(tp, timeout_ms=5000)).get(tp, [])]
                await consumer.seek_to_committed()  # Faust's seek back: nothing committed, nothing moves
                after_seek = await consumer.position(tp)
                forward = rewind_consumer(consumer, {TP("t.dropped", 0): 25})  # never forward
                sought = rewind_consumer(consumer, {TP("t.dropped", 0): fetched[0]})
                again = [m.offset for m in (await consumer.getmany(tp, timeout_ms=5000)).get(tp, [])]
                return fetched, after_seek, forward, sought, again
            finally:
                await consumer.stop()

        fetched, after_seek, forward, sought, again = asyncio.run(go())
    assert fetched == list(range(20)), fetched
    assert after_seek == 20  # the dropped records are behind the consumer for good
    assert forward == {}
    assert sought == {TP("t.dropped", 0): 0}
    assert again == fetched


def test_a_restored_partition_behind_a_recreated_and_refilled_topic_reads_it_from_offset_0() -> None:
    """The facts a restored partition gathers on a real broker when Faust hands it an offset beyond its
    snapshot's next (a catch-up): on the topic it was snapshotted from, offsets S+1..F-1 are read state
    only; on the topic recreated (the broker restarted on the same port, memory storage gone) and refilled
    past S, the record at S is another one and the partition is read from offset 0. As in the fault
    test's failure: S=49, F=66, nothing committed, the end at 90."""
    topic, snap, first = "t.recreated", 49, 66
    old = EmbeddedBroker()
    old.start()
    try:
        settings = make_settings(old.bootstrap)

        async def facts_on(bootstrap: str, snap_ts: float | None) -> tuple[float | None, Any]:
            offsets = Offsets(None, settings, bootstrap, WorkerMetrics())
            try:
                at_snap = await offsets.record_time(topic, 0, snap)
                first_ts = await offsets.record_time(topic, 0, first)
                facts = await offsets.facts(topic, 0, snap, at_snap if snap_ts is None else snap_ts, first, first_ts,
                                            with_end=True)
            finally:
                await offsets.ranges.close()
            return at_snap, facts

        asyncio.run(write(settings, topic, 90))
        snap_ts, same = asyncio.run(facts_on(old.bootstrap, None))
        old.kill()  # no goodbye: the topics are gone with the broker's memory
        new = EmbeddedBroker(port=old.port)
        new.start()
        try:
            asyncio.run(write(settings, topic, 90))  # recreated and refilled past the snapshot's offset
            _, rebuilt = asyncio.run(facts_on(new.bootstrap, snap_ts))
        finally:
            new.stop()
    finally:
        old.stop()
    assert (same.end, same.committed, same.broker_ts_at_snapshot) == (90, None, snap_ts), same
    r = decide(same)
    assert (r.action, r.start, r.stop) == (Action.CATCH_UP, snap + 1, first), r
    assert rebuilt.end == 90 and rebuilt.broker_ts_at_snapshot not in (None, snap_ts), rebuilt
    r = decide(rebuilt)
    assert (r.action, r.start, r.stop) == (Action.REBUILT_REFILLED, 0, first), (r, rebuilt)
    assert "recreated or truncated" in r.why
