"""``lockstep capacity``: the GPU-hours lost per root-cause entity, job or domain over a window.

Asks a worker's ``/capacity`` (``--url``, else ``LOCKSTEP_PUBLIC_URL``, else
``http://LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT``), or with ``--kafka`` reads the ``capacity`` topic
itself (``LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS``) and rolls it up here, with the same code. ``--by``:
``entity`` (every entity: ports and their leaves both), one kind (``port``, ``leaf``, ``spine``,
``nic``, ``node``, ``pool``, ...), ``job`` or ``domain``. ``--window``: ``hour``, ``day``, ``week``
or ``<n>h|d|w`` (default ``7d``). How the figures are made: docs/capacity.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from lockstep.apiclient import get_json
from lockstep.commands.diagnose import base_url
from lockstep.safetext import safe_data, safe_json, safe_text
from models.settings import LockstepSettings
from streams.ledger import GROUPINGS, Ledger, LedgerEntry, LedgerError, report


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("capacity", help="print the GPU-hours lost per entity, job or domain (the ledger)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--by", default="entity", choices=GROUPINGS, help="what to group by (default entity)")
    p.add_argument("--window", default="7d", help="hour, day, week or <n>s|m|h|d|w (default 7d)")
    p.add_argument("--limit", type=int, default=10, help="rows to print (default 10)")
    p.add_argument("--url", default=None, help="a worker's base URL")
    p.add_argument("--kafka", action="store_true", help="read the capacity topic instead of asking a worker")
    p.add_argument("--json", action="store_true", help="print the JSON answer")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the worker or the broker")
    p.set_defaults(handler=run)


def fetch_capacity(base: str, by: str, window: str, limit: int, timeout: float = 10.0) -> dict[str, Any]:
    """GET ``/capacity``; raises ``LookupError`` with the API's message on a 4xx."""
    query = urllib.parse.urlencode({"by": by, "window": window, "limit": limit})
    return get_json(f"{base}/capacity?{query}", timeout)


def ledger_of_records(records: list[Any]) -> tuple[Ledger, int]:
    """A ledger from ``capacity`` records in their partitions' order; also how many were unusable."""
    led, bad = Ledger(), 0
    for rec in records:
        try:
            led.add(LedgerEntry.from_record(rec))
        except (LedgerError, AttributeError):
            bad += 1
    return led, bad


def render_capacity(d: dict[str, Any]) -> str:
    """The roll-up as a table, every string escaped.

    >>> print(render_capacity({"by": "leaf", "window": "7d", "as_of_iso": "2025-11-30T11:44:00Z", "gpu_hours": 2.1333,
    ...     "incidents": 1, "rows": [{"kind": "leaf", "id": "leaf03", "gpu_hours": 2.1333, "incidents": 1, "open": 0,
    ...     "fixed": True, "jobs": ["llm-70b"]}]}))
    GPU-time lost by leaf over 7d to 2025-11-30 11:44:00 UTC: 2.13 GPU-hours in 1 incident
      KIND          ENTITY                          GPU-HOURS  INCIDENTS  OPEN  FIXED  JOBS
      leaf          leaf03                               2.13          1     0  yes    llm-70b
    """
    d = safe_data(d)
    n = d["incidents"]
    lines = [f"GPU-time lost by {d['by']} over {d['window']} to {d['as_of_iso'][:19].replace('T', ' ')} UTC: "
             f"{d['gpu_hours']:,.2f} GPU-hours in {n} incident{'s' if n != 1 else ''}"]
    if not d["rows"]:
        return lines[0] + "\n  (nothing lost in this window)"
    lines.append(f"  {'KIND':<12}  {'ENTITY':<30}  {'GPU-HOURS':>9}  {'INCIDENTS':>9}  {'OPEN':>4}  FIXED  JOBS")
    for r in d["rows"]:
        jobs = ", ".join(r["jobs"][:3]) + (f" (+{len(r['jobs']) - 3})" if len(r["jobs"]) > 3 else "")
        lines.append(f"  {r['kind']:<12}  {r['id']:<30}  {r['gpu_hours']:>9,.2f}  {r['incidents']:>9}  "
                     f"{r['open']:>4}  {'yes' if r['fixed'] else 'no':<5}  {jobs}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    try:
        if args.kafka:
            from agents.topics import TopicCatalogue
            from lockstep.replay import read_topic

            if settings.kafka_bootstrap_servers is None:
                print("lockstep capacity: --kafka needs LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", file=sys.stderr)
                return 2
            records = asyncio.run(read_topic(settings, settings.kafka_bootstrap_servers,
                                             TopicCatalogue(settings).capacity, args.timeout))
            led, bad = ledger_of_records(records)
            if bad:
                print(f"lockstep capacity: {bad} unusable records on the capacity topic skipped", file=sys.stderr)
            d = report(led, args.by, args.window, args.limit, None, time.time())
        else:
            d = fetch_capacity(base_url(settings, args.url), args.by, args.window, args.limit, args.timeout)
    except (LookupError, LedgerError) as exc:
        print(f"lockstep capacity: {safe_text(exc)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"lockstep capacity: no answer ({safe_text(reason)}); start a worker (`lockstep run` or `lockstep "
              "worker`) or pass --url, or --kafka with LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", file=sys.stderr)
        return 2
    print(safe_json(d, indent=2) if args.json else render_capacity(d))
    return 0
