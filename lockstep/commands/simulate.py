"""``lockstep simulate``: a simulated cluster, to a JSONL file or to Kafka."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lockstep.commands.run import positive_speed
from lockstep.scenarios import extra_scenarios
from lockstep.simulate import SCENARIOS


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="generate a simulated cluster with a named fault scenario",
                       description=__doc__)
    p.add_argument("scenario", nargs="?", default="seed-incident", choices=sorted({*SCENARIOS, *extra_scenarios()}),
                   help="fault scenario (default seed-incident; the storage and fabric ones with --output only)")
    p.add_argument("--output", "-o", type=Path, help="write JSONL here (a replay file)")
    p.add_argument("--kafka", action="store_true",
                   help="produce live to LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS (inventory first, then 1 s ticks)")
    p.add_argument("--speed", type=positive_speed, default=1.0,
                   help="with --kafka: play this many times faster than real time (event times start far enough "
                   "in the past never to be ahead of the wall clock)")
    p.add_argument("--once", action="store_true", help="with --kafka: stop at the end of the scenario")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--list", action="store_true", help="list the scenarios and what each should yield")
    p.add_argument("--gpus", type=int, help="load generation instead of a scenario: a cluster of N GPUs "
                   "(lockstep.loadgen; with --kafka or --output)")
    p.add_argument("--rate", type=float, help="with --gpus: samples/s to produce (default: real time, one scrape a "
                   "second)")
    p.add_argument("--duration", type=float, help="with --gpus: seconds of scrapes (default: until Ctrl-C with "
                   "--kafka, 60 with --output)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        listed = {name: (sc.description, sc.expect) for name, sc in SCENARIOS.items()}
        listed |= {name: (d, e) for name, (d, e, _) in extra_scenarios().items()}
        for name, (description, expect) in sorted(listed.items()):
            print(f"{name:24s} {description}\n{'':24s} expect: {expect}")
        return 0
    if args.gpus:
        from lockstep.loadgen import run_cli

        return run_cli(args)
    extra = extra_scenarios().get(args.scenario)
    if extra is not None and args.kafka:
        print(f"lockstep simulate: {args.scenario} is written to a file only: give --output FILE.jsonl and "
              "replay it with `lockstep replay -i FILE.jsonl`", file=sys.stderr)
        return 2
    if args.kafka:
        return _live(args)
    if args.output is None:
        print("lockstep simulate: give --output FILE.jsonl or --kafka (or use `lockstep run` for the whole demo)",
              file=sys.stderr)
        return 2
    from lockstep.replay import write_simulation

    n = (extra[2](args.output, args.scenario, seed=args.seed) if extra is not None
         else write_simulation(args.output, args.scenario, seed=args.seed))
    print(f"wrote {n} lines of scenario {args.scenario} to {args.output}", file=sys.stderr)
    return 0


def _live(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import signal
    import time

    from agents.kafka import start_producer
    from agents.topics import TopicCatalogue, create_topics
    from lockstep.logs import setup_logging
    from lockstep.run import demo_start, play
    from lockstep.simulate import Simulator
    from models.inventory import inventory_adapter, inventory_key
    from models.settings import LockstepSettings

    settings = LockstepSettings()
    setup_logging(settings.log_level)
    bootstrap = settings.kafka_bootstrap_servers
    if bootstrap is None:
        print("lockstep simulate --kafka: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await create_topics(settings, bootstrap)
        sc = SCENARIOS[args.scenario]
        anchor = demo_start(time.time(), sc.duration, args.speed)
        sim = Simulator(sc, start_ts=anchor, seed=args.seed)
        producer = await start_producer(settings, bootstrap)
        cat = TopicCatalogue(settings)
        for msg in sim.inventory():
            event = inventory_adapter.validate_python(msg.value)
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        await producer.stop()
        print(f"lockstep simulate: {args.scenario} to {bootstrap} at {args.speed:g}x", file=sys.stderr)
        await play(settings, bootstrap, args.scenario, args.speed, args.seed, stop, anchor,
                   realtime_after=not args.once)

    asyncio.run(main())
    return 0
