"""The scale bench's settle check against the real broker: a group is settled only when DescribeGroups
says Stable with every member the bench started (benchmarks.lockbench.Bench.group_settled)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from benchmarks.lockbench import Bench
from lockstep.broker import EmbeddedBroker

pytestmark = [pytest.mark.broker]


def test_a_group_is_settled_only_when_stable_with_every_member(broker: EmbeddedBroker) -> None:
    group = f"settle-{uuid.uuid4().hex[:6]}"
    bench = Bench(broker.bootstrap, partitions=1)

    async def go() -> tuple[bool, bool, bool]:
        before = await bench.group_settled(group, 1)  # no such group yet
        consumer = AIOKafkaConsumer(f"{group}-t", bootstrap_servers=broker.bootstrap, group_id=group,
                                    session_timeout_ms=6000, heartbeat_interval_ms=1000)
        await consumer.start()
        try:
            for _ in range(60):  # joined once the first fetch round ran with an assignment
                await consumer.getmany(timeout_ms=500)
                if consumer.assignment() or await bench.group_settled(group, 1):
                    break
            one = await bench.group_settled(group, 1)
            two = await bench.group_settled(group, 2)  # waiting for a second member that never came
        finally:
            await consumer.stop()
        return before, one, two

    before, one, two = asyncio.run(go())
    assert (before, one, two) == (False, True, False)
