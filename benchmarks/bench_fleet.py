"""The fleet's reads over a full read model: ``/fabric/health``, ``/capacity/heatmap`` and ``/placement``
(issue 22) with N incidents on the synthetic 1,000-node fabric of bench_placement.

    python benchmarks/bench_fleet.py [--incidents 5000 10000] [--runs 5]

Incidents: random switch-port (70%), leaf (10%), NIC (20%) root causes over 7 days on 1,000 jobs of
8-256 GPUs, 1-30 minutes long, 2% still firing. Prints the median of ``--runs`` calls of each view;
wall clock on this machine, one thread. Not a timed test.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from benchmarks.bench_placement import synthetic
from models.timeutil import format_ts
from streams import fabric_health
from streams.ledger import Ledger, entry_of, heatmap

T0 = 1_764_502_800.0
WEEK = 7 * 86_400.0


def ledger_of(n: int, inv_leaves: int, rng: random.Random) -> Ledger:
    tiers = {f"leaf{i:03d}": "leaf" for i in range(inv_leaves)}
    out = []
    for k in range(n):
        onset = T0 - rng.uniform(0, WEEK)
        end = None if rng.random() < 0.02 else onset + rng.uniform(60, 1800)
        leaf = f"leaf{rng.randrange(inv_leaves):03d}"
        r = rng.random()
        root = ({"layer": "switch", "source": leaf, "labels": {"port": str(rng.randrange(1, 17))}} if r < 0.7 else
                {"layer": "switch", "source": leaf, "labels": {}} if r < 0.8 else
                {"layer": "nic", "source": f"n{rng.randrange(1000):04d}", "labels": {"device": "mlx5_0"}})
        alert = {"alert_id": f"a{k}", "type": "job_slowdown", "status": "firing" if end is None else "resolved",
                 "job_id": f"job{rng.randrange(1000)}", "gpus": rng.choice((8, 16, 64, 256)),
                 "started_at": format_ts(onset), "detected_at": format_ts(onset),
                 "symptom": {"baseline": 1.0, "value": 1.0 + rng.uniform(0.1, 1.5), "ratio": 0.0,
                             "onset": format_ts(onset)},
                 "root_cause": {"domain": "network", **root}}
        alert["symptom"]["ratio"] = alert["symptom"]["value"]
        if end is not None:
            alert["resolved_at"] = format_ts(end)
        e = entry_of(alert, tiers)
        assert e is not None
        out.append(e)
    return Ledger(out)


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--incidents", type=int, nargs="+", default=[5000, 10000])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    inv = synthetic(1000)
    leaves = len({leaf for ls in inv.node_leaves.values() for leaf in ls})
    for n in args.incidents:
        led = ledger_of(n, leaves, random.Random(7))
        health = median_ms(lambda led=led: fabric_health.health(led, {}, inv, T0, WEEK, 50), args.runs)
        heat = median_ms(lambda led=led: heatmap(led, "leaf", "7d", "1h", 20, T0, T0), args.runs)
        placed = median_ms(lambda led=led: fabric_health.placement(inv, led, 256, "tightly-coupled", T0), args.runs)
        print(f"{n:>6} incidents: /fabric/health 7d {health:.0f} ms · /capacity/heatmap leaf 7d/1h {heat:.0f} ms · "
              f"/placement 256 {placed:.0f} ms")

if __name__ == "__main__":
    main()
