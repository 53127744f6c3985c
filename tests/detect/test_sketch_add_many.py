"""``RollingPercentiles.add_many`` (many values per series in one call) gives exactly the state of
``add`` one sample at a time in event-time order: grid placement and shifts, pane rolls, late drops."""

from __future__ import annotations

import numpy as np
import pytest

from streams.sketch import RollingPercentiles, SketchConfig


@pytest.mark.parametrize("seed", range(40))
def test_add_many_equals_one_at_a_time_in_event_time_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cfg = SketchConfig(windows=(2.0, 7.0), buckets=16, headroom=4)
    many, one = RollingPercentiles(cfg), RollingPercentiles(cfg)
    for sid in range(5):
        many.register(sid)
        one.register(sid)
    t = 0.0
    for _ in range(6):
        n = int(rng.integers(1, 40))
        ids = rng.integers(0, 5, n)
        ts = t + rng.uniform(-6, 6, n) * (rng.random() < 0.5) + rng.uniform(0, 5, n)  # some late samples
        x = np.where(rng.random(n) < 0.2, 0.0, rng.lognormal(rng.uniform(-3, 6), 2, n))  # zeros, grid shifts
        many.add_many(ids, ts, x)
        for i in np.argsort(ts, kind="stable"):
            one.add(ids[i: i + 1], ts[i: i + 1], x[i: i + 1])
        t += float(rng.uniform(0, 8))
        a, b = many.snapshot(), one.snapshot()  # the panes too (derived from the latest sample)
        for name in ("counts", "pane", "offset", "started"):
            assert np.array_equal(a[f"sketch.{name}"], b[f"sketch.{name}"]), name
        assert np.allclose(many.last_ts, one.last_ts, equal_nan=True)
        assert many.dropped == one.dropped
