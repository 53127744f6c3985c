"""Per-series anomaly detection over a rolling baseline, vectorised across series.

Each series keeps a ring buffer of its last ``window`` normal values (its baseline). A new value is
scored with a robust z-score against the baseline's median and MAD, in the direction the catalogue
says is bad, and calibrated to ``[0, 1)``::

    score = 1 - 2 ** (-z / z_threshold)      # z = z_threshold  <=>  score = 0.5

A series enters an anomaly *episode* after ``confirm`` consecutive bad samples (the onset is the
first of them) and leaves it after ``clear`` consecutive normal samples. Baselines freeze during an
episode (so a fault does not become the new normal) for at most ``window`` samples.

Counter semantics (``Mode.ERRORS``): on a series whose baseline is all zeros (a clean link) any
positive rate is bad from the first increment, scored by its size; a series that always errs is
judged against its own baseline like any other. ``Mode.EVENT``: a change to a non-zero value is bad.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.catalogue import Direction, Mode
from streams.series import grow

MODE_CODES = {Mode.LEVEL: 0, Mode.RATE: 1, Mode.ERRORS: 2, Mode.EVENT: 3, Mode.CONTEXT: 4}
DIR_CODES = {Direction.UP: 1, Direction.DOWN: -1, Direction.BOTH: 0}

NORMAL, EPISODE = 0, 1


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    window: int = 120
    min_samples: int = 20
    z_threshold: float = 6.0
    score_threshold: float = 0.5
    confirm: int = 2
    clear: int = 5
    min_relative_change: float = 0.2
    #: Rate (per second) of a fault counter on a clean series that scores 0.9.
    error_rate_ref: float = 1.0


@dataclass(slots=True)
class Transitions:
    """Episode transitions of one round. ``pos`` indexes the round's input arrays."""

    pos: np.ndarray
    phase: np.ndarray  # 1 = start, 0 = end
    onset_ts: np.ndarray
    value: np.ndarray
    score: np.ndarray
    p50: np.ndarray
    p99: np.ndarray


def calibrate(z: np.ndarray, z_threshold: float) -> np.ndarray:
    """Map a directional z-score to ``[0, 1)``; ``z_threshold`` maps to 0.5, negatives to 0.

    >>> calibrate(np.array([-1.0, 0.0, 6.0, 12.0]), 6.0).tolist()
    [0.0, 0.0, 0.5, 0.75]
    """
    return np.where(z > 0, 1.0 - np.exp2(-np.maximum(z, 0.0) / z_threshold), 0.0)


