"""The small-sample medians and quantiles give numpy's values to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from streams.quantiles import median, median_sorted, quantile_sorted


@pytest.mark.parametrize("seed", range(5))
def test_median_is_numpys_median_for_lists_and_arrays_of_every_size(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in range(1, 80):
        x = rng.lognormal(0.0, 2.0, n) * rng.choice([-1.0, 1.0], n)
        if n % 7 == 0:
            x[: n // 2] = x[0]  # ties
        expected = float(np.median(x))
        assert median(x) == expected
        assert median(x.tolist()) == expected
        assert median_sorted(np.sort(x)) == expected


def test_quantile_sorted_is_numpys_linear_percentile() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 99, 250):
        ordered = sorted(rng.normal(0.0, 5.0, n).tolist())
        for q in (0.0, 0.01, 0.5, 0.9, 0.99, 1.0):
            assert quantile_sorted(ordered, q) == pytest.approx(float(np.percentile(ordered, 100 * q)), rel=1e-15,
                                                               abs=1e-300)
