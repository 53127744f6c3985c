"""``lockstep worker``: one production worker (ingest + correlate agents) until SIGTERM/Ctrl-C.

With ``LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS`` set it joins that cluster; without it, it starts the
embedded broker and prints its address (useful to feed it by hand).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from lockstep.logs import setup_logging
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a worker (creates missing topics first)", description=__doc__)
    p.add_argument("--no-create-topics", action="store_true", help="do not create missing topics")
    p.set_defaults(handler=run)


async def _main(settings: LockstepSettings, create: bool) -> int:
    from agents.topics import create_topics
    from lockstep.broker import EmbeddedBroker
    from lockstep.worker import Worker, settle_heap, start_unless_stopped

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    broker = None
    worker = None
    try:
        bootstrap = settings.kafka_bootstrap_servers
        if bootstrap is None:
            broker = await EmbeddedBroker(log_dir=settings.data_dir).astart()
            bootstrap = broker.bootstrap
            print(f"lockstep worker: embedded broker on {bootstrap} (pid {broker.pid})", file=sys.stderr)
        if create:
            await create_topics(settings, bootstrap)
        worker = Worker(settings, bootstrap, serve_web=True)
        if not await start_unless_stopped(worker, stop):
            print("lockstep worker: stopped during start-up", file=sys.stderr)
            return 0
        settle_heap(settings.gc_young_threshold)
        print(f"lockstep worker: consuming from {bootstrap} as {settings.app_id}; API and page at "
              f"{worker.web_url}/", file=sys.stderr)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            if worker.app.crashed:  # a process that serves HTTP but no longer consumes must not look alive
                print(f"lockstep worker: the agents crashed ({worker.app.crash_reason!r}); exiting so that the "
                      "supervisor restarts the worker", file=sys.stderr)
                return 1
        return 0
    finally:
        if worker is not None:
            await worker.stop()
        if broker is not None:
            broker.stop()


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    setup_logging(settings.log_level)
    return asyncio.run(_main(settings, not args.no_create_topics))
