"""``lockstep run``: embedded broker + worker + simulated cluster playing a fault scenario, live alerts."""

from __future__ import annotations

import argparse
import asyncio

from lockstep.logs import setup_logging
from lockstep.simulate import SCENARIOS
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="the whole pipeline on this machine with a simulated cluster (the demo)",
                       description=__doc__)
    p.add_argument("--scenario", default="seed-incident", choices=sorted(SCENARIOS))
    p.add_argument("--speed", type=positive_speed, default=10.0,
                   help="play the scenario this many times faster than real time (then real time); its event "
                   "times start far enough in the past never to be ahead of the wall clock")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--exit-on", choices=("firing", "resolved"), default=None,
                   help="exit 0 at the first alert with this status (exit 1 if none came within --max-seconds)")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(handler=run)


def positive_speed(text: str) -> float:
    """``--speed``: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a speed above 0")
    return value


def run(args: argparse.Namespace) -> int:
    from lockstep.run import run as run_async

    settings = LockstepSettings()
    setup_logging("warn" if settings.log_level == "info" else settings.log_level)
    return asyncio.run(run_async(settings, scenario=args.scenario, speed=args.speed, seed=args.seed,
                                 exit_on=args.exit_on, max_seconds=args.max_seconds))
