"""Peer comparison inside a job: in data-parallel training every worker should look like its peers.

Per job and time step (one value per worker: mini-batch time, step time, collective time...), each
worker's *ratio* to the job's median of that step is compared with two references:

- **the peers** (gross rule): a worker whose smoothed ratio is at least ``1 + gross`` (default 30 %
  slower than the median worker) is an outlier, whatever its history;
- **itself** (change rule): each worker learns its usual ratio (an exponentially weighted mean,
  rate ``base_alpha``, learned only while it is not flagged and only within ``1 +- gross``), so a
  worker that is *steadily* a little different (a slower GPU, a busier host) becomes its own normal.
  A worker whose smoothed ratio rises at least ``change`` (default 8 %) above its usual ratio, and
  stands out from the other workers' changes by at least ``z_min`` robust z-scores (median and MAD
  across the job's workers, scale floored at ``min_scale``), is an outlier.

Ratios are smoothed per worker over steps (rate ``smooth_alpha``), and a step is outlying only if both
its own ratio and the smoothed one pass the margin, so one noisy step neither starts nor ends a run.

Confirmation is **k of n**: a worker becomes a **straggler** once at least ``confirm`` of its last
``confirm_window`` steps were outlying (``confirm_window == confirm`` is the strict consecutive rule).
A straggler that is slow in most steps, interrupted by single normal ones, is still a straggler. Its
onset is the first step of the *run*: the outlying steps by their raw ratio, linked across gaps of at
most ``confirm_window - confirm`` normal steps. Hysteresis: it recovers after ``clear`` consecutive
normal steps judged with the lower exit margins (``exit_fraction`` of the entry margins). The first
``warmup`` steps of a worker only learn (the gross rule still applies). Only slowness counts: faster
than the peers is never flagged.

Pure: no clock (a step's time is an input), no I/O; state per job is plain arrays plus worker names,
with :meth:`PeerComparator.snapshot` / :meth:`PeerComparator.restore`.

>>> pc = PeerComparator(PeerConfig(warmup=5, confirm=3, clear=3))
>>> out = []
>>> for step in range(40):
...     slow = 1.6 if step >= 20 else 1.0          # worker w3 slows down at step 20
...     vals = [1.0, 1.02, 0.98, slow, 1.01]
...     out += pc.update("job", float(step), ["w0", "w1", "w2", "w3", "w4"], vals)
>>> [(t.worker, t.phase, t.onset_step) for t in out]
[('w3', 'start', 20.0)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.quantiles import median


@dataclass(frozen=True, slots=True)
class PeerConfig:
    gross: float = 0.30
    change: float = 0.08
    z_min: float = 2.0
    min_scale: float = 0.01
    smooth_alpha: float = 0.3
    base_alpha: float = 0.02
    warmup: int = 20
    #: k of n: ``confirm`` outlying steps among the last ``confirm_window`` (at most 62) start a straggler.
    confirm: int = 5
    confirm_window: int = 8
    clear: int = 5
    exit_fraction: float = 0.5
    #: Steps with fewer reporting workers than this are skipped (a median of two is no reference).
    min_workers: int = 3


@dataclass(frozen=True, slots=True)
class StragglerTransition:
    """A worker became a straggler (``start``, onset = first outlying step) or recovered (``end``)."""

    job_id: str
    worker: str
    phase: str
    onset_step: float
    step: float
    ratio: float  # smoothed ratio to the job median at this step
    usual: float  # the worker's usual ratio
    reason: str  # "gross" or "change"


@dataclass(slots=True)
class _Job:
    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    smooth: np.ndarray = field(default_factory=lambda: np.zeros(0))
    base: np.ndarray = field(default_factory=lambda: np.zeros(0))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    state: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    run: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    run_step: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lead: np.ndarray = field(default_factory=lambda: np.zeros(0))  # first step of the current raw run; NaN: none
    gap: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # raw-normal steps since the run
    hist: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # outlying steps, bit 0 = latest

    _ARRAYS = ("smooth", "base", "count", "state", "run", "run_step", "lead", "gap", "hist")
    #: What an array holds for a worker a snapshot does not know (snapshots from before it existed).
    _MISSING = {"lead": math.nan}

    def ensure(self, workers: list[str]) -> np.ndarray:
        idx = np.empty(len(workers), dtype=np.int64)
        new = 0
        for k, w in enumerate(workers):
            i = self.index.get(w)
            if i is None:
                i = self.index[w] = len(self.names)
                self.names.append(w)
                new += 1
            idx[k] = i
        if new:
            for name in self._ARRAYS:
                arr = getattr(self, name)
                setattr(self, name, np.concatenate([arr, np.zeros(new, dtype=arr.dtype)]))
        return idx


class PeerComparator:
    """Straggler detection by peer comparison, for many jobs; see the module docstring."""

    def __init__(self, config: PeerConfig | None = None) -> None:
        self.config = config or PeerConfig()
        self.jobs: dict[str, _Job] = {}

    def update(self, job_id: str, step: float, workers: list[str], values: list[float] | np.ndarray
               ) -> list[StragglerTransition]:
        """One time step of one job: each listed worker's value (larger is worse). Returns transitions."""
        cfg = self.config
        x = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(x) & (x > 0)
        if int(ok.sum()) < cfg.min_workers:
            return []
        workers = [w for w, k in zip(workers, ok, strict=True) if k]
        x = x[ok]
        job = self.jobs.setdefault(job_id, _Job())
        idx = job.ensure(workers)
        ratio = x / median(x)
        count = job.count[idx]
        sm = np.where(count == 0, ratio, job.smooth[idx] + cfg.smooth_alpha * (ratio - job.smooth[idx]))
        base = np.where(count == 0, np.clip(ratio, 1 - cfg.gross, 1 + cfg.gross), job.base[idx])
        state = job.state[idx]
        flagged = state == 1
        margin = np.where(flagged, cfg.exit_fraction, 1.0)
        # Both the smoothed and this step's ratio must agree: one noisy step neither starts nor ends a run.
        gross = (sm >= 1.0 + cfg.gross * margin) & (ratio >= 1.0 + cfg.gross * margin)
        excess = sm - base
        med = median(excess)
        scale = max(1.4826 * median(np.abs(excess - med)), cfg.min_scale)
        z = (excess - med) / scale
        warm = count >= cfg.warmup
        change = (warm & (excess >= cfg.change * margin) & (ratio - base >= cfg.change * margin)
                  & (z >= cfg.z_min * margin))
        out_now = gross | change
        # The raw ratio alone (no smoothing): where the current uninterrupted run of outlying steps
        # began. The smoothed ratio confirms a run a few steps late; its onset is this earlier step.
        # A run survives gaps of up to ``confirm_window - confirm`` raw-normal steps (the k-of-n slack).
        # A raw step passes the change rule as the smoothed one does: above its usual ratio and standing
        # out from the other workers' raw changes (one worker's noise is not a run's first step).
        raw_excess = ratio - base
        raw_med = median(raw_excess)
        raw_scale = max(1.4826 * median(np.abs(raw_excess - raw_med)), cfg.min_scale)
        raw_out = (ratio >= 1.0 + cfg.gross * margin) | (
            warm & (raw_excess >= cfg.change * margin) & ((raw_excess - raw_med) / raw_scale >= cfg.z_min * margin))
        slack = max(cfg.confirm_window - cfg.confirm, 0)
        lead_prev = np.where(count == 0, np.nan, job.lead[idx])
        gap = np.where(raw_out, 0, job.gap[idx] + 1)
        lead = np.where(raw_out, np.where(np.isnan(lead_prev), step, lead_prev),
                        np.where(gap > slack, np.nan, lead_prev))
        window_mask = (1 << max(cfg.confirm_window, cfg.confirm)) - 1
        hist = ((job.hist[idx] << 1) | out_now.astype(np.int64)) & window_mask
        outlying = np.bitwise_count(hist)
        run = job.run[idx]
        # While flagged a run counts consecutive normal steps (the end); before, the k-of-n count decides.
        new_run = np.where(flagged, np.where(~out_now, run + 1, 0), 0)
        run_step = np.where(flagged & ~out_now & (run == 0), step, job.run_step[idx])
        start = ~flagged & out_now & (outlying >= cfg.confirm)
        end = flagged & (new_run >= cfg.clear)
        # The onset of a start: the first step of the raw run (an outlying step is raw-outlying too, so a
        # starting worker always has one).
        run_step = np.where(start, lead, run_step)
        # Learn the usual ratio only from normal, unflagged steps within the plausible band.
        learn = ~flagged & ~out_now & (np.abs(ratio - 1.0) < cfg.gross)
        base = np.where(learn, base + cfg.base_alpha * (ratio - base), base)
        job.smooth[idx] = sm
        job.base[idx] = base
        job.count[idx] = count + 1
        job.state[idx] = np.where(start, 1, np.where(end, 0, state))
        job.run[idx] = np.where(start | end, 0, new_run)
        job.run_step[idx] = run_step
        job.lead[idx] = lead
        job.gap[idx] = gap
        job.hist[idx] = np.where(start | end, 0, hist)
        out: list[StragglerTransition] = []
        for k in np.flatnonzero(start | end):
            out.append(StragglerTransition(
                job_id, workers[k], "start" if start[k] else "end", float(run_step[k]), step, float(sm[k]),
                float(base[k]), "gross" if gross[k] else ("change" if change[k] else "recovered")))
        return out

    def stragglers(self, job_id: str) -> list[str]:
        """Workers of ``job_id`` flagged right now."""
        job = self.jobs.get(job_id)
        return [] if job is None else [job.names[i] for i in np.flatnonzero(job.state == 1)]

    def forget(self, job_id: str) -> None:
        """Drop a finished job's state."""
        self.jobs.pop(job_id, None)

    def snapshot(self) -> dict[str, Any]:
        """Plain data: per job, worker names and arrays as lists (JSON-able)."""
        return {jid: {"names": list(j.names), **{k: getattr(j, k).tolist() for k in _Job._ARRAYS}}
                for jid, j in self.jobs.items()}

    def restore(self, data: dict[str, Any]) -> None:
        self.jobs = {}
        for jid, d in data.items():
            j = _Job(names=list(d["names"]), index={n: i for i, n in enumerate(d["names"])})
            for k in _Job._ARRAYS:
                fill = _Job._MISSING.get(k, 0)
                setattr(j, k, np.asarray(d.get(k, [fill] * len(j.names)), dtype=getattr(j, k).dtype))
            self.jobs[jid] = j
