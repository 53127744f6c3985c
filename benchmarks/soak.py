"""Soak: one worker process under steady live load with incidents: memory flat, lag bounded, every
incident alerted once and resolved, for as long as the run lasts.

    python -m benchmarks.soak [--minutes 30] [--rate SAMPLES_PER_S] [--gpus 1024] [--incident-every 120]

Starts the embedded broker and a worker process (as ``lockstep bench`` spawns it), produces the generated
cluster (:mod:`lockstep.loadgen`) at ``--rate`` samples/s for about ``--minutes``, with a leaf-port incident
every ``--incident-every`` seconds of wall time (:func:`schedule`), and every 10 s records the worker's RSS
and CPU, the broker's RSS and the worker's lag (telemetry messages not committed yet:
:meth:`benchmarks.lockbench.Bench.lag`, the ends from a fetch answer). Meanwhile it reads the alerts topic:
each incident's ``job_slowdown`` alert, its latency (from the broker's ack of the scrape that completed its
evidence: :func:`benchmarks.lockbench.slowdown_latencies`) and its resolution. After the last scrape it waits
up to ``--settle`` seconds for the last incidents to fire and resolve.

Pass: RSS at the end within 10 % of RSS after the first fifth of the run (warm-up: every series seen,
arrays at capacity); lag never above 30 s of input; every incident fired exactly one ``job_slowdown``
alert on its job and it resolved; no ``job_slowdown`` alert on a job without an incident. Writes a JSON
document (``--output``) with every 10-second reading and every alert's times.

The embedded broker keeps every record in memory (no retention): it grows by about 200 bytes a sample of
the generated cluster, so ``--minutes`` times ``--rate`` bounds the run on a given machine (30 minutes at
25,000 samples/s: 8.7 GB measured).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.lockbench import (
    LATENCY_INCIDENT_S,
    LATENCY_WARMUP,
    Bench,
    TopicNames,
    cpu_seconds,
    rss_mb,
    slowdown_latencies,
)

#: Readings of the worker every this many seconds.
EVERY_S = 10.0


def schedule(minutes: float, rate: float, gpus: int, incident_every_s: float, *, wait_s: float,
             incident_s: float = LATENCY_INCIDENT_S) -> tuple[Any, int]:
    """The soak's cluster and its number of scrapes: ``minutes`` of scrapes at ``rate`` samples/s, a
    leaf-port incident every ``incident_every_s`` of wall time after :data:`LATENCY_WARMUP` scrapes
    (the jobs in turn), the last one with room after it for its verdict (``wait_s`` of event time after
    the symptom) and its end.

    >>> spec, scrapes = schedule(10, 28602.0, 1024, 60.0, wait_s=15.0)
    >>> scrapes, [at for _, at in spec.incidents]
    (1200, [40, 160, 280, 400, 520, 640, 760, 880, 1000])
    >>> [j for j, _ in spec.incidents][:5], spec.incident_s
    ([0, 1, 2, 3, 4], 40.0)
    """
    from lockstep.loadgen import CHAIN_LAST_S, LoadGenerator, LoadSpec

    base = LoadSpec(gpus=gpus)
    per_s = rate / LoadGenerator(base).samples_per_scrape / base.interval_s  # scrapes a wall second
    scrapes = max(1, round(minutes * 60.0 * per_s))
    spacing = max(1, round(incident_every_s * per_s))
    room = math.ceil((CHAIN_LAST_S + wait_s + incident_s) / base.interval_s) + 30
    count = max(0, (scrapes - room - LATENCY_WARMUP) // spacing + 1)
    incidents = tuple((j, LATENCY_WARMUP + j * spacing) for j in range(count))
    return LoadSpec(gpus=gpus, incidents=incidents, incident_s=incident_s), scrapes


def match_incidents(incidents: list[Any], alerts: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """Each incident's ``job_slowdown`` alerts: the alerts on its job that started within it (the alert's
    ``started_at`` from the incident's start to its end), firing and resolved; and the alerts on no
    incident. ``alerts``: ``(monotonic time read, alert)`` in the order read.

    >>> from lockstep.loadgen import Incident
    >>> inc = [Incident("job1", 1764502800.0, 1764502840.0, "leaf0", "1")]
    >>> a = {"type": "job_slowdown", "job_id": "job1", "alert_id": "x", "started_at": "2025-11-30T11:40:05Z"}
    >>> out = match_incidents(inc, [(1.0, {**a, "status": "firing"}), (9.0, {**a, "status": "resolved"}),
    ...                             (9.5, {**a, "job_id": "job2", "alert_id": "y", "status": "firing"})])
    >>> out["per_incident"][0]["fired"], out["per_incident"][0]["resolved_after_s"], out["unexpected"]
    (['x'], 8.0, ['y'])
    """
    from models.timeutil import parse_ts

    fired: dict[str, tuple[float, dict[str, Any]]] = {}
    resolved: dict[str, float] = {}
    for now, alert in alerts:
        if alert.get("type") != "job_slowdown":
            continue
        aid = str(alert.get("alert_id"))
        if alert.get("status") == "firing":
            fired.setdefault(aid, (now, alert))
        elif alert.get("status") == "resolved":
            resolved.setdefault(aid, now)
    claimed: set[str] = set()
    per_incident = []
    for inc in incidents:
        mine = [aid for aid, (_, al) in fired.items()
                if al.get("job_id") == inc.job and isinstance(al.get("started_at"), str)
                and inc.start_ts <= parse_ts(al["started_at"]) <= inc.end_ts]
        claimed.update(mine)
        first = mine[0] if mine else None
        per_incident.append({
            "job": inc.job, "start_ts": inc.start_ts, "fired": mine,
            "resolved_after_s": (round(resolved[first] - fired[first][0], 1)
                                 if first is not None and first in resolved else None)})
    return {"per_incident": per_incident, "unexpected": [aid for aid in fired if aid not in claimed]}


async def soak(minutes: float, rate: float, gpus: int, incident_every_s: float = 120.0,
               settle_s: float = 90.0) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    from agents.topics import create_topics
    from lockstep.broker import EmbeddedBroker
    from lockstep.loadgen import LoadGenerator, produce

    broker = await EmbeddedBroker().astart()
    bench = Bench(broker.bootstrap)
    readings: list[dict[str, Any]] = []
    received: list[tuple[float, dict[str, Any]]] = []
    acked: dict[int, float] = {}
    try:
        settings = bench.with_prefix("soak")
        wait_s = max(settings.grace_s, settings.job_end_margin_s) + settings.allowed_lateness_s
        spec, scrapes = schedule(minutes, rate, gpus, incident_every_s, wait_s=wait_s)
        gen = LoadGenerator(spec)
        per_message = gen.samples_per_scrape / max(1, sum(1 for _ in gen.messages(0)))
        await create_topics(settings, broker.bootstrap)
        worker = bench.spawn_worker(settings, "soak-worker")
        await bench.wait_consuming(worker)  # the group join takes ~15 s on the embedded broker
        alerts = AIOKafkaConsumer(TopicNames(settings).alerts, bootstrap_servers=broker.bootstrap, group_id=None,
                                  auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await alerts.start()
        stop = asyncio.Event()

        async def read_alerts() -> None:
            while not stop.is_set():
                batches = await alerts.getmany(timeout_ms=100)
                now = time.monotonic()
                received.extend((now, orjson.loads(m.value)) for msgs in batches.values() for m in msgs)

        def settled() -> bool:
            out = match_incidents(gen.incidents, received)
            return all(i["fired"] and i["resolved_after_s"] is not None for i in out["per_incident"])

        reading = asyncio.create_task(read_alerts())
        producing = asyncio.create_task(produce(settings, broker.bootstrap, spec, rate=rate, scrapes=scrapes,
                                                on_scrape=lambda k, ts, wall: acked.__setitem__(k, wall)))
        topics = TopicNames(settings).telemetry
        t0 = time.monotonic()
        cpu_last = cpu_seconds(worker.pid) or 0.0
        ended: float | None = None
        try:
            while worker.poll() is None:
                await asyncio.sleep(EVERY_S)
                lag_msgs = await bench.lag(settings.app_id, topics)
                cpu = cpu_seconds(worker.pid) or cpu_last
                readings.append({"t": round(time.monotonic() - t0, 1), "rss_mb": rss_mb(worker.pid),
                                 "broker_rss_mb": rss_mb(broker.pid) if broker.pid else None,
                                 "cores": round((cpu - cpu_last) / EVERY_S, 3),
                                 "lag_messages": lag_msgs, "lag_s": round(lag_msgs * per_message / rate, 2),
                                 "alerts_read": len(received)})
                cpu_last = cpu
                print(orjson.dumps(readings[-1]).decode(), flush=True)
                if producing.done():
                    ended = ended or time.monotonic()
                    if settled() or time.monotonic() - ended > settle_s:
                        break
        finally:
            stop.set()
            await reading
            await alerts.stop()
            await bench.close_readers()
        produced = await producing if producing.done() else None
        if not producing.done():
            producing.cancel()
    finally:
        bench.stop_all()
        broker.stop()
    return summarise(minutes, rate, gpus, incident_every_s, readings, received, acked, spec, gen.incidents, wait_s,
                     produced)


def summarise(minutes: float, rate: float, gpus: int, incident_every_s: float, readings: list[dict[str, Any]],
              received: list[tuple[float, dict[str, Any]]], acked: dict[int, float], spec: Any,
              incidents: list[Any], wait_s: float, produced: dict[str, Any] | None) -> dict[str, Any]:
    """The soak's document and its verdict (the module's pass rule); ``incidents``: the load generator's
    (:attr:`lockstep.loadgen.LoadGenerator.incidents`)."""
    warm = readings[max(0, len(readings) // 5 - 1)]["rss_mb"] if readings else None
    last = readings[-1]["rss_mb"] if readings else None
    growth = (last / warm - 1.0) if warm and last else None
    max_lag = max((r["lag_s"] for r in readings), default=None)
    matched = match_incidents(incidents, received)
    _, lat = slowdown_latencies(received, acked, spec, wait_s)
    arr = np.array(lat) if lat else np.array([np.nan])
    by_type: dict[str, int] = {}
    for _, alert in received:
        key = f"{alert.get('type')}/{alert.get('status')}"
        by_type[key] = by_type.get(key, 0) + 1
    per_incident = matched["per_incident"]
    ok_alerts = (all(len(i["fired"]) == 1 and i["resolved_after_s"] is not None for i in per_incident)
                 and not matched["unexpected"])
    cores = [r["cores"] for r in readings[len(readings) // 5:]]
    return {"minutes": minutes, "rate": rate, "gpus": gpus, "incident_every_s": incident_every_s,
            "produced": produced, "readings": readings,
            "rss_after_warmup_mb": warm, "rss_end_mb": last,
            "rss_growth": round(growth, 4) if growth is not None else None, "max_lag_s": max_lag,
            "worker_cores_median": float(np.median(cores)) if cores else None,
            "incidents": len(per_incident), "incidents_fired": sum(1 for i in per_incident if i["fired"]),
            "incidents_resolved": sum(1 for i in per_incident if i["resolved_after_s"] is not None),
            "unexpected_slowdowns": matched["unexpected"], "per_incident": per_incident,
            "alerts_by_type": by_type,
            "latency_p50_s": round(float(np.percentile(arr, 50)), 3),
            "latency_p99_s": round(float(np.percentile(arr, 99)), 3), "latency_max_s": round(float(np.max(arr)), 3),
            "pass": bool(growth is not None and abs(growth) <= 0.10 and max_lag is not None and max_lag <= 30.0
                         and per_incident and ok_alerts)}


def add_load_arguments(p: argparse.ArgumentParser, *, minutes: float, rate: float, gpus: int,
                       incident_every: float) -> None:
    """The live load's options of a soak or a chaos run (benchmarks.chaos), with these defaults."""
    p.add_argument("--minutes", type=float, default=minutes)
    p.add_argument("--rate", type=float, default=rate, help=f"samples/s (default {rate:,.0f})")
    p.add_argument("--gpus", type=int, default=gpus)
    p.add_argument("--incident-every", type=float, default=incident_every,
                   help="seconds of wall time between incidents")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_arguments(p, minutes=30.0, rate=25_000.0, gpus=1024, incident_every=120.0)
    p.add_argument("--settle", type=float, default=90.0,
                   help="seconds to wait after the last scrape for the last incidents to fire and resolve")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/soak.json"))
    args = p.parse_args()
    out = asyncio.run(soak(args.minutes, args.rate, args.gpus, args.incident_every, args.settle))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"soak: rss {out['rss_after_warmup_mb']} -> {out['rss_end_mb']} MB ({out['rss_growth']}), "
          f"max lag {out['max_lag_s']} s, incidents {out['incidents_fired']}/{out['incidents']} fired, "
          f"{out['incidents_resolved']} resolved, {len(out['unexpected_slowdowns'])} unexpected, "
          f"latency p50 {out['latency_p50_s']} p99 {out['latency_p99_s']} s, pass={out['pass']}; wrote {args.output}")
    sys.exit(0 if out["pass"] else 1)


if __name__ == "__main__":
    main()
