"""``lockstep replay --input FILE.jsonl --output ALERTS.jsonl``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from lockstep.logs import setup_logging
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="push a JSONL file of samples and inventory through the agents via the broker",
                       description=__doc__)
    p.add_argument("--input", "-i", type=Path, required=True,
                   help="JSONL: one sample, inventory event or real-format envelope per line")
    p.add_argument("--output", "-o", type=Path, default=None, help="write alerts here as JSON lines (default stdout)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lockstep.replay import replay

    settings = LockstepSettings()
    setup_logging(settings.log_level if settings.log_level != "info" else "warn")
    if not args.input.exists():
        print(f"lockstep replay: {args.input}: no such file", file=sys.stderr)
        return 2
    out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
    try:
        summary = asyncio.run(replay(settings, args.input, out, timeout_s=args.timeout))
    except TimeoutError:
        print("lockstep replay: the pipeline did not finish in time", file=sys.stderr)
        return 1
    finally:
        if args.output:
            out.close()
    print(f"replayed {summary['samples']} samples, {summary['inventory']} inventory events, "
          f"{summary['envelopes']} real-format messages ({summary['bad_lines']} bad lines) "
          f"in {summary['seconds']} s: {summary['alerts']} alert records",
          file=sys.stderr)
    return 0
