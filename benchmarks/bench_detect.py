"""Detector throughput and memory, next to a plain numpy-percentile baseline measured in the same run.

    python benchmarks/bench_detect.py [--series 100000] [--rounds 5] [--clock wall|cpu]

- batch mode: one ``DetectorBank.update`` per round over every series (one sample each);
- streaming path: calls of 8 and 32 samples (a Kafka message's worth), per-call cost included;
- baseline: what the old design paid per call at least: ``np.percentile`` (p50, p99) over a 120-sample
  ring buffer of each series in the call, plus writing the new value in;
- memory: state bytes per series with 100,000 series registered.
Each figure is the median of ``--blocks`` timed blocks, Lockstep's and the baseline's interleaved, with
their ratio. To compare two trees, run each with ``PYTHONPATH=<tree>`` from inside it, interleaved
(an editable install otherwise imports the checkout it was installed from).
Timings are wall-clock on this machine by default; ``--clock cpu`` times the process's CPU time instead
(single-threaded numpy: the same work, but far less disturbed by other jobs on shared cores).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

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


def bench(n: int, rounds: int, clock: str = "wall", blocks: int = 5) -> None:
    """Each figure is the median of ``blocks`` timed blocks, Lockstep's and the baseline's interleaved
    (a burst of load on the shared machine then hits both), with the ratio of their costs per point."""
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
    t = 10.0 * warm

    def timed(fn: Callable[[], None]) -> float:
        t0 = now()
        fn()
        return now() - t0

    def bank_batch() -> None:
        nonlocal t
        for r in range(rounds):
            bank.update(ids_all, np.full(n, t), xs[r])
            t += 10.0

    def base_batch() -> None:
        for r in range(rounds):
            baseline_call(buf, pos, ids_all, xs[r])

    el_bank, el_base = [], []
    for _ in range(blocks):
        el_bank.append(timed(bank_batch))
        el_base.append(timed(base_batch))
    t_bank, t_base = float(np.median(el_bank)), float(np.median(el_base))
    pts = rounds * n
    print(f"batch mode ({n:,} series per call, {rounds} calls a block, median of {blocks} blocks)")
    print(f"  lockstep DetectorBank.update     {pts / t_bank:12,.0f} points/s   {t_bank / rounds * 1e3:8.1f} ms/call")
    print(f"  baseline np.percentile ring(120) {pts / t_base:12,.0f} points/s   {t_base / rounds * 1e3:8.1f} ms/call")
    print(f"  lockstep / baseline throughput   {t_base / t_bank:12.2f}x")
    for size in (8, 32):
        calls = 600
        starts = rng.integers(0, n - size, calls)

        def bank_calls(size: int, calls: int, starts: np.ndarray) -> None:
            nonlocal t
            for c in range(calls):
                ids = ids_all[starts[c]: starts[c] + size]
                bank.update(ids, np.full(size, t), xs[c % rounds, :size])
                t += 0.01

        def base_calls(size: int, calls: int, starts: np.ndarray) -> None:
            for c in range(calls):
                ids = ids_all[starts[c]: starts[c] + size]
                baseline_call(buf, pos, ids, xs[c % rounds, :size])

        el_bank, el_base = [], []
        for _ in range(blocks):
            el_bank.append(timed(partial(bank_calls, size, calls, starts)))
            el_base.append(timed(partial(base_calls, size, calls, starts)))
        t_s, t_b = float(np.median(el_bank)), float(np.median(el_base))
        print(f"streaming path, {size} samples per call ({calls} calls a block, median of {blocks} blocks)")
        for label, el in (("lockstep DetectorBank.update    ", t_s), ("baseline np.percentile ring(120)", t_b)):
            print(f"  {label} {calls * size / el:12,.0f} samples/s  {el / calls * 1e6:8.1f} us/call")
        print(f"  lockstep / baseline cost per call {t_s / t_b:11.2f}x")
    parts = bank.nbytes_per_series()
    print(f"state per series at {n:,} series: {sum(parts.values()):.0f} bytes "
          + ", ".join(f"{k} {v:.0f}" for k, v in parts.items())
          + f"  (baseline ring buffer alone: {buf.nbytes / n:.0f} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=5, help="timed blocks of each figure (the median is printed)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall-clock time, or the process's CPU time (steadier on shared cores)")
    args = ap.parse_args()
    bench(args.series, args.rounds, args.clock, args.blocks)


if __name__ == "__main__":
    main()
