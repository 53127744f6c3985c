"""The production scorer: robust, seasonal, constant state per series, vectorised across series.

Each series keeps two predictors and picks, sample by sample, the one that has lately been better:

- **level**: an exponentially weighted level (rate ``level_alpha``), for series without a daily shape;
- **daily profile**: ``bins`` time-of-day slots (event time, UTC), each an exponentially weighted
  value (rate ``season_alpha``), for series with one (the profile is used once its recent absolute
  error is below ``season_gain`` times the level's).

The residual of the chosen predictor is divided by its scale (an exponentially weighted mean absolute
residual, rate ``scale_alpha``, floored at ``floor_rel`` of the level) to give a z-score. Every update
is Huber-clipped at ``huber`` scales, so a spike moves neither the level nor the scale much, while a
lasting level shift or slow drift is absorbed within about ``1 / level_alpha`` samples: the series is
judged against its *recent* self.

Two scores come out, both calibrated with the same map ``s = z / (z + z_threshold)`` (``z <= 0``
gives 0; ``z = z_threshold`` gives exactly 0.5; never saturates, so scores stay comparable):

- ``score``: the surprise of this sample (what the episode state machine of
  :class:`streams.detect.DetectorBank` thresholds);
- ``novelty``: the same, but only where the surprise is more than ``novelty_ratio`` times the largest
  surprise of the recent past (decaying with a half-life of ``novelty_half_life`` samples), else 0.
  It marks the *start* of an event once instead of every sample of it: the score NAB rewards.

State per series: 7 float64, 1 int32 and ``bins`` float32 (48 bins: 252 bytes).

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

from dataclasses import dataclass

import numpy as np

from streams.series import grow

#: Mean absolute deviation to standard deviation for a normal distribution (sqrt(pi / 2)).
MAD_TO_SD = 1.2533141373155001
#: Direction codes: which sign of the residual is bad.
UP, DOWN, BOTH = 1, -1, 0


@dataclass(frozen=True, slots=True)
class RobustConfig:
    """Tuning of :class:`RobustScorer` (rates are per sample)."""

    level_alpha: float = 0.05
    scale_alpha: float = 0.02
    season_alpha: float = 0.25
    bins: int = 48
    season_gain: float = 0.8
    huber: float = 4.0
    floor_rel: float = 0.01
    floor_abs: float = 1e-9
    z_threshold: float = 6.0
    min_samples: int = 20
    #: Rates of the fast and slow means whose extremes the novelty output tracks (besides the value's).
    novelty_fast: float = 0.2
    novelty_slow: float = 0.05
    #: Exceedance of a feature's historical span (as a fraction of it) that scores 0.5 as novelty.
    novelty_margin: float = 0.1
    #: Per sample, the remembered extremes shrink by this fraction of their distance to their middle.
    novelty_forget: float = 0.0
    #: Novelty z-scores use a scale of at least this fraction of the value's historical span.
    novelty_span_floor: float = 0.01
    novelty_z_from: int = 150
    novelty_z_weight: float = 0.25
    novelty_refractory: float = 25.0
    novelty_refractory_ratio: float = 1.0
    #: Moves smaller than this fraction of the expected value never score (0 disables).
    min_relative_change: float = 0.0
    threshold: float = 0.5

    @classmethod
    def for_window(cls, window: int, **kw: float | int) -> RobustConfig:
        """Rates for a baseline memory of about ``window`` samples (level 5/window, scale 2/window)."""
        return cls(level_alpha=min(1.0, 5.0 / window), scale_alpha=min(1.0, 2.0 / window), **kw)  # type: ignore[arg-type]


def calibrate(z: np.ndarray, z_threshold: float) -> np.ndarray:
    """Map a directional z-score to ``[0, 1)``: ``z_threshold`` maps to 0.5, ``z <= 0`` to 0.

    >>> calibrate(np.array([-1.0, 0.0, 6.0, 18.0]), 6.0).tolist()
    [0.0, 0.0, 0.5, 0.75]
    """
    zp = np.maximum(np.nan_to_num(z, nan=0.0, posinf=1e300), 0.0)
    return zp / (zp + z_threshold)  # type: ignore[no-any-return]


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
    _zdir: np.ndarray
    _nz: np.ndarray
    _m_fast: np.ndarray
    _m_slow: np.ndarray
    _e: np.ndarray


class RobustScorer:
    """Robust seasonal z-scores for many series; see the module docstring."""

    _F64 = ("level", "mad_level", "err_level", "mad_season", "err_season", "peak", "recent",
            "lo_x", "hi_x", "m_fast", "lo_fast", "hi_fast", "m_slow", "lo_slow", "hi_slow")

    def __init__(self, config: RobustConfig | None = None) -> None:
        self.config = config or RobustConfig()
        self.threshold = self.config.threshold
        self._rdecay = 0.5 ** (1.0 / self.config.novelty_refractory) if self.config.novelty_refractory > 0 else 0.0
        for name in self._F64:
            setattr(self, name, np.zeros(0))
        self.count = np.zeros(0, dtype=np.int32)
        self.direction = np.zeros(0, dtype=np.int8)
        self.profile = np.full((0, max(self.config.bins, 1)), np.nan, dtype=np.float32)

    def __len__(self) -> int:
        return int(self.count.shape[0])

    def register(self, sid: int, direction: int = BOTH) -> None:
        """Declare series ``sid`` (dense ids; storage grows by doubling) and its bad direction."""
        size = sid + 1
        if size > self.count.shape[0]:
            for name in self._F64:
                setattr(self, name, grow(getattr(self, name), size, 0.0))
            self.count = grow(self.count, size, 0)
            self.direction = grow(self.direction, size, 0)
            self.profile = grow(self.profile, size, np.nan)
        self.direction[sid] = direction

    def _bin(self, ts: np.ndarray) -> np.ndarray:
        bins = self.config.bins
        return (np.mod(ts, 86400.0) * (bins / 86400.0)).astype(np.int64) % max(bins, 1)  # type: ignore[no-any-return]

    def evaluate(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> RobustScores:
        """Score rows ``x`` of series ``ids`` (unique) at times ``ts``, without learning."""
        cfg = self.config
        count = self.count[ids]
        lvl = self.level[ids]
        first = count == 0
        lvl = np.where(first, x, lvl)
        b = self._bin(ts)
        prof = self.profile[ids, b].astype(np.float64) if cfg.bins > 0 else np.full(ids.shape[0], np.nan)
        has_season = ~np.isnan(prof)
        r_level = x - lvl
        r_season = np.where(has_season, x - prof, r_level)
        use_season = has_season & (self.err_season[ids] < cfg.season_gain * self.err_level[ids])
        floor = cfg.floor_rel * np.abs(lvl) + cfg.floor_abs
        r = np.where(use_season, r_season, r_level)
        # The scales start at 0 and follow at ``scale_alpha``: without a bias correction (as in Adam's
        # moment estimates) they are a fraction of the truth for the first ~1/alpha samples, and every
        # sample just after warm-up looks several scales away.
        debias = 1.0 - (1.0 - cfg.scale_alpha) ** np.maximum(count - 1, 1)
        mad = np.maximum(np.where(use_season, self.mad_season[ids], self.mad_level[ids]) / debias, floor)
        z = r / (MAD_TO_SD * mad)
        direction = self.direction[ids]
        zdir = np.where(direction == 0, np.abs(z), z * direction)
        if cfg.min_relative_change > 0:
            expected = np.where(use_season, prof, lvl)
            zdir = np.where(np.abs(r) < cfg.min_relative_change * np.abs(expected), 0.0, zdir)
        warm = count >= cfg.min_samples
        novelty, nz, m_fast, m_slow = self._novelty(ids, x, first, mad, direction, count, zdir)
        zdir = np.where(warm, zdir, 0.0)
        return RobustScores(
            score=calibrate(zdir, cfg.z_threshold), novelty=novelty, z=zdir,
            expected=np.where(use_season, prof, lvl),
            scale=MAD_TO_SD * mad, warm=warm, _bins=b, _r_level=r_level, _r_season=r_season,
            _has_season=has_season, _floor=floor, _zdir=zdir, _nz=nz, _m_fast=m_fast, _m_slow=m_slow, _e=self._e,
        )

    def _novelty(self, ids: np.ndarray, x: np.ndarray, first: np.ndarray, mad: np.ndarray,
                 direction: np.ndarray, count: np.ndarray, zdir: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cfg = self.config
        lo_x = np.where(first, x, self.lo_x[ids])
        hi_x = np.where(first, x, self.hi_x[ids])
        span = hi_x - lo_x
        m_fast = np.where(first, x, self.m_fast[ids] + cfg.novelty_fast * (x - self.m_fast[ids]))
        m_slow = np.where(first, x, self.m_slow[ids] + cfg.novelty_slow * (x - self.m_slow[ids]))

        def exceed(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            width = np.maximum(hi - lo, cfg.floor_abs)
            up, down = (v - hi) / width, (lo - v) / width
            return np.where(direction == 0, np.maximum(up, down), np.where(direction > 0, up, down))

        e_x = exceed(x, lo_x, hi_x)
        e_fast = exceed(m_fast, np.where(first, x, self.lo_fast[ids]), np.where(first, x, self.hi_fast[ids]))
        e_slow = exceed(m_slow, np.where(first, x, self.lo_slow[ids]), np.where(first, x, self.hi_slow[ids]))
        # The surprise against the predictors, on a scale no finer than a fraction of the span seen.
        nz = np.where(count >= cfg.novelty_z_from, zdir * (mad / np.maximum(mad, cfg.novelty_span_floor * span)), 0.0)
        peak = self.peak[ids]
        e_z = np.where(peak > 0, (nz - peak) / np.maximum(peak, cfg.floor_abs), 0.0) * cfg.novelty_z_weight
        self._parts = (e_x, e_fast, e_slow, e_z)
        e = np.maximum(np.maximum(e_x, e_fast), np.maximum(e_slow, e_z))
        e = np.where(count >= cfg.min_samples, np.clip(np.nan_to_num(e, nan=0.0, posinf=1e300), 0.0, None), 0.0)
        self._e = e
        if cfg.novelty_refractory > 0:
            e = np.where(e > cfg.novelty_refractory_ratio * self.recent[ids] * self._rdecay, e, 0.0)
        return e / (e + cfg.novelty_margin), nz, m_fast, m_slow

    def learn(self, ids: np.ndarray, x: np.ndarray, ev: RobustScores, mask: np.ndarray | None = None) -> None:
        """Advance the state of series ``ids`` with the rows evaluated in ``ev``.

        Rows where ``mask`` is False do not move the baselines (the bank freezes them during an
        episode), but they still count for warm-up and for the novelty memory.
        """
        cfg = self.config
        self._learn_novelty(ids, x, ev)
        self.count[ids] = np.minimum(self.count[ids].astype(np.int64) + 1, 2**31 - 1)
        if mask is not None:
            if not mask.any():
                return
            ids, x, sel = ids[mask], x[mask], mask
        else:
            sel = slice(None)  # type: ignore[assignment]
        floor = ev._floor[sel]
        r_l = ev._r_level[sel]
        mad_l = self.mad_level[ids]
        first = self.count[ids] <= 1
        debias = 1.0 - (1.0 - cfg.scale_alpha) ** np.maximum(self.count[ids] - 2, 1)
        lim_l = cfg.huber * MAD_TO_SD * np.maximum(mad_l / debias, floor)
        lvl = np.where(first, x, self.level[ids])
        self.level[ids] = lvl + cfg.level_alpha * np.clip(r_l, -lim_l, lim_l)
        self.mad_level[ids] = np.where(first, 0.0, mad_l + cfg.scale_alpha * (np.minimum(np.abs(r_l), lim_l) - mad_l))
        err_l = self.err_level[ids]
        self.err_level[ids] = np.where(first, 0.0, err_l + cfg.scale_alpha * (np.abs(r_l) - err_l))
        if cfg.bins <= 0:
            return
        b = ev._bins[sel]
        has = ev._has_season[sel]
        r_s = ev._r_season[sel]
        mad_s = self.mad_season[ids]
        lim_s = cfg.huber * MAD_TO_SD * np.maximum(mad_s / debias, floor)
        prof = self.profile[ids, b].astype(np.float64)
        self.profile[ids, b] = np.where(has, prof + cfg.season_alpha * np.clip(r_s, -lim_s, lim_s), x)
        self.mad_season[ids] = np.where(has, mad_s + cfg.scale_alpha * (np.minimum(np.abs(r_s), lim_s) - mad_s),
                                        mad_s)
        err_s = self.err_season[ids]
        # An unvisited slot counts as a bad guess (twice the level's error) so the profile must earn its use.
        self.err_season[ids] = err_s + cfg.scale_alpha * (np.where(has, np.abs(r_s), 2.0 * np.abs(r_l)) - err_s)

    def _learn_novelty(self, ids: np.ndarray, x: np.ndarray, ev: RobustScores) -> None:
        """The remembered extremes follow every sample, anomalous or not: what was seen is not new."""
        cfg = self.config
        count = self.count[ids]
        keep = 1.0 - cfg.novelty_forget
        # A mean's extremes are recorded once it has seen three times its memory (3 / rate samples):
        # before, its first samples weigh too much and set extremes the series never had.
        for name, v, start in (("x", x, 0), ("fast", ev._m_fast, 3.0 / cfg.novelty_fast),
                               ("slow", ev._m_slow, 3.0 / cfg.novelty_slow)):
            first = count <= start
            lo = np.where(first, v, np.minimum(getattr(self, "lo_" + name)[ids], v))
            hi = np.where(first, v, np.maximum(getattr(self, "hi_" + name)[ids], v))
            if cfg.novelty_forget > 0:
                mid = 0.5 * (lo + hi)
                lo, hi = mid + keep * (lo - mid), mid + keep * (hi - mid)
            getattr(self, "lo_" + name)[ids] = lo
            getattr(self, "hi_" + name)[ids] = hi
        self.m_fast[ids] = ev._m_fast
        self.m_slow[ids] = ev._m_slow
        self.peak[ids] = np.maximum(self.peak[ids] * keep, ev._nz)
        self.recent[ids] = np.maximum(self.recent[ids] * self._rdecay, ev._e)

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

    def snapshot(self, n: int | None = None) -> dict[str, np.ndarray]:
        """State of the first ``n`` series (all by default) as named arrays."""
        n = len(self) if n is None else n
        names = (*self._F64, "count", "direction", "profile")
        return {f"robust.{k}": getattr(self, k)[:n].copy() for k in names}

    def restore(self, data: dict[str, np.ndarray]) -> None:
        n = data["robust.count"].shape[0]
        if data["robust.profile"].shape[1:] != self.profile.shape[1:]:
            raise ValueError("snapshot profile bins differ from the configured bins")
        if n:
            self.register(n - 1)
        for k in (*self._F64, "count", "direction", "profile"):
            getattr(self, k)[:n] = data[f"robust.{k}"]

    @property
    def nbytes_per_series(self) -> float:
        """State bytes per registered series (allocated capacity counted as used)."""
        names = (*self._F64, "count", "direction", "profile")
        cap = max(self.count.shape[0], 1)
        return sum(getattr(self, k).nbytes for k in names) / cap  # type: ignore[no-any-return]
