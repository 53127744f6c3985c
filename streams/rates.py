"""Cumulative counters to per-second rates, per series, a round of unique series at a time.

Contract:
- the first sample of a series gives no rate;
- a drop (reset or wrap) starts a new baseline and gives no rate: never a negative rate;
- intervals may be irregular: rate = delta value / delta time;
- a sample at or before the series' last time is out of order: it gives no rate and leaves the
  state untouched (the caller reports it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.series import grow


@dataclass(slots=True)
class RateResult:
    """``rate`` is NaN where no rate exists; ``reset`` and ``out_of_order`` flag why."""

    rate: np.ndarray
    reset: np.ndarray
    out_of_order: np.ndarray
    duplicate: np.ndarray
    #: Each series' time before this sample (NaN: its first).
    prev_ts: np.ndarray
    #: Every sample is after its series' last one (none first, out of order or a duplicate): the steady
    #: state of a scrape, in which ``out_of_order`` and ``duplicate`` are all False.
    in_order: bool = False


class CounterRates:
    """Last (time, value) per series id."""

    def __init__(self) -> None:
        self.last_ts = np.full(0, np.nan)
        self.last_value = np.full(0, np.nan)

    def _ensure(self, size: int) -> None:
        if size > self.last_ts.shape[0]:
            self.last_ts = grow(self.last_ts, size, np.nan)
            self.last_value = grow(self.last_value, size, np.nan)

    def update(self, ids: np.ndarray, ts: np.ndarray, values: np.ndarray) -> RateResult:
        """Rates for one round (``ids`` unique). Values are raw cumulative counts.

        >>> r = CounterRates()
        >>> r.update(np.array([0]), np.array([10.0]), np.array([100.0])).rate.tolist()
        [nan]
        >>> r.update(np.array([0]), np.array([12.0]), np.array([160.0])).rate.tolist()
        [30.0]
        >>> r.update(np.array([0]), np.array([13.0]), np.array([5.0])).rate.tolist()   # reset
        [nan]
        """
        if ids.size:
            self._ensure(int(ids.max()) + 1)
        prev_ts = self.last_ts[ids]
        prev_val = self.last_value[ids]
        dt = ts - prev_ts
        dv = values - prev_val
        if ids.size and dt.min() > 0:  # the steady state (NaN, a first sample, fails the test): fewer steps
            rate = dv / dt
            reset = dv < 0
            np.putmask(rate, reset, np.nan)
            self.last_ts[ids] = ts
            self.last_value[ids] = values
            none = np.zeros(ids.shape[0], dtype=bool)
            return RateResult(rate, reset, none, none, prev_ts, True)
        have = ~np.isnan(prev_ts)
        duplicate = have & (dt == 0) & (dv == 0)
        out_of_order = have & (dt <= 0) & ~duplicate
        reset = have & (dt > 0) & (dv < 0)
        ok = have & (dt > 0) & (dv >= 0)
        rate = np.full(ids.shape[0], np.nan)
        np.divide(dv, dt, out=rate, where=ok)
        accept = ~have | (dt > 0)
        upd = ids[accept]
        self.last_ts[upd] = ts[accept]
        self.last_value[upd] = values[accept]
        return RateResult(rate, reset, out_of_order, duplicate, prev_ts)

    def clear(self, ids: np.ndarray) -> None:
        """Forget series ``ids`` (their ids are reused by new series: a first sample again)."""
        ids = ids[ids < self.last_ts.shape[0]]
        self.last_ts[ids] = np.nan
        self.last_value[ids] = np.nan

    def snapshot(self, n: int) -> dict[str, np.ndarray]:
        """State of the first ``n`` series as arrays (see :mod:`streams.snapshot`)."""
        return {"rates.last_ts": self.last_ts[:n].copy(), "rates.last_value": self.last_value[:n].copy()}

    def restore(self, data: dict[str, np.ndarray]) -> None:
        n = data["rates.last_ts"].shape[0]
        self._ensure(n)
        self.last_ts[:n] = data["rates.last_ts"]
        self.last_value[:n] = data["rates.last_value"]
