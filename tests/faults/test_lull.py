"""Input that pauses and resumes, live, with a restart in between: correlation never freezes.

A real worker process on the real broker. The traffic (a small generated cluster) stops for several
times the idle rule's wall time, so every input partition is reported idle and then orphaned; then it
resumes and carries an incident (a leaf port errs, AllReduce slows, GPU utilisation falls, step time
doubles). Then the worker is stopped and started again, the input pauses once more, and resumes.

    traffic   0 ........ 30 | pause | 30 ....... 90 (incident at 45) | restart, pause | 90 .. 120
    checks                    wm finite, held     one firing, after its grace; timelines on      wm moves on

Before the fix the watermark ran to ``+inf`` at the first pause (and the snapshot carried it into the
restart): timelines and stats stopped, the symptom fired without its grace.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec
from lockstep.replay import read_topic
from models.timeutil import parse_ts

from .kit import WorkerProcess, make_settings, send_inventory, send_scrapes, wait_until, web_url

pytestmark = [pytest.mark.broker]

SPEC = LoadSpec(gpus=32, nodes_per_job=4, incidents=((0, 45),), incident_s=20.0, seed=3)
IDLE_S = 2.0
PAUSE_S = 4 * IDLE_S  # every input reported idle for twice the idle rule, then resumed
LATENESS_S = 5.0
GRACE_S = 5.0


def watermarks(url: str) -> list[float]:
    """Every correlation partition's ``lockstep_watermark_seconds`` the worker exports."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    return [float(v) for v in re.findall(r'^lockstep_watermark_seconds\{partition="\d+"\} (\S+)$', text, re.M)]


async def wait_watermark(worker: WorkerProcess, at_least: float, timeout_s: float = 90.0) -> list[float]:
    seen: list[float] = []

    async def reached() -> bool:
        nonlocal seen
        url = web_url(worker)
        if url is None:
            return False
        try:
            seen = await asyncio.to_thread(watermarks, url)
        except OSError:
            return False
        return bool(seen) and max(seen) >= at_least

    assert await wait_until(reached, timeout_s), (seen, worker.log()[-3000:])
    return seen


def test_a_lull_and_a_restart_never_freeze_correlation(broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    settings = make_settings(broker.bootstrap, watermark_idle_s=IDLE_S, allowed_lateness_s=LATENESS_S,
                             grace_s=GRACE_S, snapshot_interval_s=5.0)
    env = {"LOCKSTEP_WATERMARK_IDLE_S": str(IDLE_S), "LOCKSTEP_WATERMARK_ORPHAN_HOLD_S": str(IDLE_S),
           "LOCKSTEP_ALLOWED_LATENESS_S": str(LATENESS_S), "LOCKSTEP_GRACE_S": str(GRACE_S)}
    cat = TopicCatalogue(settings)
    gen = LoadGenerator(SPEC)
    t0 = SPEC.start_ts

    async def scenario() -> None:
        await create_topics(settings, broker.bootstrap)
        await send_inventory(settings, gen)
        worker = WorkerProcess(settings, "lull-1", extra_env=env)
        workers.append(worker)
        await send_scrapes(settings, gen, range(0, 30), pace_s=0.02)
        await wait_watermark(worker, t0 + 29 - LATENESS_S)

        # The lull: nothing arrives; every input goes idle, then unmentioned. The watermark stays finite,
        # at the data's progress, and no later than it.
        await asyncio.sleep(PAUSE_S)
        held = await wait_watermark(worker, t0 + 29 - LATENESS_S)
        assert max(held) <= t0 + 29, held

        # Input resumes with an incident: the watermark follows the data and the verdict keeps its grace.
        await send_scrapes(settings, gen, range(30, 90), pace_s=0.02)
        await wait_watermark(worker, t0 + 89 - LATENESS_S)
        alerts = await read_topic(settings, broker.bootstrap, cat.alerts)
        firing = [a for a in alerts if a["status"] == "firing" and a["type"] == "job_slowdown"]
        assert firing, (alerts, worker.log()[-3000:])
        for a in alerts:
            if a["status"] == "firing":  # never judged before its onset plus the grace (no early verdict)
                assert parse_ts(a["detected_at"]) >= parse_ts(a["started_at"]) + GRACE_S - 1e-6, a
        timelines = await read_topic(settings, broker.bootstrap, cat.timelines)
        assert max(r["ts"] for r in timelines) >= t0 + 80, "timelines stopped at the lull"

        # A restart, and a second lull after it: the restored watermark is finite and moves on.
        worker.stop()
        again = WorkerProcess(settings, "lull-2", extra_env=env)
        workers.append(again)
        assert await wait_until(lambda: _consuming(again), 90), again.log()[-3000:]
        await asyncio.sleep(PAUSE_S)
        await send_scrapes(settings, gen, range(90, 120), pace_s=0.02)
        moved = await wait_watermark(again, t0 + 119 - LATENESS_S)
        assert max(moved) <= t0 + 119, moved
        assert "unusable" not in again.log() and "restored correlation partition" in again.log(), again.log()[-3000:]
        timelines = await read_topic(settings, broker.bootstrap, cat.timelines)
        assert max(r["ts"] for r in timelines) >= t0 + 110, "timelines stopped after the restart"

    asyncio.run(scenario())


async def _consuming(worker: WorkerProcess) -> bool:
    return "consuming from" in worker.log()
