"""``lockstep fabric``: the six fabric questions, per fabric and tier, from a running worker's API.

Asks ``GET /fabric/report`` (docs/fabric.md) of the worker at ``--url``, else ``LOCKSTEP_PUBLIC_URL``,
else ``http://LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT``, and prints each question with its number per
fabric and tier and the first rows of its evidence; ``--json`` prints the API's answer as it is.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from typing import Any

from lockstep.apiclient import get_json
from lockstep.commands.diagnose import base_url
from lockstep.safetext import safe_data, safe_json, safe_text
from models.settings import LockstepSettings

#: Figures printed beside each group's number (when the group has them).
FIGURES = ("p50", "p99", "throughput_gbps_p99", "links_measured", "links_without_line_rate",
           "links_saturating_in_collectives", "by_kind", "hotspots", "by_meaning", "ports_with_errors",
           "trending_worse", "expected", "reporting", "last_seen_age_s_max", "silent_exporters", "jobs",
           "mean_excess", "incidents", "share_named")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fabric", help="print the six fabric questions per fabric and tier (from a worker's API)",
                       description=__doc__)
    p.add_argument("--url", default=None, help="a worker's base URL (default: LOCKSTEP_PUBLIC_URL, else "
                   "http://LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("--evidence", type=int, default=3, help="rows of evidence per group (default 3)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the worker")
    p.set_defaults(handler=run)


def fetch_report(base: str, timeout: float = 10.0) -> dict[str, Any]:
    """GET ``/fabric/report``; raises ``LookupError`` with the API's message on an HTTP error."""
    return get_json(f"{base}/fabric/report", timeout)


def _figure(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_figure(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return str(value)


def render_report(report: dict[str, Any], evidence: int = 3) -> str:
    """The report as readable text, every string escaped (:func:`lockstep.safetext.safe_data`).

    >>> print(render_report({"now_iso": "2025-11-30T11:43:00Z", "questions": {"loss": {
    ...     "question": "does it avoid loss?", "value_is": "errors per port-second", "groups": [
    ...     {"fabric": "infiniband", "tier": "leaf", "value": 0.33, "unit": "errors per port-second",
    ...      "ports_with_errors": 1, "evidence": [{"link": "leaf03 port 17", "errors_per_s": 16.6}]}]}}}))
    ━━ fabric report · as of 2025-11-30 11:43:00 UTC
    loss: does it avoid loss?
      infiniband  leaf    0.33 errors per port-second  (ports_with_errors 1)
          link leaf03 port 17 · errors_per_s 16.6

    A link whose line rate the inventory does not give says so (its utilisation is unknown):

    >>> print(render_report({"questions": {"bandwidth": {"question": "enough bandwidth?", "groups": [
    ...     {"fabric": "roce", "tier": "leaf", "value": None, "unit": "share of line rate", "links_measured": 1,
    ...      "links_without_line_rate": 1, "evidence": [{"link": "leaf06 port 1", "speed_gbps": None, "p50": None,
    ...      "p99": None, "gbps_p99": 19.4}]}]}}}).splitlines()[-1])
          link leaf06 port 1 · gbps_p99 19.4 · line rate unknown
    """
    report = safe_data(report)
    lines = [f"━━ fabric report · as of {str(report.get('now_iso', '?'))[:19].replace('T', ' ')} UTC"]
    for name, q in report["questions"].items():
        lines.append(f"{name}: {q['question']}")
        if not q["groups"]:
            lines.append("  (no data yet)")
        for g in q["groups"]:
            value = "-" if g["value"] is None else _figure(g["value"])
            figures = ", ".join(f"{k} {_figure(g[k])}" for k in FIGURES if k in g and g[k] not in (None, {}, []))
            lines.append(f"  {g['fabric']:<11} {g['tier']:<7} {value} {g['unit']}" + (f"  ({figures})" if figures
                                                                                         else ""))
            for row in g["evidence"][:evidence]:
                shown = [f"{k} {_figure(v)}" for k, v in row.items() if not isinstance(v, list) and v is not None]
                if "speed_gbps" in row and row["speed_gbps"] is None:
                    shown.append("line rate unknown")
                lines.append("      " + " · ".join(shown))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    base = base_url(settings, args.url)
    try:
        report = fetch_report(base, args.timeout)
    except LookupError as exc:
        print(f"lockstep fabric: {safe_text(exc)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"lockstep fabric: no worker answers at {safe_text(base)} ({safe_text(reason)}); start one "
              "(`lockstep run` or `lockstep worker`) or pass --url", file=sys.stderr)
        return 2
    print(safe_json(report, indent=2) if args.json else render_report(report, args.evidence))
    return 0
