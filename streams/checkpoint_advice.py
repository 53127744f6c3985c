"""Checkpoint-stagger advice per storage pool, for a training launcher to read (``GET /advice/checkpoints``).

The ``checkpoint_contention`` rule (streams/correlation/rules/contention.py) raises one alert per
contention: the jobs that burst writes to one pool together while its write latency climbed, and
``details.advice``: the job to move and by how many seconds. A launcher wants the same per pool and
job, over the checkpoints seen so far::

    lustre-a   train-a  AAAA.......................AAAA.......................AAAA       period 120 s
               train-b  .BBBB.......................BBBB.......................BBBB      period 120 s
                                                                                         move train-b +35 s

For each pool with a contention alert in the window, every job the alerts name, with:

- ``writes``: the checkpoints observed (one per alert naming the job: the start of its write burst,
  the earliest of its timeline entries there);
- ``period_s``: the median gap between those starts (``null`` with a single one), and ``phase_s``:
  the last start modulo the period (Unix seconds: a launcher starts the next checkpoint when
  ``time() % period_s == phase_s``);
- ``offset_s``: the pool's latest contention's advice: its ``by_seconds`` for the job it moves, 0 for
  the others; ``next_write_at`` (the next start the period predicts after ``as_of``) and
  ``suggested_start_at`` (that plus the offset), ``null`` while the period is not known.

The pool is ``contended`` while one of its alerts still fires, else ``clear`` (the advice stands: jobs
that checkpoint on a period meet again at the next round). Pure: the alerts and the time are inputs.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from models.timeutil import format_ts, parse_ts

#: two starts closer than this are one checkpoint (the same burst named by two alerts)
SAME_WRITE_S = 1.0


def _write_starts(alert: Mapping[str, Any]) -> dict[str, float]:
    """job -> the start of its write burst in this alert (the earliest of its timeline entries)."""
    out: dict[str, float] = {}
    for entry in alert.get("timeline") or ():
        job = (entry.get("labels") or {}).get("job_id")
        if job and entry.get("layer") == "storage" and entry.get("meaning") == "throughput":
            ts = parse_ts(entry["ts"])
            out[job] = min(out.get(job, ts), ts)
    return out


def checkpoint_advice(alerts: Iterable[Mapping[str, Any]], now: float, window_s: float,
                      pool: str | None = None) -> list[dict[str, Any]]:
    """Per pool (by name), its jobs' observed checkpoints and the suggested offsets (module docstring).

    ``alerts`` are the latest version of each alert (any type: only ``checkpoint_contention`` is read);
    one counts when it started in ``[now - window_s, now]``; ``pool`` keeps one pool.
    """
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for a in alerts:
        details = a.get("details") or {}
        name = details.get("pool")
        if a.get("type") != "checkpoint_contention" or not name or (pool is not None and name != pool):
            continue
        if now - window_s <= parse_ts(a["started_at"]) <= now:
            by_pool.setdefault(str(name), []).append(a)
    out = []
    for name in sorted(by_pool):
        held = sorted(by_pool[name], key=lambda a: (parse_ts(a["started_at"]), a["alert_id"]))
        latest = held[-1]
        advice = (latest.get("details") or {}).get("advice") or {}
        starts: dict[str, list[float]] = {}
        gpus: dict[str, int] = {}
        for a in held:
            for job, ts in _write_starts(a).items():
                starts.setdefault(job, []).append(ts)
            for other in a.get("other_jobs") or ():
                gpus[other["job_id"]] = int(other.get("gpus") or 0)
            for job in (a.get("details") or {}).get("jobs") or ():
                starts.setdefault(job, [])
        jobs = [_job(job, starts[job], gpus.get(job, 0), advice, now) for job in sorted(starts)]
        overlap = (latest.get("details") or {}).get("overlap") or {}
        out.append({
            "pool": name,
            "state": "contended" if any(a.get("status") == "firing" for a in held) else "clear",
            "contentions": len(held),
            "latest": {"alert_id": latest["alert_id"], "status": latest.get("status"),
                       "started_at": latest["started_at"], "overlap_s": overlap.get("seconds"),
                       "advice": advice.get("text")},
            "jobs": jobs,
        })
    return out


def _job(job: str, raw: list[float], gpus: int, advice: Mapping[str, Any], now: float) -> dict[str, Any]:
    seen: list[float] = []
    for ts in sorted(raw):
        if not seen or ts - seen[-1] >= SAME_WRITE_S:
            seen.append(ts)
    period = statistics.median(b - a for a, b in itertools.pairwise(seen)) if len(seen) > 1 else None
    moves = advice.get("move") == job
    offset = float(advice.get("by_seconds") or 0.0) if moves else 0.0
    row: dict[str, Any] = {"job_id": job, "gpus": gpus, "writes": len(seen),
                           "last_write_at": format_ts(seen[-1]) if seen else None,
                           "period_s": round(period, 1) if period else None,
                           "phase_s": round(seen[-1] % period, 1) if period else None,
                           "move": moves, "offset_s": round(offset, 1), "next_write_at": None,
                           "suggested_start_at": None}
    if period:
        nxt = seen[-1] + (int((now - seen[-1]) // period) + 1) * period
        row["next_write_at"], row["suggested_start_at"] = format_ts(nxt), format_ts(nxt + offset)
    return row
