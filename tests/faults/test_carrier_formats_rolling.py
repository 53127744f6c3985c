"""A rolling change of ``LOCKSTEP_CARRIER_FORMATS`` on the real broker: nothing shipped is lost.

Two worker processes share one group, one reading no carrier (``none``) and one the ``prometheus``
carrier, as during a rollout that enables a format. Faust's assignor gives a topic's partitions only
to members subscribed to it, so the scrapes on the carrier are converted by the worker that reads it,
and the native telemetry is shared. Then the ``prometheus`` worker leaves: the scrapes shipped
meanwhile are not skipped by the other (it never commits a carrier offset) but wait, and its start-up
warning names the topic; a ``prometheus`` worker that joins again converts every one of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.replay import read_topic

from .kit import WorkerProcess, committed, end_offsets, make_settings, wait_until

pytestmark = [pytest.mark.broker]

T0 = 1764502800.0
SOURCES = [f"rolling-{i:02d}" for i in range(8)]


def scrape(k: int) -> bytes:
    """One node_exporter-like scrape at T0 + k (a gauge with its own timestamp)."""
    ms = int((T0 + k) * 1000)
    return f"# TYPE node_load1 gauge\nnode_load1 {k % 7}.5 {ms}\n".encode()


def native(k: int) -> bytes:
    return orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": f"gpu{k % 8:03d}", "metric": "DCGM_FI_DEV_GPU_UTIL",
                          "value": 90.0, "labels": {"gpu": "0"}}])


async def send(settings: Any, ks: range) -> None:
    cat = TopicCatalogue(settings)
    producer = await start_producer(settings, settings.kafka_bootstrap_servers)
    try:
        for k in ks:
            await producer.send(cat._n("telemetry.raw.prometheus"), scrape(k), key=SOURCES[k % len(SOURCES)].encode())
            await producer.send(cat.telemetry("gpu"), native(k), key=f"gpu{k % 8:03d}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def caught_up(settings: Any, topics: list[str]) -> bool:
    ends = await end_offsets(settings, topics)
    done = await committed(settings, topics)
    return all(done[tp] >= end for tp, end in ends.items())


async def converted(settings: Any) -> set[float]:
    """The record times of the scrapes' samples on the native host topic (what the convert agent produced)."""
    cat = TopicCatalogue(settings)
    out: set[float] = set()
    for rec in await read_topic(settings, settings.kafka_bootstrap_servers, cat.telemetry("host")):
        for sample in rec if isinstance(rec, list) else [rec]:
            if sample.get("metric") == "node_load1" and str(sample.get("source", "")).startswith("rolling-"):
                out.add(float(sample["ts"]))
    return out


def test_enabling_a_format_on_some_workers_loses_no_scrape(broker: EmbeddedBroker,
                                                           workers: list[WorkerProcess]) -> None:
    settings = make_settings(broker.bootstrap, partitions=4, carrier_formats="prometheus")
    cat = TopicCatalogue(settings)
    carrier = [cat._n("telemetry.raw.prometheus")]
    gpu = [cat.telemetry("gpu")]

    async def go() -> None:
        await create_topics(settings, broker.bootstrap)
        plain = WorkerProcess(settings, "plain", {"LOCKSTEP_CARRIER_FORMATS": "none"})
        scrapes = WorkerProcess(settings, "scrapes", {"LOCKSTEP_CARRIER_FORMATS": "prometheus"})
        workers.extend([plain, scrapes])
        await send(settings, range(0, 40))
        assert await wait_until(lambda: caught_up(settings, carrier + gpu), 120), "the mixed group did not drain"
        assert await converted(settings) == {T0 + k for k in range(40)}

        # the worker that reads the carrier leaves; what is shipped meanwhile waits
        scrapes.stop()
        await send(settings, range(40, 80))
        assert await wait_until(lambda: caught_up(settings, gpu), 120), "the plain worker did not take over"
        ends = await end_offsets(settings, carrier)
        done = await committed(settings, carrier)
        assert sum(ends.values()) - sum(done.values()) == 40, (ends, done)
        assert plain.alive and "does not read" in plain.log() and carrier[0] in plain.log()

        again = WorkerProcess(settings, "scrapes-again", {"LOCKSTEP_CARRIER_FORMATS": "prometheus"})
        workers.append(again)
        assert await wait_until(lambda: caught_up(settings, carrier), 120), \
            ("the scrapes were not converted", await end_offsets(settings, carrier), await committed(settings, carrier))

        async def all_converted() -> bool:
            return await converted(settings) == {T0 + k for k in range(80)}

        assert await wait_until(all_converted, 30), sorted({T0 + k for k in range(80)} - await converted(settings))

    asyncio.run(go())
