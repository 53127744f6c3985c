"""``lockstep topics list|create``: the topic catalogue, and its idempotent creation."""

from __future__ import annotations

import argparse
import asyncio
import sys

from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics", help="list or create the topics Lockstep uses", description=__doc__)
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    ls = tsub.add_parser("list", help="print the catalogue (name, partitions, key, retention, purpose)")
    ls.set_defaults(handler=list_topics)
    cr = tsub.add_parser("create", help="create every missing topic (idempotent)")
    cr.set_defaults(handler=create)


def list_topics(args: argparse.Namespace) -> int:
    from agents.topics import TopicCatalogue

    for spec in TopicCatalogue(LockstepSettings()).specs():
        retention = f"retention {spec.retention_ms // 3_600_000}h" if spec.retention_ms else ""
        policy = "compact" if spec.compact else retention
        print(f"{spec.name:44s} {spec.partitions:4d}  key={spec.key[:40]:40s} {policy:16s} {spec.purpose}")
    return 0


def create(args: argparse.Namespace) -> int:
    from agents.topics import create_topics

    settings = LockstepSettings()
    if settings.kafka_bootstrap_servers is None:
        print("lockstep topics create: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS (the embedded broker creates its "
              "topics itself in `lockstep run`, `worker` and `replay`)", file=sys.stderr)
        return 2
    created = asyncio.run(create_topics(settings, settings.kafka_bootstrap_servers))
    print(f"created {len(created)} topics" + (": " + ", ".join(created) if created else " (all existed)"))
    return 0
