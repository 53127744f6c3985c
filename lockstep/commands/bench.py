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
SCALE_BEGIN = "<!-- bench-scale:begin (written by `lockstep bench --scale-only`) -->"
SCALE_END = "<!-- bench-scale:end -->"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="measure throughput, latency, state and scaling (docs/performance.md)",
                       description=__doc__)
    add_arguments(p)
    p.set_defaults(handler=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="headline rows only, each from an 8 s window; no scaling runs (2-3 minutes)")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                   help="the peer rows (Quix Streams, Bytewax: the bench extra); default on, off with --quick")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite the table in docs/performance.md")
    p.add_argument("--output", type=Path, help="JSON file (default benchmarks/results/<commit>.json)")
    p.add_argument("--worker-cores", type=float, default=0.6, metavar="CORES",
                   help="repeat the scaling runs with each worker held to this many cores by a cgroup CPU quota, "
                        "so two workers and the broker fit in the machine (0: skip; needs a writable cgroup)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="repeat the throughput and latency runs N times and report the medians (default 1)")
    p.add_argument("--scale", type=int, default=0, metavar="N",
                   help="also the scale run: N worker processes vs 1 at --scale-cores each on 16 partitions, then "
                        "live traffic of a 10,000-GPU cluster at half what the N sustained (0: skip)")
    p.add_argument("--scale-cores", type=float, default=0.3, metavar="CORES",
                   help="the CPU budget of each worker process of the scale run (a cgroup CPU quota)")
    p.add_argument("--scale-load", type=float, default=0.5, metavar="FRACTION",
                   help="the scale run's live traffic as a fraction of what its N workers sustained (default 0.5)")
    p.add_argument("--scale-only", action="store_true",
                   help="only the scale run (--scale 4 unless given); the document and docs get only its rows")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


#: One round's ratio on this shared machine moves by about this much either way (rounds of the same
#: code at 4ee35a0: bare 213,944-403,438 samples/s), so a one-round ratio this close to 1 says nothing.
NOISE = 0.2


def _paired(a: dict[str, Any], b: dict[str, Any], figure: str = "samples_per_s") -> str:
    """The ratio of run ``a`` to baseline ``b`` in ``figure`` (``samples_per_s``, or
    ``samples_per_cpu_s``: per CPU-second): the median of the rounds' same-run ratios with their
    spread when the runs were repeated, else the one ratio; marked as noise when the rounds fall on
    both sides of 1.0, or when one round is within :data:`NOISE` of 1.0.

    >>> _paired({"samples_per_s": 4.0, "rounds": [3.0, 4.0, 9.0]}, {"samples_per_s": 2.0, "rounds": [2.0, 1.0, 3.0]})
    '3.00x (1.50-4.00 over 3 rounds)'
    >>> _paired({"samples_per_s": 3.0}, {"samples_per_s": 2.0})
    '1.50x (one round)'
    >>> _paired({"samples_per_s": 2.1}, {"samples_per_s": 2.0})
    '1.05x (one round; noise: within 20% of 1)'
    >>> _paired({"samples_per_s": 1, "rounds": [1.0, 1.0]}, {"samples_per_s": 1, "rounds": [0.9, 1.2]})
    '0.83x (0.83-1.11 over 2 rounds; noise: rounds either side of 1)'
    >>> _paired({"samples_per_cpu_s": 3.0, "cpu_rounds": [3.0]}, {"samples_per_cpu_s": 1.0}, "samples_per_cpu_s")
    '3.00x (one round)'
    >>> _paired({}, {"samples_per_s": 2.0})
    'n/a'
    """
    key = "cpu_rounds" if figure == "samples_per_cpu_s" else "rounds"
    ra, rb = a.get(key) or [], b.get(key) or []
    pairs = sorted(x / y for x, y in zip(ra, rb, strict=False) if x and y) if len(ra) == len(rb) > 1 else []
    if len(pairs) > 1:
        mid = pairs[(len(pairs) - 1) // 2]
        noise = "; noise: rounds either side of 1" if pairs[0] < 1.0 < pairs[-1] else ""
        return f"{mid:.2f}x ({pairs[0]:.2f}-{pairs[-1]:.2f} over {len(pairs)} rounds{noise})"
    x, y = a.get(figure), b.get(figure)
    if not x or not y:
        return "n/a"
    noise = f"; noise: within {NOISE:.0%} of 1" if abs(x / y - 1.0) < NOISE else ""
    return f"{x / y:.2f}x (one round{noise})"


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


def _sps(run: dict[str, Any] | None) -> str:
    """A run's samples/s, or n/a and why (too few progress points, not run); a rate fitted over fewer
    than three commits inside its window (the process drained the backlog within a few commits:
    ``Run.coarse``) says so, as its digits are then the commit interval's as much as the process's.

    >>> _sps({"samples_per_s": 1234.5}), _sps(None), _sps({"why": "1 progress point(s)"})
    ('1,234', 'n/a (not run)', 'n/a (1 progress point(s))')
    >>> _sps({"samples_per_s": 1234.5, "coarse": True})
    '1,234 (coarse fit)'
    """
    if not run:
        return "n/a (not run)"
    v = run.get("samples_per_s")
    if not v:
        return f"n/a ({run.get('why') or 'no rate'})"
    return f"{v:,.0f} (coarse fit)" if run.get("coarse") else f"{v:,.0f}"


#: At or above this share of the wall time running or waiting for a CPU, a process is taken as
#: CPU-bound (it would have run more with more cores), not waiting on its fetches.
CPU_BOUND = 0.85


def _with_cpu(run: dict[str, Any] | None, bound_note: bool = False) -> str:
    """``135,056 on 1.03 core = 131,118/CPU-s``; with ``bound_note``, whether the process was CPU-bound:
    the CPU it used plus the time its threads waited on a run queue for one (``cpu_wait_cores``), per
    process, against :data:`CPU_BOUND`. On a loaded machine a CPU-bound process gets less than a core.

    >>> _with_cpu({"samples_per_s": 9e4, "cpu_cores": [0.45], "cpu_wait_cores": [0.1], "samples_per_cpu_s": 2e5},
    ...           bound_note=True)
    '90,000 on 0.45 core = 200,000/CPU-s (not CPU-bound: ran 0.45 + waited 0.10 for a CPU; the rest on fetches)'
    >>> _with_cpu({"samples_per_s": 9e4, "cpu_cores": [0.25], "cpu_wait_cores": [0.7], "samples_per_cpu_s": 3.6e5},
    ...           bound_note=True)
    '90,000 on 0.25 core = 360,000/CPU-s (CPU-bound: ran 0.25 + waited 0.70 for a CPU)'
    """
    if not run:
        return "n/a (not run)"
    cores = run.get("cpu_cores")
    if not cores or not run.get("samples_per_s"):
        return _sps(run)
    note = ""
    waits = run.get("cpu_wait_cores")
    if bound_note and waits and len(waits) == len(cores):
        ran, waited = sum(cores) / len(cores), sum(waits) / len(waits)
        busy = f"ran {ran:.2f} + waited {waited:.2f} for a CPU"
        bound = ran + waited >= CPU_BOUND
        note = f" (CPU-bound: {busy})" if bound else f" (not CPU-bound: {busy}; the rest on fetches)"
    return f"{_sps(run)} on {'+'.join(f'{c:.2f}' for c in cores)} core = {_per_cpu(run)}/CPU-s{note}"


def _budget_row(doc: dict[str, Any]) -> str:
    """The scaling row at a fixed CPU budget per worker (benchmarks.cpulimit), or why it was not measured.

    >>> _budget_row({"batched": {"runs": {}, "cpu_budget": "no writable cgroup cpu controller under /x"}})
    '| scaling at a CPU budget per worker: 2 worker processes vs 1 | n/a | ... | - | >= 1.7x where cores allow |'
    """
    b = doc["batched"]
    one, two = b["runs"].get("worker_budget"), b["runs"].get("worker_budget_x2")
    label = "| scaling at a CPU budget per worker: 2 worker processes vs 1 |"
    if not one or not two:
        return (f"{label} n/a | not measured: {b.get('cpu_budget', 'older bench')} | - | - "
                "| >= 1.7x where cores allow |")
    return (f"{label} {_sps(two)} ({two.get('cpu_budget')} core each; got {_cores(two)}) | 1 worker "
            f"{_sps(one)} (got {_cores(one)}) | {_paired(two, one)} | {_paired(two, one, 'samples_per_cpu_s')} "
            "| >= 1.7x where cores allow |")


def _peer_rows(doc: dict[str, Any]) -> list[str]:
    """One row per peer framework (benchmarks.peers): measured, or why not."""
    from benchmarks.peers import PEERS

    runs = doc["batched"]["runs"]
    worker = runs["worker"]
    status = doc.get("peers") or {}
    rows = []
    for kind, (_, label) in PEERS.items():
        name = "peer_" + kind.replace("-", "_")
        peer = runs.get(name)
        what = f"| batched, Lockstep's whole pipeline vs {label} doing decode + rolling z-score only |"
        if not peer:
            rows.append(f"{what} {_with_cpu(worker)} | n/a: {status.get(kind, 'not run')} | - | - | "
                        ">= 1.0x per CPU-s of the faster peer |")
            continue
        rows.append(f"{what} {_with_cpu(worker)} | {_with_cpu(peer)} | {_paired(worker, peer)} | "
                    f"{_paired(worker, peer, 'samples_per_cpu_s')} | >= 1.0x per CPU-s of the faster peer |")
    return rows


def _live_share(sc: dict[str, Any]) -> str:
    """How the live rate relates to the cluster's real time and to what the workers sustained.

    >>> _live_share({"spec": {"workers": 4, "load": 0.8}, "live_share_of_real_time": 0.5})
    "50% of the cluster's real time: 80% of what the 4 sustained"
    >>> _live_share({"spec": {"workers": 4, "load": 0.8}, "live_share_of_real_time": 1.0})
    "the cluster's real time: less than 80% of what the 4 sustained"
    """
    spec, share = sc["spec"], sc.get("live_share_of_real_time") or 0.0
    load = f"{spec.get('load', 0.5):.0%} of what the {spec['workers']} sustained"
    if share >= 1.0:
        return f"the cluster's real time: less than {load}"
    return f"{share:.0%} of the cluster's real time: {load}"


def scale_rows(doc: dict[str, Any]) -> list[str]:
    """The rows of the scale run (``--scale N``): N budgeted workers vs 1 on one backlog, and the live run.

    >>> row, = scale_rows({"scale": {"spec": {"workers": 4, "partitions": 16, "gpus": 10000}, "why": "no cgroup"}})
    >>> row.split(" | ")[1:3]
    ['n/a', 'not measured: no cgroup']
    """
    sc = doc.get("scale")
    if not sc:
        return []
    spec = sc["spec"]
    n = spec["workers"]
    label = f"| scale, {spec['partitions']} partitions: {n} worker processes vs 1 at a CPU budget each |"
    if sc.get("why"):
        return [f"{label} n/a | not measured: {sc['why']} | - | - | >= 3.4x |"]
    one, many = sc["one"], sc["many"]
    rows = [f"{label} {_with_cpu(many)} ({sc['cpu_budget']:g} core each; broker {many.get('broker_cores')}) | "
            f"1 worker {_with_cpu(one)} (broker {one.get('broker_cores')}) | {_paired(many, one)} | "
            f"{_paired(many, one, 'samples_per_cpu_s')} | >= {0.85 * n:.1f}x |"]
    live = sc.get("live")
    if live:
        lag = live.get("lag_messages") or {}
        each = ", ".join(_sps({"samples_per_s": v}) for v in live.get("per_worker_samples_per_s") or [])
        cores = "+".join(f"{c:.2f}" for c in live.get("cpu_cores") or [])
        produced = (live.get("produced") or {}).get("samples_per_s")
        sent = f"; the load generator sent {produced:,.0f}" if produced else ""
        latency = (f"{live['p50_s']} s / {live['p99_s']} s" if live.get("measured") else
                   f"n/a: no alert within {spec.get('settle_s', 8):g} s of the last scrape")
        rows += [
            f"| scale live: {n} workers, {spec['gpus']:,}-GPU cluster at {live['rate_samples_per_s']:,.0f} samples/s "
            f"({_live_share(sc)}{sent}), alert latency p50 / p99 | {latency} "
            f"({live['measured']} of {live['incidents']} incidents) | - | - | - | p99 < 1 s |",
            f"| scale live: lag in telemetry messages (max / median / last of {lag.get('readings', 0)} readings); "
            f"samples/s of each worker (cores) | {lag.get('max')} / {lag.get('median')} / {lag.get('last')}; "
            f"{each} ({cores}) | - | - | - | - |",
        ]
    return rows


def _carriers_note(doc: dict[str, Any]) -> str:
    """What the workers subscribed to besides the telemetry topics (older documents do not say: every carrier).

    >>> _carriers_note({"worker_carrier_formats": "none"})
    ' Workers with `LOCKSTEP_CARRIER_FORMATS=none` (the backlogs are native telemetry).'
    >>> _carriers_note({})
    ''
    """
    formats = doc.get("worker_carrier_formats")
    return (f" Workers with `LOCKSTEP_CARRIER_FORMATS={formats}` (the backlogs are native telemetry)."
            if formats else "")


def table(doc: dict[str, Any]) -> str:
    """The Markdown table of one bench document (what docs/performance.md shows); rows a ``--quick``
    run does not measure say so. A ``--scale-only`` document gives the scale rows alone."""
    m = doc["machine"]
    if "batched" not in doc:
        wall = f", {doc['wall_s']:.0f} s" if doc.get("wall_s") else ""
        head = (f"Commit `{doc['commit']}`, {doc['started']}{wall}; machine: {m['cpu']}, {m['cores']} cores shared "
                f"with the broker and other engineers' work, Python {m['python']} (scale run only).")
        return head + "\n\n" + "\n".join([
            "| figure | Lockstep | baseline (same run) | ratio, samples/s | ratio, per CPU-second | goal |",
            "|---|---|---|---|---|---|", *scale_rows(doc)]) + "\n"
    b = doc["batched"]["runs"]
    s = doc["single"]["runs"]
    st = doc["state"]
    lat = doc["latency"]
    m = doc["machine"]
    quick = bool(doc.get("quick"))
    skipped = "not run with --quick" if quick else "not run"
    stock_s = s.get("faust_stock", {})
    stock_b = b.get("faust_stock", {})
    per_msg = doc["batched"]["loaded"]["samples"] / doc["batched"]["loaded"]["messages"]
    rows = [
        "| figure | Lockstep | baseline (same run) | ratio, samples/s | ratio, per CPU-second | goal |",
        "|---|---|---|---|---|---|",
        f"| batched messages ({per_msg:.0f} samples/message), samples/s, 1 worker process | {_with_cpu(b['worker'])} "
        f"| bare aiokafka+orjson {_with_cpu(b['bare'], bound_note=True)} | {_paired(b['worker'], b['bare'])} | "
        f"{_paired(b['worker'], b['bare'], 'samples_per_cpu_s')} | >= 0.75x; >= 0.50x per CPU-s |",
        *_peer_rows(doc),
        f"| one sample per message, samples/s, 1 worker process | {_with_cpu(s['worker'])} | do-nothing Faust agent "
        f"{_with_cpu(stock_s)} (bare {_sps(s.get('bare'))}) | {_paired(s['worker'], stock_s)} | "
        f"{_paired(s['worker'], stock_s, 'samples_per_cpu_s')} | >= 0.75x |",
    ]
    if s.get("faust_noop"):
        rows.append(f"| one sample per message: the same vs a do-nothing agent with Lockstep's hand-over "
                    f"(`agents/transport.py`) | {_sps(s['worker'])} | {_sps(s['faust_noop'])} | "
                    f"{_paired(s['worker'], s['faust_noop'])} | "
                    f"{_paired(s['worker'], s['faust_noop'], 'samples_per_cpu_s')} | (reference) |")
    if b.get("worker_floor"):
        rows.append(f"| batched, Lockstep's floor: a worker that only consumes, hands over, decodes and validates "
                    f"(`benchmarks/ablated_worker.py`), vs bare | {_with_cpu(b['worker_floor'])} | bare "
                    f"{_sps(b['bare'])} | {_paired(b['worker_floor'], b['bare'])} | "
                    f"{_paired(b['worker_floor'], b['bare'], 'samples_per_cpu_s')} | (reference: what is left of "
                    f"the goals above for everything else) |")
    rows.append(f"| batched, do-nothing Faust agent / with Lockstep's hand-over, vs bare | {_with_cpu(stock_b)} / "
                f"{_with_cpu(b.get('faust_noop')) if b.get('faust_noop') else skipped} | bare {_sps(b['bare'])} | "
                f"{_paired(stock_b, b['bare'])} | {_paired(stock_b, b['bare'], 'samples_per_cpu_s')} | (reference) |")
    cluster = (f", {lat['gpus']:,}-GPU cluster" + (f" in {lat['jobs']} jobs" if lat.get("jobs") else "")
               if lat.get("gpus") else "")
    hi = doc.get("latency_80")
    found = doc.get("live_max") or {}
    above = (f"; above the live maximum {found['live_max_samples_per_s']:,.0f}: the worker falls behind"
             if found.get("live_max_samples_per_s") and lat["rate_samples_per_s"] > found["live_max_samples_per_s"]
             else "")
    rows.append(f"| alert latency at {lat['rate_samples_per_s']:,.0f} samples/s (half the backlog rate{cluster}"
                f"{above}), p50 / p99 | "
                f"{lat['p50_s']} s / {lat['p99_s']} s ({lat['measured']} alerts{_p99s(lat)}) | - | - | - | "
                f"{'(reference)' if hi else 'p99 < 1 s'} |")
    if hi:
        sent = (hi.get("produced") or {}).get("samples_per_s")
        of = (f"80% of the live maximum {found['live_max_samples_per_s']:,.0f}" if found.get("live_max_samples_per_s")
              else "80% of max")
        rows.append(f"| alert latency at {hi['rate_samples_per_s']:,.0f} samples/s ({of}{cluster}; sent "
                    f"{sent or 0:,.0f}), p50 / p99 | {hi['p50_s']} s / {hi['p99_s']} s ({hi['measured']} of "
                    f"{hi['incidents']} alerts{_p99s(hi)}) | - | - | - | p99 < 1 s |")
    if doc.get("live_max"):
        found = doc["live_max"]
        steps = "; ".join(f"{t['rate_samples_per_s']:,.0f} {'kept up' if t['kept_up'] else 'behind'}"
                          f" ({t['cpu_cores']} core)" for t in found["trials"])
        shape = (f"{found['gpus']:,} GPUs in {found['jobs']} jobs, " if found.get("gpus") and found.get("jobs")
                 else "")
        inc = found.get("incidents")
        if inc:
            shape += (f"an incident every {inc['every_scrapes']} scrapes lasting {inc['each_s']:.0f} s as in the "
                      f"latency run, ")
        rows.append(f"| highest rate 1 worker sustains live ({shape}{found.get('step_s', 10):.0f} s steps, everything "
                    f"processed within {found.get('drain_allowed_s', 0.5)} s of the last scrape) | "
                    f"{found['live_max_samples_per_s']:,.0f} samples/s | backlog rate {_sps(b['worker'])} | "
                    f"{_ratio(found['live_max_samples_per_s'], b['worker'].get('samples_per_s'))} | - | "
                    f"(steps: {steps}) |")
    for target in ("10000", "100000"):
        if target in st:
            x = st[target]
            index = x.get("parts_bytes", {}).get("row_index")
            of_it = (f" (state {x['state_bytes_per_series']:,.0f} + row index {index:,.0f})"
                     if index is not None and "state_bytes_per_series" in x else "")
            rows.append(f"| state per series at {x['series']:,} series (arrays + registry + row index / heap / "
                        f"snapshot) | {x['arrays_and_registry_bytes_per_series']:,.0f}{of_it} / "
                        f"{x['heap_bytes_per_series']:,.0f} / {x['snapshot_bytes_per_series']:,.0f} B | - | - | - | "
                        "<= 1.5 KB at 100k |")
        else:
            rows.append(f"| state per series at ~{int(target):,} series | {skipped} | - | - | - | <= 1.5 KB at 100k |")
    big = st.get("worker_100k")
    big_series = f"{big['series']:,} series" if big else "~100k series"
    big_rss = f"{big['rss_mb']} MB" if big else skipped
    rows.append(f"| worker resident memory: {doc['batched']['loaded'].get('series', 0):,} series / {big_series} | "
                f"{b['worker']['rss_mb']} MB / {big_rss} | bare consumer {b['bare']['rss_mb']} MB | - | - | - |")
    if b.get("worker_x2"):
        bare2 = b.get("bare_x2", {})
        rows += [
            f"| scaling, 8 partitions: 2 worker processes vs 1 | {_sps(b['worker_x2'])} | "
            f"1 worker {_sps(b['worker'])}; "
            f"bare 2 vs 1: {_ratio(bare2.get('samples_per_s'), b['bare'].get('samples_per_s'))} | "
            f"{_paired(b['worker_x2'], b['worker'])} | {_paired(b['worker_x2'], b['worker'], 'samples_per_cpu_s')} | "
            f">= 1.7x where cores allow |",
            f"| scaling: CPU the workers got (cores; broker) | 2 workers {_cores(b['worker_x2'])} | 1 worker "
            f"{_cores(b['worker'])} | - | - | (what limits the ratio above) |",
        ]
    else:
        rows.append(f"| scaling, 8 partitions: 2 worker processes vs 1 | {skipped} | - | - | - | >= 1.7x where cores "
                    "allow |")
    rows.append(_budget_row(doc))
    rows += scale_rows(doc)
    wall = f", {doc['wall_s']:.0f} s" if doc.get("wall_s") else ""
    head = (f"Commit `{doc['commit']}`, {doc['started']}{wall}; machine: {m['cpu']}, {m['cores']} cores shared with "
            f"the broker and other engineers' work, Python {m['python']}{' (quick run)' if quick else ''}."
            + _carriers_note(doc))
    return head + "\n\n" + "\n".join(rows) + "\n"


def write_docs(doc: dict[str, Any], path: Path) -> bool:
    """The table between the ``bench`` markers of ``path``; a ``--scale-only`` document's between the
    ``bench-scale`` ones (the main table stays as it was). False when the markers are missing."""
    begin, end = (BEGIN, END) if "batched" in doc else (SCALE_BEGIN, SCALE_END)
    text = path.read_text() if path.exists() else ""
    if begin not in text or end not in text:
        return False
    a = text.index(begin) + len(begin)
    b = text.index(end)
    path.write_text(text[:a] + "\n\n" + table(doc) + "\n" + text[b:])
    return True


def scale_spec(args: argparse.Namespace) -> Any:
    """The :class:`benchmarks.lockbench.ScaleSpec` the options ask for, or None (no scale run).

    >>> p = argparse.ArgumentParser(); add_arguments(p)
    >>> scale_spec(p.parse_args([])) is None
    True
    >>> spec = scale_spec(p.parse_args(["--scale", "4", "--scale-cores", "0.25"]))
    >>> spec.workers, spec.cores, spec.partitions, spec.load
    (4, 0.25, 16, 0.5)
    >>> scale_spec(p.parse_args(["--scale-only"])).workers
    4
    """
    from benchmarks.lockbench import ScaleSpec

    workers = args.scale or (4 if args.scale_only else 0)
    if workers <= 0:
        return None
    return ScaleSpec(workers=workers, cores=args.scale_cores, load=args.scale_load)


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
                             worker_cores=args.worker_cores or None, peer_rows=args.peers,
                             scale=scale_spec(args), scale_only=args.scale_only)
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
