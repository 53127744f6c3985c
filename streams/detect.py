"""Per-series anomaly detection, vectorised across series: scores, counter semantics, episodes.

A :class:`DetectorBank` holds, per series id:

- a :class:`streams.scorers.robust.RobustScorer` state (level, daily profile, robust scale: constant
  size per series), which turns each value into a directional z-score and a calibrated score
  ``z / (z + z_threshold)`` (so ``z_threshold`` maps to 0.5, the default ``score_threshold``);
- a :class:`streams.sketch.RollingPercentiles` sketch of its values over event-time windows (the p50
  and p99 reported with each transition come from the longest window);
- an episode state machine: a series enters an anomaly *episode* once ``confirm`` of its last
  ``confirm_window`` samples scored at least ``score_threshold`` (k of n; ``confirm_window == confirm``
  is the strict consecutive rule), on a bad sample; the onset is the first bad sample of the run (bad
  samples linked across gaps of at most ``confirm_window - confirm`` normal ones). It leaves the
  episode after ``clear`` consecutive samples below (hysteresis: one good sample does not end it).
  Baselines do not learn from anomalous samples, nor during an episode until it has lasted ``window``
  samples (then the new level becomes normal).

Scoring by mode (:class:`streams.catalogue.Mode`):

- ``level`` / ``rate``: the robust score in the catalogue's bad direction (a congestion counter is a
  ``rate``: judged against its own baseline like any gauge);
- ``errors``: a fault counter on a *clean* series (its learned level and scale are both zero: no
  error so far) is anomalous from its first increment, scored by its rate:
  ``max(score_threshold, 1 - 2 ** (-3.32 * rate / error_rate_ref))`` (``error_rate_ref`` per second
  scores 0.9); a series that always errs is judged against its own baseline like a ``rate``;
- ``event``: a change to a non-zero value scores 0.99;
- ``context``: never scores (tracked for percentiles only).

Time is an input: ``ts`` are event times in seconds; nothing reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from streams.catalogue import Direction, Mode
from streams.scorers.base import Evaluation, SeriesScorer
from streams.scorers.robust import RobustConfig, RobustScorer
from streams.series import RowIndex, Rows, SeriesLimits, grow, row_index, rows_size, run_index, take_rows
from streams.sketch import RollingPercentiles, SketchConfig

MODE_CODES = {Mode.LEVEL: 0, Mode.RATE: 1, Mode.ERRORS: 2, Mode.EVENT: 3, Mode.CONTEXT: 4}
DIR_CODES = {Direction.UP: 1, Direction.DOWN: -1, Direction.BOTH: 0}

NORMAL, EPISODE = 0, 1


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Detection settings (``agents.app.detector_config`` builds one from the settings).

    ``window`` is the baseline memory in samples: the level follows at rate ``5 / window`` and the
    scale at ``2 / window``.
    """

    window: int = 120
    min_samples: int = 20
    z_threshold: float = 6.0
    score_threshold: float = 0.5
    confirm: int = 2
    #: k of n: ``confirm`` bad samples among the last ``confirm_window`` (at most 30) start an episode.
    confirm_window: int = 3
    clear: int = 5
    min_relative_change: float = 0.2
    #: Rate (per second) of a fault counter on a clean series that scores 0.9.
    error_rate_ref: float = 1.0
    #: Time-of-day slots of the daily profile (0 disables seasonality).
    season_bins: int = 48
    #: Event-time windows (seconds) of the rolling percentiles.
    percentile_windows: tuple[float, ...] = (60.0, 300.0, 3600.0)
    #: Series held per input partition and per source, and idle series eviction.
    limits: SeriesLimits = field(default_factory=SeriesLimits)
    #: The per-series scorer, by its name in :data:`SCORERS`.
    scorer: str = "robust"
    #: The robust scorer's novelty: how much a lone sample beyond its remembered range counts (a mean
    #: beyond its range counts 1), and a surprise beyond the largest remembered one.
    novelty_value_weight: float = 1.0
    novelty_z_weight: float = 0.25
    #: The robust scorer's scale per time-of-day slot (opt-in: +``season_bins`` float32 a series and ~10 %
    #: of a streaming call; for series with a daily cycle whose noise differs by time of day).
    slot_scale: bool = False

    def robust(self) -> RobustConfig:
        return RobustConfig.for_window(
            self.window, z_threshold=self.z_threshold, min_samples=self.min_samples, bins=self.season_bins,
            min_relative_change=self.min_relative_change, threshold=self.score_threshold,
            novelty_value_weight=self.novelty_value_weight, novelty_z_weight=self.novelty_z_weight,
            slot_scale=self.slot_scale)

    def sketch(self) -> SketchConfig:
        return SketchConfig(windows=self.percentile_windows)



