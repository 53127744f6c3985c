"""A flood of new series against a real worker on the real broker: the state stays at its cap.

Before: 510k distinct label values were all accepted; RSS went from 247 to 1,365 MB (about 2.2 KB a
series), with no cap, no metric and no eviction.

Now: an input partition holds at most ``max_series_per_partition`` series. Here 200,000 new series
arrive in 200 messages of 1,000 (each message also carries the 200 series the partition already
holds): the partition holds exactly its cap of 1,000, every sample of a known series is processed,
each message with refused samples gives one ``SeriesLimitExceeded`` dead letter with their count,
and ``lockstep_series_refused_samples_total`` counts them. Once the flood's series have been idle
for ``series_idle_s`` of event time they are evicted (``lockstep_series_evicted_total``) and a new
wave takes their ids: the id space does not grow. The process's resident memory is measured around
the flood and must stay far below what the flood's series would cost (about 500 MB).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import time
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker

from .kit import make_settings

pytestmark = pytest.mark.broker

T0 = 1764502800.0
CAP = 1000
KNOWN = 200
FLOOD_MESSAGES = 200
FLOOD_PER_MESSAGE = 1000
IDLE_S = 60.0


def known(ts: float) -> list[dict[str, Any]]:
    return [{"ts": ts, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 90.0,
             "labels": {"gpu": str(g)}} for g in range(KNOWN)]


def flood(ts: float, wave: str, m: int) -> list[dict[str, Any]]:
    """``FLOOD_PER_MESSAGE`` series never seen before (a label per pod, spread over 50 sources)."""
    return [{"ts": ts, "layer": "gpu", "source": f"flood{j % 50}", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 1.0,
             "labels": {"pod": f"{wave}-{m}-{j}"}} for j in range(FLOOD_PER_MESSAGE)]


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def total(worker: Worker, name: str, **labels: str) -> float:
    return sum(s.value for m in worker.metrics.registry.collect() for s in m.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_a_flood_of_new_series_is_held_at_the_cap_refused_per_message_and_evicted_when_idle(broker: Any) -> None:
    settings = make_settings(broker.bootstrap, partitions=1, max_series_per_partition=CAP, series_idle_s=IDLE_S)

    async def go() -> dict[str, Any]:
        bootstrap = settings.kafka_bootstrap_servers or ""
        await create_topics(settings, bootstrap)
        cat = TopicCatalogue(settings)
        topic = cat.telemetry("gpu")
        origin = f"{topic}:0"
        worker = Worker(settings, bootstrap)
        await worker.start()
        producer = await start_producer(settings, bootstrap)

        async def produce(messages: list[bytes]) -> None:
            for raw in messages:
                await producer.send(topic, raw, key=b"gpu001")
            await producer.flush()

        async def until(predicate: Any, timeout_s: float = 90.0) -> None:
            deadline = time.monotonic() + timeout_s
            while not predicate():
                assert time.monotonic() < deadline, "the worker did not get there in time"
                await asyncio.sleep(0.2)

        def processed() -> float:
            return total(worker, "lockstep_samples_in_total")

        def refusals() -> float:
            return total(worker, "lockstep_dead_letters_total", error="SeriesLimitExceeded")

        try:
            # The partition's own series, then the flood: 1,000 new series a message, with the known ones.
            await produce([orjson.dumps(known(T0 + k)) for k in range(5)])
            await until(lambda: processed() >= 5 * KNOWN)
            gc.collect()
            rss_before = rss_mb()
            started = time.monotonic()
            messages = [orjson.dumps(known(T0 + 10 + 0.1 * m) + flood(T0 + 10 + 0.1 * m, "a", m))
                        for m in range(FLOOD_MESSAGES)]
            await produce(messages)
            admitted = CAP - KNOWN
            await until(lambda: processed() >= 5 * KNOWN + FLOOD_MESSAGES * KNOWN + admitted
                        and refusals() >= FLOOD_MESSAGES)
            flood_s = time.monotonic() - started
            del messages
            gc.collect()
            rss_after = rss_mb()
            pipe = worker.state.pipelines[origin]
            held = {"series": total(worker, "lockstep_series", origin=origin), "len": len(pipe.registry),
                    "size": pipe.registry.size, "processed": processed(),
                    "refused": total(worker, "lockstep_series_refused_samples_total", origin=origin,
                                     reason="partition")}
            # The known series go on past the idle span: the flood's series are evicted, a new wave
            # takes their ids.
            await produce([orjson.dumps(known(T0 + 100 + k)) for k in range(10)])
            await until(lambda: total(worker, "lockstep_series_evicted_total", origin=origin) >= admitted)
            after_idle = {"series": total(worker, "lockstep_series", origin=origin), "len": len(pipe.registry),
                          "evicted": total(worker, "lockstep_series_evicted_total", origin=origin)}
            await produce([orjson.dumps(known(T0 + 120 + k) + flood(T0 + 120 + k, "b", k)) for k in range(3)])
            await until(lambda: refusals() >= FLOOD_MESSAGES + 3)
            pipe = worker.state.pipelines[origin]
            wave_b = {"series": total(worker, "lockstep_series", origin=origin), "len": len(pipe.registry),
                      "size": pipe.registry.size}
            dlq = await read_topic(settings, bootstrap, cat.dlq)
            return {"rss": (rss_before, rss_after), "flood_s": flood_s, "held": held, "after_idle": after_idle,
                    "wave_b": wave_b, "dlq": dlq, "sent": [orjson.dumps(known(T0 + 10 + 0.1 * m)
                                                                        + flood(T0 + 10 + 0.1 * m, "a", m))
                                                           for m in (0, FLOOD_MESSAGES - 1)]}
        finally:
            await producer.stop()
            await worker.stop()

    r = asyncio.run(go())
    held, after_idle, wave_b = r["held"], r["after_idle"], r["wave_b"]
    # Held at the cap; every known sample processed; the rest refused and counted.
    assert held["series"] == held["len"] == CAP and held["size"] == CAP
    assert held["processed"] == 5 * KNOWN + FLOOD_MESSAGES * KNOWN + (CAP - KNOWN)
    refused = FLOOD_MESSAGES * FLOOD_PER_MESSAGE - (CAP - KNOWN)
    assert held["refused"] == refused
    # One dead letter per message, not per sample, each with its message's bytes and count.
    dls = [d for d in r["dlq"] if d["error"] == "SeriesLimitExceeded"]
    assert len(dls) == FLOOD_MESSAGES + 3 and len(r["dlq"]) == len(dls)
    wave_a = sorted(dls, key=lambda d: d["offset"])[:FLOOD_MESSAGES]
    assert [d["offset"] for d in wave_a] == list(range(5, 5 + FLOOD_MESSAGES))
    assert sum(int(d["reason"].split()[2]) for d in wave_a) == refused
    assert all(d["stage"] == "validate" and "max_series_per_partition" in d["reason"] for d in dls)
    assert base64.b64decode(wave_a[0]["original"]) == r["sent"][0]
    assert base64.b64decode(wave_a[-1]["original"]) == r["sent"][1]
    # Idle flood series evicted; the next wave reuses their ids (the id space stays at the cap).
    assert after_idle["evicted"] == CAP - KNOWN and after_idle["series"] == after_idle["len"] == KNOWN
    assert wave_b["series"] == wave_b["len"] == CAP and wave_b["size"] == CAP
    # Memory: the same flood into a worker without a cap grew its RSS by 499-541 MB (200,200 series,
    # ~2.7 KB each); capped, the growth is the flood's own bytes passing through the producer and the
    # consumer's buffers (57-70 MB measured), not state.
    before, after = r["rss"]
    print(f"\nflood of {FLOOD_MESSAGES * FLOOD_PER_MESSAGE:,} new series in {r['flood_s']:.1f} s: "
          f"RSS {before:.0f} -> {after:.0f} MB ({after - before:+.0f} MB), {held['len']} series held")
    assert after - before < 150.0
