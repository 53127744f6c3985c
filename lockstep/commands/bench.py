"""``lockstep bench``: throughput, alert latency, state size and scaling, each next to a baseline
measured in the same run (run on demand from a source checkout; not part of CI's pass/fail).

Starts the embedded broker (or uses ``LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS``), runs
``benchmarks/lockbench.py``, prints every figure, writes ``benchmarks/results/<commit>.json`` and the
table between the ``bench:begin``/``bench:end`` markers of ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

#: Results and docs/performance.md are written under the directory the command runs in (a checkout).
ROOT = Path.cwd()
BEGIN = "<!-- bench:begin (written by `lockstep bench`) -->"
END = "<!-- bench:end -->"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="measure throughput, latency, state and scaling (docs/performance.md)",
                       description=__doc__)
    add_arguments(p)
    p.set_defaults(handler=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="smaller backlogs (a minute or two)")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite the table in docs/performance.md")
    p.add_argument("--output", type=Path, help="JSON file (default benchmarks/results/<commit>.json)")
    p.add_argument("--worker-cores", type=float, default=0.6, metavar="CORES",
                   help="repeat the scaling runs with each worker held to this many cores by a cgroup CPU quota, "
                        "so two workers and the broker fit in the machine (0: skip; needs a writable cgroup)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="repeat the throughput and latency runs N times and report the medians (default 1)")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def _round_ratios(a: dict[str, Any], b: dict[str, Any]) -> str:
    """`` (rounds: 0.45, 0.49, 0.47)``: the ratio of each repeated round, when there were several."""
    ra, rb = a.get("rounds") or [], b.get("rounds") or []
    if len(ra) < 2 or len(ra) != len(rb):
        return ""
    return " (rounds: " + ", ".join(f"{x / y:.2f}" if x and y else "n/a" for x, y in zip(ra, rb, strict=True)) + ")"


def _paired(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The ratio of run ``a`` to baseline ``b``: the median of the rounds' same-run ratios when the runs
    were repeated, else the one ratio; followed by every round's ratio.

    >>> _paired({"samples_per_s": 4.0, "rounds": [3.0, 4.0, 9.0]}, {"samples_per_s": 2.0, "rounds": [2.0, 1.0, 3.0]})
    '3.00x (rounds: 1.50, 4.00, 3.00)'
    >>> _paired({"samples_per_s": 3.0}, {"samples_per_s": 2.0})
    '1.50x'
    """
    ra, rb = a.get("rounds") or [], b.get("rounds") or []
    pairs = sorted(x / y for x, y in zip(ra, rb, strict=False) if x and y) if len(ra) == len(rb) > 1 else []
    if pairs:
        return f"{pairs[(len(pairs) - 1) // 2]:.2f}x{_round_ratios(a, b)}"
    return _ratio(a.get("samples_per_s"), b.get("samples_per_s"))


def _p99s(lat: dict[str, Any]) -> str:
    rounds = lat.get("rounds") or []
    return f"; median of {len(rounds)} runs, p99 " + ", ".join(f"{x} s" for x in rounds) if len(rounds) > 1 else ""


def _cores(run: dict[str, Any]) -> str:
    """``0.93+0.88 (broker 0.31)``: the CPU each process under test and the broker used while measured."""
    cores = run.get("cpu_cores")
    if not cores:
        return "n/a"
    broker = run.get("broker_cores")
    return "+".join(f"{c:.2f}" for c in cores) + (f" (broker {broker:.2f})" if broker is not None else "")


def _per_cpu(run: dict[str, Any]) -> str:
    v = run.get("samples_per_cpu_s")
    return f"{v:,.0f}" if v else "n/a"


def _budget_row(doc: dict[str, Any]) -> str:
    """The scaling row at a fixed CPU budget per worker (benchmarks.cpulimit), or why it was not measured.

    >>> _budget_row({"batched": {"runs": {}, "cpu_budget": "no writable cgroup cpu controller under /x"}})
    '| scaling at a CPU budget per worker: 2 worker processes vs 1 | n/a | ... | >= 1.7x where cores allow |'
    """
    b = doc["batched"]
    one, two = b["runs"].get("worker_budget"), b["runs"].get("worker_budget_x2")
    label = "| scaling at a CPU budget per worker: 2 worker processes vs 1 |"
    if not one or not two:
        return f"{label} n/a | not measured: {b.get('cpu_budget', 'older bench')} | - | >= 1.7x where cores allow |"
    sps1, sps2 = one.get("samples_per_s"), two.get("samples_per_s")
    return (f"{label} {sps2 or 0:,.0f} ({two.get('cpu_budget')} core each; got {_cores(two)}) | 1 worker "
            f"{sps1 or 0:,.0f} (got {_cores(one)}) | {_paired(two, one)} | >= 1.7x where cores allow |")


