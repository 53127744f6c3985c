"""When the ingest agent publishes a partition's fabric summaries (agents.ingest.FabricSummaries): when
they are due by event time, at the end of the input, and once the partition has been idle."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from agents.ingest import FabricSummaries
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

T0 = 1_764_500_000.0


def runtime(**extra: Any) -> tuple[Any, list[tuple[str, bytes | None, bytes]]]:
    settings = LockstepSettings(_env_file=None, **extra)  # type: ignore[call-arg]
    sent: list[tuple[str, bytes | None, bytes]] = []
    cat = TopicCatalogue(settings)

    async def send(topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        sent.append((topic.name, key, value))

    app = SimpleNamespace(topic=lambda name, **kw: SimpleNamespace(name=name))
    state = SimpleNamespace(pipelines={}, last_message={})
    return SimpleNamespace(settings=settings, catalogue=cat, app=app, send=send, state=state), sent


def switch_pipe(summaries: FabricSummaries, seconds: range) -> PartitionPipeline:
    pipe = PartitionPipeline("lockstep.telemetry.switch:0", DetectorConfig(), InventoryIndex(),
                             fabric=summaries.config, fabric_interval_s=5.0)
    for i in seconds:
        sample = {"ts": T0 + i, "layer": "switch", "source": "leaf01", "metric": "PortXmitWait", "value": 10.0 * i,
                  "labels": {"port": "1"}, "kind": "counter"}
        pipe.process_many([(orjson.dumps([sample]), Origin("lockstep.telemetry.switch", 0, i, T0 + i))])
    return pipe


def test_summaries_go_out_when_due_at_the_end_and_when_idle() -> None:
    rt, sent = runtime()
    summaries = FabricSummaries(rt)
    pipe = switch_pipe(summaries, range(3))
    asyncio.run(summaries.publish([(pipe, False)]))
    assert [(t, k) for t, k, _ in sent] == [(rt.catalogue.fabric_rollup, b"lockstep.telemetry.switch:0")]
    pipe = switch_pipe(summaries, range(3, 5))  # a new partition state: its first summary is due at once
    asyncio.run(summaries.publish([(pipe, False)]))
    assert len(sent) == 2
    for i in range(5, 7):  # less than 5 s of event time on: not due
        sample = {"ts": T0 + i, "layer": "switch", "source": "leaf01", "metric": "PortXmitWait", "value": 10.0 * i,
                  "labels": {"port": "1"}, "kind": "counter"}
        pipe.process_many([(orjson.dumps([sample]), Origin("lockstep.telemetry.switch", 0, i, T0 + i))])
    asyncio.run(summaries.publish([(pipe, False)]))
    assert len(sent) == 2
    rt.state.pipelines = {pipe.origin: pipe}
    rt.state.last_message = {pipe.origin: 100.0}
    asyncio.run(summaries.publish_idle(100.0 + rt.settings.watermark_idle_s / 2))  # not idle yet
    assert len(sent) == 2
    asyncio.run(summaries.publish_idle(100.0 + rt.settings.watermark_idle_s + 1))
    assert len(sent) == 3
    (port,) = orjson.loads(sent[-1][2])["ports"]
    assert (port["first"], port["last"], port["inc"]) == (T0 + 5, T0 + 6, {"c:xmit_wait": 20.0})
    asyncio.run(summaries.publish([(pipe, True)]))  # nothing left: the end of the input sends nothing more
    assert len(sent) == 3


def test_without_the_fabric_report_nothing_is_folded_or_sent() -> None:
    rt, sent = runtime(fabric_report=False)
    summaries = FabricSummaries(rt)
    pipe = switch_pipe(summaries, range(10))
    asyncio.run(summaries.publish([(pipe, True)]))
    assert pipe.fabric is None and sent == []
