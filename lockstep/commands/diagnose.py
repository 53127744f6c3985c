"""``lockstep diagnose JOB``: the seven answers for a job, from a running worker's API.

The worker is ``--url``, else ``LOCKSTEP_PUBLIC_URL``, else ``http://LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT``
(any worker answers for any job). ``--alert ID`` examines that incident instead of the latest;
``--json`` prints the API's answer as it is.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from lockstep.apiclient import get_json
from lockstep.safetext import safe_data, safe_json, safe_text
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("diagnose", help="print the seven answers for a job (from a worker's API)",
                       description=__doc__)
    p.add_argument("job", help="job id, e.g. llm-70b")
    p.add_argument("--url", default=None, help="a worker's base URL (default: LOCKSTEP_PUBLIC_URL, else "
                   "http://LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT)")
    p.add_argument("--alert", default=None, help="examine this alert of the job instead of its latest")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the worker")
    p.set_defaults(handler=run)


def base_url(settings: LockstepSettings, url: str | None) -> str:
    """The worker to ask: ``--url``, else the public URL, else the local web host and port.

    >>> base_url(LockstepSettings(_env_file=None, web_host="0.0.0.0", web_port=7000), None)
    'http://127.0.0.1:7000'
    """
    if url:
        return url.rstrip("/")
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(settings.web_host, settings.web_host)
    return f"http://{host}:{settings.web_port}"


def fetch_diagnosis(base: str, job: str, alert: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """GET ``/jobs/{job}/diagnosis``; raises ``LookupError`` with the API's message on a 4xx."""
    url = f"{base}/jobs/{urllib.parse.quote(job, safe='')}/diagnosis"
    if alert:
        url += "?" + urllib.parse.urlencode({"alert": alert})
    return get_json(url, timeout)


def render_diagnosis(d: dict[str, Any], width: int = 100) -> str:
    """The seven answers as a readable block, every string escaped (:func:`lockstep.safetext.safe_data`).

    >>> print(render_diagnosis({"job_id": "j", "name": None, "status": "ok", "as_of_iso": None, "alert_id": None,
    ...     "answers": [{"n": 1, "question": "Which GPUs take part in the job?", "answer": "8 GPUs"}]}, width=30))
    ━━ j · ok ━━━━━━━━━━━━━━━━━━━━
      1. Which GPUs take part in the job?
         8 GPUs
    """
    d = safe_data(d)
    name = f" ({d['name']})" if d.get("name") and d["name"] != d["job_id"] else ""
    head = f"━━ {d['job_id']}{name} · {d['status']}"
    if d.get("alert_id"):
        head += f" · alert {d['alert_id']}"
    if d.get("as_of_iso"):
        head += f" · as of {d['as_of_iso'][:19].replace('T', ' ')} UTC"
    lines = [head + " " + "━" * max(3, width - len(head) - 1)]
    for a in d["answers"]:
        lines.append(f"  {a['n']}. {a['question']}")
        for chunk in textwrap.wrap(a["answer"], width=width - 5) or ["-"]:
            lines.append(f"     {chunk}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    base = base_url(settings, args.url)
    try:
        d = fetch_diagnosis(base, args.job, args.alert, args.timeout)
    except LookupError as exc:
        print(f"lockstep diagnose: {safe_text(exc)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"lockstep diagnose: no worker answers at {safe_text(base)} ({safe_text(reason)}); start one "
              "(`lockstep run` or `lockstep worker`) or pass --url", file=sys.stderr)
        return 2
    print(safe_json(d, indent=2) if args.json else render_diagnosis(d))
    return 0
