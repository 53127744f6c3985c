"""Property tests for counters -> rates (streams/rates.py).

The counter process is generated: irregular intervals, true non-negative increments, resets to a
small value and 32/64-bit wraps. Whatever happens, a rate is never negative and never more than the
true increase over its interval divided by the interval; the first sample of a series gives none.
A scalar reference implementation of the contract is checked against the vectorised one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.rates import CounterRates

# These strategies draw only from Hypothesis. Under xdist a session-scoped worker of the web tests
# (tests/web/conftest.py: seed_worker) can still be running in the same process, and its Kafka clients'
# threads call the ``random`` module while examples are generated; Hypothesis sees the module's state
# move and warns once per example (137 warnings in one CI run), about a thread that is not the strategy.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning")

WRAP32 = 2.0**32


@st.composite
def counter_process(draw: st.DrawFn, wrap: float | None = None) -> list[tuple[float, float, float]]:
    """``(ts, observed value, true increase since the previous sample)`` for one series."""
    n = draw(st.integers(1, 40))
    t = draw(st.floats(1.7e9, 1.8e9))
    start = draw(st.floats(0, wrap - 1 if wrap else 1e12))
    value = start
    out = [(t, value, 0.0)]
    for _ in range(n - 1):
        dt = draw(st.one_of(st.floats(1e-3, 1.0), st.floats(1.0, 600.0)))
        inc = draw(st.one_of(st.just(0.0), st.floats(0, 1e6), st.floats(0, 1e10)))
        t += dt
        if draw(st.integers(0, 9)) == 0:  # a reset: the device restarted and counted `value` since
            value = draw(st.floats(0, 1e3))
            inc = value
        else:
            value += inc
            if wrap is not None:
                value = math.fmod(value, wrap)
        out.append((t, value, inc))
    return out


def _feed(series: list[tuple[float, float, float]]) -> list[float]:
    rates = CounterRates()
    out = []
    for ts, value, _ in series:
        res = rates.update(np.array([0]), np.array([ts]), np.array([value]))
        out.append(float(res.rate[0]))
    return out


@settings(max_examples=200, deadline=None)
@given(counter_process())
def test_rates_are_never_negative_nor_above_the_true_increase(series):
    rates = _feed(series)
    assert math.isnan(rates[0])  # the first sample gives no rate
    for i in range(1, len(series)):
        r = rates[i]
        if math.isnan(r):
            continue
        dt = series[i][0] - series[i - 1][0]
        assert r >= 0
        # An undetected reset (new value above the old) can only under-count, never over-count.
        bound = series[i][2] / dt
        assert r <= bound * (1 + 1e-9) + 1e-6 * (1 + series[i][1]) / dt


@settings(max_examples=200, deadline=None)
@given(counter_process(wrap=WRAP32))
def test_a_32_bit_wrap_gives_no_rate_instead_of_a_negative_or_a_wrapped_one(series):
    rates = _feed(series)
    for i in range(1, len(series)):
        dropped = series[i][1] < series[i - 1][1]
        if dropped:
            assert math.isnan(rates[i])  # a drop starts a new baseline
        elif not math.isnan(rates[i]):
            assert 0 <= rates[i] <= WRAP32 / (series[i][0] - series[i - 1][0])


def test_a_64_bit_wrap_near_the_top_gives_no_rate():
    top = 2.0**64 - 1000.0
    rates = _feed([(1e9, top, 0), (1e9 + 10, 500.0, 1500.0), (1e9 + 20, 1500.0, 1000.0)])
    assert math.isnan(rates[1]) and rates[2] == 100.0


def _reference(events: list[tuple[int, float, float]]) -> list[tuple[float, bool, bool, bool]]:
    """The contract, one sample at a time: (rate or NaN, reset, out_of_order, duplicate)."""
    last: dict[int, tuple[float, float]] = {}
    out = []
    for sid, ts, value in events:
        if sid not in last:
            last[sid] = (ts, value)
            out.append((math.nan, False, False, False))
            continue
        pts, pval = last[sid]
        dt, dv = ts - pts, value - pval
        if dt == 0 and dv == 0:
            out.append((math.nan, False, False, True))
        elif dt <= 0:
            out.append((math.nan, False, True, False))
        elif dv < 0:
            last[sid] = (ts, value)
            out.append((math.nan, True, False, False))
        else:
            last[sid] = (ts, value)
            out.append((dv / dt, False, False, False))
    return out


@st.composite
def rounds(draw: st.DrawFn) -> list[list[tuple[int, float, float]]]:
    """Rounds of unique series ids with irregular, sometimes stale or repeated, times."""
    n_series = draw(st.integers(1, 6))
    out = []
    for _ in range(draw(st.integers(1, 25))):
        ids = draw(st.lists(st.integers(0, n_series - 1), min_size=1, max_size=n_series, unique=True))
        out.append([(sid, draw(st.floats(1.7e9, 1.7e9 + 500).map(lambda t: round(t, 1))),
                     draw(st.sampled_from([0.0, 1.0, 5.0, 100.0, 1e6]) | st.floats(0, 1e6).map(lambda v: round(v))))
                    for sid in ids])
    return out


@settings(max_examples=200, deadline=None)
@given(rounds())
def test_vectorised_rates_match_the_scalar_contract(batches):
    rates = CounterRates()
    got: list[tuple[float, bool, bool, bool]] = []
    flat: list[tuple[int, float, float]] = []
    for batch in batches:
        ids = np.array([b[0] for b in batch], dtype=np.int64)
        res = rates.update(ids, np.array([b[1] for b in batch]), np.array([b[2] for b in batch]))
        got += list(zip(res.rate.tolist(), res.reset.tolist(), res.out_of_order.tolist(), res.duplicate.tolist(),
                        strict=True))
        flat += batch
    want = _reference(flat)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[1:] == w[1:]
        assert (math.isnan(g[0]) and math.isnan(w[0])) or g[0] == w[0]
        assert math.isnan(g[0]) or g[0] >= 0


@settings(max_examples=100, deadline=None)
@given(rounds())
def test_snapshot_and_restore_continue_the_same_rates(batches):
    whole = CounterRates()
    half = CounterRates()
    cut = len(batches) // 2
    for batch in batches[:cut]:
        for r in (whole, half):
            r.update(np.array([b[0] for b in batch]), np.array([b[1] for b in batch]), np.array([b[2] for b in batch]))
    restored = CounterRates()
    restored.restore(half.snapshot(8))
    for batch in batches[cut:]:
        args = (np.array([b[0] for b in batch]), np.array([b[1] for b in batch]), np.array([b[2] for b in batch]))
        a, b = whole.update(*args), restored.update(*args)
        np.testing.assert_array_equal(a.rate, b.rate)
        np.testing.assert_array_equal(a.reset, b.reset)


def test_empty_round_and_first_sample_of_each_new_series():
    rates = CounterRates()
    empty = rates.update(np.array([], dtype=np.int64), np.array([]), np.array([]))
    assert empty.rate.size == 0
    res = rates.update(np.array([3, 0]), np.array([10.0, 10.0]), np.array([5.0, 7.0]))
    assert np.isnan(res.rate).all() and not res.reset.any()
    res = rates.update(np.array([0, 3, 7]), np.array([12.0, 11.0, 12.0]), np.array([9.0, 4.0, 1.0]))
    assert res.rate[0] == 1.0 and np.isnan(res.rate[1]) and res.reset[1] and np.isnan(res.rate[2])
