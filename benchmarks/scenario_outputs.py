"""Every simulator scenario through the broker-free runner, written out so two trees can be diffed.

A change of shape (streams/stages, lockstep/local.py) must not change what comes out. Run this once
on the tree before the change and once on the tree after, then diff the two directories::

    git archive <before> | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before python benchmarks/scenario_outputs.py write /tmp/out-before
    PYTHONPATH=$PWD        python benchmarks/scenario_outputs.py write /tmp/out-after
    python benchmarks/scenario_outputs.py diff /tmp/out-before /tmp/out-after

Run as a script (not ``-m``) so that ``PYTHONPATH`` alone decides which tree is measured. It uses
only what both trees have: :func:`lockstep.local.run_scenario` and the fields of its result. Each
scenario gives one file of canonical JSON (sorted keys): alerts, anomalies, timelines, stats, the
dead-letter and sample counts. With ``--replay`` each scenario also goes through ``lockstep replay``
(the real worker on the embedded broker, a minute or two each), its alerts as written in
``<scenario>.replay.jsonl``. ``diff`` compares every file byte for byte and exits 1 when any
differs, with the first difference.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

#: The result fields compared (lists of records, then counts).
FIELDS = ("alerts", "anomalies", "timelines", "stats", "dead_letters", "samples")


def outputs(name: str, seed: int = 7) -> dict[str, Any]:
    """Scenario ``name`` through :func:`lockstep.local.run_scenario`: the compared fields."""
    from lockstep.local import run_scenario

    result = run_scenario(name, seed=seed)
    return {f: getattr(result, f) for f in FIELDS}


def canonical(doc: dict[str, Any]) -> bytes:
    """Byte-stable JSON: sorted keys, numpy scalars as numbers."""
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2)


def replay(name: str, seed: int, target: Path) -> None:
    """Scenario ``name`` written as a replay file and through ``lockstep replay`` (same ``PYTHONPATH``)."""
    with tempfile.TemporaryDirectory() as tmp:
        feed = Path(tmp) / f"{name}.jsonl"
        for args in (["simulate", name, "--seed", str(seed), "-o", str(feed)],
                     ["replay", "-i", str(feed), "-o", str(target)]):
            subprocess.run([sys.executable, "-m", "lockstep.cli", *args], check=True, cwd=tmp, env=dict(os.environ),
                           stdout=subprocess.DEVNULL)


def write(directory: Path, names: list[str], seed: int, with_replay: bool = False) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        blob = canonical(outputs(name, seed))
        (directory / f"{name}.json").write_bytes(blob)
        print(f"{name}: {hashlib.sha256(blob).hexdigest()[:16]} ({len(blob)} bytes)", flush=True)
        if with_replay:
            target = directory / f"{name}.replay.jsonl"
            replay(name, seed, target)
            print(f"{name} replay: {hashlib.sha256(target.read_bytes()).hexdigest()[:16]}", flush=True)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two decoded JSON documents first differ, or None when they are equal.

    >>> first_difference({"x": [1, {"y": 2}]}, {"x": [1, {"y": 3}]})
    'x[1].y: 2 != 3'
    >>> first_difference([1, 2], [1, 2]) is None
    True
    """
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'after' if k in b else 'before'}".lstrip(".")
            d = first_difference(a[k], b[k], f"{path}.{k}".lstrip("."))
            if d is not None:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        return None if len(a) == len(b) else f"{path}: length {len(a)} != {len(b)}"
    return None if a == b else f"{path}: {a!r} != {b!r}"


def diff(before: Path, after: Path) -> int:
    """Compare every scenario file of ``before`` with ``after`` byte for byte; 1 if any differs."""
    names = sorted(p.name for p in [*before.glob("*.json"), *before.glob("*.replay.jsonl")])
    if not names:
        print(f"no scenario files in {before}")
        return 1
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not b.exists():
            print(f"{name}: missing in {after}")
            differ += 1
            continue
        if a.read_bytes() == b.read_bytes() and name.endswith(".jsonl"):
            print(f"{name}: identical ({len(a.read_bytes().splitlines())} alerts)")
            continue
        if name.endswith(".jsonl"):
            differ += 1
            print(f"{name}: DIFFERENT")
            continue
        if a.read_bytes() == b.read_bytes():
            doc = orjson.loads(a.read_bytes())
            print(f"{name}: identical ({len(doc['alerts'])} alerts, {len(doc['anomalies'])} anomalies, "
                  f"{len(doc['timelines'])} timelines, {len(doc['stats'])} stats, "
                  f"{doc['dead_letters']} dead letters, {doc['samples']} samples)")
            continue
        differ += 1
        print(f"{name}: DIFFERENT at {first_difference(orjson.loads(a.read_bytes()), orjson.loads(b.read_bytes()))}")
    print(f"{len(names) - differ}/{len(names)} scenarios identical")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="run the scenarios, one JSON file each")
    w.add_argument("directory", type=Path)
    w.add_argument("--scenario", action="append", help="only these (default: every scenario)")
    w.add_argument("--seed", type=int, default=7)
    w.add_argument("--replay", action="store_true", help="also through lockstep replay (embedded broker)")
    d = sub.add_parser("diff", help="compare two directories written by 'write'")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "diff":
        return diff(args.before, args.after)
    from lockstep.simulate import SCENARIOS

    write(args.directory, args.scenario or list(SCENARIOS), args.seed, args.replay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
