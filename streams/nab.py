"""NAB scoring, re-implemented from the published rules of the Numenta Anomaly Benchmark (v1.1).

Pure functions over arrays: no pandas, no files, no clock. :mod:`lockstep.commands.eval` reads the
CSVs and labels and calls these. The rules, as NAB's ``sweeper``/``scorer``/``runner`` apply them:

- **Probationary period**: the first ``min(floor(0.15 * n), 0.15 * 5000)`` rows of each file are not
  scored at all (neither true nor false positives, and a window lying entirely in them is ignored).
- **Windows**: each labelled window ``[start, end]`` is entered on the row whose timestamp equals
  ``start`` and left after the row whose timestamp equals ``end`` (windows are taken in label order).
- **Scaled sigmoid**: a row at relative position ``p`` scores ``2 * sigmoid(-5 p) - 1`` (``-1`` beyond
  ``p > 3``). In a window of width ``w`` whose last row has index ``r``, row ``i`` sits at
  ``p = -(r - i + 1) / w`` and is worth ``tp * S(p) / S(-1)``; only the best (earliest) detection of a
  window counts and a window without any is worth ``-fn``. A detection outside every window is a false
  positive worth ``fp * S(|r' - i| / (w' - 1))`` after a window (``r'``, ``w'`` the last window left), or
  ``-fp`` before the first window.
- **Profiles** (cost matrices): ``standard`` (tp 1, fp 0.11, fn 1), ``reward_low_FP_rate`` (fp 0.22),
  ``reward_low_FN_rate`` (fn 2).
- **Threshold sweep**: a detection is a row whose anomaly score is ``>=`` the threshold. The sweep
  evaluates every distinct score of the whole corpus (plus 1.1, "nothing detected") and keeps the
  best total; ties go to the higher threshold.
- **Normalisation**: ``100 * (raw - null) / (perfect - null)`` where ``null`` is the swept raw score of
  the null detector (a constant 0.5 everywhere) and ``perfect`` is the number of labelled windows
  times ``tp``.

Example: one window over rows 4..6 of 10, and a detector that fires on row 5 only::

    >>> geo = window_geometry(list(range(10)), [(4, 6)], probation_percent=0.0)
    >>> rows = sweep_rows(geo, np.array([0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0]), PROFILES["standard"])
    >>> round(best_row(rows).score, 4)   # S(-2/3) / S(-1): detected a third of the way in
    0.9437
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Rows of a file that lie in the probationary period carry this window id.
PROBATIONARY = -2
#: Rows outside every window.
OUTSIDE = -1
#: The sweep's starting threshold: above every score, so nothing is detected.
START_THRESHOLD = 1.1


@dataclass(frozen=True, slots=True)
class CostMatrix:
    """One NAB application profile."""

    tp: float
    fp: float
    fn: float


#: NAB's ``config/profiles.json``.
PROFILES: dict[str, CostMatrix] = {
    "standard": CostMatrix(tp=1.0, fp=0.11, fn=1.0),
    "reward_low_FP_rate": CostMatrix(tp=1.0, fp=0.22, fn=1.0),
    "reward_low_FN_rate": CostMatrix(tp=1.0, fp=0.11, fn=2.0),
}


def probationary_length(n_rows: int, percent: float = 0.15) -> float:
    """Rows at the start of a file that are never scored.

    >>> probationary_length(4032), probationary_length(6000, 0.1), probationary_length(100, 0.0)
    (604, 500.0, 0)
    """
    return min(math.floor(percent * n_rows), percent * 5000)


def scaled_sigmoid(position: np.ndarray | float) -> np.ndarray:
    """NAB's weighting of a detection at a relative position (``-1`` window start, ``0`` its end).

    >>> [round(float(v), 5) for v in scaled_sigmoid(np.array([-1.0, -0.5, 0.0, 1.0, 3.5]))]
    [0.98661, 0.84828, 0.0, -0.98661, -1.0]
    """
    p = np.asarray(position, dtype=np.float64)
    with np.errstate(over="ignore"):
        val = 2.0 / (1.0 + np.exp(5.0 * np.minimum(p, 3.0))) - 1.0
    return np.where(p > 3.0, -1.0, val)


_MAX_TP = float(scaled_sigmoid(-1.0))


@dataclass(frozen=True, slots=True)
class WindowGeometry:
    """Where each row of one file sits relative to its labelled windows (independent of the profile).

    ``window[i]`` is the window index (``OUTSIDE``, or ``PROBATIONARY`` for unscored rows);
    ``position[i]`` the relative position used for the sigmoid (in-window or past the last window;
    NaN before the first window); ``n_windows`` counts windows with at least one scored row.
    """

    window: np.ndarray
    position: np.ndarray
    n_windows: int
    n_labelled: int


class LabelError(ValueError):
    """A window limit that does not match a row timestamp of its file."""


def window_geometry(timestamps: Sequence[Any], windows: Sequence[tuple[Any, Any]],
                    probation_percent: float = 0.15) -> WindowGeometry:
    """Walk the rows as NAB's sweeper does and record each row's window and relative position.

    ``timestamps`` and the window limits must compare equal where NAB expects them to (the same
    type: datetimes, numbers or strings). Raises :class:`LabelError` if a window's end is not a row.

    >>> g = window_geometry(list(range(8)), [(2, 4)], probation_percent=0.0)
    >>> g.window.tolist()
    [-1, -1, 0, 0, 0, -1, -1, -1]
    >>> [round(float(p), 3) for p in g.position[2:]]
    [-1.0, -0.667, -0.333, 0.5, 1.0, 1.5]
    """
    ts = list(timestamps)
    n = len(ts)
    index_of: dict[Any, int] = {}
    for i, t in enumerate(ts):
        index_of.setdefault(t, i)
    pending = list(windows)
    window = np.full(n, OUTSIDE, dtype=np.int64)
    position = np.full(n, np.nan)
    cur: int | None = None
    cur_right = cur_width = 0
    prev_right: int | None = None
    prev_width = 0
    next_id = 0
    for i, t in enumerate(ts):
        if pending and t == pending[0][0]:
            start, end = pending.pop(0)
            if end not in index_of:
                raise LabelError(f"window end {end!r} is not a timestamp of the file")
            cur, next_id = next_id, next_id + 1
            cur_right = index_of[end]
            cur_width = cur_right - index_of[start] + 1
        if cur is not None:
            window[i] = cur
            position[i] = -(cur_right - i + 1) / cur_width
        elif prev_right is not None:
            if prev_width <= 1:
                raise LabelError("a one-row window followed by rows cannot be scored (NAB divides by zero)")
            position[i] = abs(prev_right - i) / (prev_width - 1)
        if cur is not None and t == end:
            prev_right, prev_width, cur = i, cur_width, None
    if pending:
        raise LabelError(f"window start {pending[0][0]!r} is not a timestamp of the file (or out of order)")
    probation = math.ceil(probationary_length(n, probation_percent))
    window[:probation] = PROBATIONARY
    scored = window[window >= 0]
    return WindowGeometry(window, position, int(np.unique(scored).size), next_id)


def row_weights(geo: WindowGeometry, cost: CostMatrix) -> np.ndarray:
    """Each row's contribution if detected (NAB's per-row ``S(t)`` column)."""
    inside = geo.window >= 0
    sig = scaled_sigmoid(np.nan_to_num(geo.position, nan=10.0))
    return np.where(inside, sig * cost.tp / _MAX_TP, sig * cost.fp)


@dataclass(frozen=True, slots=True)
class ThresholdRows:
    """The score of every threshold of a sweep, thresholds in decreasing order."""

    threshold: np.ndarray
    score: np.ndarray
    tp: np.ndarray
    tn: np.ndarray
    fp: np.ndarray
    fn: np.ndarray


@dataclass(frozen=True, slots=True)
class ThresholdScore:
    threshold: float
    score: float
    tp: int
    tn: int
    fp: int
    fn: int

    @property
    def total(self) -> int:
        return self.tp + self.tn + self.fp + self.fn


def sweep_rows(geo: WindowGeometry | Sequence[WindowGeometry], scores: np.ndarray | Sequence[np.ndarray],
               cost: CostMatrix) -> ThresholdRows:
    """Score every threshold at once for one file or a whole corpus (NAB's ``calcScoreByThreshold``).

    With several files, windows are kept apart per file and the false positives of all files add up.
    """
    geos = [geo] if isinstance(geo, WindowGeometry) else list(geo)
    arrays = [np.asarray(scores, dtype=np.float64)] if isinstance(geo, WindowGeometry) else \
        [np.asarray(s, dtype=np.float64) for s in scores]
    win_parts, w_parts, s_parts = [], [], []
    offset = 0
    n_windows = 0
    for g, s in zip(geos, arrays, strict=True):
        if s.shape[0] != g.window.shape[0]:
            raise ValueError("scores and timestamps differ in length")
        if np.isnan(s).any():
            raise ValueError("anomaly scores contain NaN")
        keep = g.window != PROBATIONARY
        win = g.window[keep]
        win_parts.append(np.where(win >= 0, win + offset, OUTSIDE))
        w_parts.append(row_weights(g, cost)[keep])
        s_parts.append(s[keep])
        offset += g.n_labelled
        n_windows += g.n_windows
    win = np.concatenate(win_parts) if win_parts else np.zeros(0, dtype=np.int64)
    weight = np.concatenate(w_parts) if w_parts else np.zeros(0)
    score = np.concatenate(s_parts) if s_parts else np.zeros(0)
    return threshold_rows(score, weight, win, n_windows, cost.fn)


def threshold_rows(score: np.ndarray, weight: np.ndarray, window: np.ndarray, n_windows: int,
                   fn_weight: float) -> ThresholdRows:
    """The sweep itself, over scored rows (probationary rows already removed).

    ``weight`` is each row's worth if detected, ``window`` its window id (``OUTSIDE`` or ``>= 0``) and
    ``n_windows`` the number of distinct windows among them. NAB's own unit-test case:

    >>> r = threshold_rows(np.array([0.0, 0.2, 0.3, 0.5, 0.5]), np.array([-3.0, 20, 10, 5, -3]),
    ...                    np.array([-1, 0, 0, 1, -1]), 2, 5.0)
    >>> r.threshold.tolist(), r.score.tolist()
    ([1.1, 0.5, 0.3, 0.2, 0.0], [-10.0, -3.0, 12.0, 22.0, 19.0])
    >>> r.tp.tolist(), r.tn.tolist(), r.fp.tolist(), r.fn.tolist()
    ([0, 1, 2, 3, 3], [2, 1, 1, 1, 0], [0, 1, 1, 1, 2], [3, 2, 1, 0, 0])
    """
    score = np.asarray(score, dtype=np.float64)
    order = np.argsort(-score, kind="stable")
    win, weight, score = window[order], weight[order], score[order]
    inside = win >= 0
    # False positives add up; a window is worth its best (earliest) detection so far.
    fp_gain = np.where(inside, 0.0, weight)
    tp_gain = np.zeros(score.size)
    if inside.any():
        idx = np.flatnonzero(inside)
        wins = win[idx]
        by_win = np.argsort(wins, kind="stable")
        g_w, g_val = wins[by_win], weight[idx][by_win]
        starts = np.r_[True, g_w[1:] != g_w[:-1]]
        group = np.cumsum(starts) - 1
        # Running maximum within each window group, starting from -fn (offsetting each group by
        # more than the value span lets one global accumulate do it).
        span = 2.0 * (float(np.abs(g_val).max()) + fn_weight) + 1.0
        run = np.maximum(np.maximum.accumulate(g_val + group * span) - group * span, -fn_weight)
        prev = np.where(starts, -fn_weight, np.r_[-fn_weight, run[:-1]])
        gains = np.empty(idx.size)
        gains[by_win] = run - prev
        tp_gain[idx] = gains
    total = -fn_weight * n_windows + np.cumsum(fp_gain + tp_gain)
    n_in = int(inside.sum())
    n_out = int(score.size - n_in)
    tp_c = np.cumsum(inside)
    fp_c = np.cumsum(~inside)
    # A threshold row is recorded after the last point of each distinct score.
    last = np.flatnonzero(np.r_[score[1:] != score[:-1], True]) if score.size else np.zeros(0, dtype=np.int64)
    thr = np.r_[START_THRESHOLD, score[last]]
    tot = np.r_[-fn_weight * n_windows, total[last]]
    tp = np.r_[0, tp_c[last]]
    fp = np.r_[0, fp_c[last]]
    return ThresholdRows(thr, tot, tp, n_out - fp, fp, n_in - tp)


def _row(rows: ThresholdRows, k: int) -> ThresholdScore:
    return ThresholdScore(float(rows.threshold[k]), float(rows.score[k]), int(rows.tp[k]), int(rows.tn[k]),
                          int(rows.fp[k]), int(rows.fn[k]))


def best_row(rows: ThresholdRows) -> ThresholdScore:
    """The best threshold (NAB's optimiser: highest score, ties to the higher threshold)."""
    return _row(rows, int(np.argmax(rows.score)))


def row_at(rows: ThresholdRows, threshold: float) -> ThresholdScore:
    """The score when every row scoring ``>= threshold`` is a detection."""
    k = int(np.searchsorted(-rows.threshold, -threshold, side="right")) - 1
    return _row(rows, max(k, 0))


@dataclass(frozen=True, slots=True)
class FileInput:
    """One scored file: its name, row timestamps, labelled windows and the detector's scores."""

    name: str
    timestamps: Sequence[Any]
    windows: Sequence[tuple[Any, Any]]
    scores: np.ndarray


@dataclass(frozen=True, slots=True)
class ProfileResult:
    profile: str
    threshold: float
    raw: float
    null: float
    perfect: float
    normalised: float
    per_file: dict[str, ThresholdScore]
    at_threshold: float | None = None
    at_threshold_raw: float | None = None
    at_threshold_normalised: float | None = None
    at_threshold_per_file: dict[str, ThresholdScore] | None = None


def score_corpus(files: Sequence[FileInput], profiles: dict[str, CostMatrix] | None = None,
                 fixed_threshold: float | None = None, probation_percent: float = 0.15
                 ) -> dict[str, ProfileResult]:
    """Score a corpus per profile: swept threshold, normalised score, per-file rows.

    ``fixed_threshold`` additionally scores every file at that threshold (Lockstep's own).
    """
    profiles = profiles or PROFILES
    geos = [window_geometry(f.timestamps, f.windows, probation_percent) for f in files]
    labelled = sum(len(f.windows) for f in files)
    out: dict[str, ProfileResult] = {}
    for name, cost in profiles.items():
        rows = sweep_rows(geos, [f.scores for f in files], cost)
        best = best_row(rows)
        null_rows = sweep_rows(geos, [np.full(len(f.timestamps), 0.5) for f in files], cost)
        null = best_row(null_rows).score
        perfect = labelled * cost.tp
        denom = perfect - null

        def norm(raw: float, null: float = null, denom: float = denom) -> float:
            return 100.0 * (raw - null) / denom if denom else 0.0

        per_file = {f.name: row_at(sweep_rows(g, f.scores, cost), best.threshold)
                    for f, g in zip(files, geos, strict=True)}
        extra: dict[str, Any] = {}
        if fixed_threshold is not None:
            fixed = row_at(rows, fixed_threshold)
            extra = {
                "at_threshold": fixed_threshold, "at_threshold_raw": fixed.score,
                "at_threshold_normalised": norm(fixed.score),
                "at_threshold_per_file": {f.name: row_at(sweep_rows(g, f.scores, cost), fixed_threshold)
                                          for f, g in zip(files, geos, strict=True)},
            }
        out[name] = ProfileResult(name, best.threshold, best.score, null, perfect, norm(best.score), per_file,
                                  **extra)
    return out


@dataclass(frozen=True, slots=True)
class WindowDetection:
    """One labelled window at a fixed threshold: its scored rows, its first detection (None: missed) and
    what that is worth (``-fn`` when missed), and its highest score (how far a miss was from the threshold)."""

    first_row: int
    last_row: int
    detected: int | None
    worth: float
    peak_row: int
    peak: float


@dataclass(frozen=True, slots=True)
class FileDetections:
    """Where one file's NAB score comes from at a fixed threshold: each window's detection, and each row
    detected outside every window (row, score, worth). The worths add up to the file's score at that
    threshold (:func:`row_at` of its sweep)."""

    windows: list[WindowDetection]
    false_positives: list[tuple[int, float, float]]


def detections(geo: WindowGeometry, scores: np.ndarray, threshold: float, cost: CostMatrix) -> FileDetections:
    """The rows behind one file's score at ``threshold`` (a detection is a score ``>= threshold``; only a
    window's earliest detection counts; probationary rows are not scored).

    >>> geo = window_geometry(list(range(10)), [(4, 6)], probation_percent=0.0)
    >>> d = detections(geo, np.array([0, 0, 0.6, 0, 0, 0.7, 0.9, 0, 0, 0]), 0.5, PROFILES["standard"])
    >>> w = d.windows[0]
    >>> (w.first_row, w.last_row, w.detected, round(w.worth, 4), w.peak_row)
    (4, 6, 5, 0.9437, 6)
    >>> [(r, round(x, 2)) for r, _, x in d.false_positives]   # before the first window: -fp
    [(2, -0.11)]
    """
    scores = np.asarray(scores, dtype=np.float64)
    weight = row_weights(geo, cost)
    hit = scores >= threshold
    windows = []
    for k in np.unique(geo.window[geo.window >= 0]):
        rows = np.flatnonzero(geo.window == k)
        found = rows[hit[rows]]
        peak = int(rows[np.argmax(scores[rows])])
        first = int(found[0]) if found.size else None
        windows.append(WindowDetection(int(rows[0]), int(rows[-1]), first,
                                       float(weight[first]) if first is not None else -cost.fn,
                                       peak, float(scores[peak])))
    outside = np.flatnonzero((geo.window == OUTSIDE) & hit)
    return FileDetections(windows, [(int(i), float(scores[i]), float(weight[i])) for i in outside])



@dataclass(frozen=True, slots=True)
class Losses:
    """Where a score at a fixed threshold falls short of perfect, by kind (one file, or pooled with ``+``).

    ``tp * windows - raw = missed * tp + miss_cost + late + fp_cost``: a missed window forgoes ``tp``
    and costs ``fn`` (``miss_cost`` sums them); a detected one is worth less than ``tp`` the later it
    comes (``late`` sums ``tp - worth``; NAB centres a window on its labelled point, so a detection *at*
    that point already loses ``1 - S(-0.5) / S(-1)``, about 0.14 of ``tp``); ``fp_cost`` sums what the
    rows detected outside every window cost (as a positive number).
    """

    windows: int = 0
    detected: int = 0
    missed: int = 0
    worth: float = 0.0
    miss_cost: float = 0.0
    late: float = 0.0
    fp_rows: int = 0
    fp_cost: float = 0.0

    @property
    def raw(self) -> float:
        """The score these detections add up to (:func:`row_at`'s for the same files and threshold)."""
        return self.worth - self.miss_cost - self.fp_cost

    def __add__(self, other: Losses) -> Losses:
        return Losses(self.windows + other.windows, self.detected + other.detected, self.missed + other.missed,
                      self.worth + other.worth, self.miss_cost + other.miss_cost, self.late + other.late,
                      self.fp_rows + other.fp_rows, self.fp_cost + other.fp_cost)


def losses(found: FileDetections, cost: CostMatrix) -> Losses:
    """One file's :class:`Losses` from its :func:`detections` under ``cost``.

    >>> geo = window_geometry(list(range(20)), [(4, 6), (12, 14)], probation_percent=0.0)
    >>> d = detections(geo, np.array([0, 0, 0.6] + [0] * 2 + [0.9] + [0] * 14), 0.5, PROFILES["standard"])
    >>> l = losses(d, PROFILES["standard"])
    >>> (l.windows, l.detected, l.missed, round(l.late, 4), l.fp_rows, round(l.fp_cost, 2), round(l.raw, 4))
    (2, 1, 1, 0.0563, 1, 0.11, -0.1663)
    """
    hit = [w for w in found.windows if w.detected is not None]
    return Losses(
        windows=len(found.windows), detected=len(hit), missed=len(found.windows) - len(hit),
        worth=sum(w.worth for w in hit), miss_cost=sum(-w.worth for w in found.windows if w.detected is None),
        late=sum(cost.tp - w.worth for w in hit), fp_rows=len(found.false_positives),
        fp_cost=-sum(w for _, _, w in found.false_positives))
