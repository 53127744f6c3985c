"""The ingest agent's batches (agents.batching.take_batches) on a real Faust stream and broker.

Faust's ``take_events`` waits ``within`` after every batch; ``take_batches`` keeps ``within`` as a
cadence: a batch that took longer is followed at once by what queued up meanwhile, a worker keeping up
still gets about one batch per ``within``, no batch exceeds ``max_``, every event is handed over once in
offset order, and acknowledged (the group's commit reaches the end).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

import pytest

from agents import transport
from agents.batching import take_batches
from lockstep.broker import EmbeddedBroker
from tests.broker_timing import HEARTBEAT_INTERVAL_S, REBALANCE_TIMEOUT_S, SESSION_TIMEOUT_S

pytestmark = pytest.mark.broker

WITHIN = 2.0
MAX = 50


async def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return sum([int(await consumer.committed(TopicPartition(topic, p)) or 0) for p in range(partitions)])
    finally:
        await consumer.stop()


async def _until(check: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return bool(check())


def test_take_batches_cadence_bound_and_acks(broker: EmbeddedBroker) -> None:
    asyncio.run(_cadence_bound_and_acks(broker))


async def _cadence_bound_and_acks(broker: EmbeddedBroker) -> None:
    import faust
    from aiokafka import AIOKafkaProducer

    run = uuid.uuid4().hex[:8]
    topic_name, group = f"batching-{run}", f"batching-test-{run}"
    await _create_topic(broker.bootstrap, topic_name, 2)
    transport.register()
    app = faust.App(group, broker=f"lockstep://{broker.bootstrap}", store="memory://", web_enabled=False,
                    datadir=f"/tmp/lockstep-test-{group}", topic_allow_declare=False, topic_disable_leader=True,
                    consumer_auto_offset_reset="earliest", broker_commit_interval=0.5,
                    broker_session_timeout=SESSION_TIMEOUT_S, broker_heartbeat_interval=HEARTBEAT_INTERVAL_S,
                    broker_rebalance_timeout=REBALANCE_TIMEOUT_S,
                    loop=asyncio.get_running_loop())
    app.lockstep_fetch_max_wait_ms = 50  # type: ignore[attr-defined]
    topic = app.topic(topic_name, key_serializer="raw", value_serializer="raw", partitions=2)
    batches: list[tuple[float, float, list[tuple[int, int]]]] = []  # (handed over, handled, [(partition, offset)])
    slow = asyncio.Event()  # set: the next batch takes longer than the cadence

    @app.agent(topic, name="batches")
    async def agent(stream: faust.StreamT[bytes]) -> None:
        async for events in take_batches(stream, MAX, WITHIN):
            handed = time.monotonic()
            if slow.is_set():
                slow.clear()
                await asyncio.sleep(WITHIN * 1.5)
            batches.append((handed, time.monotonic(), [(e.message.partition, e.message.offset) for e in events]))

    app.finalize()
    await app.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    await producer.start()
    try:
        async def send(n: int) -> None:
            for i in range(n):
                await producer.send(topic_name, b"x", key=str(i).encode(), partition=i % 2)
            await producer.flush()

        # 1. Keeping up: a trickle is handed over about once per cadence, not per message.
        for _ in range(12):
            await send(1)
            await asyncio.sleep(0.25)
        assert await _until(lambda: sum(len(b[2]) for b in batches) == 12, 30.0)
        trickle = list(batches)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(trickle)]
        assert len(trickle) < 12 and all(g >= WITHIN * 0.9 for g in gaps), gaps

        # 2. Behind: a batch that takes longer than the cadence is followed at once by what queued up
        # meanwhile (fewer than MAX: Faust's take_events would wait a whole cadence for more).
        slow.set()
        await send(1)
        assert await _until(lambda: not slow.is_set(), 30.0)  # the slow batch is being handled
        await send(MAX // 2)
        assert await _until(lambda: sum(len(b[2]) for b in batches) == 12 + 1 + MAX // 2, 60.0)
        after = batches[len(trickle):]
        slow_batch, following = after[0], after[1]
        assert following[0] - slow_batch[1] < WITHIN / 2, (slow_batch, following[0])

        # 3. A burst: no batch holds more than MAX events.
        await send(3 * MAX + 7)
        assert await _until(lambda: sum(len(b[2]) for b in batches) == 12 + 1 + MAX // 2 + 3 * MAX + 7, 60.0)
        assert all(len(b[2]) <= MAX for b in batches)
        assert max(len(b[2]) for b in batches) == MAX

        # Every event once, in offset order per partition; and acknowledged: the commit reaches the end.
        seen = [po for b in batches for po in b[2]]
        assert len(seen) == len(set(seen))
        for p in (0, 1):
            offsets = [o for q, o in seen if q == p]
            assert offsets == list(range(len(offsets)))
        total = len(seen)
        deadline = time.monotonic() + 30.0
        while await _committed(broker.bootstrap, group, topic_name, 2) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert await _committed(broker.bootstrap, group, topic_name, 2) == total
    finally:
        await producer.stop()
        await app.stop()