def table(doc: dict[str, Any]) -> str:
    """The Markdown table of one bench document (what docs/performance.md shows)."""
    b = doc["batched"]["runs"]
    s = doc["single"]["runs"]
    st = doc["state"]
    lat = doc["latency"]
    m = doc["machine"]

    def sps(run: dict[str, Any]) -> str:
        v = run.get("samples_per_s")
        return f"{v:,.0f}" if v else "n/a"

    stock_s = s.get("faust_stock", {})
    stock_b = b.get("faust_stock", {})
    bare1 = b["bare"].get("samples_per_s")
    bare2 = b["bare_x2"].get("samples_per_s")
    per_cpu1 = b["worker"].get("samples_per_cpu_s")
    rows = [
        "| figure | Lockstep | baseline (same run) | ratio (median of the rounds' same-run ratios) | goal |",
        "|---|---|---|---|---|",
        f"| batched messages ({doc['batched']['loaded']['samples'] / doc['batched']['loaded']['messages']:.0f} "
        f"samples/message), samples/s, 1 worker process | {sps(b['worker'])} | bare aiokafka+orjson "
        f"{sps(b['bare'])} | {_paired(b['worker'], b['bare'])} | >= 0.50x |",
        f"| one sample per message, samples/s, 1 worker process | {sps(s['worker'])} | do-nothing Faust agent "
        f"{sps(stock_s)} (bare {sps(s['bare'])}) | {_paired(s['worker'], stock_s)} | "
        f">= 0.75x |",
        f"| one sample per message: the same vs a do-nothing agent with Lockstep's hand-over "
        f"(`agents/transport.py`) | {sps(s['worker'])} | {sps(s['faust_noop'])} | "
        f"{_paired(s['worker'], s['faust_noop'])} | (reference) |",
        f"| batched, do-nothing Faust agent / with Lockstep's hand-over, samples/s | {sps(stock_b)} / "
        f"{sps(b['faust_noop'])} | bare {sps(b['bare'])} | {_ratio(stock_b.get('samples_per_s'), bare1)} / "
        f"{_ratio(b['faust_noop'].get('samples_per_s'), bare1)} | (reference) |",
        f"| alert latency at {lat['rate_samples_per_s']:,.0f} samples/s (50% of max), p50 / p99 | "
        f"{lat['p50_s']} s / {lat['p99_s']} s ({lat['measured']} alerts{_p99s(lat)}) | - | - | p99 < 2 s |",
        f"| state per series at {st['10000']['series']:,} series (arrays + registry / heap / snapshot) | "
        f"{st['10000']['arrays_and_registry_bytes_per_series']:,.0f} / {st['10000']['heap_bytes_per_series']:,.0f} / "
        f"{st['10000']['snapshot_bytes_per_series']:,.0f} B | - | - | <= 2 KB |",
        f"| state per series at {st['100000']['series']:,} series (arrays + registry / heap / snapshot) | "
        f"{st['100000']['arrays_and_registry_bytes_per_series']:,.0f} / "
        f"{st['100000']['heap_bytes_per_series']:,.0f} / {st['100000']['snapshot_bytes_per_series']:,.0f} B | - | - |"
        f" <= 2 KB |",
        f"| worker resident memory: {doc['batched']['loaded'].get('series', 0):,}"
        f" series / {st['worker_100k']['series']:,} series | {b['worker']['rss_mb']} MB / "
        f"{st['worker_100k']['rss_mb']} MB | bare consumer {b['bare']['rss_mb']} MB | - | - |",
        f"| scaling, 8 partitions: 2 worker processes vs 1 | {sps(b['worker_x2'])} | 1 worker {sps(b['worker'])}; "
        f"bare 2 vs 1: {_ratio(bare2, bare1)} | {_paired(b['worker_x2'], b['worker'])} | "
        f">= 1.7x where cores allow |",
        f"| scaling: CPU the workers got (cores; broker) / samples per worker CPU-second | 2 workers "
        f"{_cores(b['worker_x2'])} / {_per_cpu(b['worker_x2'])} | 1 worker {_cores(b['worker'])} / "
        f"{_per_cpu(b['worker'])} | {_ratio(b['worker_x2'].get('samples_per_cpu_s'), per_cpu1)} per CPU-second | "
        f"(what limits the ratio above) |",
        _budget_row(doc),
    ]
    head = (f"Commit `{doc['commit']}`, {doc['started']}; machine: {m['cpu']}, {m['cores']} cores shared with the "
            f"broker and other engineers' work, Python {m['python']}{' (quick run)' if doc.get('quick') else ''}.")
    return head + "\n\n" + "\n".join(rows) + "\n"


def write_docs(doc: dict[str, Any], path: Path) -> bool:
    text = path.read_text() if path.exists() else ""
    if BEGIN not in text or END not in text:
        return False
    a = text.index(BEGIN) + len(BEGIN)
    b = text.index(END)
    path.write_text(text[:a] + "\n\n" + table(doc) + "\n" + text[b:])
    return True


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.lockbench import run_all
    from lockstep.broker import EmbeddedBroker
    from models.settings import LockstepSettings

    bootstrap = LockstepSettings().kafka_bootstrap_servers
    broker = None
    if bootstrap is None:
        broker = await EmbeddedBroker().astart()
        bootstrap = broker.bootstrap
    try:
        return await run_all(bootstrap, quick=args.quick, say=lambda line: print(line, flush=True),
                             repeat=max(1, args.repeat), broker_pid=broker.pid if broker is not None else None,
                             worker_cores=args.worker_cores or None)
    finally:
        if broker is not None:
            broker.stop()


def run(args: argparse.Namespace) -> int:
    try:
        import benchmarks.lockbench  # noqa: F401 - installed with the package (pyproject: packages)
    except ImportError:
        print("lockstep bench: the benchmarks package is not installed with this lockstep; install from the "
              "sources (git clone ... && pip install '.[embedded]') to run it", file=sys.stderr)
        return 2
    doc = asyncio.run(_bench(args))
    out = args.output or ROOT / "benchmarks" / "results" / f"{doc['commit']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"\nwrote {out}")
    print(table(doc))
    if not args.no_docs and write_docs(doc, ROOT / "docs" / "performance.md"):
        print("updated docs/performance.md")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lockstep bench", description=__doc__)
    add_arguments(p)
    return run(p.parse_args(argv))
