"""The ingest pipeline alone, without a broker: ``run_together`` (as the ingest agent runs it: a batch of
every input partition at once, one detector bank shared) or, with ``--alone`` or a tree without it,
``PartitionPipeline.process_many`` on each partition, on generated load.

The cheapest honest measure of a change to the pipeline's shape: the same messages through two
versions of ``streams/pipeline.py`` in one process, runs interleaved (A, B, A, B, ...) so both see the
same machine load, and their outputs compared record for record::

    git show <before>:streams/pipeline.py > /tmp/pipeline_before.py
    PYTHONPATH=$PWD python -m benchmarks.bench_pipeline --baseline /tmp/pipeline_before.py

The baseline file is loaded as a module of its own next to the tree's ``streams`` package (it uses
the tree's detectors, rates and inventory), so only the pipeline module differs between the two.
Load: :class:`lockstep.loadgen.LoadGenerator` scrapes (one message per source and scrape) with one
incident, spread over ``partitions`` input partitions by key as the producer spreads them, handed
over ``scrapes_per_batch`` scrapes per ``process_many`` call (so a batch holds several samples of a
series: several rounds), with a few bad messages (not JSON, not a sample, an old one again: late)
so the comparison covers dead letters too. Each run starts from fresh pipelines. ``--timed`` runs the current version
with a stage timer, as the ingest agent calls it.

A change below the pipeline module (the detectors, the scorers, the stages) is measured against a
whole other tree instead: ``--baseline-tree DIR`` (a checkout of the code before, e.g.
``git worktree add /tmp/before <commit>`` or ``git archive <commit> | tar -x -C /tmp/before``) runs
each pass in a process of its own, this tree's and that tree's alternately, with ``PYTHONPATH`` at
the tree, and compares a digest of every output::

    PYTHONPATH=$PWD python -m benchmarks.bench_pipeline --baseline-tree /tmp/before
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

from lockstep.loadgen import LoadGenerator, LoadSpec
from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex


def load_module(path: Path, name: str = "pipeline_baseline") -> ModuleType:
    """``path`` as a module named ``name`` (its imports resolve against this tree)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def workload(gpus: int, scrapes: int, partitions: int, per_batch: int, bad: bool = True
             ) -> tuple[InventoryIndex, list[tuple[str, list[tuple[bytes, str, int, int]]]], int]:
    """The inventory, the batches as ``(origin, [(raw, topic, partition, offset), ...])``, and the samples."""
    gen = LoadGenerator(LoadSpec(gpus=gpus, incidents=((0, scrapes // 2),), incident_s=scrapes / 4))
    inv = InventoryIndex()
    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    offsets: dict[str, int] = {}
    batches = []
    first_raw: dict[str, list[bytes]] = {}  # per input partition: its first message of each batch
    for n, first in enumerate(range(0, scrapes, per_batch)):
        groups: dict[str, list[tuple[bytes, str, int, int]]] = {}

        def add(origin: str, topic: str, p: int, raw: bytes, groups: dict[str, Any] = groups) -> None:
            off = offsets.get(origin, 0)
            offsets[origin] = off + 1
            groups.setdefault(origin, []).append((raw, topic, p, off))

        for k in range(first, min(first + per_batch, scrapes)):
            for layer, key, raw in gen.messages(k):
                topic = f"telemetry.{layer}"
                p = zlib.crc32(key) % partitions
                add(f"{topic}:{p}", topic, p, raw)
        if bad:  # every stage's dead letters among the good messages: not JSON, not a sample, out of order
            for origin in sorted(groups):
                topic, part = origin.rsplit(":", 1)
                first_raw.setdefault(origin, []).append(groups[origin][0][0])
                if n % 10 == 0:
                    add(origin, topic, int(part), b"{not json")
                    add(origin, topic, int(part), b'[{"ts": 1.0}]')
                if n % 10 == 5:
                    add(origin, topic, int(part), first_raw[origin][-3])  # two batches back: late
        batches += sorted(groups.items())
    return inv, batches, gen.samples_per_scrape * scrapes


def lane_batches(batches: list[tuple[str, list[tuple[bytes, str, int, int]]]], chunk: int, most: int = 4000
                 ) -> list[list[tuple[str, list[tuple[bytes, str, int, int]]]]]:
    """The workload's messages as the ingest lane hands a backlog to the agent: each partition's messages
    in fetch chunks of ``chunk`` (a fetch brings each partition's next chunk, in partition order), a batch
    whole chunks in that order up to ``most`` messages (the last one split): a few partitions a batch,
    many scrapes deep (a worker draining the bench's backlog took 3-13 partitions a batch, mostly of one
    topic).

    >>> b = [("a", [1, 2, 3]), ("b", [4, 5])]
    >>> [[(o, m) for o, m in g] for g in lane_batches(b, 2, most=3)]
    [[('a', [1, 2]), ('b', [4])], [('b', [5]), ('a', [3])]]
    """
    streams: dict[str, list[Any]] = {}
    for origin, items in batches:
        streams.setdefault(origin, []).extend(items)
    fetched: list[tuple[str, list[Any]]] = []
    at = dict.fromkeys(streams, 0)
    while any(at[o] < len(streams[o]) for o in streams):
        for o in sorted(streams):
            if at[o] < len(streams[o]):
                fetched.append((o, streams[o][at[o]:at[o] + chunk]))
                at[o] += chunk
    out: list[list[tuple[str, list[Any]]]] = []
    taken: dict[str, list[Any]] = {}
    room = most
    for origin, items in fetched:
        while items:
            part, items = items[:room], items[room:]
            taken.setdefault(origin, []).extend(part)
            room -= len(part)
            if room == 0:
                out.append(list(taken.items()))
                taken, room = {}, most
    if taken:
        out.append(list(taken.items()))
    return out


def run(module: ModuleType, inv: InventoryIndex, batches: list[tuple[str, list[tuple[bytes, str, int, int]]]],
        keep: bool = False, timed: bool = False, alone: bool = False, lane: int = 0) -> tuple[float, int, list[Any]]:
    """Every batch through fresh pipelines of ``module``: CPU seconds inside the pipeline calls (the cores
    are shared, so wall time would measure the neighbours), samples, outputs. As the ingest agent runs
    them where ``module`` has ``run_together`` (one detector bank for every partition; the batches of the
    partitions that follow one another run together), unless ``alone``: ``process_many`` on each. With
    ``lane``, the batches are re-cut as the ingest lane hands a backlog over (:func:`lane_batches`)."""
    pipes: dict[str, Any] = {}
    origin_cls = module.Origin
    groups = [[(origin, [(raw, origin_cls(t, p, off, None, None)) for raw, t, p, off in items])
               for origin, items in group]
              for group in (lane_batches(batches, lane) if lane else agent_batches(batches))]
    calls = [call for group in groups for call in group]
    outs = []
    spent = 0.0
    samples = 0
    config = DetectorConfig()
    together = getattr(module, "run_together", None)
    if together is not None and not alone:
        # as the ingest agent runs them: a batch of every partition at once, one detector bank shared
        from streams.detect import DetectorBank

        bank = DetectorBank(config)
        for group in groups:
            work = []
            for origin, items in group:
                pipe = pipes.get(origin)
                if pipe is None:
                    pipe = pipes[origin] = module.PartitionPipeline(origin, config, inv, bank=bank)
                work.append((pipe, items))
            t0 = time.thread_time()
            results = together(work, time.perf_counter) if timed else together(work)
            spent += time.thread_time() - t0
            for out in results:
                if isinstance(out, Exception):
                    raise out
                samples += out.samples
                if keep:
                    outs.append(out)
        return spent, samples, outs
    for origin, items in calls:
        pipe = pipes.get(origin)
        if pipe is None:
            pipe = pipes[origin] = module.PartitionPipeline(origin, config, inv)
        t0 = time.thread_time()
        out = pipe.process_many(items, time.perf_counter) if timed else pipe.process_many(items)
        spent += time.thread_time() - t0
        samples += out.samples
        if keep:
            outs.append(out)
    return spent, samples, outs


def agent_batches(calls: list[tuple[str, Any]]) -> list[list[tuple[str, Any]]]:
    """The workload's calls as the ingest agent's batches: runs of distinct partitions (each partition's
    share of a batch once).

    >>> [[o for o, _ in g] for g in agent_batches([("a", 1), ("b", 2), ("a", 3)])]
    [['a', 'b'], ['a']]
    """
    out: list[list[tuple[str, Any]]] = []
    for origin, items in calls:
        if not out or any(o == origin for o, _ in out[-1]):
            out.append([])
        out[-1].append((origin, items))
    return out


def comparable(out: Any) -> str:
    """An output as exact text (every field, floats by ``repr``), the per-stage timings left out."""
    doc = dataclasses.asdict(out)
    doc.pop("stage_seconds", None)
    return repr(doc)


def one_pass(args: argparse.Namespace) -> int:
    """One pass of the workload through the ``streams.pipeline`` on ``sys.path`` (``--one-pass``): prints
    ``<samples> <CPU seconds> <digest of every output>``."""
    import streams.pipeline as current

    inv, batches, _ = workload(args.gpus, args.scrapes, args.partitions, args.scrapes_per_batch)
    run(current, inv, batches[:8], alone=args.alone)  # warm-up, not measured: imports, first allocations
    spent, samples, outs = run(current, inv, batches, keep=True, alone=args.alone, lane=args.lane)
    digest = hashlib.sha256("\n".join(comparable(o) for o in outs).encode()).hexdigest()[:16]
    print(samples, spent, digest)
    return 0


def trees(args: argparse.Namespace) -> int:
    """This tree against ``args.baseline_tree``, one pass per process, alternately (``--baseline-tree``)."""
    here = Path(__file__).resolve().parents[1]
    versions = {"baseline": Path(args.baseline_tree).resolve(), "current": here}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one-pass", "--gpus", str(args.gpus), "--scrapes",
           str(args.scrapes), "--partitions", str(args.partitions), "--scrapes-per-batch", str(args.scrapes_per_batch),
           *(["--alone"] if args.alone else []), "--lane", str(args.lane)]
    rates: dict[str, list[float]] = {name: [] for name in versions}
    digests: dict[str, set[str]] = {name: set() for name in versions}
    for r in range(args.repeat):
        for name, tree in versions.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *args.path]))
            line = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True).stdout.split()
            samples, spent, digest = int(line[0]), float(line[1]), line[2]
            rates[name].append(samples / spent)
            digests[name].add(digest)
            print(f"round {r + 1} {name}: {samples / spent:,.0f} samples per CPU second (outputs {digest})", flush=True)
    for name, r_ in rates.items():
        print(f"{name}: median {statistics.median(r_):,.0f} samples per CPU second over {len(r_)} runs "
              f"(min {min(r_):,.0f}, max {max(r_):,.0f})")
    ratio = statistics.median(rates["current"]) / statistics.median(rates["baseline"])
    pairs = [c / b for b, c in zip(rates["baseline"], rates["current"], strict=True)]
    print(f"current/baseline: {ratio:.3f} (per interleaved pair: {', '.join(f'{p:.3f}' for p in pairs)})")
    same = len(digests["current"]) == 1 and digests["current"] == digests["baseline"]
    print("outputs: " + ("identical in every run" if same else f"DIFFER: {digests}"))
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another streams/pipeline.py to compare with")
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--scrapes", type=int, default=80)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--scrapes-per-batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timed", action="store_true",
                        help="time the current version's stages as the ingest agent does (process_many's timer)")
    parser.add_argument("--baseline-tree", type=Path,
                        help="another whole checkout to compare with, one pass per process (see the module docstring)")
    parser.add_argument("--path", action="append", default=[],
                        help="with --baseline-tree: a directory both trees' processes import from too (e.g. a "
                             "--target install of an optional package)")
    parser.add_argument("--alone", action="store_true",
                        help="each partition's batches through process_many, as before the partitions were run "
                             "together (the default where the tree has streams.pipeline.run_together)")
    parser.add_argument("--lane", type=int, default=0, metavar="CHUNK",
                        help="batches as the ingest lane hands a backlog over: fetch chunks of CHUNK messages a "
                             "partition, whole chunks in fetch order up to 4,000 messages a batch (0: the "
                             "workload's batches, every partition each)")
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_pass:
        return one_pass(args)
    if args.baseline_tree:
        return trees(args)
    import streams.pipeline as current

    inv, batches, _ = workload(args.gpus, args.scrapes, args.partitions, args.scrapes_per_batch)
    versions = {"current": current}
    if args.baseline:
        versions = {"baseline": load_module(args.baseline), "current": current}
    if len(versions) == 2:
        a, b = (run(m, inv, batches, keep=True)[2] for m in versions.values())
        differ = sum(comparable(x) != comparable(y) for x, y in zip(a, b, strict=True))
        anomalies = sum(len(o.anomalies) for o in a)
        dead = sum(len(o.dead_letters) for o in a)
        print(f"outputs: {len(a)} batches, {anomalies} anomalies, {dead} dead letters; {differ} batches differ")
        if differ:
            return 1
    rates: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(args.repeat):
        for name, module in versions.items():
            spent, samples, _ = run(module, inv, batches, timed=args.timed and module is current)
            rates[name].append(samples / spent)
    for name, r in rates.items():
        print(f"{name}: median {statistics.median(r):,.0f} samples per CPU second over {len(r)} runs "
              f"(min {min(r):,.0f}, max {max(r):,.0f})")
    if len(versions) == 2:
        ratio = statistics.median(rates["current"]) / statistics.median(rates["baseline"])
        pairs = [c / b for b, c in zip(rates["baseline"], rates["current"], strict=True)]
        print(f"current/baseline: {ratio:.3f} (per interleaved pair: {', '.join(f'{p:.3f}' for p in pairs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
