"""The fabric rollup's cost per NIC and switch sample: folded raw by every read model (before issue 23)
against built once at ingest and merged from its summaries by every read model (now).

    PYTHONPATH=$PWD python -m benchmarks.bench_fabric [--gpus 10000] [--scrapes 30] [--rounds 5]

Load: the scale bench's cluster (:class:`lockstep.loadgen.LoadGenerator`, one message per source and
scrape: per node 8 NIC counters, per leaf port 4 switch counters), its NIC and switch messages spread
over ``--partitions`` input partitions by key as the producer spreads them. Three costs, in CPU
seconds (``time.process_time``) per fabric sample, runs interleaved round by round so every row sees
the same machine load, the median of the rounds printed with its spread:

- **read model, raw** (before): ``FabricRollup.fold_message`` of every NIC and switch message, what
  every worker's read model did (decode, validate, fold);
- **read model, summaries** (now): ``FabricRollup.merge_message`` of the summaries the partitions
  published over the same input (``--interval`` seconds of event time apart);
- **ingest, added** (now, once per sample in the whole group): the ``fabric`` stage's seconds (the
  pipeline's stage timer) and the publishing, with the pipelines of the NIC and switch partitions
  fed ``--scrapes-per-batch`` scrapes per ``process_many`` call.

Then the cost per fabric sample for a group of W workers: before W x raw; now ingest + W x summaries.
Both reports are compared (they must be equal), so a faster path that answers differently fails.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from typing import Any

import orjson

from lockstep.loadgen import LoadGenerator, LoadSpec
from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.fabric import FabricConfig, FabricRollup, fabric_report
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline
from streams.readstore import ReadStore


def load(gpus: int, scrapes: int, partitions: int) -> tuple[list[list[tuple[str, bytes]]], InventoryIndex, int]:
    """Per scrape: the NIC and switch messages as ``(input partition, value)``; the inventory; the samples."""
    gen = LoadGenerator(LoadSpec(gpus=gpus, seed=11))
    inv = InventoryIndex()
    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    out, samples = [], 0
    for k in range(scrapes):
        msgs = []
        for layer, key, samples_of in gen.scrape(k):
            if layer in ("nic", "switch"):
                msgs.append((f"telemetry.{layer}:{zlib.crc32(key.encode()) % partitions}", orjson.dumps(samples_of)))
                samples += len(samples_of)
        out.append(msgs)
    return out, inv, samples


def raw_read_model(scrapes: list[list[tuple[str, bytes]]]) -> tuple[FabricRollup, float]:
    roll = FabricRollup()
    t0 = time.process_time()
    for msgs in scrapes:
        for _, value in msgs:
            roll.fold_message(value)
    return roll, time.process_time() - t0


def ingest(scrapes: list[list[tuple[str, bytes]]], inv: InventoryIndex, per_batch: int,
           interval_s: float) -> tuple[list[bytes], float]:
    """The NIC and switch partitions' pipelines with the rollup; the summaries and the CPU seconds the
    rollup added (its stage, timed by the pipeline, and the publishing)."""
    pipes: dict[str, PartitionPipeline] = {}
    offsets: dict[str, int] = {}
    published: list[bytes] = []
    added = 0.0
    for start in range(0, len(scrapes), per_batch):
        groups: dict[str, list[tuple[bytes, Origin]]] = {}
        for msgs in scrapes[start:start + per_batch]:
            for name, value in msgs:
                topic, _, p = name.rpartition(":")
                off = offsets.get(name, 0)
                offsets[name] = off + 1
                groups.setdefault(name, []).append((value, Origin(topic, int(p), off, float(off))))
        for name, items in groups.items():
            pipe = pipes.get(name)
            if pipe is None:
                pipe = pipes[name] = PartitionPipeline(name, DetectorConfig(), inv, fabric=FabricConfig(),
                                                       fabric_interval_s=interval_s)
            out = pipe.process_many(items, timer=time.process_time)
            added += out.stage_seconds.get("fabric", 0.0)
            assert pipe.fabric is not None
            t0 = time.process_time()
            published += pipe.fabric.publish(pipe.watermark, name)
            added += time.process_time() - t0
    t0 = time.process_time()
    for name, pipe in pipes.items():
        assert pipe.fabric is not None
        published += pipe.fabric.publish(pipe.watermark, name, force=True)
    return published, added + time.process_time() - t0


def merged_read_model(published: list[bytes]) -> tuple[FabricRollup, float]:
    roll = FabricRollup()
    t0 = time.process_time()
    for value in published:
        roll.merge_message(value)
    return roll, time.process_time() - t0


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--scrapes-per-batch", type=int, default=2)
    ap.add_argument("--interval", type=float, default=5.0, help="event-time seconds between summaries")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 4, 16])
    args = ap.parse_args(argv)
    scrapes, inv, samples = load(args.gpus, args.scrapes, args.partitions)
    raw_bytes = sum(len(v) for msgs in scrapes for _, v in msgs)
    print(f"{args.gpus:,} GPUs, {args.scrapes} scrapes: {samples:,} NIC and switch samples in "
          f"{sum(len(m) for m in scrapes):,} messages ({raw_bytes / 1e6:.1f} MB) on {args.partitions} partitions")
    rows: dict[str, list[float]] = {"raw": [], "merge": [], "ingest": []}
    summary: dict[str, Any] = {}
    for r in range(args.rounds):
        old, raw_s = raw_read_model(scrapes)
        published, ingest_s = ingest(scrapes, inv, args.scrapes_per_batch, args.interval)
        new, merge_s = merged_read_model(published)
        if r == 0:
            assert old.latest is not None
            same = fabric_report(old, inv, ReadStore(), old.latest) == fabric_report(new, inv, ReadStore(), old.latest)
            summary = {"messages": len(published), "bytes": sum(len(v) for v in published), "same": same}
            print(f"summaries: {summary['messages']:,} messages, {summary['bytes'] / 1e6:.2f} MB "
                  f"({raw_bytes / max(summary['bytes'], 1):.0f}x fewer bytes than the raw topics); "
                  f"report equal to the raw fold's: {same}")
            if not same:
                return 1
        for k, v in (("raw", raw_s), ("merge", merge_s), ("ingest", ingest_s)):
            rows[k].append(v / samples * 1e6)
        print(f"round {r + 1}: raw {rows['raw'][-1]:.3f} us/sample, summaries {rows['merge'][-1]:.3f}, "
              f"ingest added {rows['ingest'][-1]:.3f}", flush=True)
    raw, merge, ing = (statistics.median(rows[k]) for k in ("raw", "merge", "ingest"))
    print(f"\nCPU microseconds per NIC/switch sample, median of {args.rounds} rounds (min-max):")
    print(f"  read model, raw fold (before)        {spread(rows['raw'])}")
    print(f"  read model, merging summaries (now)  {spread(rows['merge'])}   = {raw / merge:.1f}x less")
    print(f"  ingest, fabric stage + publish (now) {spread(rows['ingest'])}   (once per sample, on its owner)")
    ratios = [rows["raw"][i] / rows["merge"][i] for i in range(args.rounds)]
    print(f"  per-round ratio raw / summaries: {spread(ratios)}")
    print("\nper fabric sample, a group of W workers (CPU us; before W x raw, now ingest + W x summaries):")
    for w in args.workers:
        before, now = w * raw, ing + w * merge
        print(f"  W={w:>3}: before {before:8.3f}  now {now:8.3f}  ({before / now:.1f}x less)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