def _half_space_trees(cfg: DetectorConfig) -> SeriesScorer:
    from streams.scorers.hst import HalfSpaceTreesScorer, HSTConfig  # river is imported only when chosen

    return HalfSpaceTreesScorer(HSTConfig(min_samples=cfg.min_samples, z_threshold=cfg.z_threshold,
                                          threshold=cfg.score_threshold))


#: The per-series scorers :class:`DetectorBank` can run (the ``scorer`` setting), each one module under
#: streams/scorers/ keeping the :class:`streams.scorers.base.SeriesScorer` contract. A new scorer is its
#: module plus one line here.
SCORERS: dict[str, Callable[[DetectorConfig], SeriesScorer]] = {
    "robust": lambda cfg: RobustScorer(cfg.robust()),
    "hst": _half_space_trees,
}


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


@dataclass(frozen=True, slots=True)
class Judged:
    """The scorer's evaluation of a round's rows ``rows`` (None: every row; ``ev`` None: no row)."""

    ev: Evaluation | None
    rows: np.ndarray | None


@dataclass(slots=True)
class Scores:
    """Per-row scores of one round (see :meth:`DetectorBank.update`)."""

    score: np.ndarray
    novelty: np.ndarray


class DetectorBank:
    """Detection state for many series, addressed by series id."""

    _FIELDS = ("mode", "bad_dir", "state", "run", "run_ts", "run_value", "run_score", "episode_len", "last_value")
    #: What a new series' row holds (grown rows and cleared ones alike).
    _FILL = {"mode": 0, "bad_dir": 0, "state": NORMAL, "run": 0, "run_ts": np.nan, "run_value": np.nan,
             "run_score": 0.0, "episode_len": 0, "last_value": np.nan}

    #: The most rows one pass of :meth:`update` scores at once (a larger round runs as chunks of this
    #: many; about 4,096 rows of float64 temporaries fit a core's L2 cache with room to spare).
    chunk: int = 4096

    def __init__(self, config: DetectorConfig) -> None:
        self.config = config
        if config.scorer not in SCORERS:
            raise ValueError(f"unknown scorer {config.scorer!r}: one of {', '.join(sorted(SCORERS))}")
        self.scorer: SeriesScorer = SCORERS[config.scorer](config)
        window = max(config.confirm_window, config.confirm)
        if window > 30:
            raise ValueError(f"confirm_window {window} is above 30 (the history is 31 bits)")
        self._window_mask = np.int32((1 << window) - 1)
        #: A bad sample within the last ``confirm_window - confirm + 1`` samples keeps a run alive.
        self._slack_mask = np.int32((1 << (window - config.confirm + 1)) - 1)
        self.sketch = RollingPercentiles(config.sketch())
        self.mode = np.zeros(0, dtype=np.int8)
        self.bad_dir = np.zeros(0, dtype=np.int8)
        self.state = np.zeros(0, dtype=np.int8)
        #: Normal: the bad samples of the last ``confirm_window`` (bit 0 the latest); episode: the
        #: consecutive normal samples.
        self.run = np.zeros(0, dtype=np.int32)
        self.run_ts = np.full(0, np.nan)  # time of the first sample of the current run
        self.run_value = np.full(0, np.nan)
        self.run_score = np.zeros(0)
        self.episode_len = np.zeros(0, dtype=np.int32)
        self.last_value = np.full(0, np.nan)
        self._n = 0
        #: Per-row scores of the last :meth:`update` (for evaluation and debugging).
        self.last_scores = Scores(np.zeros(0), np.zeros(0))
        # Rows handed out by :meth:`allocate` (a bank shared by several pipelines): the next new row, the
        # rows free for reuse, and those released but not yet recycled.
        self._next_row = 0
        self._free: list[np.ndarray] = []
        self._released: list[np.ndarray] = []
        #: How many times :meth:`recycle` cleared released rows (a pipeline used after that raises).
        self.recycled = 0

    def __len__(self) -> int:
        return self._n

    # -- rows of a shared bank ------------------------------------------------------------------
    # One bank can hold the series of several input partitions (a worker's: streams.pipeline.run_together
    # then scores their rounds together, one set of array operations for all). Each partition's pipeline
    # maps its series ids to rows it was given here, and gives them back when it goes.
    def allocate(self, k: int) -> np.ndarray:
        """``k`` rows for new series (to :meth:`register` each): rows given back first (clean, as a new
        series has them), then new ones after every row handed out so far."""
        got: list[np.ndarray] = []
        need = k
        while need and self._free:
            chunk = self._free.pop()
            if chunk.size > need:
                self._free.append(chunk[need:])
                chunk = chunk[:need]
            got.append(chunk)
            need -= chunk.size
        if need:
            got.append(np.arange(self._next_row, self._next_row + need, dtype=np.int64))
            self._next_row += need
        return np.concatenate(got) if len(got) != 1 else got[0]

    def release(self, rows: np.ndarray) -> None:
        """Give ``rows`` back (their pipeline was dropped). They keep their state, and are not handed out
        again, until :meth:`recycle`: a batch still holding the dropped pipeline may use them until then."""
        if rows.size:
            self._released.append(rows.copy())

    def recycle(self) -> int:
        """Clear the rows released since the last call and make them free for :meth:`allocate`; returns
        how many. Call it between batches, when no dropped pipeline can be in use."""
        if not self._released:
            return 0
        rows = np.concatenate(self._released)
        self._released = []
        self.clear(rows)
        self._free.append(rows)
        self.recycled += 1
        return int(rows.size)

    @property
    def rows_in_use(self) -> int:
        """Rows handed out by :meth:`allocate` and not given back."""
        return self._next_row - sum(r.size for r in self._free) - sum(r.size for r in self._released)

    def register(self, sid: int, mode: Mode, bad: Direction) -> None:
        """Declare a series: a new id (dense, in order) or one :meth:`clear` freed for reuse."""
        size = sid + 1
        if size > self.mode.shape[0]:
            for name, fill in self._FILL.items():
                setattr(self, name, grow(getattr(self, name), size, fill))
        self._n = max(self._n, size)
        self.mode[sid] = MODE_CODES[mode]
        self.bad_dir[sid] = DIR_CODES[bad]
        self.scorer.register(sid, DIR_CODES[bad])
        self.sketch.register(sid)

    def clear(self, ids: np.ndarray) -> None:
        """Forget series ``ids`` (evicted; their ids are reused): episode state, baseline and
        percentiles as a newly registered series has them, so nothing carries over to the next one."""
        ids = ids[ids < self.mode.shape[0]]
        for name, fill in self._FILL.items():
            getattr(self, name)[ids] = fill
        self.scorer.clear(ids)
        self.sketch.clear(ids)

    # -- scoring ------------------------------------------------------------------------------
    def _score(self, ids: np.ndarray, sel: RowIndex, ts: np.ndarray, x: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, Judged, np.ndarray | None]:
        """Scores, novelty, the scorer's evaluation and, where some row is not a plain level or rate,
        the rows' modes (None: every row scores as the scorer says; else possibly a view of :attr:`mode`,
        which :meth:`update` never writes). ``sel`` is ``ids`` as an index (:func:`run_index`).

        The scorer judges only the rows it scores: an event's score is its value's change and a context
        series never scores, so neither is evaluated nor learnt (a quarter of a GPU scrape's rows: power,
        memory used, the last XID); their percentiles are kept all the same (the sketch)."""
        cfg = self.config
        mode = self.mode[sel]
        # Rows per mode (one call; a mode no row has costs no mask).
        _, _, errors, events, contexts = np.bincount(mode, minlength=5).tolist()
        if not (errors or events or contexts):
            ev = self.scorer.evaluate(ids, ts, x)
            return ev.score, ev.novelty, Judged(ev, None), None
        n = ids.shape[0]
        rows = np.flatnonzero(mode < MODE_CODES[Mode.EVENT]) if events or contexts else None
        if rows is None:
            ev = self.scorer.evaluate(ids, ts, x)
            judged = Judged(ev, None)
            score, novelty = ev.score.copy(), ev.novelty.copy()
        else:
            judged = Judged(self.scorer.evaluate(ids[rows], ts[rows], x[rows]) if rows.size else None, rows)
            score, novelty = np.zeros(n), np.zeros(n)
            if judged.ev is not None:
                score[rows] = judged.ev.score
                novelty[rows] = judged.ev.novelty
        if errors and judged.ev is not None:
            # Fault counters on clean series: any increment is bad, scored by its rate.
            warm = np.flatnonzero(judged.ev.warm)  # (positions among the rows judged)
            at = warm if rows is None else rows[warm]
            at = at[mode[at] == 2]
            clean = at[self.scorer.clean(ids[at])]
            if clean.size:
                rate = np.maximum(x[clean], 0.0)
                s = np.where(rate > 0, np.maximum(cfg.score_threshold,
                                                  1.0 - np.exp2(-3.32 * rate / cfg.error_rate_ref)), 0.0)
                score[clean] = s
                novelty[clean] = np.where(self.last_value[ids[clean]] > 0, 0.0, s)
        if events:
            event = mode == 3
            prev = self.last_value[ids[event]]
            xe = x[event]
            score[event] = np.where((xe != 0) & (xe != prev), 0.99, 0.0)
            novelty[event] = score[event]
        return score, novelty, judged, mode

    def _learn(self, ids: np.ndarray, x: np.ndarray, judged: Judged, mask: np.ndarray | None = None) -> None:
        """The scorer learns the rows it judged (``mask``: which of every row move the baselines)."""
        if judged.ev is None:
            return
        if judged.rows is None:
            self.scorer.learn(ids, x, judged.ev, mask)
        else:
            rows = judged.rows
            self.scorer.learn(ids[rows], x[rows], judged.ev, None if mask is None else mask[rows])

    def update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> Transitions:
        """Score one round (``ids`` unique, ``x`` finite), learn, and advance the episode state machines.

        The per-row scores are left in :attr:`last_scores`.

        A round of more than :attr:`chunk` rows runs as consecutive chunks of that many: the series are
        independent (``ids`` unique), so the result is the same to the bit, while each chunk's dozens of
        temporaries stay in the CPU's cache instead of streaming through memory.
        """
        n = ids.shape[0]
        if n <= self.chunk:
            return self._update(ids, ts, x)
        parts = [(lo, self._update(ids[lo:lo + self.chunk], ts[lo:lo + self.chunk], x[lo:lo + self.chunk]),
                  self.last_scores) for lo in range(0, n, self.chunk)]
        self.last_scores = Scores(np.concatenate([s.score for _, _, s in parts]),
                                  np.concatenate([s.novelty for _, _, s in parts]))
        return Transitions(
            pos=np.concatenate([tr.pos + lo for lo, tr, _ in parts]),
            **{f: np.concatenate([getattr(tr, f) for _, tr, _ in parts])
               for f in ("phase", "onset_ts", "value", "score", "p50", "p99")})

    def _update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> Transitions:
        """:meth:`update` of one chunk.

        The chunk's rows are indexed once as ``sel`` (:func:`run_index`): a slice where they are one
        ascending run of consecutive rows (most rounds), else ``ids``. A read through ``sel`` may then be
        a view of the bank's array: each is used only before the same rows are written (``state`` and
        ``run`` here, ``mode``), or goes straight into an expression that makes a new array. The scorer is
        given ``ids`` (it judges a subset of the rows, seldom a run of them)."""
        cfg = self.config
        sel = run_index(ids)
        scores, novelty, judged, mode = self._score(ids, sel, ts, x)
        self.last_scores = Scores(scores, novelty)
        bad = scores >= cfg.score_threshold
        state = self.state[sel]
        run = self.run[sel]
        if not np.count_nonzero(bad) and not np.count_nonzero(state):
            return self._quiet(ids, sel, ts, x, judged, run)
        return self._episodes(ids, sel, ts, x, judged, scores, mode, bad, state, run)

    def _episodes(self, ids: np.ndarray, sel: RowIndex, ts: np.ndarray, x: np.ndarray, judged: Judged,
                  scores: np.ndarray, mode: np.ndarray | None, bad: np.ndarray, state: np.ndarray,
                  run: np.ndarray) -> Transitions:
        """:meth:`_update`'s learning and episode state machines, for any round (``bad``: the rows scoring
        at least the threshold; ``state`` and ``run``: the rows' episode state and run before, possibly
        views of :attr:`state` and :attr:`run`: neither is read once the rows' state is written)."""
        cfg = self.config
        # An event (an XID) or an error on a clean link is confirmed by itself: it is one sample long.
        confirm: np.ndarray | int = cfg.confirm
        if mode is not None:
            confirm = np.where((mode == 3) | ((mode == 2) & (scores >= 0.95)), 1, cfg.confirm)
        in_ep = state == EPISODE
        # Normal: k of n over the bit history of bad samples; a run starts at a bad sample with no bad
        # one within the slack before it. Episode: consecutive normal samples end it.
        disagree = in_ep ^ bad
        hist = ((run << 1) | bad) & self._window_mask
        new_run = np.where(in_ep, np.where(disagree, run + 1, 0), hist)
        starting_run = disagree & ((run & np.where(in_ep, -1, self._slack_mask)) == 0)
        run_ts = np.where(starting_run, ts, self.run_ts[sel])
        run_value = np.where(starting_run, x, self.run_value[sel])
        run_score = np.where(starting_run, scores, np.maximum(self.run_score[sel], np.where(disagree, scores, 0)))
        start = ~in_ep & bad & (np.bitwise_count(hist) >= confirm)
        end = in_ep & (new_run >= cfg.clear)
        ep_len = np.where(in_ep, self.episode_len[sel] + 1, 0)
        # Baseline: learn normal values; during an episode only once it outlived the window (a start
        # is a bad sample outside an episode: never learnt).
        learn = np.where(in_ep, ep_len > cfg.window, ~bad)
        self._learn(ids, x, judged, learn)
        self.sketch.add(ids, ts, x, sel)
        flips = start | end  # a start only outside an episode, an end only inside: the state flips
        self.state[sel] = state ^ flips
        self.run[sel] = np.where(flips, 0, new_run)
        self.run_ts[sel] = run_ts
        self.run_value[sel] = run_value
        self.run_score[sel] = np.where(flips, 0.0, run_score)
        self.episode_len[sel] = np.where(start, 0, ep_len)
        self.last_value[sel] = x
        changed = flips.nonzero()[0]
        if changed.size == 0:
            return self._no_transitions()
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

    def _quiet(self, ids: np.ndarray, sel: RowIndex, ts: np.ndarray, x: np.ndarray, judged: Judged,
               run: np.ndarray) -> Transitions:
        """:meth:`_episodes` of a round in which no row is bad and no series is in an episode (most rounds):
        the same state to the bit, without the masks that are then constant. No run starts (its time and
        value stay), none ends, every row is learnt, and a run's history of bad samples shifts in a 0."""
        self._learn(ids, x, judged)
        self.sketch.add(ids, ts, x, sel)
        self.run[sel] = (run << 1) & self._window_mask
        # (as the full path leaves it: the largest of the run's score and no bad score, 0)
        self.run_score[sel] = np.maximum(self.run_score[sel], 0.0)
        self.episode_len[sel] = 0
        self.last_value[sel] = x
        return self._no_transitions()

    @staticmethod
    def _no_transitions() -> Transitions:
        empty = np.zeros(0)
        return Transitions(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int8), empty, empty, empty, empty, empty)

    def percentiles(self, ids: np.ndarray, qs: tuple[float, ...], window: int = -1) -> tuple[np.ndarray, ...]:
        """Rolling percentiles ``qs`` (0-100) of series ``ids`` over ``window`` (default the longest),
        as of each series' last sample (NaN where the window is empty)."""
        return tuple(self.sketch.quantiles(ids, qs, window=window))

    def in_episode(self, sid: int) -> bool:
        return bool(self.state[sid] == EPISODE)

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self, n: Rows) -> dict[str, np.ndarray]:
        """The state of the first ``n`` series, or of the rows listed in that order (a pipeline's rows of
        a shared bank): the same arrays either way."""
        out = {f"detect.{name}": take_rows(getattr(self, name), n) for name in self._FIELDS}
        out.update({f"detect.{k}": v for k, v in self.scorer.snapshot(n).items()})
        out.update({f"detect.{k}": v for k, v in self.sketch.snapshot(n).items()})
        return out

    def restore(self, data: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """A :meth:`snapshot` into the first series, or into ``rows`` (one per snapshot row, registered)."""
        n = data["detect.state"].shape[0]
        size = rows_size(n if rows is None else rows)
        if size:
            self.register(size - 1, Mode.LEVEL, Direction.UP)
        at = row_index(n if rows is None else rows)
        for name in self._FIELDS:
            getattr(self, name)[at] = data[f"detect.{name}"]
        own = {f"detect.{name}" for name in self._FIELDS}
        self.scorer.restore({k[len("detect."):]: v for k, v in data.items()
                             if k.startswith("detect.") and k not in own and not k.startswith("detect.sketch.")},
                            rows)
        self.sketch.restore({k[len("detect."):]: v for k, v in data.items() if k.startswith("detect.sketch.")}, rows)
        self._n = max(self._n, size)

    def nbytes_per_series(self) -> dict[str, float]:
        """State bytes per series by part (allocated capacity counted as used)."""
        cap = max(self.mode.shape[0], 1)
        own = sum(getattr(self, k).nbytes for k in self._FIELDS) / cap
        return {"episodes": own, "scorer": self.scorer.nbytes_per_series, "percentiles": self.sketch.nbytes_per_series}
