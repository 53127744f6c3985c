"""Before and after a resolved incident: the job's step time and the cause's lane during the incident
against after it resolved, with the change and its uncertainty (issue 22.4, docs/capacity.md).

For a resolved ledger incident (:class:`~streams.ledger.LedgerEntry`) of job J, from J's per-second
lanes in the read model (:class:`~streams.readstore.LaneRing`), three windows of at most
``window_s`` seconds each:

- ``baseline``: ``[onset - window_s, onset)``, the job before it degraded;
- ``during``: ``[onset, end)``, the incident (the time before the fix);
- ``after``: ``[end, end + window_s)``, once it resolved (cut at the latest second held).

Two series are compared: the job's **step time** (lane ``step_time``, its slowest rank per second:
the job runs at that pace) and the **cause's lane** (the lane of the root cause's layer, e.g.
``fabric_errors`` for a switch port or a NIC, ``storage_latency`` for a pool), its worst entity per
second (the job's entities on that lane; the root-cause entity when it is the one that moved).

``change`` is ``mean(after) - mean(during)`` with a 95% interval by Welch's normal approximation
(``1.96 x sqrt(var_a / n_a + var_d / n_d)``), ``relative`` the change over ``mean(during)``, and
``vs_baseline`` the same for ``after`` against ``baseline`` (is the job back to where it was?). The
seconds of a series are not independent (a step time is correlated with the next), so the interval
is narrower than the truth: read it as "the change is at least this certain", not as an exact 95%.
A window with fewer than :data:`MIN_SECONDS` seconds held gives nulls, never a guess.

Pure: numpy over the store's arrays; no clock (the windows come from the incident).

>>> compare_series(np.array([2.0, 2.1, 1.9, 2.0]), np.array([1.0, 1.1, 0.9, 1.0]))["change"]
-1.0
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streams.ledger import Ledger, LedgerEntry
from streams.readstore import LANE_INDEX, MAX, LaneRing, ReadStore

#: The lane a root cause's layer moves (what "the entity's error/congestion rate" is read from).
CAUSE_LANE = {"switch": "fabric_errors", "nic": "fabric_errors", "nccl": "collective_time", "gpu": "gpu_faults",
              "storage": "storage_latency", "host": "cpu_util", "step": "step_time"}
#: Fewest seconds a window needs for its figures to be given.
MIN_SECONDS = 3
#: Seconds of each window by default (as the annotation effect's, LOCKSTEP_ANNOTATION_WINDOW_S).
DEFAULT_WINDOW_S = 300.0


def summary(x: np.ndarray) -> dict[str, Any]:
    """``{"n", "mean", "p50", "std"}`` of the finite values of ``x`` (nulls below :data:`MIN_SECONDS`)."""
    x = x[np.isfinite(x)]
    if x.size < MIN_SECONDS:
        return {"n": int(x.size), "mean": None, "p50": None, "std": None}
    return {"n": int(x.size), "mean": round(float(x.mean()), 6), "p50": round(float(np.median(x)), 6),
            "std": round(float(x.std(ddof=1)), 6)}


def _diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float] | None:
    """``mean(b) - mean(a)`` and its 95% half-width (Welch, normal approximation)."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < MIN_SECONDS or b.size < MIN_SECONDS:
        return None
    half = 1.96 * math.sqrt(float(a.var(ddof=1)) / a.size + float(b.var(ddof=1)) / b.size)
    return float(b.mean() - a.mean()), half


def compare_series(during: np.ndarray, after: np.ndarray, baseline: np.ndarray | None = None) -> dict[str, Any]:
    """The three windows' summaries, ``change`` (after - during) with ``ci95`` ``[low, high]``, ``relative``
    and ``significant`` (the interval excludes 0), and ``vs_baseline`` (after - baseline, the same way)."""
    out: dict[str, Any] = {"baseline": summary(baseline) if baseline is not None else None,
                           "during": summary(during), "after": summary(after)}
    d = _diff(during, after)
    base = float(np.nanmean(during)) if d is not None else math.nan
    out.update(_fields(d, base))
    out["vs_baseline"] = _fields(_diff(baseline, after), float(np.nanmean(baseline))) \
        if baseline is not None and _diff(baseline, after) is not None else None
    return out


def _fields(d: tuple[float, float] | None, reference: float) -> dict[str, Any]:
    if d is None:
        return {"change": None, "ci95": None, "relative": None, "significant": None}
    change, half = d
    return {"change": round(change, 6), "ci95": [round(change - half, 6), round(change + half, 6)],
            "relative": round(change / reference, 4) if reference else None,
            "significant": bool(abs(change) > half)}


def effect(ring: LaneRing | None, entry: LedgerEntry, window_s: float = DEFAULT_WINDOW_S) -> dict[str, Any]:
    """Before and after one resolved incident (see the module docstring); ``held`` false when the ring
    holds none of the incident (too old for the read model's history)."""
    if entry.end is None:
        raise ValueError("before/after needs a resolved incident")
    onset, end = math.floor(entry.onset), math.ceil(entry.end)
    layer = str(entry.root.get("layer") or "")
    lane = CAUSE_LANE.get(layer)
    out: dict[str, Any] = {
        "incident": entry.key, "alert_id": entry.alert_id, "job_id": entry.job_id,
        "entities": [{"kind": e.kind, "id": e.id} for e in entry.entities], "window_s": window_s,
        "cause_lane": lane, "held": False, "step_time": None, "cause": None,
    }
    if ring is None or ring.latest < 0:
        return out
    last = ring.latest + 1
    w = int(window_s)
    windows = {"baseline": (onset - w, onset), "during": (onset, end), "after": (end, min(end + w, last))}
    if windows["during"][0] < ring.earliest or windows["after"][1] <= windows["after"][0]:
        # the incident is older than the ring, or nothing after it is held yet
        out["held"] = windows["during"][0] >= ring.earliest
        if not out["held"]:
            return out
    out["held"] = True

    def series(name: str) -> dict[str, Any]:
        i = LANE_INDEX[name]
        cols = {k: ring.column(a, b, i, MAX) if b > a else np.array([]) for k, (a, b) in windows.items()}
        return compare_series(cols["during"], cols["after"], cols["baseline"])

    out["step_time"] = series("step_time")
    out["cause"] = series(lane) if lane is not None else None
    return out


def effects(store: ReadStore, ledger: Ledger, now: float, window_s: float, limit: int,
            compare_s: float = DEFAULT_WINDOW_S) -> dict[str, Any]:
    """``/capacity/effects``: before/after of every incident that resolved in ``[now - window_s, now)``,
    the latest first, at most ``limit``."""
    done = sorted((e for e in ledger.entries.values() if e.end is not None and now - window_s <= e.end <= now),
                  key=lambda e: (-(e.end or 0.0), e.key))[:limit]
    return {"as_of": now, "window_s": window_s, "compare_s": compare_s,
            "incidents": [effect(store.lanes.get(e.job_id), e, compare_s) for e in done]}
