"""Two trees' workers on the bench's batched backlog, interleaved, with the bare consumer beside them.

    python -m benchmarks.worker_ab --before /tmp/before --after $PWD [--rounds 3] [--path DIR]

The batched row of ``lockstep bench`` (:meth:`benchmarks.lockbench.Bench.throughput`: the same
backlog, group, 8 s window, samples per CPU-second from ``/proc``), for two checkouts of the code
in the same run: each round runs the bare aiokafka+orjson consumer, the ``before`` tree's worker and
the ``after`` tree's, so each round's ratio has its own baseline. ``--path`` directories are added
to the workers' ``PYTHONPATH`` after the tree (an optional package installed with ``--target``).

``--drain`` measures instead what does not depend on how much of a core the neighbours leave a
worker: the CPU-seconds the worker process spends from its start-up line (``consuming from``) until
its group has committed the whole backlog, and its start-up CPU before that line (imports, a
compiled kernel's cache load), each worker in a group of its own, the trees alternately.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import lockbench


async def drain(bench: lockbench.Bench, settings: Any, loaded: dict[str, Any], tree: Path, tag: str,
                timeout_s: float = 600.0) -> dict[str, Any]:
    """One worker of ``tree`` over the whole backlog: start-up CPU, CPU until all is committed, RSS."""
    lockbench.REPO = tree
    group = f"{settings.app_id}-drain-{uuid.uuid4().hex[:6]}"
    topics = lockbench.TopicNames(settings).telemetry
    proc = bench.spawn_worker(settings.model_copy(update={"app_id": group}), tag)
    began = time.monotonic()
    try:
        await bench.wait_consuming(proc)
        start_cpu = lockbench.cpu_seconds(proc.pid) or 0.0
        t0 = time.monotonic()
        while time.monotonic() - began < timeout_s:
            if await bench.committed(group, topics) >= loaded["messages"]:
                break
            await asyncio.sleep(0.25)
        else:
            raise TimeoutError(f"{tag} did not drain the backlog in {timeout_s:.0f} s")
        cpu = (lockbench.cpu_seconds(proc.pid) or 0.0) - start_cpu
        return {"startup_cpu_s": round(start_cpu, 2), "drain_cpu_s": round(cpu, 2),
                "drain_wall_s": round(time.monotonic() - t0, 1), "samples_per_cpu_s": loaded["samples"] / cpu,
                "rss_mb": lockbench.rss_mb(proc.pid)}
    finally:
        bench.stop(proc)
        reader = bench._offset_readers.pop(group, None)
        if reader is not None:
            await reader.stop()


async def drain_rounds(args: argparse.Namespace, bench: lockbench.Bench, settings: Any, loaded: dict[str, Any],
                       trees: dict[str, Path]) -> None:
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            fig = await drain(bench, settings, loaded, trees[name], f"drain-{name}-{r}")
            got[name].append(fig)
            print(f"round {r + 1} {name}: start-up {fig['startup_cpu_s']} CPU-s, backlog {fig['drain_cpu_s']} CPU-s in "
                  f"{fig['drain_wall_s']} s = {fig['samples_per_cpu_s']:,.0f} samples per CPU-second, "
                  f"rss {fig['rss_mb']} MB", flush=True)
    for name, figs in got.items():
        print(f"{name}: median {statistics.median(f['samples_per_cpu_s'] for f in figs):,.0f} samples per "
              f"CPU-second, start-up median {statistics.median(f['startup_cpu_s'] for f in figs)} CPU-s")
    pairs = [a["samples_per_cpu_s"] / b["samples_per_cpu_s"] for a, b in zip(got["after"], got["before"], strict=True)]
    print(f"after/before per CPU-second, per round: {', '.join(f'{p:.3f}' for p in pairs)} "
          f"(median {statistics.median(pairs):.3f})")


async def main_async(args: argparse.Namespace) -> int:
    from lockstep.broker import EmbeddedBroker
    from lockstep.loadgen import LoadSpec

    if args.path:
        os.environ["PYTHONPATH"] = os.pathsep.join(args.path)
    broker = await EmbeddedBroker().astart()
    bench = lockbench.Bench(broker.bootstrap, broker_pid=broker.pid)
    figures: dict[str, list[dict[str, Any]]] = {"bare": [], "before": [], "after": []}
    try:
        settings = bench.with_prefix("ab")
        loaded = await bench.preload(settings, LoadSpec(gpus=1024), args.scrapes)
        print(f"preloaded {loaded['messages']:,} messages, {loaded['samples']:,} samples", flush=True)
        trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
        if args.drain:
            await drain_rounds(args, bench, settings, loaded, trees)
            return 0
        for r in range(args.rounds):
            order = ["bare", "before", "after"] if r % 2 == 0 else ["bare", "after", "before"]
            for name in order:
                kind = "bare" if name == "bare" else "worker"
                lockbench.REPO = trees.get(name, trees["after"])  # what spawn_worker runs (and its cwd)
                run = await bench.throughput(f"ab-{name}-{r}", settings, loaded, kind, timeout_s=90.0,
                                             measure_s=args.window)
                figures[name].append(run.as_dict())
                print(f"round {r + 1} {lockbench.describe(name, run)}", flush=True)
    finally:
        bench.stop_all()
        await bench.close_readers()
        broker.stop()
    for name in ("before", "after"):
        per_cpu = [f["samples_per_cpu_s"] for f in figures[name] if f.get("samples_per_cpu_s")]
        vs_bare = [f["samples_per_cpu_s"] / b["samples_per_cpu_s"] for f, b in zip(figures[name], figures["bare"],
                                                                                   strict=True)
                   if f.get("samples_per_cpu_s") and b.get("samples_per_cpu_s")]
        rss = [max(f["rss_mb"]) for f in figures[name] if f.get("rss_mb")]
        if per_cpu:
            print(f"{name}: {statistics.median(per_cpu):,.0f} samples per CPU-second (median of "
                  f"{', '.join(f'{v:,.0f}' for v in per_cpu)}); vs bare per CPU-second "
                  f"{', '.join(f'{v:.2f}x' for v in vs_bare)}; rss {rss} MB")
    pairs = [a["samples_per_cpu_s"] / b["samples_per_cpu_s"] for a, b in zip(figures["after"], figures["before"],
                                                                             strict=True)
             if a.get("samples_per_cpu_s") and b.get("samples_per_cpu_s")]
    if pairs:
        print(f"after/before per CPU-second, per round: {', '.join(f'{p:.3f}' for p in pairs)} "
              f"(median {statistics.median(pairs):.3f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="a checkout of the code before")
    p.add_argument("--after", required=True, help="a checkout of the code after")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scrapes", type=int, default=100)
    p.add_argument("--window", type=float, default=8.0, help="seconds fitted after the first commit (as --quick)")
    p.add_argument("--path", action="append", default=[], help="added to the workers' PYTHONPATH after the tree")
    p.add_argument("--drain", action="store_true", help="CPU-seconds over the whole backlog (module docstring)")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
