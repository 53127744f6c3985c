"""The robust scorer's per-slot scale: a series noisy by day and quiet by night is judged at night against
the night's noise, once the slot was seen on a later day; older snapshots restore with the day's scale."""

from __future__ import annotations

import numpy as np

from streams.scorers.robust import RobustConfig, RobustScorer

DAY = 86400.0
STEP = 300.0  # NAB's usual cadence: 6 samples a slot a day


def noisy_by_day(seed: int, days: int = 14) -> tuple[np.ndarray, np.ndarray]:
    """A daily wave; noise sd 10 from 08:00 to 20:00 UTC and sd 1 otherwise."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, days * DAY, STEP)
    hour = (t % DAY) / 3600.0
    noise = np.where((hour >= 8.0) & (hour < 20.0), 10.0, 1.0)
    return t, 100.0 + 50.0 * np.sin(2 * np.pi * (hour - 6.0) / 24.0) + rng.normal(0.0, 1.0, t.size) * noise


def config(slot_scale: bool = True) -> RobustConfig:
    return RobustConfig.for_window(100, min_samples=150, slot_scale=slot_scale)


def fed(t: np.ndarray, x: np.ndarray, slot_scale: bool = True, until: int | None = None) -> RobustScorer:
    s = RobustScorer(config(slot_scale))
    s.register(0)
    for k in range(t.size if until is None else until):
        s.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    return s


def spike_score(s: RobustScorer, ts: float, expected_from: np.ndarray, size: float) -> float:
    """The score of a spike ``size`` above the usual value at ``ts`` (evaluated, not learnt)."""
    usual = float(np.median(expected_from))
    return float(s.evaluate(np.array([0]), np.array([ts]), np.array([usual + size])).score[0])


def test_a_night_spike_of_a_daytime_size_scores_only_with_the_slot_scale() -> None:
    for seed in (1, 2, 3):
        t, x = noisy_by_day(seed)
        with_slots, without = fed(t, x), fed(t, x, slot_scale=False)
        # 21:00 of the next day: an hour into the quiet night (the day's scale, a memory of a few hours,
        # still remembers the noisy day; the daily profile is the chosen predictor).
        night = t[-1] + STEP + 21 * 3600.0
        day = t[-1] + STEP + 14 * 3600.0  # 14:00
        same_slot = (t % DAY) == (night % DAY)
        # 20 is 2 daytime noise sds: normal by day; 20 night sds at night.
        assert spike_score(with_slots, night, x[same_slot], 20.0) >= 0.5, seed
        assert spike_score(without, night, x[same_slot], 20.0) < 0.5, seed
        noon = (t % DAY) == (day % DAY)
        assert spike_score(with_slots, day, x[noon], 20.0) < 0.5, seed
        # The slots learnt the shape of the noise against the day's scale (which follows the noise with a
        # memory of a few hours): the first quiet hours far below it, the first noisy ones far above.
        assert (with_slots.slot_mad[0] > 0).all()
        hours = np.arange(48) * 0.5
        assert (with_slots.slot_mad[0][hours >= 20] < 0.6).all()
        assert (with_slots.slot_mad[0][(hours >= 8) & (hours < 12)] > 1.3).all()


def test_on_a_series_with_the_same_noise_all_day_the_slot_scale_moves_little() -> None:
    """No time-of-day structure in the noise: the slots stay near the day's scale, and the scores follow."""
    rng = np.random.default_rng(7)
    t = np.arange(0.0, 14 * DAY, STEP)
    x = 100.0 + 50.0 * np.sin(2 * np.pi * (t % DAY) / DAY) + rng.normal(0.0, 2.0, t.size)
    s = fed(t, x)
    assert (np.abs(s.slot_mad[0] - 1.0) < 0.35).all()


