"""Sparse counters (issue 18.4): a counter that ticks now and then has a baseline that knows it does.

Healthy RoCE pause counters tick about once every three seconds. A rate of 0.3/s is not zero: after
its first ticks are known, such a series raises no episode, while a storm on it still does.
"""

from __future__ import annotations

import numpy as np

from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig
from streams.scorers.robust import NOVEL_COLUMNS, WEEK_EDGE, RobustConfig, RobustScorer


def ticking(seed: int, n: int = 1800, quiet: int = 60, storm: tuple[int, int] | None = None) -> np.ndarray:
    """1 Hz samples of a counter's rate: zero for ``quiet`` s, then a tick in one second of three."""
    rng = np.random.default_rng(seed)
    x = np.where(np.arange(n) < quiet, 0.0, (rng.random(n) < 1 / 3).astype(float))
    if storm:
        x[storm[0]: storm[1]] = 25_000.0
    return x


def episodes(x: np.ndarray) -> list[tuple[int, float, int]]:
    bank = DetectorBank(DetectorConfig())
    bank.register(0, Mode.RATE, Direction.UP)
    out = []
    for t, v in enumerate(x):
        tr = bank.update(np.array([0]), np.array([float(t)]), np.array([v]))
        out += [(int(tr.phase[k]), float(tr.onset_ts[k]), t) for k in range(tr.pos.size)]
    return out


def test_a_healthy_sparse_counter_raises_no_episode_once_its_ticks_are_known() -> None:
    for seed in range(6):
        eps = episodes(ticking(seed))
        # The first ticks of a series that was zero may stand out (before three ticks are seen); from
        # then on, nothing, and whatever started has ended.
        assert all(onset < 60 + 15 for _, onset, _ in eps), (seed, eps)
        assert len(eps) % 2 == 0, (seed, eps)


def test_a_storm_on_a_sparse_counter_is_an_episode_from_its_first_sample_and_ends() -> None:
    eps = episodes(ticking(0, storm=(1200, 1230)))
    late = [e for e in eps if e[1] >= 1000]
    assert [(p, o) for p, o, _ in late] == [(1, 1200.0), (0, 1230.0)]


def test_a_first_tick_storm_on_a_series_that_was_always_zero_is_still_seen() -> None:
    x = np.zeros(600)
    x[300:320] = 25_000.0
    eps = episodes(x)
    assert eps and eps[0][:2] == (1, 300.0)


def test_dense_series_are_not_floored() -> None:
    """A series non-zero in most samples keeps its own robust scale (the sparse floor never applies)."""
    a = RobustScorer(RobustConfig(min_samples=10, bins=0))
    b = RobustScorer(RobustConfig(min_samples=10, bins=0, sparse_fraction=0.0))
    rng = np.random.default_rng(1)
    for s in (a, b):
        s.register(0)
    for t in range(500):
        x = np.array([1.0 + rng.normal(0, 0.01)])
        assert a.update(np.array([0]), np.array([float(t)]), x) == b.update(np.array([0]), np.array([float(t)]), x)


def test_a_snapshot_from_before_sparsity_restores_as_unknown_sparsity() -> None:
    a = RobustScorer(RobustConfig(min_samples=10, bins=0))
    a.register(0)
    for t in range(50):
        a.update(np.array([0]), np.array([float(t)]), np.array([float(t % 3 == 0)]))
    snap = a.snapshot()
    snap["robust.novel"] = snap["robust.novel"][:, :10]  # the layout before sparsity was learned
    b = RobustScorer(RobustConfig(min_samples=10, bins=0))
    b.restore(snap)
    assert b.novel.shape[1] == NOVEL_COLUMNS
    assert (b.novel[0, :10] == a.novel[0, :10]).all() and (b.novel[0, 10:WEEK_EDGE] == 0).all()
