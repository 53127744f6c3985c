"""Read load during ingest, live: a worker subprocess on the real broker takes telemetry at a steady
rate while 50 clients in flight hammer its heaviest endpoints (six-hour timelines over an hour of
lanes, a job of 20,000 nodes, ``/metrics``, the list of 100 jobs, the diagnosis).

What must hold (issue 16, point 3): ingest keeps up (every sample produced is processed, exactly
once; no valid sample is dead-lettered as ``LateData``); ``/healthz`` answers within half the probes'
timeout at the 99th percentile throughout; heavy requests beyond ``LOCKSTEP_WEB_MAX_HEAVY_REQUESTS`` are answered
429 with ``Retry-After`` instead of queueing. The figures are printed (``-s``) for the notes.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec
from lockstep.replay import read_topic
from models.inventory import inventory_adapter, inventory_key

from .kit import WorkerProcess, make_settings, send_inventory, wait_until, web_url

#: The liveness and readiness probes' timeout in deploy/kubernetes/base/deployment-worker.yaml.
PROBE_TIMEOUT_S = 5.0

pytestmark = [pytest.mark.broker]

SPEC = LoadSpec(gpus=64, nodes_per_job=4, seed=13)
#: Samples per second produced in both phases (the generated cluster gives ~900 a scrape).
RATE = 1800.0
QUIET_S = 8.0
#: How long the clients hammer, how many are in flight at once, and the most requests they send.
LOAD_S = 12.0
IN_FLIGHT = 50
MAX_REQUESTS = 50_000
BIG_NODES = 20_000
HISTORY_S = 3600
HISTORY_JOBS = 100


def big_job_inventory(ts: float) -> list[dict[str, Any]]:
    """One job of :data:`BIG_NODES` nodes, each cabled to a leaf (its detail is megabytes unpaginated)."""
    nodes = [f"big{i:06d}" for i in range(BIG_NODES)]
    docs: list[dict[str, Any]] = [
        {"kind": "link", "ts": ts, "node": n, "device": "mlx5_0", "port": "1", "switch": f"bigleaf{i // 32:04d}",
         "switch_port": str(1 + i % 32), "fabric": "infiniband"} for i, n in enumerate(nodes)]
    docs.append({"kind": "job", "ts": ts, "job_id": "big", "state": "RUNNING", "nodes": ",".join(nodes),
                 "gpus_per_node": 8, "storage": []})
    return docs


async def send_docs(settings: Any, docs: list[dict[str, Any]]) -> None:
    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "", max_batch_size=1024 * 1024)
    try:
        cat = TopicCatalogue(settings)
        for doc in docs:
            event = inventory_adapter.validate_python(doc)
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def send_history(settings: Any, start_ts: float) -> None:
    """An hour of lanes for ``job00000`` and ten minutes for 100 more jobs on ``timelines`` (what a
    worker that ran that long would have written): the read model holds what a long-running one does,
    so a six-hour timeline and the job list cost what they cost in production."""
    from streams.lanes import LANE_ORDER

    lanes = {lane: {"n": 8, "p50": 1.0, "p99": 1.5, "min": 0.5, "max": 2.0} for lane in LANE_ORDER}
    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "", max_batch_size=1024 * 1024)
    try:
        topic = TopicCatalogue(settings).timelines
        for s in range(HISTORY_S):
            await producer.send(topic, orjson.dumps({"type": "timeline", "job_id": "job00000",
                                                     "ts": start_ts - HISTORY_S + s, "lanes": lanes}), key=b"job00000")
        for j in range(HISTORY_JOBS):
            job = f"hist{j:03d}"
            for s in range(0, 600, 2):
                await producer.send(topic, orjson.dumps({"type": "timeline", "job_id": job, "ts": start_ts - 600 + s,
                                                         "lanes": lanes}), key=job.encode())
        await producer.flush()
    finally:
        await producer.stop()


class Producing:
    """Telemetry at :data:`RATE` samples/s, scrape after scrape, counting what was acknowledged."""

    def __init__(self, settings: Any, gen: LoadGenerator) -> None:
        self.settings = settings
        self.gen = gen
        self.samples = 0
        self.k = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        cat = TopicCatalogue(self.settings)
        producer = await start_producer(self.settings, self.settings.kafka_bootstrap_servers or "")
        t0 = time.monotonic()
        try:
            while not self.stop.is_set():
                n = 0
                for layer, key, value in self.gen.messages(self.k):
                    await producer.send(cat.telemetry(layer), value, key=key)
                    n += len(orjson.loads(value))
                await producer.flush()
                self.samples += n
                self.k += 1
                delay = t0 + self.samples / RATE - time.monotonic()
                if delay > 0:
                    with_stop = asyncio.ensure_future(self.stop.wait())
                    await asyncio.wait([with_stop], timeout=delay)
                    with_stop.cancel()
        finally:
            await producer.stop()


async def processed(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "lockstep_samples_in":
            total += sum(s.value for s in family.samples if s.name == "lockstep_samples_in_total")
    return int(total)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def test_read_load_does_not_starve_ingest_and_health_answers_fast(
        broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    settings = make_settings(broker.bootstrap)

    async def go() -> dict[str, Any]:
        await create_topics(settings, broker.bootstrap)
        gen = LoadGenerator(SPEC)
        await send_inventory(settings, gen)
        await send_docs(settings, big_job_inventory(SPEC.start_ts - 60))
        await send_history(settings, SPEC.start_ts)
        worker = WorkerProcess(settings, "worker", {"LOCKSTEP_WEB_MAX_HEAVY_REQUESTS": "4"})
        workers.append(worker)

        async def listening() -> bool:
            return web_url(worker) is not None or not worker.alive

        assert await wait_until(listening, 60), worker.log()[-3000:]
        url = web_url(worker)
        assert url, worker.log()[-3000:]
        out: dict[str, Any] = {}
        connector = aiohttp.TCPConnector(limit=IN_FLIGHT + 8)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            producing = Producing(settings, gen)
            sending = asyncio.create_task(producing.run())
            # Quiet phase: the ingest rate without read load.
            await wait_until(lambda: _positive(session, url), 30, every_s=0.2)
            p0, t0, s0 = await processed(session, url), time.monotonic(), producing.samples
            await asyncio.sleep(QUIET_S)  # a measuring interval, not synchronisation
            p1, t1, s1 = await processed(session, url), time.monotonic(), producing.samples
            out["quiet_samples_per_s"] = (p1 - p0) / (t1 - t0)
            out["quiet_produced_per_s"] = (s1 - s0) / (t1 - t0)

            # Loaded phase: 50 clients in flight on the heavy endpoints, /healthz probed throughout.
            latest = SPEC.start_ts + producing.k
            heavy = [f"/jobs/job00000/timeline?from={latest - 6 * 3600 + 60:.0f}&to={latest + 60:.0f}",
                     "/metrics", "/jobs/big", "/jobs", "/jobs/job00000/diagnosis"]
            statuses: dict[int, int] = {}
            retry_after: set[str] = set()
            heavy_s: list[float] = []
            health_s: list[float] = []
            until = math.inf
            sent = 0

            async def client(i: int) -> None:
                # Clients that do not wait for Retry-After: the worst a dashboard wall can do.
                nonlocal sent
                while time.monotonic() < until and sent < MAX_REQUESTS:
                    path = heavy[(i + sent) % len(heavy)]
                    sent += 1
                    started = time.monotonic()
                    async with session.get(url + path, headers={"Accept": "application/json"}) as resp:
                        await resp.read()
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1
                        if resp.status == 429:
                            retry_after.add(resp.headers.get("Retry-After", ""))
                        elif resp.status == 200:
                            heavy_s.append(time.monotonic() - started)

            p2, t2, s2 = await processed(session, url), time.monotonic(), producing.samples
            until = t2 + LOAD_S
            loading = asyncio.gather(*(client(i) for i in range(IN_FLIGHT)))
            while not loading.done():
                started = time.monotonic()
                async with session.get(f"{url}/healthz") as resp:
                    await resp.read()
                    assert resp.status == 200
                health_s.append(time.monotonic() - started)
                await asyncio.wait([loading], timeout=0.05)  # the probe's period
            await loading
            p3, t3, s3 = await processed(session, url), time.monotonic(), producing.samples
            out["loaded_samples_per_s"] = (p3 - p2) / (t3 - t2)
            out["loaded_produced_per_s"] = (s3 - s2) / (t3 - t2)
            out["behind_after_load"] = s3 - p3
            out["load_s"] = t3 - t2
            producing.stop.set()
            await sending

            async def caught_up() -> bool:
                return await processed(session, url) >= producing.samples

            await wait_until(caught_up, 30, every_s=0.5)
            out["processed"] = await processed(session, url)
        out.update(produced=producing.samples, statuses=statuses, retry_after=retry_after,
                   healthz_p50=pct(health_s, 0.5), healthz_p99=pct(health_s, 0.99), healthz_max=max(health_s),
                   heavy_p50=pct(heavy_s, 0.5), heavy_p99=pct(heavy_s, 0.99), probes=len(health_s), requests=sent)
        dlq = await read_topic(settings, broker.bootstrap, TopicCatalogue(settings).dlq)
        out["late"] = sum(1 for d in dlq if d.get("error") == "LateData")
        out["log"] = worker.log()
        worker.stop()
        return out

    out = asyncio.run(go())
    log = out.pop("log")
    print("\nread load:", {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()})
    assert out["processed"] == out["produced"], (out, log[-3000:])  # none lost, none counted twice
    assert out["late"] == 0, out
    # Well inside the probes' 5 s timeout (deploy/kubernetes, docker-compose.yml): 15-16 s before issue 16.
    # Quiet it is ~0.1 s; 1.07 s was seen beside a full suite on two loaded cores, so the bound is half the probe.
    assert out["healthz_p99"] < PROBE_TIMEOUT_S / 2, out
    assert out["statuses"].get(429, 0) > 0 and out["retry_after"] and all(v.isdigit() for v in out["retry_after"])
    assert set(out["statuses"]) <= {200, 429}, out
    # Ingest keeps up under the load: when it ends, at most 4 s of production is still to be processed
    # (the counter is read from /metrics, itself up to 1 s old, and ingest works in batches).
    assert out["behind_after_load"] <= 4 * RATE, out


async def _positive(session: aiohttp.ClientSession, url: str) -> bool:
    return await processed(session, url) > 0
