"""Rolling percentiles: accuracy against exact percentiles, windows in event time, bounded memory."""

from __future__ import annotations

import numpy as np

from streams.sketch import RollingPercentiles, SketchConfig


def fill(rp: RollingPercentiles, n: int, times: np.ndarray, values: np.ndarray) -> None:
    ids = np.arange(n)
    for k, t in enumerate(times):
        rp.add(ids, np.full(n, t), values[k])


def test_percentiles_are_within_the_relative_accuracy_on_a_pane_aligned_window() -> None:
    rng = np.random.default_rng(1)
    rp = RollingPercentiles(SketchConfig(windows=(300.0,)))
    for sid in range(200):
        rp.register(sid)
    times = np.arange(0, 600, 1.0)
    values = rng.lognormal(0, 0.7, (times.size, 200))
    fill(rp, 200, times, values)
    got = rp.quantiles(np.arange(200), (50.0, 90.0, 99.0), window=0, now=600.0)
    exact = np.percentile(values[times >= 300], [50, 90, 99], axis=0, method="inverted_cdf")
    rel = np.abs(got / exact - 1)
    assert rel.max() <= 0.03  # accuracy 2.5 % plus rounding at a bucket edge


def test_old_samples_leave_the_window_and_the_previous_pane_fades() -> None:
    rp = RollingPercentiles(SketchConfig(windows=(60.0,)))
    rp.register(0)
    ids = np.array([0])
    for t in range(60):  # a minute of 100s...
        rp.add(ids, np.array([float(t)]), np.array([100.0]))
    for t in range(60, 120):  # ...then a minute of 50s
        rp.add(ids, np.array([float(t)]), np.array([50.0]))
    # at 119 s the first minute counts for 1/60 of its 60 samples: 1 of 61, under 5 %
    assert rp.quantiles(ids, (95.0,), window=0, now=119.0)[0, 0] < 52.0
    assert 98 < rp.quantiles(ids, (99.0,), window=0, now=60.5)[0, 0] < 103
    assert np.isnan(rp.quantiles(ids, (50.0,), window=0, now=500.0)[0, 0])  # nothing in the window


def test_a_spike_far_above_the_grid_keeps_the_tail_exact() -> None:
    rp = RollingPercentiles(SketchConfig(windows=(1000.0,)))
    rp.register(0)
    ids = np.array([0])
    for t in range(999):
        rp.add(ids, np.array([float(t)]), np.array([1.0 + (t % 10) / 10]))
    rp.add(ids, np.array([999.0]), np.array([5000.0]))
    p999, p100 = rp.quantiles(ids, (99.95, 100.0), window=0, now=999.5)[:, 0]
    assert abs(p100 / 5000.0 - 1) < 0.03 and abs(p999 / 5000.0 - 1) < 0.03


def test_zeros_read_back_as_zero_and_late_samples_are_counted() -> None:
    rp = RollingPercentiles(SketchConfig(windows=(10.0,)))
    rp.register(0)
    ids = np.array([0])
    for t in range(10):
        rp.add(ids, np.array([100.0 + t]), np.array([0.0]))
    assert rp.quantiles(ids, (50.0,), window=0)[0, 0] == 0.0
    rp.add(ids, np.array([50.0]), np.array([1.0]))  # more than one pane late
    assert rp.dropped == 1


def test_memory_per_series_is_bounded_and_independent_of_the_rate() -> None:
    rp = RollingPercentiles()
    rp.register(99_999)
    assert rp.nbytes_per_series <= 1024
    before = rp.nbytes_per_series
    fill(rp, 100, np.arange(0, 100, 0.1), np.ones((1000, 100)))
    assert rp.nbytes_per_series == before


def test_snapshot_round_trip() -> None:
    rng = np.random.default_rng(2)
    a = RollingPercentiles()
    for sid in range(5):
        a.register(sid)
    fill(a, 5, np.arange(0, 200, 1.0), rng.exponential(1, (200, 5)))
    b = RollingPercentiles()
    b.restore(a.snapshot())
    ids = np.arange(5)
    assert np.array_equal(a.quantiles(ids), b.quantiles(ids))
