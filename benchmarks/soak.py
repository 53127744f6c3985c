"""Soak: one worker process under steady load; resident memory must stay flat and lag bounded.

    python -m benchmarks.soak [--minutes 30] [--rate SAMPLES_PER_S] [--gpus 1024]

Starts the embedded broker and a worker process, produces the generated cluster at ``--rate``
(default 45,000 samples/s: about half the batched rate one worker sustains here, docs/performance.md),
and every 10 s records the worker's RSS and its lag (telemetry end offsets minus committed offsets).
Pass: RSS at the end within 10% of RSS after the first fifth of the run (warm-up: every series seen,
arrays at capacity), and lag never above 30 s of input. Writes a JSON summary (``--output``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.lockbench import Bench, TopicNames, rss_mb


async def soak(minutes: float, rate: float, gpus: int) -> dict[str, Any]:
    from agents.topics import create_topics
    from lockstep.broker import EmbeddedBroker
    from lockstep.loadgen import LoadGenerator, LoadSpec, produce

    broker = await EmbeddedBroker().astart()
    bench = Bench(broker.bootstrap)
    samples: list[dict[str, Any]] = []
    try:
        settings = bench.with_prefix("soak")
        spec = LoadSpec(gpus=gpus)
        per_message = LoadGenerator(spec).samples_per_scrape / max(1, sum(1 for _ in LoadGenerator(spec).messages(0)))
        await create_topics(settings, broker.bootstrap)
        worker = bench.spawn_worker(settings, "soak-worker")
        await bench.wait_consuming(worker)  # the group join takes ~15 s on the embedded broker
        stop = asyncio.Event()
        producing = asyncio.create_task(produce(settings, broker.bootstrap, spec, rate=rate, seconds=minutes * 60,
                                                stop=stop))
        topics = TopicNames(settings).telemetry
        t0 = time.monotonic()
        from aiokafka import AIOKafkaConsumer, TopicPartition

        reader = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
        await reader.start()
        try:
            while not producing.done():
                await asyncio.sleep(10.0)
                tps = [TopicPartition(t, p) for t in topics for p in range(bench.partitions)]
                end = sum((await reader.end_offsets(tps)).values())
                done = await bench.committed(settings.app_id, topics)
                lag_msgs = max(end - done, 0)
                samples.append({"t": round(time.monotonic() - t0, 1), "rss_mb": rss_mb(worker.pid),
                                "broker_rss_mb": rss_mb(broker.pid),
                                "lag_messages": lag_msgs, "lag_s": round(lag_msgs * per_message / rate, 2)})
                print(orjson.dumps(samples[-1]).decode(), flush=True)
                if worker.poll() is not None:
                    stop.set()
                    break
        finally:
            await reader.stop()
            await bench.close_readers()
        produced = await producing
    finally:
        bench.stop_all()
        broker.stop()
    warm = samples[max(0, len(samples) // 5 - 1)]["rss_mb"] if samples else None
    last = samples[-1]["rss_mb"] if samples else None
    growth = (last / warm - 1.0) if warm and last else None
    max_lag = max((s["lag_s"] for s in samples), default=None)
    return {"minutes": minutes, "rate": rate, "gpus": gpus, "produced": produced, "samples": samples,
            "rss_after_warmup_mb": warm, "rss_end_mb": last, "rss_growth": round(growth, 4) if growth is not None
            else None, "max_lag_s": max_lag,
            "pass": bool(growth is not None and abs(growth) <= 0.10 and max_lag is not None and max_lag <= 30.0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=45_000.0)
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/soak.json"))
    args = p.parse_args()
    out = asyncio.run(soak(args.minutes, args.rate, args.gpus))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"soak: rss {out['rss_after_warmup_mb']} -> {out['rss_end_mb']} MB ({out['rss_growth']}), "
          f"max lag {out['max_lag_s']} s, pass={out['pass']}; wrote {args.output}")
    sys.exit(0 if out["pass"] else 1)


if __name__ == "__main__":
    main()
