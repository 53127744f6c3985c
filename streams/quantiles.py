"""Medians and quantiles of small samples without numpy's per-call cost.

``np.median`` and ``np.percentile`` cost 10-20 us a call whatever the size (argument checks, a
partition, a mean); the correlation side calls them per job, lane-second and peer bucket on a
handful to a few hundred values, where that overhead is most of the work. These give the same
values: a median of an even count is the mean of the two middle values, ``(a + b) / 2`` as
``np.median`` computes it (``0.5 * (a + b)``: the same double), and a quantile interpolates linearly
as ``np.percentile`` does by default. Inputs hold no NaN (``np.median`` would give NaN; these do not
check).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def median_sorted(xs: Sequence[float] | np.ndarray) -> float:
    """The median of a sorted, non-empty sequence (``np.median``'s value).

    >>> median_sorted([1.0, 2.0, 10.0]), median_sorted([1.0, 2.0, 4.0, 10.0])
    (2.0, 3.0)
    """
    n = len(xs)
    h = n // 2
    return float(xs[h]) if n % 2 else 0.5 * (float(xs[h - 1]) + float(xs[h]))


def median(values: Sequence[float] | np.ndarray) -> float:
    """``float(np.median(values))`` of a non-empty list or 1-D array without NaN.

    >>> median([3.0, 1.0, 2.0]), median(np.array([4.0, 1.0, 3.0, 2.0])), median([5])
    (2.0, 2.5, 5.0)
    """
    if type(values) is list:
        return median_sorted(sorted(values))
    return median_sorted(np.sort(values))


def quantile_sorted(ordered: Sequence[float], q: float) -> float:
    """``np.percentile(ordered, 100 q)`` (linear interpolation) of a sorted, non-empty sequence.

    >>> xs = [1.0, 2.0, 4.0, 10.0]
    >>> qs = (0.0, 0.5, 0.99, 1.0)
    >>> [quantile_sorted(xs, q) for q in qs] == [float(np.percentile(xs, 100 * q)) for q in qs]
    True
    """
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    if lo + 1 >= len(ordered):
        return float(ordered[-1])
    return float(ordered[lo] + (ordered[lo + 1] - ordered[lo]) * (pos - lo))