def test_a_slot_scale_is_not_used_before_the_series_came_back_to_the_slot_on_a_later_day() -> None:
    """Within the first day every slot is seen in one stay only: the scores are those of the day's scale
    (bit for bit), and no slot's scale is in use; at 1 Hz for an hour (a scenario's shape) likewise."""
    t, x = noisy_by_day(4, days=2)
    first_day = int(DAY // STEP)
    a, b = RobustScorer(config()), RobustScorer(config(slot_scale=False))
    a.register(0)
    b.register(0)
    for k in range(first_day):
        assert a.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == b.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    assert (a.slot_mad[0] <= 0).all() and (a.slot_mad[0] < 0).any()
    for k in range(first_day, t.size):
        a.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    assert (a.slot_mad[0] > 0).any()
    rng = np.random.default_rng(5)
    c, d = RobustScorer(config()), RobustScorer(config(slot_scale=False))
    c.register(0)
    d.register(0)
    for k in range(3600):
        ts, v = np.array([1_764_502_800.0 + k]), np.array([80.0 + rng.normal()])
        assert c.update(np.array([0]), ts, v) == d.update(np.array([0]), ts, v)
    assert (c.slot_mad[0] <= 0).all()


def test_a_snapshot_from_before_the_slot_scale_restores_with_the_days_scale() -> None:
    t, x = noisy_by_day(6)
    cut = 10 * int(DAY // STEP)
    a = fed(t, x, until=cut)
    snap = a.snapshot()
    assert (snap["robust.slot_mad"][0] > 0).all()
    old = {k: v for k, v in snap.items() if k != "robust.slot_mad"}
    b = RobustScorer(config())
    b.restore(old)
    assert (b.slot_mad[0] == 0).all()
    # The rest of that day it scores as the day's scale alone would: zeros are unknown.
    c = RobustScorer(config(slot_scale=False))
    c.restore(old)
    for k in range(cut, cut + int(DAY // STEP) - 1):
        assert b.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == c.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    # and the slots are learnt again from there
    for k in range(cut + int(DAY // STEP) - 1, t.size):
        b.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    assert (b.slot_mad[0] > 0).all()
    # Today's snapshot restores to the same scores.
    d = RobustScorer(config())
    d.restore(snap)
    for k in range(cut, cut + 600):
        assert d.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == a.update(np.array([0]), t[k:k + 1], x[k:k + 1])


def test_a_snapshot_with_other_bins_is_refused() -> None:
    t, x = noisy_by_day(8, days=1)
    snap = fed(t, x).snapshot()
    snap["robust.slot_mad"] = snap["robust.slot_mad"][:, :24]
    s = RobustScorer(config())
    try:
        s.restore(snap)
    except ValueError as exc:
        assert "slot scale bins" in str(exc)
    else:
        raise AssertionError("restored a slot scale of 24 bins into 48")


def test_off_by_default_the_scorer_holds_no_slot_state() -> None:
    """Opt-in: the default scorer allocates, snapshots and counts no slot scale (385 B a series at 48 bins,
    as before the slot scale; 577 B with it)."""
    off, on = RobustScorer(RobustConfig()), RobustScorer(RobustConfig(slot_scale=True))
    for s in (off, on):
        s.register(999)
    assert off.slot_mad.nbytes == 0 and on.slot_mad.shape[1] == 48
    assert off.nbytes_per_series == 385 and on.nbytes_per_series == 385 + 48 * 4
    assert "robust.slot_mad" not in off.snapshot() and "robust.slot_mad" in on.snapshot()


def test_a_snapshot_with_slot_scales_restores_into_a_scorer_without_them() -> None:
    """The slot scales are ignored: it scores as the same state without them does."""
    t, x = noisy_by_day(9, days=4)
    cut = 3 * int(DAY // STEP)
    snap = fed(t, x, until=cut).snapshot()
    assert (snap["robust.slot_mad"][0] > 0).all()
    b, c = RobustScorer(config(slot_scale=False)), RobustScorer(config(slot_scale=False))
    b.restore(snap)
    c.restore({k: v for k, v in snap.items() if k != "robust.slot_mad"})
    assert b.slot_mad.nbytes == 0 and "robust.slot_mad" not in b.snapshot()
    for k in range(cut, t.size):
        assert b.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == c.update(np.array([0]), t[k:k + 1], x[k:k + 1])


def test_a_snapshot_without_slot_scales_restores_into_a_scorer_with_them_on_the_days_scale() -> None:
    """A snapshot of a scorer with the slot scale off restores into one with it on: the slots start unknown,
    and until the series came back to a slot on a later day it scores as the scorer without them."""
    t, x = noisy_by_day(10, days=5)
    cut = 3 * int(DAY // STEP)
    off = fed(t, x, slot_scale=False, until=cut)
    snap = off.snapshot()
    b = RobustScorer(config())
    b.restore(snap)
    assert b.slot_mad.shape[1] == 48 and (b.slot_mad[0] == 0).all()
    for k in range(cut, cut + int(DAY // STEP) - 1):
        assert b.update(np.array([0]), t[k:k + 1], x[k:k + 1]) == off.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    for k in range(cut + int(DAY // STEP) - 1, t.size):
        b.update(np.array([0]), t[k:k + 1], x[k:k + 1])
    assert (b.slot_mad[0] > 0).all()
