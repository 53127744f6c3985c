"""The production scorer: robust, seasonal, constant state per series, vectorised across series.

Each series keeps two predictors and picks, sample by sample, the one that has lately been better:

- **level**: an exponentially weighted level (rate ``level_alpha``), for series without a daily shape;
- **daily profile**: ``bins`` time-of-day slots (event time, UTC), each an exponentially weighted
  value (rate ``season_alpha``), for series with one (the profile is used once its recent absolute
  error is below ``season_gain`` times the level's);
- **weekly offsets**: 7 day-of-week offsets (UTC days) on the daily profile, *relative* to it (a weekend
  at half the weekday is -0.5: half of each slot's usual value, not one amount all day), used while the
  profile plus the day's offset has lately been better than the profile alone by ``season_gain``. No period
  is assumed: a seasonal predictor is used only while it predicts better (for a stationary series the
  error at lag ``P`` shrinks as the autocorrelation at ``P`` grows). The offsets and the error that decides
  their use learn from *every* row (a weekday series' weekend is otherwise an episode the baselines never
  learn from) at a rate per unit of event time: ``dt / 1 day`` for an offset (a day seen moves it ~63 %
  of the way to that day's mean relative residual of the profile), a week's memory for the error.

The residual of the chosen predictor is divided by its scale (an exponentially weighted mean absolute
residual, rate ``scale_alpha``, floored at ``floor_rel`` of the level) to give a z-score. Every update
is Huber-clipped at ``huber`` scales, so a spike moves neither the level nor the scale much, while a
lasting level shift or slow drift is absorbed within about ``1 / level_alpha`` samples: the series is
judged against its *recent* self.

**Per-slot scale** (``slot_scale``): a daily series may be noisy by day and quiet by night, and one scale
for the whole day is then too wide at night (a night spike of a daytime size goes unseen) and too narrow
by day. Each time-of-day slot also keeps its scale as a multiple of the day's seasonal scale: the mean of
the slot's residuals of the seasonal prediction over the day's (debiased) scale, Huber-clipped at the
slot's own scale, at ``scale_alpha`` per visit of the slot, starting at 1 (the day's scale: no zero start,
so no bias to correct). A multiple, not an amount: a slot is visited ``bins`` times less often than the
day's scale learns, so the slot keeps the *shape* of the noise over the day (slow) while the day's scale
follows its level (fast). The slot's scale (its multiple times the day's, floored as any scale) is used
only while the daily profile is the chosen predictor and only once the series came back to the slot in
a later period of it (a later day): a scale learnt within one stay in a slot says nothing about that time
of day. Until then, and after restoring a snapshot from before it (zeros: unknown), the day's scale is
used.

Two scores come out, both calibrated with the same map ``s = z / (z + z_threshold)`` (``z <= 0``
gives 0; ``z = z_threshold`` gives exactly 0.5; never saturates, so scores stay comparable):

- ``score``: the surprise of this sample (what the episode state machine of
  :class:`streams.detect.DetectorBank` thresholds);
- ``novelty``: is this sample *new* for the series? Each series remembers the lowest and highest it
  has seen of three features: the value, a fast mean (rate ``novelty_fast``) and a slow mean (rate
  ``novelty_slow``); the extremes forget ``novelty_forget`` of their span per sample, so "seen" means
  roughly the last few thousand samples. A sample's exceedance is how far a feature goes beyond its
  remembered range (in the bad direction), as a fraction of that range; a surprise (z, on a scale no
  finer than ``novelty_span_floor`` of the range) beyond the largest remembered surprise also counts,
  weighted ``novelty_z_weight`` (surprises are remembered, warm or not, once the scale has seen three
  times its memory, ``3 / scale_alpha`` samples: the rule the means' extremes follow). An exceedance
  scores only if it beats the recent novelty (a memory with a half-life of ``novelty_refractory``
  samples), so an event scores at its start and again only where it outgrows itself (once a row has
  scored, by another ``novelty_margin``); ``novelty_margin`` of exceedance scores 0.5. The value's
  exceedance counts ``novelty_value_weight`` of itself (the means' count whole). This is what NAB
  rewards: early, single detections of what the series has not done before.

**Sparse series** (a counter that ticks now and then: RoCE pause frames, a retry counter): each series
also learns, from every sample, how often it is non-zero (rate ``scale_alpha``, the first samples
averaged equally) and the usual size of
its non-zero values (updates clipped at ``sparse_clip`` times the size once ``sparse_min_ticks`` ticks
were seen, so a storm is not a tick). A series with at least ``sparse_min_ticks`` ticks that is
non-zero in fewer than ``sparse_fraction`` of its samples is *sparse*: its scale is floored at its usual
tick size, so a tick of the usual size (a rate of 0.3/s is not zero) is about 1 z and a value
``z_threshold`` times the usual tick (a pause storm) scores 0.5 or more. Before its ticks are known, a
series is judged as any other (the first ticks of a series that was always zero still stand out).

State per series: 5 float64 (level, scale and error of both predictors), 15 float64 of novelty, sparsity
and the weekly decision (means, lows, highs, largest surprise, recent novelty; non-zero fraction, tick
size, ticks seen; weekly edge, last event time), 1 int32, 1 int8, ``bins`` float32 of profile, 7 float32
of weekly offsets (48 bins: 385 bytes); with ``slot_scale``, also ``bins`` float32 of slot scales (577 bytes).

>>> s = RobustScorer(RobustConfig(min_samples=10, bins=0))
>>> s.register(0)
>>> rng = np.random.default_rng(0)
>>> for t in range(200):
...     _ = s.update(np.array([0]), np.array([60.0 * t]), np.array([10.0 + rng.normal()]))
>>> quiet = s.update(np.array([0]), np.array([12000.0]), np.array([10.5]))
>>> spike = s.update(np.array([0]), np.array([12060.0]), np.array([25.0]))
>>> bool(quiet[0] < 0.5 < spike[0])
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streams.series import Rows, grow, row_index, rows_size, take_rows

#: Mean absolute deviation to standard deviation for a normal distribution (sqrt(pi / 2)).
MAD_TO_SD = 1.2533141373155001
#: Direction codes: which sign of the residual is bad.
UP, DOWN, BOTH = 1, -1, 0
#: Columns of :attr:`RobustScorer.novel`.
MEANS, LOWS, HIGHS, PEAK, RECENT = slice(0, 2), slice(2, 5), slice(5, 8), 8, 9
#: Sparsity columns of :attr:`RobustScorer.novel` (learned from every row, as novelty is).
TICK_FRACTION, TICK_SIZE, TICKS = 10, 11, 12
#: Weekly columns of :attr:`RobustScorer.novel` (learned from every row): the recent mean of
#: ``|weekly residual| - season_gain |daily residual|`` (negative: the offsets beat the daily profile by
#: the gain) and the series' last event time.
WEEK_EDGE, LAST_TS = 13, 14
NOVEL_COLUMNS = 15
#: A day-of-week offset learns relative residuals of at most this many times the profile.
WEEK_CLIP = 4.0


#: A learned level and scale at or below this count as zero (:meth:`RobustScorer.clean`).
CLEAN_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class RobustConfig:
    """Tuning of :class:`RobustScorer` (rates are per sample)."""

    level_alpha: float = 0.05
    scale_alpha: float = 0.02
    season_alpha: float = 0.25
    bins: int = 48
    season_gain: float = 0.8
    #: Day-of-week offsets on the daily profile (weekly seasonality; False: daily only).
    weekly: bool = True
    #: A robust scale per time-of-day slot, used while the daily profile is (False, the default: one scale a
    #: day, and no per-slot state: ``bins`` float32 a series and ~10 % of a streaming call saved).
    slot_scale: bool = False
    huber: float = 4.0
    floor_rel: float = 0.01
    floor_abs: float = 1e-9
    z_threshold: float = 6.0
    min_samples: int = 20
    #: Rates of the fast and slow means whose extremes the novelty output remembers (besides the value's).
    novelty_fast: float = 0.2
    novelty_slow: float = 0.05
    #: Exceedance (as a fraction of the remembered span) at which novelty scores 0.5.
    novelty_margin: float = 0.075
    #: Per sample, the remembered extremes and the largest surprise forget this fraction of themselves
    #: (half-life ~6,900 samples): a series is judged against roughly its last few thousand samples.
    novelty_forget: float = 1e-4
    #: The surprise behind novelty uses a scale of at least this fraction of the value's remembered span.
    novelty_span_floor: float = 0.01
    #: The surprise's exceedance of its own largest counts this much (z is heavier-tailed than values).
    novelty_z_weight: float = 0.25
    #: The value's exceedance of its remembered range counts this much, the means' 1 (a lone sample beyond
    #: its range is weaker evidence than a mean beyond its range; 1 weighs them alike).
    novelty_value_weight: float = 1.0
    #: Half-life (samples) of the memory of recent novelty: an event scores once, at its onset, and
    #: again only where it outgrows itself.
    novelty_refractory: float = 25.0
    #: Moves smaller than this fraction of the expected value never score (0 disables).
    min_relative_change: float = 0.0
    #: A series non-zero in fewer than this fraction of its samples, with at least ``sparse_min_ticks``
    #: non-zero samples seen, is sparse: its scale is floored at its usual tick size (0 disables).
    sparse_fraction: float = 0.5
    sparse_min_ticks: int = 3
    #: A tick moves the usual tick size by at most this many times the size (a storm is not a tick).
    sparse_clip: float = 4.0
    threshold: float = 0.5

    @classmethod
    def for_window(cls, window: int, **kw: float | int) -> RobustConfig:
        """Rates for a baseline memory of about ``window`` samples (level 5/window, scale 2/window,
        novelty's refractory half-life window/4)."""
        kw.setdefault("novelty_refractory", max(1.0, window / 4.0))
        return cls(level_alpha=min(1.0, 5.0 / window), scale_alpha=min(1.0, 2.0 / window), **kw)  # type: ignore[arg-type]


def calibrate(z: np.ndarray, z_threshold: float) -> np.ndarray:
    """Map a directional z-score to ``[0, 1)``: ``z_threshold`` maps to 0.5, ``z <= 0`` to 0.

    >>> calibrate(np.array([-1.0, 0.0, 6.0, 18.0]), 6.0).tolist()
    [0.0, 0.0, 0.5, 0.75]
    """
    zp = np.minimum(np.fmax(z, 0.0), 1e300)  # NaN and negatives to 0, +inf to a finite cap
    return zp / (zp + z_threshold)  # type: ignore[no-any-return]


def _clip(r: np.ndarray, lim: np.ndarray) -> np.ndarray:
    """``r`` clipped to ``[-lim, lim]`` (``np.clip``'s wrapper costs more than the two ufuncs on small arrays)."""
    return np.minimum(np.maximum(r, -lim), lim)  # type: ignore[no-any-return]


@dataclass(slots=True)
class RobustScores:
    """Per-row outputs of one :meth:`RobustScorer.evaluate`."""

    score: np.ndarray
    novelty: np.ndarray
    z: np.ndarray  # directional z-score (bad direction positive)
    expected: np.ndarray  # the chosen predictor's expected value (NaN before the first sample)
    scale: np.ndarray  # the chosen predictor's scale, in value units (standard-deviation-like)
    warm: np.ndarray
    # internals handed from evaluate() to learn()
    _bins: np.ndarray
    _r_level: np.ndarray
    _r_season: np.ndarray
    _has_season: np.ndarray
    _floor: np.ndarray
    _count: np.ndarray  # samples seen before this row
    _debias: np.ndarray
    _zdir: np.ndarray
    _novel: np.ndarray  # (rows, NOVEL_COLUMNS): the novelty state after this row (see RobustScorer.novel)
    _r_pred: np.ndarray  # the residual of the seasonal prediction made (what its scale and error learn)
    _prof: np.ndarray  # the slot's daily profile as stored (float64; NaN: not visited yet, or no profile)
    # weekly seasonality: the day of the week, and (None when it is off) its offset once this row is learnt
    _dow: np.ndarray | None
    _week: np.ndarray | None
    # per-slot scale (None when off): the slot's stored scale, and whether it is in use once this row is
    # learnt (in use already, or known and this row is the series' first in a new period of the slot)
    _slot: np.ndarray | None
    _slot_use: np.ndarray | None


class RobustScorer:
    """Robust seasonal z-scores for many series; see the module docstring."""

    _F64 = ("level", "mad_level", "err_level", "mad_season", "err_season")
    #: Per-series float state (one entry per series; see the module docstring).
    level: np.ndarray
    mad_level: np.ndarray
    err_level: np.ndarray
    mad_season: np.ndarray
    err_season: np.ndarray
    _STATE = (*_F64, "novel", "count", "direction", "profile", "week", "slot_mad")
    #: The state without the per-slot scale (``slot_scale`` off: not allocated, written or read).
    _STATE_NO_SLOT = _STATE[:-1]
    #: Added after the first snapshots were written: an older snapshot restores them as a new series has them.
    _LATER = {"week": 0.0, "slot_mad": 0.0}

    def __init__(self, config: RobustConfig | None = None) -> None:
        self.config = config or RobustConfig()
        cfg = self.config
        self.threshold = cfg.threshold
        self._rdecay = 0.5 ** (1.0 / cfg.novelty_refractory) if cfg.novelty_refractory > 0 else 0.0
        self._rates_col = np.array([[cfg.novelty_fast], [cfg.novelty_slow]])
        # The scales' bias correction by samples seen, ``1 - (1 - scale_alpha) ** max(n - 1, 1)``, as a
        # table: past its end the correction is 1.0 to the last bit.
        decay = 1.0 - cfg.scale_alpha
        size = int(min(math.log(1e-17) / math.log(decay), 1e6)) + 3 if 0.0 < decay < 1.0 else 2
        self._debias = 1.0 - decay ** np.maximum(np.arange(size) - 1.0, 1.0)
        # A mean's extremes are recorded once it has seen three times its memory (3 / rate samples):
        # before, its first samples weigh too much and would set extremes the series never had.
        self._starts_col = np.array([[0.0], [3.0 / cfg.novelty_fast], [3.0 / cfg.novelty_slow]])
        self._starts_max = float(self._starts_col.max())
        # The same rule for the largest surprise: z is a residual over the scale, whose memory is
        # 1 / scale_alpha; the surprises are remembered once the scale has seen three times that, warm or
        # not (a surprise remembered only from the end of warm-up is a handful of samples' maximum, and
        # the first ordinary sample after it would look like the largest surprise ever).
        self._peak_start = 3.0 / cfg.scale_alpha if cfg.scale_alpha > 0 else 0.0
        for name in self._F64:
            setattr(self, name, np.zeros(0))
        #: Novelty state, one row per series (one array: one gather and one scatter per call):
        #: the fast and slow means, the remembered lows and highs of (value, fast mean, slow mean),
        #: the largest surprise and the largest recent novelty exceedance.
        self.novel = np.zeros((0, NOVEL_COLUMNS))
        self.count = np.zeros(0, dtype=np.int32)
        self.direction = np.zeros(0, dtype=np.int8)
        self.profile = np.full((0, max(cfg.bins, 1)), np.nan, dtype=np.float32)
        #: Day-of-week offsets on the daily profile (day 0 is the UTC day of the epoch).
        self.week = np.zeros((0, 7), dtype=np.float32)
        #: Per time-of-day slot, its robust scale as a multiple of the day's (``mad_season``): 0 unknown,
        #: negative while only learnt within the slot's first period (not in use), positive once the series
        #: came back to the slot on a later day (module docstring).
        #: ``slot_scale`` off: no column (nothing allocated per series), and not part of the state.
        self._slots = cfg.slot_scale
        self.slot_mad = np.zeros((0, max(cfg.bins, 1) if self._slots else 0), dtype=np.float32)
        self._slot_len = 86400.0 / max(cfg.bins, 1)
        self._names = self._STATE if self._slots else self._STATE_NO_SLOT

    def __len__(self) -> int:
        return int(self.count.shape[0])

    def register(self, sid: int, direction: int = BOTH) -> None:
        """Declare series ``sid`` (dense ids; storage grows by doubling) and its bad direction."""
        size = sid + 1
        if size > self.count.shape[0]:
            for name in (*self._F64, "novel"):
                setattr(self, name, grow(getattr(self, name), size, 0.0))
            self.count = grow(self.count, size, 0)
            self.direction = grow(self.direction, size, 0)
            self.profile = grow(self.profile, size, np.nan)
            self.week = grow(self.week, size, 0.0)
            if self._slots:
                self.slot_mad = grow(self.slot_mad, size, 0.0)
        self.direction[sid] = direction

    def clear(self, ids: np.ndarray) -> None:
        """Forget series ``ids``: their rows as :meth:`register` leaves a new one (ids are reused)."""
        ids = ids[ids < self.count.shape[0]]
        for name in (*self._F64, "novel"):
            getattr(self, name)[ids] = 0.0
        self.count[ids] = 0
        self.direction[ids] = 0
        self.profile[ids] = np.nan
        self.week[ids] = 0.0
        if self._slots:
            self.slot_mad[ids] = 0.0

    def _bin(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time-of-day slot, day of the week (0 is the UTC day of the epoch) and slot period (the slots
        counted from the epoch, as floats) of each time."""
        bins = max(self.config.bins, 1)
        # A division, not a multiplication by the reciprocal: a time on a slot's edge lands in that slot.
        period = np.floor(ts / (86400.0 / bins))
        day, slot = np.divmod(period.astype(np.int64), bins)
        return slot, day % 7, period

    def evaluate(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> RobustScores:
        """Score rows ``x`` of series ``ids`` (unique) at times ``ts``, without learning."""
        # (A round is a few hundred rows: each array operation's fixed cost, about a microsecond, weighs
        # more than its arithmetic. A selection whose mask is the same for every row of the round, as
        # most are once the series are warm, is skipped for the array it would give.)
        cfg = self.config
        n = ids.shape[0]
        count = self.count[ids]
        lvl = self.level[ids]
        if np.count_nonzero(count) < n:  # a series' first sample: its level is the value
            lvl = np.where(count == 0, x, lvl)
        b, dow, period = self._bin(ts)
        prof = day_prof = self.profile[ids, b].astype(np.float64) if cfg.bins > 0 else np.full(n, np.nan)
        has_season = prof == prof  # (not NaN: the slot has been visited)
        r_level = x - lvl
        r_season = x - prof
        all_season = np.count_nonzero(has_season) == n
        if not all_season:
            r_season = np.where(has_season, r_season, r_level)
        # The rows' novelty state, one contiguous row per column (``(column, row)``: see ``_novelty``).
        # (the ``take`` method: a third of the cost of ``novel[ids]`` for a row gather of a 2-D array)
        stt = np.ascontiguousarray(self.novel.take(ids, axis=0).T)
        floor = cfg.floor_rel * np.abs(lvl) + cfg.floor_abs
        r_week = off = pscale = None
        r_chosen = r_season
        if cfg.weekly and cfg.bins > 0:
            # Weekly seasonality: the daily profile plus this day of the week's offset, used only while
            # its recent error beats the daily profile's by ``season_gain`` (module docstring). The
            # offsets are relative to the profile, on a scale no finer than the level's floor (fmax also
            # turns an unvisited slot's NaN into the floor: nothing learns from such a row, its rate is 0).
            off = self.week[ids, dow]  # float32: float64 once combined with the residuals
            pscale = np.fmax(np.abs(prof), floor)
            shift = off * pscale
            r_week = r_season - shift
            use_week = has_season & (stt[WEEK_EDGE] < 0.0)
            if np.count_nonzero(use_week):
                r_chosen = np.where(use_week, r_week, r_season)
                prof = np.where(use_week, prof + shift, prof)
        use_season = has_season & (self.err_season[ids] < cfg.season_gain * self.err_level[ids])
        # (``np.putmask`` into an array of our own: half the cost of ``np.where`` on a small round)
        r = r_level.copy()
        np.putmask(r, use_season, r_chosen)
        # The scales start at 0 and follow at ``scale_alpha``: without a bias correction (as in Adam's
        # moment estimates) they are a fraction of the truth for the first ~1/alpha samples, and every
        # sample just after warm-up looks several scales away. (``take``'s clip: past the table's end.)
        debias = self._debias.take(count, mode="clip")
        mad = self.mad_level[ids]
        np.putmask(mad, use_season, self.mad_season[ids])
        mad /= debias
        slot = slot_use = None
        if self._slots and cfg.bins > 0:
            # The slot's own scale where the daily profile is in use and the slot's scale is (positive:
            # learnt on more than one day); the day's scale elsewhere.
            slot = self.slot_mad[ids, b]
            in_use = slot > 0.0
            mad = np.where(use_season & in_use, slot * mad, mad)
            # A new period of the slot: the series' last sample was before this period's start (a last time
            # of NaN, before a first sample or from an old snapshot, is not).
            slot_use = in_use | ((slot != 0.0) & (stt[LAST_TS] < period * self._slot_len))
        mad = np.maximum(mad, floor)
        if cfg.sparse_fraction > 0:
            # A sparse series' scale is at least its usual tick (module docstring).
            sparse = (stt[TICKS] >= cfg.sparse_min_ticks) & (stt[TICK_FRACTION] < cfg.sparse_fraction)
            mad = np.maximum(mad, sparse * stt[TICK_SIZE] * (1.0 / MAD_TO_SD))
        scale = MAD_TO_SD * mad
        z = r / scale
        direction = self.direction[ids]
        directed = np.count_nonzero(direction) == n  # no series bad both ways
        zdir = z * direction if directed else np.where(direction == 0, np.abs(z), z * direction)
        expected = lvl  # (nothing reads ``lvl`` below)
        np.putmask(expected, use_season, prof)
        if cfg.min_relative_change > 0:
            np.putmask(zdir, np.abs(r) < cfg.min_relative_change * np.abs(expected), 0.0)
        warm = count >= cfg.min_samples
        surprise = zdir  # before the warm-up gate: the novelty memory learns it (``_novelty``)
        if np.count_nonzero(warm) < n:
            zdir = np.where(warm, zdir, 0.0)
        novelty, novelt = self._novelty(stt, x, count, warm, mad, direction, directed, zdir, surprise)
        week = None
        if off is None or r_week is None or pscale is None:
            novelt[WEEK_EDGE] = stt[WEEK_EDGE]
            # The last time is kept for the slots' new-period test (without them, nothing reads it here).
            novelt[LAST_TS] = ts if self._slots and cfg.bins > 0 else stt[LAST_TS]
        else:
            # Learned from every row, anomalous or not: whether a series has a weekly cycle is a property
            # of the series (a weekday series' weekend would otherwise be an episode never learnt from).
            # The offset's rate is per unit of event time, ``dt / 1 day`` (NaN before a first sample: 0),
            # so a day seen moves it ~63 % of the way to that day's mean relative residual, whatever the
            # sample rate.
            # (fmin with ``has_season``: at most one day, and 0 where the slot is new)
            rate = np.fmin(np.fmax(ts - stt[LAST_TS], 0.0) * (1.0 / 86400.0), has_season)
            # (a day is at most WEEK_CLIP times its profile away: a spike is not a weekday; fmin/fmax
            # also keep absurd input out of the offsets)
            rel = np.fmin(np.fmax(r_season / pscale, -WEEK_CLIP), WEEK_CLIP)
            week = off + rate * (rel - off)
            # The two errors, as means over about a week of event time (a weekday series' gain is on its
            # weekend), and weighted by the gain: their difference is one such mean.
            edge = stt[WEEK_EDGE]
            gain = np.abs(r_week) - cfg.season_gain * np.abs(r_season)
            np.add(edge, rate * (1.0 / 7.0) * (gain - edge), out=novelt[WEEK_EDGE])
            novelt[LAST_TS] = ts
        return RobustScores(
            score=calibrate(zdir, cfg.z_threshold), novelty=novelty, z=zdir,
            expected=expected,
            scale=scale, warm=warm, _bins=b, _r_level=r_level, _r_season=r_season,
            _has_season=has_season, _floor=floor, _count=count, _debias=debias, _zdir=zdir, _novel=novelt.T,
            _dow=dow, _r_pred=r_chosen, _prof=day_prof, _week=week, _slot=slot, _slot_use=slot_use,
        )

    def _novelty(self, stt: np.ndarray, x: np.ndarray, count: np.ndarray, warm: np.ndarray, mad: np.ndarray,
                 direction: np.ndarray, directed: bool, zdir: np.ndarray, surprise: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Novelty of each row (module docstring) and the novelty state (``stt``, the rows' state before,
        transposed: ``(column, row)``, C-contiguous) once the row is learnt, sparsity included, in the same
        ``(column, row)`` layout (its weekly columns are left for the caller to fill). ``warm`` is
        ``count >= min_samples``, ``directed`` whether no row's ``direction`` is both ways; ``zdir`` is the
        warm-up-gated z, ``surprise`` the same z before the gate (what the largest-surprise memory learns
        once the scale has settled)."""
        cfg = self.config
        n = x.shape[0]
        # Columns are rows here, ``(column, row)`` (the state keeps them as columns): an elementwise
        # operation on a (rows, 3) block, or on one strided column, costs up to ~5x one along a contiguous
        # row (4,096 rows: 74 against 14 us for the means). On the few hundred rows of a live round each
        # operation's fixed cost (about a microsecond) weighs more than its arithmetic, so the blocks of
        # like columns go through one operation each, written in place where a result is the new state.
        outt = np.empty_like(stt)
        feats = np.empty((3, n))  # the value, the fast mean and the slow mean
        feats[0] = x
        means = feats[1:]
        prev = stt[MEANS]
        np.subtract(x, prev, out=means)
        np.multiply(self._rates_col, means, out=means)
        np.add(prev, means, out=means)
        if np.count_nonzero(count) < n:  # a series' first sample (rare: the mask costs more than the arithmetic)
            fresh = count == 0
            means[:, fresh] = x[fresh]
        outt[MEANS] = means
        # The remembered lows and highs (``stt[LOWS]`` and ``stt[HIGHS]`` are adjacent: one (2, 3, rows) block).
        if n and count.min() > self._starts_max:  # every mean has seen three times its memory
            lows, highs = stt[LOWS], stt[HIGHS]
        else:
            lows, highs = np.where(count > self._starts_col, stt[LOWS.start: HIGHS.stop].reshape(2, 3, n), feats)
        span = highs - lows
        width = np.maximum(span, cfg.floor_abs)
        # The exceedances beyond the highs (0) and below the lows (1) of each feature, then the largest
        # over the three features, per direction (row maxima: a reduction along a 3-long axis costs ten
        # times as much on a large round).
        exceed = np.empty((2, 3, n))
        np.subtract(feats, highs, out=exceed[0])
        np.subtract(lows, feats, out=exceed[1])
        exceed /= width
        if cfg.novelty_value_weight != 1.0:
            exceed[:, 0] *= cfg.novelty_value_weight
        e_both = np.maximum(exceed[:, 0], exceed[:, 1])
        np.maximum(e_both, exceed[:, 2], out=e_both)
        e_up, e_down = e_both
        if directed:
            e = e_down
            np.putmask(e, direction > 0, e_up)
        else:
            e = np.where(direction > 0, e_up, np.where(direction < 0, e_down, np.maximum(e_up, e_down)))
        # The surprise against the predictors, on a scale no finer than a fraction of the span seen
        # (a series that sat still and then moved a hair is not a billion scales away).
        span_scale = mad / np.maximum(mad, cfg.novelty_span_floor * span[0])
        nz = zdir * span_scale
        peak = stt[PEAK]
        e_z = np.where(peak > 0, (nz - peak) / np.maximum(peak, cfg.floor_abs), 0.0)
        # fmax turns NaN (absurd input) into 0; the cap keeps e / (e + margin) finite.
        e = np.minimum(np.fmax(np.maximum(e, cfg.novelty_z_weight * e_z), 0.0), 1e300) * warm
        # Once a row has scored (the recent novelty is at least the margin), the event scores again only
        # where it outgrows the recent novelty by another margin: one event, not a run of rows each a
        # hair beyond the last.
        decayed = stt[RECENT] * self._rdecay
        recent = np.where(decayed >= cfg.novelty_margin, decayed + cfg.novelty_margin, decayed)
        gated = np.where(e > recent, e, 0.0)
        # The state after this row: extremes widened by it, then forgetting a little.
        new_lows, new_highs = outt[LOWS], outt[HIGHS]
        np.minimum(lows, feats, out=new_lows)
        np.maximum(highs, feats, out=new_highs)
        if cfg.novelty_forget > 0:
            mid = new_lows + new_highs
            mid *= 0.5
            shrink = new_highs - new_lows
            shrink *= 0.5 * cfg.novelty_forget
            new_lows += shrink
            np.minimum(new_lows, mid, out=new_lows)
            new_highs -= shrink
            np.maximum(new_highs, mid, out=new_highs)
        seen = surprise * span_scale
        np.putmask(seen, count < self._peak_start, 0.0)
        np.maximum(peak * (1.0 - cfg.novelty_forget), seen, out=outt[PEAK])
        np.maximum(decayed, e, out=outt[RECENT])
        # Sparsity: how often the series ticks and how large a tick is (the first samples and the first
        # ticks are averaged equally, as the scales are debiased: no early series looks sparse).
        ax = np.abs(x)
        tick = ax > CLEAN_EPS
        frac, size, ticks = stt[TICK_FRACTION], stt[TICK_SIZE], stt[TICKS]
        np.add(frac, np.maximum(1.0 / (count + 1.0), cfg.scale_alpha) * (tick - frac), out=outt[TICK_FRACTION])
        clipped = np.where(ticks >= cfg.sparse_min_ticks, np.minimum(ax, cfg.sparse_clip * size), ax)
        np.add(size, tick * np.maximum(1.0 / (ticks + 1.0), cfg.scale_alpha) * (clipped - size), out=outt[TICK_SIZE])
        np.add(ticks, tick, out=outt[TICKS])
        gated /= gated + cfg.novelty_margin
        return gated, outt

    def learn(self, ids: np.ndarray, x: np.ndarray, ev: RobustScores, mask: np.ndarray | None = None) -> None:
        """Advance the state of series ``ids`` with the rows evaluated in ``ev``.

        Rows where ``mask`` is False do not move the baselines (the bank freezes them during an
        episode), but they still count for warm-up and for the novelty memory.
        """
        cfg = self.config
        # What was seen is not new: the novelty state follows every row, anomalous or not.
        self.novel[ids] = ev._novel
        self.count[ids] = np.minimum(ev._count, 2**31 - 2) + 1
        if ev._dow is not None and ev._week is not None:
            self.week[ids, ev._dow] = ev._week
        sel: np.ndarray | slice = slice(None)
        if mask is not None:
            learnt = np.count_nonzero(mask)
            if not learnt:
                return
            if learnt < ids.shape[0]:  # (a mask of every row selects what no mask does: no copies)
                ids, x, sel = ids[mask], x[mask], mask
        floor = ev._floor[sel]
        r_l = ev._r_level[sel]
        count = ev._count[sel]
        mad_l = self.mad_level[ids]
        debias = ev._debias[sel]
        lim_l = cfg.huber * MAD_TO_SD * np.maximum(mad_l / debias, floor)
        step = cfg.level_alpha * _clip(r_l, lim_l)
        abs_l = np.abs(r_l)
        mad_next = mad_l + cfg.scale_alpha * (np.minimum(abs_l, lim_l) - mad_l)
        err_l = self.err_level[ids]
        err_next = err_l + cfg.scale_alpha * (abs_l - err_l)
        if np.count_nonzero(count) < count.shape[0]:
            # A series' first sample: the level starts at the value, the scale and error at 0.
            first = count == 0
            self.level[ids] = np.where(first, x, self.level[ids]) + step
            mad_next = np.where(first, 0.0, mad_next)
            err_next = np.where(first, 0.0, err_next)
        else:
            self.level[ids] = self.level[ids] + step
        self.mad_level[ids] = mad_next
        self.err_level[ids] = err_next
        if cfg.bins <= 0:
            return
        b = ev._bins[sel]
        has = ev._has_season[sel]
        r_s = ev._r_season[sel]
        # The profile learns the value; its scale and error, the residual of the seasonal prediction made
        # (with the day's offset where the weekly offsets are in use).
        r_p = ev._r_pred[sel]
        mad_s = self.mad_season[ids]
        day = np.maximum(mad_s / debias, floor)
        lim_s = cfg.huber * MAD_TO_SD * day
        prof = ev._prof[sel]
        abs_p = np.abs(r_p)
        err_s = self.err_season[ids]
        if np.count_nonzero(has) == has.shape[0]:  # every row's slot was visited before (the masks are moot)
            self.profile[ids, b] = prof + cfg.season_alpha * _clip(r_s, lim_s)
            self.mad_season[ids] = mad_s + cfg.scale_alpha * (np.minimum(abs_p, lim_s) - mad_s)
            self.err_season[ids] = err_s + cfg.scale_alpha * (abs_p - err_s)
        else:
            self.profile[ids, b] = np.where(has, prof + cfg.season_alpha * _clip(r_s, lim_s), x)
            self.mad_season[ids] = np.where(has, mad_s + cfg.scale_alpha * (np.minimum(abs_p, lim_s) - mad_s), mad_s)
            # An unvisited slot counts as a bad guess (twice the level's error) so the profile must earn its use.
            self.err_season[ids] = err_s + cfg.scale_alpha * (np.where(has, abs_p, 2.0 * abs_l) - err_s)
        if ev._slot is not None and ev._slot_use is not None:
            # The slot's scale, as a multiple of the day's (debiased) one: 1 where it is unknown (0), then
            # the mean of the slot's residuals of the seasonal prediction over the day's scale, Huber-clipped
            # at the slot's own scale, at ``scale_alpha`` a visit; stored negative until in use (module
            # docstring). (It shrinks by at most a factor ``1 - scale_alpha`` a visit: it stays above 0.)
            s = ev._slot[sel]
            ratio = np.where(s == 0.0, 1.0, np.abs(s))
            lim_b = np.maximum(ratio * day, floor) * (cfg.huber * MAD_TO_SD)
            ratio += cfg.scale_alpha * (np.minimum(abs_p, lim_b) / day - ratio)
            self.slot_mad[ids, b] = np.where(has, np.where(ev._slot_use[sel], ratio, -ratio), s)

    def clean(self, ids: np.ndarray) -> np.ndarray:
        """Series whose learned level and scale are both zero (a fault counter with no error so far)."""
        return (np.abs(self.level[ids]) <= CLEAN_EPS) & (self.mad_level[ids] <= CLEAN_EPS)  # type: ignore[no-any-return]

    def update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Score then learn (the :class:`streams.scorers.base.Scorer` contract); returns ``score``."""
        ev = self.evaluate(ids, ts, x)
        self.learn(ids, x, ev)
        return ev.score

    def update_detail(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> RobustScores:
        """Score then learn; returns every output."""
        ev = self.evaluate(ids, ts, x)
        self.learn(ids, x, ev)
        return ev

    def snapshot(self, n: Rows | None = None) -> dict[str, np.ndarray]:
        """State of the first ``n`` series (all by default), or of the rows listed in that order, as named
        arrays."""
        rows = len(self) if n is None else n
        return {f"robust.{k}": take_rows(getattr(self, k), rows) for k in self._names}

    def restore(self, data: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Replace the state of the first series, or of ``rows`` (one per snapshot row), with a snapshot."""
        n = data["robust.count"].shape[0]
        if data["robust.profile"].shape[1:] != self.profile.shape[1:]:
            raise ValueError("snapshot profile bins differ from the configured bins")
        # A snapshot's slot scales restore into a scorer with them (a scorer without them ignores them; a
        # snapshot without them restores as new series have them: the day's scale until learnt).
        if (self._slots and "robust.slot_mad" in data
                and data["robust.slot_mad"].shape[1:] != self.slot_mad.shape[1:]):
            raise ValueError("snapshot slot scale bins differ from the configured bins")
        size = rows_size(n if rows is None else rows)
        if size:
            self.register(size - 1)
        at = row_index(n if rows is None else rows)
        for k in self._names:
            if f"robust.{k}" not in data and k in self._LATER:  # a snapshot from before it was learned
                getattr(self, k)[at] = self._LATER[k]
                continue
            v = data[f"robust.{k}"]
            if k == "novel" and v.shape[1] < NOVEL_COLUMNS:  # from before sparsity or the weekly offsets
                old = np.zeros((n, NOVEL_COLUMNS))
                old[:, : v.shape[1]] = v
                if v.shape[1] <= LAST_TS:
                    old[:, LAST_TS] = np.nan  # no time passed since a sample it does not know
                self.novel[at] = old
                continue
            getattr(self, k)[at] = v

    @property
    def nbytes_per_series(self) -> float:
        """State bytes per registered series (allocated capacity counted as used)."""
        cap = max(self.count.shape[0], 1)
        return sum(getattr(self, k).nbytes for k in self._names) / cap  # type: ignore[no-any-return]