def _sorted_median(sorted_rows: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Median of each row's first ``count`` values; rows are sorted with NaNs last."""
    lo = np.take_along_axis(sorted_rows, ((count - 1) // 2)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(sorted_rows, (count // 2)[:, None], axis=1)[:, 0]
    return 0.5 * (lo + hi)


def robust_stats(rows: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of each ring-buffer row (NaN marks unused slots; ``count`` >= 1 valid).

    Two row sorts instead of ``nanmedian``: ~20x faster on small windows.

    >>> robust_stats(np.array([[1.0, 5.0, 2.0, np.nan]]), np.array([3]))
    (array([2.]), array([1.]))
    """
    count = count.astype(np.int64)
    srt = np.sort(rows, axis=1)
    med = _sorted_median(srt, count)
    dev = np.sort(np.abs(rows - med[:, None]), axis=1)
    return med, _sorted_median(dev, count)


class DetectorBank:
    """Detection state for many series, addressed by series id."""

    def __init__(self, config: DetectorConfig) -> None:
        self.config = config
        w = config.window
        self.buf = np.full((0, w), np.nan, dtype=np.float64)
        self.pos = np.zeros(0, dtype=np.int32)
        self.count = np.zeros(0, dtype=np.int32)
        self.mode = np.zeros(0, dtype=np.int8)
        self.bad_dir = np.zeros(0, dtype=np.int8)
        self.state = np.zeros(0, dtype=np.int8)
        self.run = np.zeros(0, dtype=np.int32)  # consecutive bad (normal) / normal (episode) samples
        self.run_ts = np.full(0, np.nan)  # time of the first sample of the current run
        self.run_value = np.full(0, np.nan)
        self.run_score = np.zeros(0)
        self.episode_len = np.zeros(0, dtype=np.int32)
        self.last_value = np.full(0, np.nan)

    def __len__(self) -> int:
        return int(self.pos.shape[0])

    def register(self, sid: int, mode: Mode, bad: Direction) -> None:
        """Declare a new series (ids are dense and registered in order)."""
        size = sid + 1
        if size > self.buf.shape[0]:
            self.buf = grow(self.buf, size, np.nan)
            self.pos = grow(self.pos, size, 0)
            self.count = grow(self.count, size, 0)
            self.mode = grow(self.mode, size, 0)
            self.bad_dir = grow(self.bad_dir, size, 0)
            self.state = grow(self.state, size, 0)
            self.run = grow(self.run, size, 0)
            self.run_ts = grow(self.run_ts, size, np.nan)
            self.run_value = grow(self.run_value, size, np.nan)
            self.run_score = grow(self.run_score, size, 0.0)
            self.episode_len = grow(self.episode_len, size, 0)
            self.last_value = grow(self.last_value, size, np.nan)
        self.mode[sid] = MODE_CODES[mode]
        self.bad_dir[sid] = DIR_CODES[bad]

    # -- scoring ------------------------------------------------------------------------------
    def score(self, ids: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Calibrated scores for values ``x`` of series ``ids`` (unique), plus baseline p50 and scale."""
        cfg = self.config
        n = ids.shape[0]
        scores = np.zeros(n)
        med = np.full(n, np.nan)
        scale = np.full(n, np.nan)
        warm = self.count[ids] >= cfg.min_samples
        mode = self.mode[ids]
        if warm.any():
            m, mad = robust_stats(self.buf[ids[warm]], self.count[ids[warm]])
            med[warm] = m
            scale[warm] = 1.4826 * mad
        dev = x - med
        direction = self.bad_dir[ids]
        z_raw = np.divide(dev, np.maximum(scale, 1e-12), out=np.zeros(n), where=~np.isnan(med))
        z = np.where(direction == 0, np.abs(z_raw), z_raw * direction)
        # Ignore moves that are tiny relative to the level, however stable the series was.
        small = np.abs(dev) < cfg.min_relative_change * np.abs(med)
        z = np.where(small | np.isnan(med), 0.0, z)
        scores = calibrate(z, cfg.z_threshold)
        # Fault counters on clean series: any increment is bad, scored by its rate.
        clean = warm & (mode == 2) & (med == 0) & (scale == 0)
        if clean.any():
            rate = np.maximum(x[clean], 0.0)
            scores[clean] = np.where(
                rate > 0, np.maximum(cfg.score_threshold, 1.0 - np.exp2(-3.32 * rate / cfg.error_rate_ref)), 0.0
            )
        # Events: a change to a non-zero value.
        event = mode == 3
        if event.any():
            prev = self.last_value[ids[event]]
            xe = x[event]
            scores[event] = np.where((xe != 0) & (xe != prev), 0.99, 0.0)
        scores[mode == 4] = 0.0
        scores[~warm & (mode != 3)] = 0.0
        return scores, med, scale

    def update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> Transitions:
        """Score one round (``ids`` unique, ``x`` finite) and advance the episode state machines."""
        cfg = self.config
        scores, _, _ = self.score(ids, x)
        bad = scores >= cfg.score_threshold
        state = self.state[ids]
        run = self.run[ids]
        in_ep = state == EPISODE
        # A run counts consecutive samples that disagree with the current state.
        disagree = np.where(in_ep, ~bad, bad)
        new_run = np.where(disagree, run + 1, 0)
        starting_run = disagree & (run == 0)
        run_ts = np.where(starting_run, ts, self.run_ts[ids])
        run_value = np.where(starting_run, x, self.run_value[ids])
        run_score = np.where(starting_run, scores, np.maximum(self.run_score[ids], np.where(disagree, scores, 0)))
        start = ~in_ep & (new_run >= cfg.confirm)
        end = in_ep & (new_run >= cfg.clear)
        ep_len = np.where(in_ep, self.episode_len[ids] + 1, 0)
        # Baseline: learn normal values; during an episode only once it outlived the window.
        learn = (~bad & ~in_ep) | (in_ep & (ep_len > cfg.window))
        learn &= ~start
        if learn.any():
            li = ids[learn]
            p = self.pos[li]
            self.buf[li, p] = x[learn]
            self.pos[li] = (p + 1) % cfg.window
            self.count[li] = np.minimum(self.count[li] + 1, cfg.window)
        new_state = np.where(start, EPISODE, np.where(end, NORMAL, state)).astype(np.int8)
        new_run = np.where(start | end, 0, new_run)
        self.state[ids] = new_state
        self.run[ids] = new_run
        self.run_ts[ids] = run_ts
        self.run_value[ids] = run_value
        self.run_score[ids] = np.where(start | end, 0.0, run_score)
        self.episode_len[ids] = np.where(start, 0, ep_len)
        self.last_value[ids] = x
        changed = np.flatnonzero(start | end)
        if changed.size == 0:
            empty = np.zeros(0)
            return Transitions(changed, np.zeros(0, dtype=np.int8), empty, empty, empty, empty, empty)
        cids = ids[changed]
        p50, p99 = self.percentiles(cids, (50.0, 99.0))
        return Transitions(
            pos=changed,
            phase=start[changed].astype(np.int8),
            onset_ts=run_ts[changed],
            value=np.where(start[changed], run_value[changed], x[changed]),
            score=np.where(start[changed], run_score[changed], scores[changed]),
            p50=p50,
            p99=p99,
        )

    def percentiles(self, ids: np.ndarray, qs: tuple[float, ...]) -> tuple[np.ndarray, ...]:
        """Baseline percentiles of series ``ids`` (NaN where a series has no baseline yet)."""
        rows = self.buf[ids]
        out = []
        with np.errstate(all="ignore"):
            empty = np.all(np.isnan(rows), axis=1)
            safe = np.where(empty[:, None], 0.0, rows)
            for q in qs:
                v = np.nanpercentile(safe, q, axis=1) if rows.size else np.zeros(0)
                out.append(np.where(empty, np.nan, v))
        return tuple(out)

    def in_episode(self, sid: int) -> bool:
        return bool(self.state[sid] == EPISODE)

    # -- state ----------------------------------------------------------------------------------
    _FIELDS = ("buf", "pos", "count", "mode", "bad_dir", "state", "run", "run_ts", "run_value",
               "run_score", "episode_len", "last_value")

    def snapshot(self, n: int) -> dict[str, np.ndarray]:
        return {f"detect.{name}": getattr(self, name)[:n].copy() for name in self._FIELDS}

    def restore(self, data: dict[str, np.ndarray]) -> None:
        n = data["detect.pos"].shape[0]
        if n:
            self.register(n - 1, Mode.LEVEL, Direction.UP)
        for name in self._FIELDS:
            arr = data[f"detect.{name}"]
            if name == "buf" and arr.shape[1] != self.config.window:
                raise ValueError(f"snapshot window {arr.shape[1]} != configured {self.config.window}")
            getattr(self, name)[:n] = arr
