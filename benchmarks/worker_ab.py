"""Two trees' workers on the bench's batched backlog, interleaved, with the bare consumer beside them.

    python -m benchmarks.worker_ab --before /tmp/before --after $PWD [--rounds 3] [--path DIR]

The batched row of ``lockstep bench`` (:meth:`benchmarks.lockbench.Bench.throughput`: the same
backlog, group, 8 s window, samples per CPU-second from ``/proc``), for two checkouts of the code
in the same run: each round runs the bare aiokafka+orjson consumer, the ``before`` tree's worker and
the ``after`` tree's, so each round's ratio has its own baseline. ``--path`` directories are added
to the workers' ``PYTHONPATH`` after the tree (an optional package installed with ``--target``).
``--before-env NAME=VALUE`` / ``--after-env NAME=VALUE`` set a variable in one side's workers (a
setting's A/B on one tree: ``--before $PWD --after $PWD --before-env LOCKSTEP_CARRIER_FORMATS=all``).

``--drain`` measures instead what does not depend on how much of a core the neighbours leave a
process: the samples it processed per CPU-second over the whole backlog, from its group's first commit
to its last (the samples behind the committed offsets: :meth:`benchmarks.lockbench.Bench.committed_samples`;
the CPU of the process from ``/proc``), and a worker's start-up CPU before it consumes (imports, a
compiled kernel's cache load); each process in a group of its own, in an order reversed every round.
For a worker also the whole backlog over its CPU from its start-up line (``consuming from``): the
fairer figure between two configurations whose first batches differ, because what comes before a
first commit is left out of the window, and a backlog's first stretch (the small topics' one-sample
messages) is its costliest a sample (a bigger first batch looked 1.10x by the window, 1.03x whole).
With ``--bare``, the bare aiokafka+orjson consumer drains the backlog the same way each round, and every
worker's figure is also given as a ratio to that round's bare one. With ``--upto STAGE`` (repeatable),
workers of the ``--after`` tree with their ingest stages cut after ``STAGE`` drain it too
(:mod:`benchmarks.ablated_worker`): the differences between the cuts say what each part of the pipeline
costs a sample in a live worker, outputs and correlation included::

    python -m benchmarks.worker_ab --before $PWD --after $PWD --drain --bare --upto validate --upto rate \
        --upto episodes --scrapes 200
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
                kind: str = "worker", upto: str | None = None, timeout_s: float = 600.0,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """One process of ``kind`` (``worker`` of ``tree``, cut after ``upto`` if given, with ``env`` on top of
    the bench's, or a baseline of :mod:`benchmarks.consumers`) over the whole backlog: samples per
    CPU-second from its group's first commit to the last, start-up CPU (a worker's, until it consumes), RSS."""
    lockbench.REPO = tree
    group = f"{settings.app_id}-drain-{uuid.uuid4().hex[:6]}"
    topics = lockbench.TopicNames(settings).telemetry
    if kind == "worker":
        proc = bench.spawn_worker(settings.model_copy(update={"app_id": group}), tag, extra=env, upto=upto)
    else:
        proc = bench.spawn_baseline(kind, group, topics, tag)
    began = time.monotonic()
    try:
        start_cpu = None
        if kind == "worker":
            await bench.wait_consuming(proc)
            start_cpu = lockbench.cpu_seconds(proc.pid) or 0.0
        first: tuple[int, float, float] | None = None  # (samples, CPU-s, monotonic) at the first commit
        while time.monotonic() - began < timeout_s:
            done = await bench.committed_samples(group, topics)
            cpu = lockbench.cpu_seconds(proc.pid) or 0.0
            if done and first is None:
                first = (done, cpu, time.monotonic())
            if done >= loaded["samples"]:
                break
            await asyncio.sleep(0.05)
        else:
            raise TimeoutError(f"{tag} did not drain the backlog in {timeout_s:.0f} s")
        assert first is not None
        spent = cpu - first[1]
        # A worker's whole backlog from its start-up line too: what a later first commit (a bigger first batch)
        # would leave out of the window above is the backlog's costliest stretch (the small topics first)
        whole = None if start_cpu is None or cpu <= start_cpu else loaded["samples"] / (cpu - start_cpu)
        return {"startup_cpu_s": None if start_cpu is None else round(start_cpu, 2), "drain_cpu_s": round(spent, 2),
                "whole_samples_per_cpu_s": whole,
                "drain_wall_s": round(time.monotonic() - first[2], 1), "drained_samples": done - first[0],
                "samples_per_cpu_s": (done - first[0]) / spent if spent > 0 else None,
                "rss_mb": lockbench.rss_mb(proc.pid)}
    finally:
        bench.stop(proc)
        reader = bench._offset_readers.pop(group, None)
        if reader is not None:
            await reader.stop()


async def drain_rounds(args: argparse.Namespace, bench: lockbench.Bench, settings: Any, loaded: dict[str, Any],
                       trees: dict[str, Path]) -> None:
    #: name -> (tree, kind, upto)
    entries: dict[str, tuple[Path, str, str | None]] = {name: (tree, "worker", None) for name, tree in trees.items()}
    if args.bare:
        entries = {"bare": (trees["after"], "bare", None), **entries}
    for upto in args.upto:
        entries[f"after upto {upto}"] = (trees["after"], "worker", upto)
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in entries}
    for r in range(args.rounds):
        for name in (list(entries) if r % 2 == 0 else list(entries)[::-1]):
            tree, kind, upto = entries[name]
            fig = await drain(bench, settings, loaded, tree, f"drain-{name.replace(' ', '-')}-{r}", kind, upto,
                              env=args.env.get(name.split(" ")[0]) if kind == "worker" else None)
            got[name].append(fig)
            rate = fig["samples_per_cpu_s"] or 0.0
            whole = fig["whole_samples_per_cpu_s"]
            print(f"round {r + 1} {name}: start-up {fig['startup_cpu_s']} CPU-s, {fig['drained_samples']:,} samples "
                  f"in {fig['drain_cpu_s']} CPU-s ({fig['drain_wall_s']} s) = {rate:,.0f} samples per CPU-second "
                  f"= {1e6 / rate if rate else float('nan'):.3f} us a sample"
                  + (f" (the whole backlog from the start-up line: {whole:,.0f})" if whole else "")
                  + f", rss {fig['rss_mb']} MB", flush=True)
    rates = {name: [f["samples_per_cpu_s"] or 0.0 for f in figs] for name, figs in got.items()}
    wholes = {name: [f["whole_samples_per_cpu_s"] or 0.0 for f in figs] for name, figs in got.items()
              if all(f["whole_samples_per_cpu_s"] for f in figs)}  # (workers only)
    for name, figs in got.items():
        line = f"{name}: {_median_line(rates[name])}"
        if figs[0]["startup_cpu_s"] is not None:
            line += f", start-up median {statistics.median(f['startup_cpu_s'] for f in figs)} CPU-s"
        if "bare" in rates and name != "bare":
            line += f", vs bare per round {_ratios(rates[name], rates['bare'], 'x')}"
        if name in wholes:
            line += f"; the whole backlog from the start-up line: {_median_line(wholes[name])}"
            if "bare" in rates:
                line += f", vs bare per round {_ratios(wholes[name], rates['bare'], 'x')}"
        print(line)
    for label, figures in (("per CPU-second", rates), ("over the whole backlog from the start-up line", wholes)):
        pairs = [a / b for a, b in zip(figures["after"], figures["before"], strict=True) if b]
        if pairs:
            print(f"after/before {label}, per round: {_ratios(figures['after'], figures['before'])} "
                  f"(median {statistics.median(pairs):.3f})")


def _median_line(rates: list[float]) -> str:
    """``median 612,330 samples per CPU-second (1.633 us a sample)``."""
    med = statistics.median(rates)
    return f"median {med:,.0f} samples per CPU-second ({1e6 / med if med else float('nan'):.3f} us a sample)"


def _ratios(a: list[float], b: list[float], unit: str = "") -> str:
    """Round by round ``a / b`` (rounds whose ``b`` is 0 left out).

    >>> _ratios([2.0, 3.0, 1.0], [1.0, 2.0, 0.0], "x")
    '2.000x, 1.500x'
    """
    return ", ".join(f"{x / y:.3f}{unit}" for x, y in zip(a, b, strict=True) if y)


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
                                             measure_s=args.window, env=args.env.get(name))
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
    p.add_argument("--bare", action="store_true", help="with --drain: the bare consumer drained too, each round")
    p.add_argument("--upto", action="append", default=[], metavar="STAGE",
                   help="with --drain: also the --after tree's worker with its ingest stages cut after STAGE")
    p.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                   help="set in the --before worker's environment (a setting's A/B on one tree)")
    p.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE",
                   help="set in the --after worker's environment (and its cut workers')")
    args = p.parse_args(argv)
    args.env = {name: _env_pairs(getattr(args, f"{name}_env")) for name in ("before", "after")}
    return asyncio.run(main_async(args))


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as a mapping.

    >>> _env_pairs(["LOCKSTEP_CARRIER_FORMATS=none", "A=b=c"])
    {'LOCKSTEP_CARRIER_FORMATS': 'none', 'A': 'b=c'}
    """
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"not NAME=VALUE: {pair!r}")
        out[name] = value
    return out


if __name__ == "__main__":
    sys.exit(main())
