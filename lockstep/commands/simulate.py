"""``lockstep simulate``: a simulated cluster, to a JSONL file or to Kafka."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lockstep.simulate import SCENARIOS


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="generate a simulated cluster with a named fault scenario",
                       description=__doc__)
    p.add_argument("scenario", nargs="?", default="seed-incident", choices=sorted(SCENARIOS),
                   help="fault scenario (default seed-incident)")
    p.add_argument("--output", "-o", type=Path, help="write JSONL here (a replay file)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--list", action="store_true", help="list the scenarios and what each should yield")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for name, sc in sorted(SCENARIOS.items()):
            print(f"{name:24s} {sc.description}\n{'':24s} expect: {sc.expect}")
        return 0
    if args.output is None:
        print("lockstep simulate: give --output FILE.jsonl (or use `lockstep run` for a live cluster)",
              file=sys.stderr)
        return 2
    from lockstep.replay import write_simulation

    n = write_simulation(args.output, args.scenario, seed=args.seed)
    print(f"wrote {n} lines of scenario {args.scenario} to {args.output}", file=sys.stderr)
    return 0
