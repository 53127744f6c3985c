"""``lockstep tail alerts|dlq|anomalies``: follow a topic in readable form."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import signal
import sys
from typing import Any

import orjson

from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tail", help="follow alerts, dead letters or anomalies", description=__doc__)
    p.add_argument("what", choices=("alerts", "dlq", "anomalies"))
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    p.add_argument("--json", action="store_true", help="print raw JSON lines")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(handler=run)


def render(what: str, rec: dict[str, Any]) -> str:
    from lockstep.render import render_alert

    if what == "alerts":
        return render_alert(rec)
    if what == "dlq":
        original = base64.b64decode(rec.get("original", "")).decode("utf-8", "replace")
        where = f"{rec.get('topic')}[{rec.get('partition')}]@{rec.get('offset')}"
        return (f"DEAD LETTER {rec.get('stage')}/{rec.get('error')} {where} {rec.get('record') or ''}\n"
                f"  reason   {rec.get('reason')}\n  original {original[:200]}")
    if rec.get("type") == "watermark":
        return f"watermark {len(rec.get('origins', {}))} origins, eos {len(rec.get('eos', []))}"
    return (f"{rec.get('phase', '?'):5} {rec.get('job_id')} {rec.get('layer')}/{rec.get('source')} {rec.get('metric')} "
            f"{rec.get('labels')} value={rec.get('value')} p50={rec.get('p50')} score={rec.get('score', 0):.2f}")


async def _tail(settings: LockstepSettings, args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaConsumer

    from agents.kafka import client_kwargs
    from agents.topics import TopicCatalogue

    cat = TopicCatalogue(settings)
    topic = {"alerts": cat.alerts, "dlq": cat.dlq, "anomalies": cat.anomalies}[args.what]
    assert settings.kafka_bootstrap_servers is not None
    consumer = AIOKafkaConsumer(topic, **client_kwargs(settings, settings.kafka_bootstrap_servers), group_id=None,
                                auto_offset_reset="earliest" if args.from_beginning else "latest")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if args.max_seconds is not None:
        loop.call_later(args.max_seconds, stop.set)
    await consumer.start()
    try:
        while not stop.is_set():
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                for m in msgs:
                    rec = orjson.loads(m.value)
                    print(m.value.decode() if args.json else render(args.what, rec), flush=True)
    finally:
        await consumer.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    if settings.kafka_bootstrap_servers is None:
        print("lockstep tail: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS to the broker to follow "
              "(`lockstep run` prints alerts itself)", file=sys.stderr)
        return 2
    return asyncio.run(_tail(settings, args))
