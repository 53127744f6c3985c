"""The bench's progress in samples against the real broker: a group's committed offsets count the samples of
the messages below them (benchmarks.lockbench.Bench.committed_samples), not the backlog's mean samples a
message times the messages. The backlog's messages hold 1 to 96 samples, so the two differ by the mix."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from benchmarks.lockbench import Bench, TopicNames
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadSpec

pytestmark = [pytest.mark.broker]


def test_committed_offsets_count_the_samples_of_the_messages_below_them(broker: EmbeddedBroker) -> None:
    bench = Bench(broker.bootstrap, partitions=2)
    settings = bench.with_prefix(f"progress{uuid.uuid4().hex[:4]}")
    topics = TopicNames(settings).telemetry
    group = f"progress-{uuid.uuid4().hex[:6]}"

    async def go() -> tuple[dict[str, int], int, int, int, int]:
        loaded = await bench.preload(settings, LoadSpec(gpus=16), 3)
        # Read every message back, count its samples, and commit half of each partition (rounded down).
        reader = AIOKafkaConsumer(*topics, bootstrap_servers=broker.bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False)
        await reader.start()
        counts: dict[TopicPartition, list[int]] = {}
        try:
            seen = 0
            for _ in range(200):
                for tp, records in (await reader.getmany(timeout_ms=300)).items():
                    for r in records:
                        assert r.offset == len(counts.setdefault(tp, []))
                        counts[tp].append(len(orjson.loads(r.value)))
                        seen += 1
                if seen >= loaded["messages"]:
                    break
            half = {tp: len(n) // 2 for tp, n in counts.items()}
            await reader.commit({tp: OffsetAndMetadata(o, "") for tp, o in half.items()})
        finally:
            await reader.stop()
        expected = sum(sum(n[:half[tp]]) for tp, n in counts.items())
        done = await bench.committed_samples(group, topics)
        messages = await bench.committed(group, topics)
        lag = await bench.lag(group, topics)
        await bench.close_readers()
        return loaded, expected, done, messages, lag

    loaded, expected, done, messages, lag = asyncio.run(go())
    assert 0 < expected < loaded["samples"]
    assert done == expected
    assert lag == loaded["messages"] - messages  # what the group has not committed, in messages
    # the mean-samples-a-message estimate the bench used before is off for this mix
    assert round(messages * loaded["samples"] / loaded["messages"]) != expected
