"""``lockstep annotate --job J "text"``: record an operator change; the job's stats then report step time
before and after it (an ``annotation_effect`` record on the stats topic once the window has passed)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from lockstep.safetext import safe_text
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("annotate", help="record an operator change (a fix) for a job", description=__doc__)
    p.add_argument("--job", required=True, help="the job the change applies to")
    p.add_argument("text", help="what was changed")
    p.add_argument("--kind", choices=("fix", "change", "note"), default="fix")
    p.add_argument("--at", default=None, help="when (RFC 3339 or Unix seconds; default: now)")
    p.add_argument("--author", default=None)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agents.kafka import start_producer
    from agents.topics import TopicCatalogue
    from models.operator import AnnotationRecord
    from models.timeutil import TimestampError, format_ts, parse_ts

    settings = LockstepSettings()
    if settings.kafka_bootstrap_servers is None:
        print("lockstep annotate: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS (or POST /annotations on a worker)",
              file=sys.stderr)
        return 2
    now = time.time()
    try:
        ts = now if args.at is None else parse_ts(float(args.at) if args.at.replace(".", "", 1).isdigit() else args.at)
    except TimestampError as exc:
        print(f"lockstep annotate: --at: {exc}", file=sys.stderr)
        return 2
    record = AnnotationRecord(annotation_id=uuid.uuid4().hex[:16], job_id=args.job, ts=ts, kind=args.kind,
                              text=args.text, author=args.author, created_at=now)

    async def send() -> None:
        assert settings.kafka_bootstrap_servers is not None
        producer = await start_producer(settings, settings.kafka_bootstrap_servers)
        try:
            await producer.send_and_wait(TopicCatalogue(settings).annotations, record.model_dump_json().encode(),
                                         key=args.job.encode())
        finally:
            await producer.stop()

    asyncio.run(send())
    print(f"annotated {safe_text(args.job)} at {format_ts(ts)}: {safe_text(args.text)} ({record.annotation_id})")
    return 0
