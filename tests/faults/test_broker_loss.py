"""The broker goes away under a live worker and comes back (with its data): said once, not ready
meanwhile, and consumption resumes without a restart.

The broker sits behind a proxy that the test cuts (every connection dropped, new ones refused, as from
a broker that died) and restores (the broker answers again with everything it had, as a Kafka broker
with disks after a restart or a network partition).

    traffic  0 ..... 20 | cut (OUTAGE_S) ................ | restore | 20 ....... 60
    checks              one "unreachable" line, 503       one "reachable again" line; new samples processed; 200
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agents.topics import create_topics
from lockstep.broker import EmbeddedBroker, free_port
from lockstep.loadgen import LoadGenerator, LoadSpec

from .kit import WorkerProcess, make_settings, send_inventory, send_scrapes, wait_until, web_url
from .proxy import CuttableProxy

pytestmark = [pytest.mark.broker]

SPEC = LoadSpec(gpus=32, nodes_per_job=4, seed=9)
OUTAGE_S = 30.0


@pytest.fixture
def proxied() -> Iterator[tuple[EmbeddedBroker, CuttableProxy]]:
    port = free_port()
    broker = EmbeddedBroker(advertised_port=port)
    proxy = CuttableProxy(port, broker.port)
    proxy.restore()
    broker.start()
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def samples_in(url: str) -> float:
    _, text = get(f"{url}/metrics")
    assert isinstance(text, str)
    return sum(float(v) for v in re.findall(r"^lockstep_samples_in_total\{[^}]*\} (\S+)$", text, re.M))


def test_the_broker_going_away_is_said_once_and_survived(proxied: tuple[EmbeddedBroker, CuttableProxy],
                                                         workers: list[WorkerProcess]) -> None:
    broker, proxy = proxied
    settings = make_settings(broker.bootstrap)
    gen = LoadGenerator(SPEC)
    per_scrape = sum(1 for _ in gen.messages(0))

    async def scenario() -> dict[str, float]:
        await create_topics(settings, broker.bootstrap)
        await send_inventory(settings, gen)
        worker = WorkerProcess(settings, "broker-loss", extra_env={"LOCKSTEP_BROKER_PROBE_INTERVAL_S": "1"})
        workers.append(worker)
        assert await wait_until(lambda: _url_logged(worker), 90), worker.log()[-3000:]
        url = web_url(worker)
        assert url is not None
        await send_scrapes(settings, gen, range(0, 20), pace_s=0.02)

        async def processed_before() -> bool:
            return await asyncio.to_thread(samples_in, url) > 0

        assert await wait_until(processed_before, 90), worker.log()[-3000:]
        await asyncio.sleep(1.0)  # let the first scrapes settle
        before = await asyncio.to_thread(samples_in, url)

        proxy.cut()
        cut_at = time.monotonic()
        assert await wait_until(lambda: _logged(worker, "broker unreachable"), 30), worker.log()[-3000:]
        status, body = await asyncio.to_thread(get, f"{url}/readyz")
        assert status == 503 and isinstance(body, dict) and not body["checks"]["broker"], body
        assert "broker unreachable" in body["reasons"]["broker"]
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - cut_at)))
        lines_during_outage = len(worker.log().splitlines())

        proxy.restore()
        back_at = time.monotonic()
        assert await wait_until(lambda: _logged(worker, "broker reachable again"), 60), worker.log()[-3000:]
        sent = await send_scrapes(settings, gen, range(20, 60), pace_s=0.02)
        assert sent == 40 * per_scrape

        async def resumed() -> bool:
            return await asyncio.to_thread(samples_in, url) > before

        assert await wait_until(resumed, 120), worker.log()[-4000:]
        resume_s = time.monotonic() - back_at
        status, body = await asyncio.to_thread(get, f"{url}/readyz")
        log = worker.log()
        assert log.count("broker unreachable:") == 1 and log.count("broker reachable again") == 1, log[-4000:]
        assert worker.alive
        return {"resume_s": resume_s, "log_lines": lines_during_outage, "ready": float(status == 200)}

    figures = asyncio.run(scenario())
    print("broker loss figures:", figures)
    assert figures["resume_s"] < 90


async def _url_logged(worker: WorkerProcess) -> bool:
    return web_url(worker) is not None


async def _logged(worker: WorkerProcess, text: str) -> bool:
    return text in worker.log()
