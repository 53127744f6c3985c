"""The load generator's input that pauses and resumes (``produce(hold=...)``, used by benchmarks.chaos),
on the real broker: nothing is sent while held, and the scrapes then resume where they stopped."""

from __future__ import annotations

import asyncio

import pytest

from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadSpec, produce
from lockstep.replay import read_topic
from models.settings import LockstepSettings

pytestmark = [pytest.mark.broker]


def test_a_held_producer_sends_nothing_until_released_then_every_scrape_in_order(
        broker: EmbeddedBroker, settings: LockstepSettings) -> None:
    spec = LoadSpec(gpus=16)
    cat = TopicCatalogue(settings)

    async def go() -> tuple[list[int], int, list[int], dict[str, int], int]:
        await create_topics(settings, broker.bootstrap)
        hold = asyncio.Event()
        hold.set()
        acked: list[int] = []
        task = asyncio.create_task(produce(settings, broker.bootstrap, spec, rate=50_000.0, scrapes=3, hold=hold,
                                           on_scrape=lambda k, ts, wall: acked.append(k)))
        # the inventory goes first, then the producer waits at the hold
        for _ in range(200):
            if await read_topic(settings, broker.bootstrap, cat.inventory, timeout_s=2.0):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a producer that ignored the hold sends its three scrapes within this
        while_held = list(acked)
        gpu_held = len(await read_topic(settings, broker.bootstrap, cat.telemetry("gpu"), timeout_s=2.0))
        hold.clear()
        out = await task
        gpu = len(await read_topic(settings, broker.bootstrap, cat.telemetry("gpu"), timeout_s=5.0))
        return while_held, gpu_held, acked, out, gpu

    while_held, gpu_held, acked, out, gpu = asyncio.run(go())
    assert while_held == [] and gpu_held == 0, (while_held, gpu_held)
    assert acked == [0, 1, 2]
    assert out["scrapes"] == 3 and out["samples"] > 0
    assert gpu == 3 * 2  # two GPU nodes, one message each a scrape
