"""Per-job percentile summaries for capacity teams (the ``stats`` topic), pure and event-timed.

A :class:`JobStatsSummariser` keeps one :class:`streams.sketch.RollingPercentiles` series per (job,
metric). Samples come in with their event time (:meth:`~JobStatsSummariser.add`); when the watermark
passes a multiple of ``cadence_s`` (:meth:`~JobStatsSummariser.advance`), one record per job that has
data in its longest window is emitted for each boundary passed since the previous call (the first call
emits only the latest boundary; at most ``max_catch_up`` after a gap), evaluated *at* the boundary (so a
record never depends on when it was computed). Record shape (JSON-able)::

    {"type": "stats", "job_id": "llm-70b", "ts": 1764502920.0, "interval_s": 60.0,
     "metrics": {"step_time": {"60": {"count": 58, "p50": 1.01, "p90": 1.04, "p99": 1.31, "p99.9": 1.31},
                               "300": {...}, "3600": {...}},
                 "collective_time": {...}, "storage_latency": {...}, "gpu_utilisation": {...}}}

Windows are keyed by their length in seconds (as strings, for JSON); ``count`` is the estimated number
of samples in the window (see the sketch's two-pane estimate); a window without samples is omitted.
Percentile keys are ``p`` plus the percentile (``p50``, ``p99.9``).

>>> s = JobStatsSummariser(StatsConfig(cadence_s=60.0, windows=(60.0,)))
>>> for t in range(120):
...     s.add("j1", "step_time", float(t), 1.0 + (t % 10) / 100)
>>> recs = s.advance(120.0)
>>> [(r["ts"], r["metrics"]["step_time"]["60"]["p50"]) for r in recs]
[(120.0, 1.025)]
>>> s.advance(150.0)    # no new boundary
[]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.sketch import DEFAULT_PERCENTILES, RollingPercentiles, SketchConfig

#: The summary's metric names, from (layer, catalogue meaning).
SUMMARY_METRICS: dict[tuple[str, str], str] = {
    ("step", "step_time"): "step_time",
    ("nccl", "latency"): "collective_time",
    ("storage", "latency"): "storage_latency",
    ("gpu", "utilisation"): "gpu_utilisation",
}


def summary_metric(layer: str, meaning: str) -> str | None:
    """Which summary metric a sample feeds, if any.

    >>> summary_metric("nccl", "latency"), summary_metric("switch", "link_errors")
    ('collective_time', None)
    """
    return SUMMARY_METRICS.get((layer, meaning))


@dataclass(frozen=True, slots=True)
class StatsConfig:
    cadence_s: float = 60.0
    windows: tuple[float, ...] = (60.0, 300.0, 3600.0)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    #: At most this many boundaries are emitted by one advance (a long gap is not replayed).
    max_catch_up: int = 60
    digits: int = 6


class JobStatsSummariser:
    """See the module docstring."""

    def __init__(self, config: StatsConfig | None = None) -> None:
        self.config = config or StatsConfig()
        self.sketch = RollingPercentiles(SketchConfig(windows=self.config.windows, dtype="uint32"))
        self.keys: dict[tuple[str, str], int] = {}
        self.emitted_until: float | None = None

    def _sid(self, job_id: str, metric: str) -> int:
        key = (job_id, metric)
        sid = self.keys.get(key)
        if sid is None:
            sid = self.keys[key] = len(self.keys)
            self.sketch.register(sid)
        return sid

    def add(self, job_id: str, metric: str, ts: float | np.ndarray, values: float | np.ndarray) -> None:
        """Add samples (one value, or arrays of times and values) of one job's metric."""
        t = np.atleast_1d(np.asarray(ts, dtype=np.float64))
        v = np.atleast_1d(np.asarray(values, dtype=np.float64))
        ok = np.isfinite(t) & np.isfinite(v)
        if not ok.any():
            return
        sid = self._sid(job_id, metric)
        self.sketch.add_many(np.full(int(ok.sum()), sid), t[ok], v[ok])

    def add_batch(self, keys: list[tuple[str, str]], ts: list[np.ndarray], values: list[np.ndarray]) -> None:
        """Add several (job, metric) series' samples in one sketch update (one numpy pass)."""
        if not keys:
            return
        sids = np.concatenate([np.full(len(t), self._sid(job, metric), dtype=np.int64)
                               for (job, metric), t in zip(keys, ts, strict=True)])
        t_all = np.concatenate(ts).astype(np.float64)
        v_all = np.concatenate(values).astype(np.float64)
        ok = np.isfinite(t_all) & np.isfinite(v_all)
        if ok.any():
            self.sketch.add_many(sids[ok], t_all[ok], v_all[ok])

    def advance(self, watermark: float) -> list[dict[str, Any]]:
        """Records for every cadence boundary in ``(last emitted, watermark]``."""
        cfg = self.config
        last = math.floor(watermark / cfg.cadence_s) * cfg.cadence_s
        first = last if self.emitted_until is None else self.emitted_until + cfg.cadence_s
        first = max(first, last - (cfg.max_catch_up - 1) * cfg.cadence_s)
        out: list[dict[str, Any]] = []
        if not self.keys or first > last:
            if self.emitted_until is None or last > self.emitted_until:
                self.emitted_until = last
            return out
        items = list(self.keys.items())
        ids = np.array([sid for _, sid in items], dtype=np.int64)
        b = first
        while b <= last + 1e-9:
            out.extend(self._records(items, ids, b))
            b += cfg.cadence_s
        self.emitted_until = last
        return out

    def _records(self, items: list[tuple[tuple[str, str], int]], ids: np.ndarray, at: float) -> list[dict[str, Any]]:
        cfg = self.config
        nw = len(cfg.windows)
        per_window = [(self.sketch.quantiles(ids, cfg.percentiles, window=w, now=at),
                       self.sketch.counts_in(ids, window=w, now=at)) for w in range(nw)]
        jobs: dict[str, dict[str, Any]] = {}
        for k, ((job, metric), _) in enumerate(items):
            if per_window[-1][1][k] <= 0:
                continue
            windows = {}
            for w in range(nw):
                qv, cnt = per_window[w]
                if cnt[k] <= 0:
                    continue
                entry: dict[str, float] = {"count": round(float(cnt[k]), 3)}
                for qi, q in enumerate(cfg.percentiles):
                    entry[f"p{q:g}"] = round(float(qv[qi, k]), cfg.digits)
                windows[f"{cfg.windows[w]:g}"] = entry
            rec = jobs.setdefault(job, {"type": "stats", "job_id": job, "ts": at, "interval_s": cfg.cadence_s,
                                        "metrics": {}})
            rec["metrics"][metric] = windows
        return list(jobs.values())

    def forget(self, job_id: str) -> None:
        """Stop summarising a job (its sketch rows are left idle until reused by nothing)."""
        for key in [k for k in self.keys if k[0] == job_id]:
            sid = self.keys.pop(key)
            self.sketch.counts[sid] = 0

    def snapshot(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays (for :func:`streams.snapshot.pack`) and JSON-able metadata."""
        meta = {"keys": [[j, m, sid] for (j, m), sid in self.keys.items()], "emitted_until": self.emitted_until}
        return self.sketch.snapshot(max(self.keys.values(), default=-1) + 1), meta

    def restore(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.sketch = RollingPercentiles(SketchConfig(windows=self.config.windows, dtype="uint32"))
        self.sketch.restore(arrays)
        self.keys = {(j, m): int(sid) for j, m, sid in meta["keys"]}
        self.emitted_until = meta["emitted_until"]
