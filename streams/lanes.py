"""One timeline per job: the job's own signals, aggregated per second into lanes.

The ingest side forwards, per job, the values of the signals that describe it (its GPUs'
utilisation, its collectives, its step times, the error rates of its NICs and switch ports, its
pools' latency) as ``points`` records keyed by job, so that the partition that correlates a job also
sees all of its signals. There :class:`JobSignals` folds them into

- per-second lane aggregates (count, p50, p99, min, max across the job's entities), emitted once the
  watermark has passed the second: the ``timelines`` topic, which the timeline page draws;
- per-job percentile summaries at a fixed cadence (:mod:`streams.stats`): the ``stats`` topic;
- a short history of step times, for before/after comparisons around operator annotations;
- peer comparison of the workers of each job (:mod:`streams.peers`): the per-worker values of the
  :data:`PEER_LANES` (a ``points`` record's ``workers``) are bucketed by event time, each worker's
  median per bucket is one "step", and a worker that persistently lags its peers becomes a
  straggler (:class:`PeerEvent`, turned into ``straggler`` alerts by the correlator).

Nothing here reads the clock; the watermark is an argument.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.peers import PeerComparator, PeerConfig, StragglerTransition
from streams.quantiles import median, quantile_sorted
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

#: Lanes whose (layer, meaning) also covers quantities in other units: only these raw names feed them.
#: "utilisation" on a GPU is also its power (W), memory used (MiB) and the profiling fractions (0-1);
#: on a host also the raw CPU-seconds counters behind the derived share (streams.formats.derive): a
#: median across them is no utilisation (it read 0.82 "%" for GPUs at 95 % with dcgm-exporter's
#: fields). Both lanes are percent.
LANE_METRICS: dict[str, frozenset[str]] = {
    "gpu_util": frozenset({"DCGM_FI_DEV_GPU_UTIL", "nvidia_smi_utilization_gpu"}),
    "cpu_util": frozenset({"cpu_utilization"}),
}

#: Lanes whose values are also forwarded per worker and compared across the job's workers.
PEER_LANES: tuple[str, ...] = ("step_time",)

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
    #: Peer comparison: event-time bucket (one comparison step; each worker's median inside it) ...
    peer_bucket_s: float = 5.0
    #: ... the straggler rule (steps counted in buckets) ...
    peers: PeerConfig = field(default_factory=PeerConfig)
    #: ... and how long a job may send no per-worker values before its peer state is dropped
    #: (its stragglers end with reason ``no_data``).
    peer_idle_s: float = 300.0


@dataclass(frozen=True, slots=True)
class PeerEvent:
    """A straggler transition of one lane of one job (``step``: the bucket start it was decided at)."""

    lane: str
    workers: int  # workers compared in the deciding bucket
    transition: StragglerTransition


@dataclass(frozen=True, slots=True)
class StepProgress:
    """What one watermark step completed of the jobs' step times: per job, the seconds (in order) that had
    step-time values; ``at``: the event time now complete (the end of the data at the end of input)."""

    at: float
    seconds: dict[str, list[float]]

    @classmethod
    def of(cls, at: float, timelines: list[dict[str, Any]]) -> StepProgress:
        """From the lane records :meth:`JobSignals.advance` returned."""
        seconds: dict[str, list[float]] = {}
        for rec in timelines:
            if "step_time" in rec["lanes"]:
                seconds.setdefault(rec["job_id"], []).append(float(rec["ts"]))
        return cls(at, {job: sorted(secs) for job, secs in seconds.items()})


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
        #: (job, lane, bucket start) -> worker -> values, for buckets not yet compared.
        self.peer_pending: dict[tuple[str, str, float], dict[str, list[float]]] = {}
        self.peer_done_until = -math.inf  # buckets ending at or before this were compared
        self.peer_last: dict[str, float] = {}  # job -> last bucket start with per-worker values
        self.peers = {lane: PeerComparator(self.config.peers) for lane in PEER_LANES}
        #: Straggler transitions found by :meth:`advance`, for the caller to take (and clear).
        self.peer_events: list[PeerEvent] = []

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
        """Fold a ``points`` record: ``{"job_id", "lanes": {lane: [[ts, [value, ...]], ...]},
        "workers": {lane: [[ts, [value, ...], [worker, ...]], ...]}}`` (values grouped by event time).

        The ungrouped shape of earlier versions (``[[ts, value], ...]`` and ``[[ts, value, worker], ...]``)
        is still read, so records written before an upgrade are not lost.
        """
        job = rec["job_id"]
        pending = self.pending
        for lane, groups in rec["lanes"].items():
            for group in groups:
                ts, values = group[0], group[1]
                if type(values) is not list:
                    values = [values]
                sec = math.floor(ts)
                if sec <= self.emitted_until:
                    self.late_points += len(values)
                    continue
                pending[(job, sec)][lane].extend(map(float, values))
        workers = rec.get("workers")
        if workers:
            size = self.config.peer_bucket_s
            for lane, wgroups in workers.items():
                if lane not in self.peers:
                    continue
                for group in wgroups:
                    ts, values, names = group[0], group[1], group[2]
                    if type(values) is not list:
                        values, names = [values], [names]
                    b = math.floor(ts / size) * size
                    if b + size <= self.peer_done_until:
                        continue  # its bucket was compared already (counted as a late lane point above)
                    bucket = self.peer_pending.setdefault((job, lane, b), {})
                    for value, worker in zip(values, names, strict=True):
                        bucket.setdefault(str(worker), []).append(float(value))

    def _compare_peers(self, upto: float, final: bool) -> None:
        """Compare the workers of every bucket complete at second ``upto`` (all of them if ``final``)."""
        size = self.config.peer_bucket_s
        done = [k for k in self.peer_pending if final or k[2] + size <= upto + 1]
        for key in sorted(done, key=lambda k: (k[2], k[0], k[1])):
            job, lane, b = key
            per_worker = self.peer_pending.pop(key)
            names = sorted(per_worker)
            values = [median(per_worker[w]) for w in names]
            for tr in self.peers[lane].update(job, b, names, values):
                self.peer_events.append(PeerEvent(lane, len(names), tr))
            self.peer_last[job] = max(self.peer_last.get(job, -math.inf), b)
            self.peer_done_until = max(self.peer_done_until, b + size)
        if not final:
            self.peer_done_until = max(self.peer_done_until, math.floor((upto + 1) / size) * size)
            for job in [j for j, last in self.peer_last.items() if last + size + self.config.peer_idle_s <= upto]:
                self._forget_peers(job, self.peer_last.pop(job) + size)

    def _forget_peers(self, job: str, ts: float) -> None:
        """A job sent no per-worker values for ``peer_idle_s``: its stragglers end, its state goes."""
        for lane, pc in self.peers.items():
            for worker in pc.stragglers(job):
                self.peer_events.append(PeerEvent(lane, 0, StragglerTransition(
                    job, worker, "end", ts, ts, math.nan, math.nan, "no_data")))
            pc.forget(job)

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
                metric = LANE_STATS.get(lane)
                if metric is not None:
                    stat_keys.append((job, metric))
                    stat_ts.append(np.full(len(values), float(sec)))
                    stat_values.append(np.asarray(values))
                ordered = sorted(values)
                lanes[lane] = {"n": len(ordered), "p50": quantile_sorted(ordered, 0.50),
                               "p99": quantile_sorted(ordered, 0.99), "min": ordered[0], "max": ordered[-1]}
            timelines.append({"type": "timeline", "job_id": job, "ts": float(sec), "lanes": lanes})
            step = lanes.get("step_time")
            if step is not None:
                hist = self.step_history.setdefault(job, deque())
                hist.append((float(sec), step["p50"], step["max"]))
                while hist and hist[0][0] < sec - self.config.history_s:
                    hist.popleft()
        if upto > self.emitted_until:
            self.emitted_until = float(upto)
        self._compare_peers(float(upto), final=not math.isfinite(watermark))
        # Stats see each completed second once, in one sketch update (values carry their second's time).
        self.stats.add_batch(stat_keys, stat_ts, stat_values)
        # At the end of input (an infinite watermark) the data ends with second ``upto``: boundaries up to
        # its end are passed, even when no finite watermark was seen after them (a fast replay).
        end = watermark if math.isfinite(watermark) else float(upto) + 1.0
        stats = self.stats.advance(end) if math.isfinite(end) else []
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
            "peer_pending": [[job, lane, b, workers] for (job, lane, b), workers in self.peer_pending.items()],
            "peer_done_until": self.peer_done_until if math.isfinite(self.peer_done_until) else None,
            "peer_last": self.peer_last,
            "peers": {lane: pc.snapshot() for lane, pc in self.peers.items()},
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
        self.peer_pending = {(job, lane, float(b)): {w: list(v) for w, v in workers.items()}
                             for job, lane, b, workers in data.get("peer_pending", [])}
        pdu = data.get("peer_done_until")
        self.peer_done_until = -math.inf if pdu is None else float(pdu)
        self.peer_last = {job: float(t) for job, t in data.get("peer_last", {}).items()}
        for lane, pc in self.peers.items():
            pc.restore(data.get("peers", {}).get(lane, {}))
        self.peer_events = []
