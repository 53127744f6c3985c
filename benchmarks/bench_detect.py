"""Detector throughput and memory, next to a plain numpy-percentile baseline measured in the same run.

    python benchmarks/bench_detect.py [--series 100000] [--rounds 5] [--clock wall|cpu]

- batch mode: one ``DetectorBank.update`` per round over every series (one sample each);
- streaming path: calls of 8 and 32 samples (a Kafka message's worth), per-call cost included;
- baseline: what the old design paid per call at least: ``np.percentile`` (p50, p99) over a 120-sample
  ring buffer of each series in the call, plus writing the new value in;
- memory: state bytes per series with 100,000 series registered.
Timings are wall-clock on this machine by default; ``--clock cpu`` times the process's CPU time instead
(single-threaded numpy: the same work, but far less disturbed by other jobs on shared cores).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig


def make_bank(n: int) -> DetectorBank:
    bank = DetectorBank(DetectorConfig())
    for sid in range(n):
        bank.register(sid, Mode.LEVEL, Direction.UP)
    return bank


def baseline_call(buf: np.ndarray, pos: np.ndarray, ids: np.ndarray, x: np.ndarray) -> np.ndarray:
    p = np.percentile(buf[ids], (50.0, 99.0), axis=1)
    buf[ids, pos[ids]] = x
    pos[ids] = (pos[ids] + 1) % buf.shape[1]
    return np.asarray(p)


def bench(n: int, rounds: int, clock: str = "wall") -> None:
    now = time.process_time if clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(0)
    ids_all = np.arange(n)
    bank = make_bank(n)
    warm = 30
    for r in range(warm):  # past warm-up, so every path (scores, episodes) is live
        bank.update(ids_all, np.full(n, 10.0 * r), rng.normal(100, 5, n))
    buf = rng.normal(100, 5, (n, 120))
    pos = np.zeros(n, dtype=np.int64)
    xs = rng.normal(100, 5, (rounds, n))
    t0 = now()
    for r in range(rounds):
        bank.update(ids_all, np.full(n, 10.0 * (warm + r)), xs[r])
    t_bank = now() - t0
    t0 = now()
    for r in range(rounds):
        baseline_call(buf, pos, ids_all, xs[r])
    t_base = now() - t0
    pts = rounds * n
    print(f"batch mode ({n:,} series per call, {rounds} calls)")
    print(f"  lockstep DetectorBank.update     {pts / t_bank:12,.0f} points/s   {t_bank / rounds * 1e3:8.1f} ms/call")
    print(f"  baseline np.percentile ring(120) {pts / t_base:12,.0f} points/s   {t_base / rounds * 1e3:8.1f} ms/call")
    for size in (8, 32):
        calls = 3000
        starts = rng.integers(0, n - size, calls)
        t = 10.0 * (warm + rounds)
        t0 = now()
        for c in range(calls):
            ids = ids_all[starts[c]: starts[c] + size]
            bank.update(ids, np.full(size, t + c), xs[c % rounds, :size])
        t_s = now() - t0
        t0 = now()
        for c in range(calls):
            ids = ids_all[starts[c]: starts[c] + size]
            baseline_call(buf, pos, ids, xs[c % rounds, :size])
        t_b = now() - t0
        print(f"streaming path, {size} samples per call ({calls} calls)")
        for label, el in (("lockstep DetectorBank.update    ", t_s), ("baseline np.percentile ring(120)", t_b)):
            print(f"  {label} {calls * size / el:12,.0f} samples/s  {el / calls * 1e6:8.1f} us/call")
    parts = bank.nbytes_per_series()
    print(f"state per series at {n:,} series: {sum(parts.values()):.0f} bytes "
          + ", ".join(f"{k} {v:.0f}" for k, v in parts.items())
          + f"  (baseline ring buffer alone: {buf.nbytes / n:.0f} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall-clock time, or the process's CPU time (steadier on shared cores)")
    args = ap.parse_args()
    bench(args.series, args.rounds, args.clock)


if __name__ == "__main__":
    main()
