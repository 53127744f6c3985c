"""``lockstep receivers test|check``: try each configured receiver with a sample alert, or validate routes.

``test`` sends the sample alert (firing, then resolved unless ``--no-resolve``) straight through
each receiver's sender — no grouping, no ledger, no retry — and prints one line per receiver:
``ok``, or the (redacted) reason it failed. Exit code 1 if any receiver failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from lockstep.safetext import safe_text
from models.errors import ConfigError, DeliveryError
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("receivers", help="test or check the delivery receivers", description=__doc__)
    inner = p.add_subparsers(dest="receivers_command", metavar="ACTION")
    t = inner.add_parser("test", help="send a sample alert through each configured receiver and report")
    t.add_argument("--routes", type=Path, default=None, help="routing file (default LOCKSTEP_DELIVERY_ROUTES_FILE)")
    t.add_argument("--receiver", "-r", action="append", default=None, help="only this receiver (repeatable)")
    t.add_argument("--no-resolve", action="store_true", help="send only the firing alert")
    t.set_defaults(handler=run_test)
    c = inner.add_parser("check", help="validate the routing file and its secrets, print the tree")
    c.add_argument("--routes", type=Path, default=None)
    c.set_defaults(handler=run_check)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def run_check(args: argparse.Namespace) -> int:
    from lockstep.delivery.service import load_routing_file

    settings = LockstepSettings()
    try:
        config = load_routing_file(settings, args.routes)
    except ConfigError as exc:
        print(f"lockstep receivers check: {exc}", file=sys.stderr)
        return 2
    for route in config.root.walk():
        o = route.options
        depth = route.id.count(".")
        matchers = ", ".join(str(m) for m in route.matchers) or "*"
        print(f"{'  ' * depth}{route.id} [{matchers}] -> {o.receiver}{' (continue)' if route.continue_ else ''} "
              f"group_by={list(o.group_by)} wait={o.group_wait:g}s interval={o.group_interval:g}s "
              f"repeat={o.repeat_interval:g}s")
    for rc in config.receivers.values():
        print(f"receiver {rc.name}: {rc.kind}")
    return 0


def run_test(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    return asyncio.run(_test(settings, args.routes, args.receiver, not args.no_resolve, sys.stdout))


async def _test(settings: LockstepSettings, routes: Path | None, only: list[str] | None, resolve: bool,
                out: Any) -> int:
    from lockstep.delivery.base import DeliveryContext
    from lockstep.delivery.receivers import RECEIVERS
    from lockstep.delivery.redaction import SecretResolver
    from lockstep.delivery.sample import sample_alert
    from lockstep.delivery.service import build_receiver, load_routing_file
    from lockstep.delivery.topics import DeliveryTopics, create_delivery_topics
    from streams.dispatch import Notification

    try:
        config = load_routing_file(settings, routes)
    except ConfigError as exc:
        print(f"lockstep receivers test: {exc}", file=sys.stderr)
        return 2
    resolver = SecretResolver(settings.delivery_secrets)
    names = [n for n in config.receivers if not only or n in only]
    unknown = sorted(set(only or []) - set(config.receivers))
    if unknown:
        print(f"lockstep receivers test: no receiver named {', '.join(unknown)}", file=sys.stderr)
        return 2
    producer = None
    topics = DeliveryTopics(settings)
    needs_kafka = any(RECEIVERS[config.receivers[n].kind].needs_kafka for n in names)
    if needs_kafka and settings.kafka_bootstrap_servers:
        from agents.kafka import start_producer

        await create_delivery_topics(settings, settings.kafka_bootstrap_servers, config)
        producer = await start_producer(settings, settings.kafka_bootstrap_servers, acks="all")
    failed = 0
    run_tag = f"{int(time.time())}"
    try:
        for name in names:
            rc = config.receivers[name]
            if RECEIVERS[rc.kind].needs_kafka and producer is None:
                print(f"{name:24s} {rc.kind:12s} skipped: needs LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", file=out)
                continue
            receiver = build_receiver(rc, resolver, producer=producer, topics=topics)
            started = time.perf_counter()
            try:
                for status in ("firing", "resolved") if resolve else ("firing",):
                    now = time.time()
                    alert = sample_alert(now, status=status, tag=f"{name}-{run_tag}")
                    n = Notification(name, f"test:{name}", {"job": "llm-70b"}, [alert], [alert], False)
                    await receiver.send(n, DeliveryContext(now=now, public_url=settings.public_url))
                ms = (time.perf_counter() - started) * 1000
                print(f"{name:24s} {rc.kind:12s} ok ({ms:.0f} ms)", file=out)
            except DeliveryError as exc:
                failed += 1
                kind = "will retry" if exc.retryable else "rejected"
                reason = safe_text(resolver.redactor.text(str(exc)))
                print(f"{name:24s} {rc.kind:12s} FAILED ({kind}): {reason}", file=out)
            finally:
                await receiver.close()
    finally:
        if producer is not None:
            await producer.stop()
    return 1 if failed else 0
