"""One timeline per job: the job's own signals, aggregated per second into lanes.

The ingest side forwards, per job, the values of the signals that describe it (its GPUs'
utilisation, its collectives, its step times, the error rates of its NICs and switch ports, its
pools' latency) as ``points`` records keyed by job, so that the partition that correlates a job also
sees all of its signals. There :class:`JobSignals` folds them into

- per-second lane aggregates (count, p50, p99, min, max across the job's entities), emitted once the
  watermark has passed the second: the ``timelines`` topic, which the timeline page draws;
- per-job percentile summaries at a fixed cadence (:mod:`streams.stats`): the ``stats`` topic;
- a short history of step times, for before/after comparisons around operator annotations.

Nothing here reads the clock; the watermark is an argument.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.stats import JobStatsSummariser, StatsConfig

#: Lane of a (layer, meaning); signals outside this table are not forwarded.
LANES: dict[tuple[str, str], str] = {
    ("switch", "link_errors"): "fabric_errors",
    ("switch", "link_down"): "fabric_errors",
    ("switch", "drops"): "fabric_errors",
    ("nic", "link_errors"): "fabric_errors",
    ("nic", "link_down"): "fabric_errors",
    ("nic", "drops"): "fabric_errors",
    ("nic", "retransmits"): "fabric_errors",
    ("switch", "congestion"): "congestion",
    ("nic", "congestion"): "congestion",
    ("nccl", "latency"): "collective_time",
    ("gpu", "utilisation"): "gpu_util",
    ("gpu", "gpu_fault"): "gpu_faults",
    ("storage", "latency"): "storage_latency",
    ("host", "utilisation"): "cpu_util",
    ("step", "loader_wait"): "loader_wait",
    ("step", "step_time"): "step_time",
}

#: Lanes summarised on the ``stats`` topic, and their summary names (see :mod:`streams.stats`).
LANE_STATS = {"step_time": "step_time", "collective_time": "collective_time", "storage_latency": "storage_latency",
              "gpu_util": "gpu_utilisation"}

#: Lanes in the order the timeline page stacks them (cause layers on top, the job's step at the bottom).
LANE_ORDER = ("fabric_errors", "congestion", "collective_time", "gpu_faults", "gpu_util", "storage_latency",
              "cpu_util", "loader_wait", "step_time")


def lane_of(layer: str, meaning: str) -> str | None:
    """
    >>> lane_of("switch", "link_errors"), lane_of("gpu", "temperature")
    ('fabric_errors', None)
    """
    return LANES.get((layer, meaning))


@dataclass(frozen=True, slots=True)
class SignalsConfig:
    allowed_lateness_s: float = 5.0
    history_s: float = 3600.0
    #: Step time is compared over this long before and after an operator annotation.
    annotation_window_s: float = 300.0
    stats: StatsConfig = field(default_factory=StatsConfig)


class JobSignals:
    """Per-job lanes and stats for one correlation partition."""

    def __init__(self, config: SignalsConfig | None = None) -> None:
        self.config = config or SignalsConfig()
        self.pending: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.emitted_until = -math.inf
        self.stats = JobStatsSummariser(self.config.stats)
        self.step_history: dict[str, deque[tuple[float, float, float]]] = {}
        self.late_points = 0
        self.annotations: list[dict[str, Any]] = []

    def annotate(self, rec: dict[str, Any]) -> None:
        """An operator change (``annotation`` record): its before/after is reported once the window has passed."""
        if not any(a["annotation_id"] == rec["annotation_id"] for a in self.annotations):
            self.annotations.append({k: rec[k] for k in ("annotation_id", "job_id", "ts", "kind", "text")
                                     if k in rec})

    def annotation_effects(self, watermark: float) -> list[dict[str, Any]]:
        """``annotation_effect`` records for annotations whose after-window is complete."""
        w = self.config.annotation_window_s
        out, keep = [], []
        for a in sorted(self.annotations, key=lambda a: (a["ts"], a["annotation_id"])):
            if watermark < a["ts"] + w:
                keep.append(a)
                continue
            before = self.step_times(a["job_id"], a["ts"] - w, a["ts"])
            after = self.step_times(a["job_id"], a["ts"], a["ts"] + w)

            def summary(x: np.ndarray) -> dict[str, float | int | None]:
                if x.size == 0:
                    return {"n": 0, "p50": None, "p99": None}
                return {"n": int(x.size), "p50": float(np.percentile(x, 50)), "p99": float(np.percentile(x, 99))}

            b, f = summary(before), summary(after)
            change = (f["p50"] / b["p50"]) if b["p50"] and f["p50"] is not None else None
            out.append({"type": "annotation_effect", **a, "window_s": w, "metric": "step_time",
                        "before": b, "after": f, "p50_ratio": round(change, 4) if change is not None else None})
        self.annotations = keep
        return out

    def add(self, rec: dict[str, Any]) -> None:
        """Fold a ``points`` record: ``{"job_id", "lanes": {lane: [[ts, value], ...]}}``."""
        job = rec["job_id"]
        for lane, points in rec["lanes"].items():
            for ts, value in points:
                sec = math.floor(ts)
                if sec <= self.emitted_until:
                    self.late_points += 1
                    continue
                self.pending[(job, sec)][lane].append(float(value))

    def advance(self, watermark: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Lane records for every second now complete, and stats records for passed cadence boundaries."""
        if not math.isfinite(watermark):
            if watermark < 0:
                return [], []
            upto = max((sec for _, sec in self.pending), default=self.emitted_until)
        else:
            upto = math.floor(watermark) - 1
        timelines: list[dict[str, Any]] = []
        stat_keys: list[tuple[str, str]] = []
        stat_ts: list[np.ndarray] = []
        stat_values: list[np.ndarray] = []
        for key in sorted(k for k in self.pending if k[1] <= upto):
            job, sec = key
            lanes = {}
            for lane, values in self.pending.pop(key).items():
                arr = np.asarray(values)
                metric = LANE_STATS.get(lane)
                if metric is not None:
                    stat_keys.append((job, metric))
                    stat_ts.append(np.full(arr.size, float(sec)))
                    stat_values.append(arr)
                lanes[lane] = {"n": int(arr.size), "p50": float(np.percentile(arr, 50)),
                               "p99": float(np.percentile(arr, 99)), "min": float(arr.min()), "max": float(arr.max())}
            timelines.append({"type": "timeline", "job_id": job, "ts": float(sec), "lanes": lanes})
            step = lanes.get("step_time")
            if step is not None:
                hist = self.step_history.setdefault(job, deque())
                hist.append((float(sec), step["p50"], step["max"]))
                while hist and hist[0][0] < sec - self.config.history_s:
                    hist.popleft()
        if upto > self.emitted_until:
            self.emitted_until = float(upto)
        # Stats see each completed second once, in one sketch update (values carry their second's time).
        self.stats.add_batch(stat_keys, stat_ts, stat_values)
        stats = self.stats.advance(watermark) if math.isfinite(watermark) else []
        stats += self.annotation_effects(watermark)
        return timelines, stats

    def step_times(self, job_id: str, start: float, end: float) -> np.ndarray:
        """Per-second job step times (the slowest rank: the job waits for it) in ``[start, end)``."""
        hist = self.step_history.get(job_id, ())
        return np.array([worst for sec, _, worst in hist if start <= sec < end])

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "pending": [[job, sec, lanes] for (job, sec), lanes in self.pending.items()],
            "emitted_until": self.emitted_until if math.isfinite(self.emitted_until) else None,
            "step_history": {job: list(h) for job, h in self.step_history.items()},
            "annotations": self.annotations,
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.pending = defaultdict(lambda: defaultdict(list))
        for job, sec, lanes in data["pending"]:
            for lane, values in lanes.items():
                self.pending[(job, int(sec))][lane].extend(values)
        eu = data["emitted_until"]
        self.emitted_until = -math.inf if eu is None else float(eu)
        self.step_history = {job: deque(tuple(x) for x in h) for job, h in data["step_history"].items()}
        self.annotations = list(data.get("annotations", []))
