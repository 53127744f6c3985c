"""Checkpoint contention: two or more jobs bursting writes to one pool while its write latency climbs.

Rule (one pool ``P``)::

    write latency of P   ......XXXXXXXXXXXXXXXXXXXX.....      (a latency episode L)
    job A writes to P    ......AAAAAAAAAAAAAAA...........      (A's write-rate burst)
    job B writes to P    ...........BBBBBBBBBBBBBBB......      (B's burst)
                                    ^ t*: two jobs burst while L is on  -> checkpoint_contention
                                    |<- overlap ->|

Per-job write rates come from per-job pool counters (Lustre jobstats ``jobstats_write_bytes_sum`` with a
``job_id`` label); a burst is an anomaly episode of that rate. Pool anomalies reach every job on the
pool, so each of those jobs' partitions sees the same evidence; the partition of the job with the
smallest id raises the alert, so it is raised exactly once.

Advice: move the job that started writing last (or, on a tie, the one with fewer GPUs) by the overlap
plus a margin, so its burst begins after the other ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

ADVICE_MARGIN_S = 10.0


class EpisodeLike(Protocol):
    start: dict[str, Any]
    end_ts: float | None

    @property
    def ts(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Contention:
    pool: str
    start: float  # t*: the first instant two or more jobs burst while the latency episode is on
    jobs: tuple[str, ...]  # the jobs bursting at t*, sorted
    latency: EpisodeLike  # the pool's write-latency episode
    bursts: tuple[EpisodeLike, ...]  # the bursts active at t*


def is_write_latency(rec: dict[str, Any]) -> bool:
    return rec["layer"] == "storage" and rec["meaning"] == "latency" and "write" in rec["metric"]


def is_job_write_burst(rec: dict[str, Any]) -> bool:
    return (rec["layer"] == "storage" and rec["meaning"] == "throughput" and "write" in rec["metric"]
            and "job_id" in rec["labels"] and rec.get("direction", "up") == "up")


def _active(e: EpisodeLike, t: float) -> bool:
    return e.ts <= t and (e.end_ts is None or t < e.end_ts)


def find_contention(episodes: Sequence[EpisodeLike], horizon: float) -> list[Contention]:
    """Contentions whose start ``t*`` is known from evidence confirmed by ``horizon``.

    >>> from types import SimpleNamespace as E
    >>> lat = E(ts=10.0, end_ts=None, start={"layer": "storage", "meaning": "latency", "source": "p",
    ...         "metric": "write_latency_seconds", "labels": {}, "confirmed_ts": 11.0})
    >>> def burst(job, t0, t1):
    ...     return E(ts=t0, end_ts=t1, start={"layer": "storage", "meaning": "throughput", "confirmed_ts": t0 + 1,
    ...              "metric": "jobstats_write_bytes_sum", "source": "p", "labels": {"job_id": job}})
    >>> [(c.start, c.jobs) for c in find_contention([lat, burst("a", 10.0, 40.0), burst("b", 15.0, 45.0)], 100.0)]
    [(15.0, ('a', 'b'))]
    """
    usable = [e for e in episodes if float(e.start.get("confirmed_ts", e.ts)) <= horizon]
    out = []
    pools = sorted({e.start["source"] for e in usable if is_write_latency(e.start)})
    for pool in pools:
        latencies = sorted((e for e in usable if is_write_latency(e.start) and e.start["source"] == pool),
                           key=lambda e: e.ts)
        bursts = [e for e in usable if is_job_write_burst(e.start) and e.start["source"] == pool]
        for lat in latencies:
            for t in sorted({b.ts for b in bursts} | {lat.ts}):
                if not _active(lat, t):
                    continue
                active = [b for b in bursts if _active(b, t)]
                jobs = tuple(sorted({b.start["labels"]["job_id"] for b in active}))
                if len(jobs) >= 2:
                    out.append(Contention(pool, t, jobs, lat, tuple(active)))
                    break
    return out


def overlap_end(c: Contention, now: float) -> float:
    """When the contention ended: when fewer than two jobs still write (the second-latest job's end; a job
    whose counters come per target, striped over several OSTs, ends with its last series), or when the
    latency ended, whichever is earlier."""
    job_end: dict[str, float] = {}
    for b in c.bursts:
        job = b.start["labels"]["job_id"]
        job_end[job] = max(job_end.get(job, -math.inf), b.end_ts if b.end_ts is not None else math.inf)
    ends = sorted(job_end.values())
    end = ends[-2] if len(ends) >= 2 else ends[-1]
    if c.latency.end_ts is not None:
        end = min(end, c.latency.end_ts)
    return min(end, now)


def advice(c: Contention, gpus: dict[str, int], now: float) -> tuple[str, float, str]:
    """``(job to move, seconds to move it by, text)``: the last job to start writing moves (ties: fewer GPUs)."""
    first_start = {job: min(b.ts for b in c.bursts if b.start["labels"]["job_id"] == job) for job in c.jobs}
    mover = max(c.jobs, key=lambda j: (first_start[j], -gpus.get(j, 0), j))
    others = [b for b in c.bursts if b.start["labels"]["job_id"] != mover]
    other_end = max((b.end_ts if b.end_ts is not None else now) for b in others)
    shift = max(0.0, other_end - first_start[mover]) + ADVICE_MARGIN_S
    rest = [j for j in c.jobs if j != mover]
    verb = "finishes" if len(rest) == 1 else "finish"
    text = (f"stagger checkpoints: start {mover}'s writes to {c.pool} at least {shift:.0f} s later "
            f"(after {', '.join(rest)} {verb} writing)")
    return mover, shift, text
