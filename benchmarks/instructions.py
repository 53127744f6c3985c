"""The ingest stages' instructions a sample, counted by valgrind (callgrind): a measure that does not move
with the machine's load.

Timings on the shared 2-core machines here move 10-20 % from run to run (another engineer's tests, the
broker), so a change worth 3 % is lost in them however many rounds are taken. An instruction count is
the same in every run. It is not time: a cache miss or a page fault costs no instruction, so it says
nothing of memory traffic, and a change that trades instructions for memory traffic (a gather for a
slice) needs a timed run too. For the Python-level work that dominates the stages, it tracks time.

Each tree runs :func:`benchmarks.bench_pipeline.workload` through ``run_together`` as the ingest agent
runs it (one detector bank for every partition), under ``valgrind --tool=callgrind`` with the count
switched on only around the pipeline calls (``callgrind_control -i on``, after the workload is built;
each message's Kafka time 0.1 s after its samples', so the clocks stage has arrivals to judge).
Two runs of different lengths (``--scrapes`` and ``--warm``, the first scrapes register the series)
give the steady state's instructions a sample: ``(I(long) - I(short)) / (samples(long) - samples(short))``.
Outputs are not compared here (``bench_pipeline --baseline-tree`` does that)::

    python -m benchmarks.instructions --baseline-tree /tmp/before [--lane 800]

Needs valgrind (Debian's ``valgrind`` package; not installed in CI). About a minute a run for the
defaults (256 GPUs, 10 and 30 scrapes); the trees run one after the other (the count does not care).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def one_run(args: argparse.Namespace) -> int:
    """Inside valgrind (``--inside``): build the workload, switch the count on, run the pipeline."""
    import orjson

    from benchmarks.bench_pipeline import agent_batches, lane_batches, workload
    from streams.detect import DetectorBank, DetectorConfig
    from streams.pipeline import Origin, PartitionPipeline, run_together

    inv, batches, _ = workload(args.gpus, args.scrapes, args.partitions, 1, bad=False)
    groups = lane_batches(batches, args.lane) if args.lane else agent_batches(batches)
    # (each message's Kafka time a tenth of a second after its samples', so the clocks stage has arrivals)
    works = [[(origin, [(raw, Origin(t, p, off, orjson.loads(raw)[0]["ts"] + 0.1, None)) for raw, t, p, off in items])
              for origin, items in g] for g in groups]
    config = DetectorConfig()
    bank = DetectorBank(config)
    pipes: dict[str, PartitionPipeline] = {}
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    samples = 0
    for work in works:
        todo = [(pipes.get(o) or pipes.setdefault(o, PartitionPipeline(o, config, inv, bank=bank)), items)
                for o, items in work]
        for out in run_together(todo):
            if isinstance(out, Exception):
                raise out
            samples += out.samples
    print(f"samples {samples}")
    return 0


def counted(tree: Path, args: argparse.Namespace, scrapes: int) -> tuple[int, int]:
    """(instructions, samples) of one run of ``tree`` over ``scrapes`` scrapes."""
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
           sys.executable, str(Path(__file__).resolve()), "--inside", "--gpus", str(args.gpus),
           "--partitions", str(args.partitions), "--lane", str(args.lane), "--scrapes", str(scrapes)]
    env = dict(os.environ, PYTHONPATH=str(tree))  # (this script, that tree's packages)
    run = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    text = run.stdout + run.stderr
    ir = re.search(r"Collected : (\d+)", text)
    n = re.search(r"samples (\d+)", text)
    if ir is None or n is None:
        raise SystemExit(f"no count from {tree}:\n{text[-2000:]}")
    return int(ir.group(1)), int(n.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to count the same way")
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--warm", type=int, default=10, help="the shorter run's scrapes (subtracted)")
    parser.add_argument("--lane", type=int, default=0, metavar="CHUNK",
                        help="batches as the ingest lane hands a backlog over (see bench_pipeline)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:
        return one_run(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    trees = {"current": Path(__file__).resolve().parents[1]}
    if args.baseline_tree:
        trees = {"baseline": args.baseline_tree.resolve(), **trees}
    per: dict[str, float] = {}
    for name, tree in trees.items():
        long_ir, long_n = counted(tree, args, args.scrapes)
        short_ir, short_n = counted(tree, args, args.warm)
        per[name] = (long_ir - short_ir) / (long_n - short_n)
        print(f"{name}: {per[name]:,.0f} instructions a sample in the steady state "
              f"(samples {short_n:,}..{long_n:,}; {tree})", flush=True)
    if len(per) == 2:
        print(f"current/baseline: {per['current'] / per['baseline']:.3f} of the instructions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
