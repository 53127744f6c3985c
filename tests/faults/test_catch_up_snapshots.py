"""A worker catching up a backlog snapshots its partitions by the wall floor, not every interval of
event time, and a worker killed after the catch-up resumes from those snapshots without loss.

A real worker process on the real broker. 240 scrapes (240 s of event time) of a small generated
cluster are on the topics before the worker starts; it reads them in a few seconds of wall time.
Read in small batches (as a big cluster's backlog is), with snapshots every ``snapshot_interval_s``
(10 s) of event time alone every input partition with data was snapshotted about 24 times (274 for
11 partitions in 8.7 s: the old rule, which cost a catch-up a fifth of the worker's CPU); with the
wall floor (10 s) each is snapshotted once at its first batch and then at most once per 10 s of wall
time (11).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import urllib.request

import pytest

from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec

from .kit import WorkerProcess, committed, end_offsets, make_settings, send_inventory, send_scrapes, wait_until
from .test_lull import web_url

pytestmark = [pytest.mark.broker]

SPEC = LoadSpec(gpus=32, nodes_per_job=4, seed=5)
SCRAPES = 240
FLOOR_S = 10.0


def snapshots_written(url: str) -> float:
    """``lockstep_state_snapshots_total`` of the detector state table the worker exports."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = re.findall(r'^lockstep_state_snapshots_total\{table="detector_state"\} (\S+)$', text, re.M)
    return float(found[0]) if found else 0.0


def test_a_catch_up_snapshots_by_the_wall_floor_and_a_restart_after_it_loses_nothing(
        broker: EmbeddedBroker, workers: list[WorkerProcess], floor: float = FLOOR_S) -> None:
    settings = make_settings(broker.bootstrap, partitions=2, snapshot_interval_s=10.0)
    cat = TopicCatalogue(settings)
    topics = list(cat.telemetry_topics)

    async def scenario() -> None:
        await create_topics(settings, broker.bootstrap)
        gen = LoadGenerator(SPEC)
        await send_inventory(settings, gen)
        await send_scrapes(settings, gen, range(SCRAPES))
        ends = await end_offsets(settings, topics)
        with_data = sum(1 for v in ends.values() if v > 0)
        assert with_data >= 6, ends

        async def drained() -> bool:
            done = await committed(settings, topics)
            return all(done[tp] >= end for tp, end in ends.items())

        # small batches, as a big cluster's backlog gives: each partition's backlog in many batches
        env = {"LOCKSTEP_INGEST_BATCH_MESSAGES": "20", "LOCKSTEP_SNAPSHOT_WALL_FLOOR_S": str(floor)}
        worker = WorkerProcess(settings, "w1", extra_env=env)
        workers.append(worker)
        started = time.monotonic()
        assert await wait_until(drained, 120.0), worker.log()[-3000:]
        wall = time.monotonic() - started
        url = web_url(worker)
        assert url is not None, worker.log()[-2000:]
        n = await asyncio.to_thread(snapshots_written, url)
        # the event-time rule alone: about SCRAPES / interval per partition with data
        event_time_only = with_data * SCRAPES * SPEC.interval_s / settings.snapshot_interval_s
        allowed = with_data * (math.ceil(wall / FLOOR_S) + 1)
        print(f"{n:.0f} snapshots of {with_data} partitions in {wall:.1f} s (event-time rule alone: "
              f"{event_time_only:.0f}; allowed {allowed})")
        assert with_data <= n <= allowed, (n, allowed, wall, event_time_only)
        assert n < event_time_only / 3, (n, event_time_only)

        # Killed after the catch-up: the next worker restores the (fewer) snapshots, reads what they do
        # not hold for state only, and goes on with the next scrapes without losing or repeating any.
        worker.kill()
        await send_scrapes(settings, gen, range(SCRAPES, SCRAPES + 20))
        ends2 = await end_offsets(settings, topics)
        worker2 = WorkerProcess(settings, "w2", extra_env=env)
        workers.append(worker2)

        async def drained2() -> bool:
            done = await committed(settings, topics)
            return all(done[tp] >= end for tp, end in ends2.items())

        assert await wait_until(drained2, 120.0), worker2.log()[-3000:]
        log = worker2.log()
        assert "Traceback" not in log, log[-3000:]
        # the snapshots were older than the commit: the restored states were caught up, whole
        assert re.search(r"restored state caught up over offsets \d+\.\.\d+", log), log[-3000:]
        assert "incomplete" not in log.lower(), log[-3000:]

    asyncio.run(scenario())
