"""A sampling profile of one worker process draining the bench's batched backlog (issue 23).

    python -m benchmarks.profile_worker [--scrapes 300] [--seconds 20] [--out /tmp/worker.raw]
    python -m benchmarks.profile_worker --summarise /tmp/worker.raw

Preloads the batched backlog of ``lockstep bench`` (``lockstep/loadgen.py``: a 1,024-GPU cluster, one
message per scrape and source, 7 topics x 8 partitions) on an embedded broker (or
``--bootstrap``), starts ``python -m lockstep.cli worker`` as the bench does
(:meth:`benchmarks.lockbench.Bench.spawn_worker`), waits until it consumes, and records it with
py-spy (``pip install py-spy``: a dev tool, not a dependency) for ``--seconds`` in py-spy's raw
(collapsed-stack) format. ``--summarise`` groups the samples of such a file: each sample counted
once under the first group (in :data:`GROUPS` order) that one of its frames matches, and the top
frames by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: (group, pattern over a frame ``function (file:line)``), first match wins, most specific first.
GROUPS: tuple[tuple[str, str], ...] = (
    ("snapshot (pack/deflate)", r"streams/snapshot\.py|write_snapshot"),
    ("ingest: score (scorer, bank, sketch)", r"streams/(detect|sketch)\.py|streams/scorers/|stages/score\.py"),
    ("ingest: validate", r"stages/validate\.py|streams/ingest\.py \(validate|SeriesRegistry|series\.py"),
    ("ingest: decode", r"stages/decode\.py|decode_records"),
    ("ingest: rate", r"stages/rate\.py|streams/rates\.py"),
    ("ingest: normalise", r"stages/normalise\.py"),
    ("ingest: points", r"stages/points\.py"),
    ("ingest: fabric", r"stages/fabric\.py|streams/fabric"),
    ("ingest: clocks/episodes", r"stages/(clocks|episodes)\.py|streams/clocks\.py"),
    ("ingest: other pipeline", r"streams/pipeline\.py|stages/base\.py"),
    ("correlation", r"agents/correlating\.py|streams/correlation/"),
    ("read model", r"agents/readmodel\.py|streams/(readstore|views)\.py"),
    ("produce/sink (orjson.dumps, send)", r"agents/sink\.py|send_episodes|finish_batch|producer|Producer|"
                                          r"merged_points_records|dumps"),
    ("metrics", r"prometheus_client|agents/metrics\.py"),
    ("ingest agent (around the pipeline)", r"agents/ingest\.py|agents/batching\.py"),
    ("consume/transport (aiokafka fetch, Faust hand-over)", r"aiokafka|agents/transport\.py|faust/transport|"
                                                            r"faust/streams|faust/channels|faust/agents"),
    ("asyncio/mode/faust other", r"asyncio|mode/|faust/"),
)


def record(args: argparse.Namespace) -> int:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    return asyncio.run(_record(args, spy))


async def _record(args: argparse.Namespace, spy: str) -> int:
    from benchmarks.lockbench import Bench
    from lockstep.broker import EmbeddedBroker
    from lockstep.loadgen import LoadSpec

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = await EmbeddedBroker().astart()
        bootstrap = broker.bootstrap
    try:
        bench = Bench(bootstrap, broker_pid=broker.pid if broker is not None else None)
        settings = bench.with_prefix("profile")
        loaded = await bench.preload(settings, LoadSpec(gpus=args.gpus), args.scrapes)
        print(f"preloaded {loaded['messages']:,} messages, {loaded['samples']:,} samples", flush=True)
        proc = bench.spawn_worker(settings, "profile-worker")
        try:
            waited = await bench.wait_consuming(proc)
            print(f"worker {proc.pid} consuming after {waited:.1f} s; recording {args.seconds:.0f} s", flush=True)
            await asyncio.sleep(args.skip)
            t0 = time.monotonic()
            cpu0 = _cpu(proc.pid)
            rc = subprocess.run([spy, "record", "-p", str(proc.pid), "-d", str(int(args.seconds)), "-r",
                                 str(args.rate), "-f", args.format, "-o", str(args.out)] +
                                (["--nonblocking"] if args.nonblocking else []), check=False).returncode
            cpu1 = _cpu(proc.pid)
            print(f"py-spy exit {rc}; worker used {cpu1 - cpu0:.1f} CPU-s in {time.monotonic() - t0:.1f} s")
        finally:
            bench.stop_all()
            await bench.close_readers()
    finally:
        if broker is not None:
            broker.stop()
    if args.format == "raw":
        summarise(args.out)
    return 0


def _cpu(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(:(?P<line>\d+))?\)$")


def _short(frame: str) -> str:
    """``function (path:line)`` with the path cut to what follows site-packages or the repository."""
    m = FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for cut in ("site-packages/", "/lib/python3.11/", "wt-perf/", "main/"):
        if cut in path:
            path = path.split(cut, 1)[1]
            break
    return f"{m.group('fn')} ({path})"


#: A sample whose innermost frame is one of these waits (py-spy counts a thread blocked in epoll as active).
IDLE = re.compile(r"^(EpollSelector\.select|select|_wait_for_tstate_lock|wait) \(")


def summarise(path: Path, top: int = 30) -> None:
    """Groups and the top frames by own and total time of a py-spy raw file, waits left out."""
    groups: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    n = idle = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        c = int(count)
        frames = [_short(f) for f in stack.split(";")]
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        if frames and IDLE.match(frames[-1]):
            idle += c
            continue
        thread = "consumer thread (mode.threads)" if any("ServiceThread" in f or "WorkerThread" in f for f in frames) \
            else "event loop thread"
        threads[thread] += c
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        n += c
        own[frames[-1] if frames else "?"] += c
        for f in set(frames):
            total[f] += c
        joined = "\n".join(frames)
        for name, pattern in GROUPS:
            if re.search(pattern, joined):
                groups[name] += c
                break
        else:
            groups["other"] += c
    print(f"{n} busy samples ({idle} waiting in epoll and the like, left out)")
    for name, c in threads.most_common():
        print(f"  {100 * c / n:5.1f} %  {name}")
    print("by group (each sample once, first matching group):")
    for name, c in groups.most_common():
        print(f"  {100 * c / n:5.1f} %  {name}")
    print("top frames by own time:")
    for f, c in own.most_common(top):
        print(f"  {100 * c / n:5.1f} %  {f}")
    print("top frames by total time:")
    for f, c in total.most_common(top):
        print(f"  {100 * c / n:5.1f} %  {f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap", help="an existing broker (default: an embedded one)")
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--scrapes", type=int, default=300)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--skip", type=float, default=2.0, help="seconds after the worker consumes before recording")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--format", default="raw", choices=("raw", "speedscope", "flamegraph"))
    p.add_argument("--nonblocking", action="store_true", help="py-spy does not pause the worker to sample")
    p.add_argument("--out", type=Path, default=Path("/tmp/worker-profile.raw"))
    p.add_argument("--summarise", type=Path, help="only summarise this raw file")
    args = p.parse_args(argv)
    if args.summarise:
        summarise(args.summarise)
        return 0
    return record(args)


if __name__ == "__main__":
    sys.exit(main())
