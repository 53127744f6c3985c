"""State soak without a broker: the generated cluster through the pure pipeline and correlation.

    python -m benchmarks.state_soak [--scrapes 1201] [--gpus 1024] [--history-s 600]

Feeds ``--scrapes`` seconds of the load generator's cluster (a scrape per message, 14,301 series at
1,024 GPUs) through :class:`lockstep.local.LocalRunner` (ingest pipelines + job partitions, the
outputs dropped as the worker sends them away) and prints the process's resident memory and the
bounded histories every 300 scrapes. It separates growth of Lockstep's own state from what a broker
and a consumer's fetch buffers add in ``benchmarks.soak``. ``--history-s`` shortens the step-time
history (default 3600 s) so the plateau shows within a short run.
"""

from __future__ import annotations

import argparse
import gc
import os
import time


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scrapes", type=int, default=1201)
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--history-s", type=float, default=600.0)
    args = p.parse_args()

    from lockstep.loadgen import LoadGenerator, LoadSpec
    from lockstep.local import LocalRunner
    from streams.lanes import JobSignals, SignalsConfig

    spec = LoadSpec(gpus=args.gpus)
    gen = LoadGenerator(spec)
    runner = LocalRunner(partitions=8)
    for part in runner.correlators:
        part.signals = JobSignals(SignalsConfig(history_s=args.history_s))
        part.correlator.on_watermark = part._on_watermark
    for doc in gen.inventory():
        runner.inventory_event(doc)
    started = time.monotonic()
    for k in range(args.scrapes):
        for layer, key, raw in gen.messages(k):
            runner.message(layer, key.decode(), raw, float(spec.start_ts + k * spec.interval_s))
        res = runner.result
        for kept in (res.alerts, res.timelines, res.stats, res.anomalies):
            kept.clear()
        if k % 300 == 0 or k == args.scrapes - 1:
            gc.collect()
            history = sum(len(h) for c in runner.correlators for h in c.signals.step_history.values())
            print(f"scrape {k:5d}  rss {rss_mb():7.1f} MB  step-history entries {history:6d}  "
                  f"series {sum(len(pl.registry) for pl in runner.pipelines.values()):,}  "
                  f"{time.monotonic() - started:5.0f} s", flush=True)


if __name__ == "__main__":
    main()
