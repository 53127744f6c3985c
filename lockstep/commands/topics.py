"""``lockstep topics list|create``: the topic catalogue, and its idempotent creation."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import textwrap

from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics", help="list or create the topics Lockstep uses", description=__doc__)
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    ls = tsub.add_parser("list", help="print the catalogue (topic, partitions, key, retention, purpose)")
    ls.set_defaults(handler=list_topics)
    cr = tsub.add_parser("create", help="create every missing topic (idempotent)")
    cr.set_defaults(handler=create)


def list_topics(args: argparse.Namespace) -> int:
    from agents.topics import TopicCatalogue

    rows = []
    for spec in TopicCatalogue(LockstepSettings()).specs():
        policy = "compact" if spec.compact else (f"{spec.retention_ms // 3_600_000}h" if spec.retention_ms else "-")
        rows.append((spec.name, str(spec.partitions), spec.key, policy, spec.purpose))
    print(topic_table(rows, shutil.get_terminal_size((120, 24)).columns))
    return 0


KEY_WIDTH = 24  # wider keys (the inventory's) wrap inside their column


def topic_table(rows: list[tuple[str, str, str, str, str]], width: int) -> str:
    """Rows of (topic, partitions, key, retention, purpose) as aligned columns with a header: each
    column as wide as its longest cell, the key column at most ``KEY_WIDTH`` and the purpose the rest
    of ``width`` (at least 20), long cells wrapped inside their column.

    >>> print(topic_table([("lockstep.alerts", "1", "job_id", "720h", "enriched alerts"),
    ...                    ("lockstep.inventory", "1", "job:<id> | link:<node>:<dev>:<port>", "compact", "jobs")], 80))
    TOPIC               PARTS  KEY                       RETENTION  PURPOSE
    lockstep.alerts         1  job_id                    720h       enriched alerts
    lockstep.inventory      1  job:<id> |                compact    jobs
                               link:<node>:<dev>:<port>
    """
    header = ("TOPIC", "PARTS", "KEY", "RETENTION", "PURPOSE")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    widths[2] = min(widths[2], KEY_WIDTH)
    purpose = max(20, width - sum(widths) - 2 * 4)
    lines = []
    for row in [header, *rows]:
        cells = [textwrap.wrap(cell, w, break_on_hyphens=False) or [""] for cell, w in
                 zip(row, [*widths, purpose], strict=True)]
        for n in range(max(len(c) for c in cells)):
            parts = [c[n] if n < len(c) else "" for c in cells]
            line = "  ".join([parts[0].ljust(widths[0]), parts[1].rjust(widths[1]), parts[2].ljust(widths[2]),
                              parts[3].ljust(widths[3]), parts[4]])
            lines.append(line.rstrip())
    return "\n".join(lines)


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
