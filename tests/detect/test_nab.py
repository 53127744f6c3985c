"""NAB scoring: NAB's own known values (its sweeper unit tests) and the published random detector."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import numpy as np
import pytest

from streams.nab import (
    PROFILES,
    CostMatrix,
    FileInput,
    Losses,
    best_row,
    detections,
    losses,
    probationary_length,
    row_at,
    score_corpus,
    sweep_rows,
    threshold_rows,
    window_geometry,
)

FLAT = CostMatrix(tp=1.0, fp=1.0, fn=1.0)


def stamps(n: int) -> list[datetime]:
    t0 = datetime(2015, 1, 1)
    return [t0 + timedelta(minutes=5 * i) for i in range(n)]


@pytest.mark.parametrize(("rows", "percent", "expected"), [
    (100, 0.0, 0), (100, 1.0, 100), (100, 0.1, 10), (100, 0.15, 15), (5000, 0.1, 500), (6000, 0.1, 500)])
def test_probationary_length_as_nab(rows: int, percent: float, expected: int) -> None:
    assert probationary_length(rows, percent) == expected


def test_nab_threshold_sweep_known_values() -> None:
    # NAB's sweep test: rows (score, worth, window), fn weight 5.
    r = threshold_rows(np.array([0.0, 0.2, 0.3, 0.5, 0.5]), np.array([-3.0, 20, 10, 5, -3]),
                       np.array([-1, 0, 0, 1, -1]), 2, 5.0)
    assert r.threshold.tolist() == [1.1, 0.5, 0.3, 0.2, 0.0]
    assert r.score.tolist() == [-10.0, -3.0, 12.0, 22.0, 19.0]
    assert list(zip(r.tp, r.tn, r.fp, r.fn, strict=True)) == [(0, 2, 0, 3), (1, 1, 1, 2), (2, 1, 1, 1),
                                                              (3, 1, 1, 0), (3, 0, 2, 0)]


def test_no_windows_and_no_detections_score_zero() -> None:
    ts = stamps(10)
    rows = sweep_rows(window_geometry(ts, [], 0.0), np.zeros(10), FLAT)
    assert row_at(rows, 0.5).score == 0.0 and row_at(rows, 0.5).tn == 10


def test_missed_windows_cost_their_fn_weight_each() -> None:
    ts = stamps(2000)
    windows = [(ts[k], ts[k + 9]) for k in (300, 700, 1100, 1500)]
    rows = sweep_rows(window_geometry(ts, windows, 0.0), np.zeros(2000), FLAT)
    at = row_at(rows, 1.0)
    assert at.score == -4.0 and (at.tp, at.fn) == (0, 40)


def test_earliest_detection_in_a_window_counts_and_later_ones_add_nothing() -> None:
    ts = stamps(100)
    geo = window_geometry(ts, [(ts[40], ts[49])], 0.0)
    one = np.zeros(100)
    one[40] = 1.0
    both = one.copy()
    both[45] = 1.0
    a, b = row_at(sweep_rows(geo, one, FLAT), 0.5), row_at(sweep_rows(geo, both, FLAT), 0.5)
    assert a.score == pytest.approx(1.0) and b.score == pytest.approx(1.0)
    assert (a.tp, b.tp) == (1, 2)


def test_false_positive_before_any_window_costs_the_full_fp_weight() -> None:
    ts = stamps(100)
    s = np.zeros(100)
    s[10] = 1.0
    geo = window_geometry(ts, [(ts[60], ts[69])], 0.0)
    assert row_at(sweep_rows(geo, s, PROFILES["standard"]), 0.5).score == pytest.approx(-0.11 - 1.0)


def test_rows_in_a_window_score_positive_all_others_negative() -> None:
    # NAB: windows (30, 39) and (75, 95) over 100 rows, probation 10 %.
    ts = list(range(100))
    geo = window_geometry(ts, [(30, 39), (75, 95)], 0.1)
    from streams.nab import row_weights
    w = row_weights(geo, PROFILES["standard"])
    inside = geo.window >= 0
    assert int(inside.sum()) == 10 + 21
    assert (w[inside] > 0).all() and (w[~inside & (geo.window != -2)] < 0).all()
    assert int((geo.window == -2).sum()) == 10


def test_per_row_worth_matches_nab_published_results() -> None:
    """NAB's published results for ARTime on realAdExchange/exchange-2_cpc list each row's S(t)_standard:
    -0.11 before the window, then 1.0, 0.9995802920893468, 0.9991476933957508 on the window's first rows
    (hourly rows from 2011-07-01 00:00:01; window 2011-07-11 04:00:01 .. 2011-07-17 22:00:01)."""
    ts = list(range(1624))
    geo = window_geometry(ts, [(244, 406)], 0.15)
    from streams.nab import row_weights
    w = row_weights(geo, PROFILES["standard"])
    assert w[244] == pytest.approx(1.0, abs=1e-12) and w[245] == pytest.approx(0.9995802920893468, abs=1e-12)
    assert w[246] == pytest.approx(0.9991476933957508, abs=1e-12) and w[0] == pytest.approx(-0.11)


def test_random_and_null_detectors_normalise_to_their_ends() -> None:
    ts = stamps(3000)
    windows = [(ts[1000], ts[1299]), (ts[2200], ts[2499])]
    rng = random.Random(42)
    rnd = np.array([rng.random() for _ in ts])
    files = [FileInput("a.csv", ts, windows, rnd)]
    res = score_corpus(files)
    assert -100 < res["standard"].normalised < 100
    null = score_corpus([FileInput("a.csv", ts, windows, np.full(3000, 0.5))])
    assert all(r.normalised == 0.0 for r in null.values())
    perfect = np.zeros(3000)
    perfect[1000] = perfect[2200] = 1.0
    assert score_corpus([FileInput("a.csv", ts, windows, perfect)])["standard"].normalised == pytest.approx(100.0)


def test_best_threshold_prefers_the_higher_on_ties() -> None:
    r = threshold_rows(np.array([0.9, 0.8]), np.array([-0.5, -0.5]), np.array([-1, -1]), 0, 1.0)
    assert best_row(r).threshold == 1.1


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_losses_add_up_to_the_score_at_the_threshold_and_to_what_perfect_would_score(profile: str) -> None:
    """Per file and pooled: the losses' raw is the score NAB's sweep gives at the threshold, and perfect
    minus it is missed windows (tp + fn each), lateness and false positives, whatever the detector."""
    cost = PROFILES[profile]
    rng = np.random.default_rng(7)
    files, total = [], Losses()
    for k in range(12):
        n = int(rng.integers(200, 600))
        ts = stamps(n)
        starts = sorted(rng.choice(np.arange(100, n - 40), size=int(rng.integers(0, 3)), replace=False))
        wins = [(ts[s], ts[s + 30]) for s in starts if all(abs(s - t) > 35 for t in starts if t != s)]
        scores = np.where(rng.random(n) < 0.01 * (k % 4), rng.uniform(0.5, 1.0, n), rng.uniform(0.0, 0.5, n))
        geo = window_geometry(ts, wins)
        found = detections(geo, scores, 0.5, cost)
        lost = losses(found, cost)
        assert lost.raw == pytest.approx(row_at(sweep_rows(geo, scores, cost), 0.5).score, abs=1e-12)
        assert lost.windows == geo.n_windows and lost.detected + lost.missed == lost.windows
        assert lost.miss_cost == pytest.approx(lost.missed * cost.fn) and lost.late >= 0 and lost.fp_cost >= 0
        assert cost.tp * lost.windows - lost.raw == pytest.approx(
            lost.missed * cost.tp + lost.miss_cost + lost.late + lost.fp_cost, abs=1e-12)
        files.append(FileInput(f"c/f{k}.csv", ts, wins, scores))
        total = total + lost
    assert total.missed > 0 and total.detected > 0 and total.fp_rows > 0  # every kind is exercised
    pooled = score_corpus(files, profiles={profile: cost}, fixed_threshold=0.5)[profile]
    assert total.raw == pytest.approx(pooled.at_threshold_raw, abs=1e-9)
    assert total.windows * cost.tp == pytest.approx(pooled.perfect)
