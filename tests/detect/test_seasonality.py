"""Weekly seasonality is learnt from the data (relative day-of-week offsets on the daily profile, used
only while they predict better), at a rate per unit of event time, and older snapshots restore."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig
from streams.scorers.robust import LAST_TS, NOVEL_COLUMNS, WEEK_EDGE, RobustConfig, RobustScorer

DAY, WEEK = 86400.0, 7 * 86400.0
MONDAY = 4 * DAY  # 1970-01-05


def demand(seed: int, weeks: int = 6, step: float = 1800.0, weekend: float = 0.5,
           daily: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """A demand-like series from a Monday: a daily wave, the weekend at ``weekend`` times the weekday."""
    rng = np.random.default_rng(seed)
    t = MONDAY + np.arange(0.0, weeks * WEEK, step)
    hour = (t % DAY) / DAY
    base = 100.0 * (1.0 + daily * np.sin(2 * np.pi * (hour - 0.25)))
    base *= np.where(((t - MONDAY) // DAY) % 7 >= 5, weekend, 1.0)
    return t, base + rng.normal(0.0, 2.0, t.size)


def run(t: np.ndarray, x: np.ndarray, weekly: bool = True) -> tuple[np.ndarray, list[float]]:
    """Scores and episode onsets of one series through the bank production runs."""
    bank = DetectorBank(replace(DetectorConfig(), min_relative_change=0.0))
    bank.scorer.config = replace(bank.scorer.config, weekly=weekly)  # type: ignore[attr-defined]
    bank.register(0, Mode.LEVEL, Direction.BOTH)
    scores, onsets = np.zeros(t.size), []
    for k in range(t.size):
        tr = bank.update(np.array([0]), t[k:k + 1], x[k:k + 1])
        scores[k] = bank.last_scores.score[0]
        onsets += [float(tr.onset_ts[j]) for j in range(tr.pos.size) if tr.phase[j] == 1]
    return scores, onsets


def test_a_weekend_is_an_episode_every_week_without_the_offsets_and_mostly_normal_once_they_are_learnt() -> None:
    for seed in (1, 2, 3):
        t, x = demand(seed)
        off, daily_only = run(t, x, weekly=False)
        assert sorted({int((o - MONDAY) // WEEK) for o in daily_only}) == [0, 1, 2, 3, 4, 5]  # every weekend
        scores, onsets = run(t, x)
        later = t >= MONDAY + 2 * WEEK
        assert len([o for o in onsets if o >= MONDAY + 2 * WEEK]) <= 1  # weeks 2-5: at most one stray
        assert (scores[later] >= 0.5).sum() * 20 < (off[later] >= 0.5).sum()


def test_a_real_anomaly_on_a_weekly_series_is_still_an_episode() -> None:
    t, x = demand(4)
    at = MONDAY + 5 * WEEK + 2 * DAY + 12 * 3600.0  # a Wednesday noon, week 5
    hit = (t >= at) & (t < at + 3 * 3600.0)
    x = np.where(hit, 1.6 * x, x)
    _, onsets = run(t, x)
    assert [o for o in onsets if o >= MONDAY + 3 * WEEK] == [at]


def test_the_offsets_learn_per_unit_of_event_time_whatever_the_sample_rate() -> None:
    for step in (300.0, 1800.0, 3600.0):  # 288, 48 and 24 samples a day (hourly: every other slot)
        t, x = demand(5, step=step)
        off, _ = run(t, x, weekly=False)
        scores, onsets = run(t, x)
        later = t >= MONDAY + 2 * WEEK
        assert len([o for o in onsets if o >= MONDAY + 2 * WEEK]) <= 1, step
        assert (scores[later] >= 0.5).sum() * 4 < (off[later] >= 0.5).sum(), step


def test_without_a_weekly_cycle_the_offsets_are_never_used() -> None:
    """A daily series and a flat noisy one score exactly as with the offsets off: they must earn their use."""
    for daily in (0.5, 0.0):
        t, x = demand(6, weekend=1.0, daily=daily)
        x[1500] += 60.0  # a spike the offsets also see
        on, _ = run(t, x)
        off, _ = run(t, x, weekly=False)
        assert np.array_equal(on, off), daily


def test_a_snapshot_from_before_the_weekly_offsets_restores_and_goes_on() -> None:
    cfg = RobustConfig(min_samples=10)
    a = RobustScorer(cfg)
    a.register(0)
    t, x = demand(7)
    for k in range(1500):
        a.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    snap = a.snapshot()
    old = {k: v for k, v in snap.items() if k != "robust.week"}
    old["robust.novel"] = snap["robust.novel"][:, :WEEK_EDGE]  # the layout before the weekly offsets
    b = RobustScorer(cfg)
    b.restore(old)
    assert b.novel.shape[1] == NOVEL_COLUMNS and np.isnan(b.novel[0, LAST_TS]) and (b.week[0] == 0).all()
    assert (b.novel[0, :WEEK_EDGE] == a.novel[0, :WEEK_EDGE]).all() and (b.profile[0] == a.profile[0]).all()
    out = [b.update(np.array([0]), t[k:k + 1], x[k:k + 1])[0] for k in range(1500, t.size)]
    assert np.isfinite(out).all() and max(out) <= 1.0
    c = RobustScorer(cfg)
    c.restore(snap)  # and today's snapshot restores to the same scores
    for k in range(1500, 1800):
        assert c.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == a.update(np.array([0]), t[k:k + 1], x[k:k + 1])


def test_absurd_values_do_not_poison_the_offsets() -> None:
    t, x = demand(8, weeks=3)
    x[700], x[701] = 1e300, -1e300  # a Monday afternoon of week 2: the offsets are learning
    s = RobustScorer(RobustConfig(min_samples=10))
    s.register(0)
    out = [s.update(np.array([0]), t[k:k + 1], x[k:k + 1])[0] for k in range(t.size)]
    assert np.isfinite(s.week[0]).all() and (np.abs(s.week[0]) <= 4.0).all()
    assert np.isfinite(out).all() and np.isfinite(s.novel[0, WEEK_EDGE])
