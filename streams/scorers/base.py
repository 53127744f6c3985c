"""The contracts every scorer keeps (checked by ``tests/detect/test_contract.py``).

A scorer holds the state of many series (or entities), addressed by dense integer ids, in plain
arrays or objects it can snapshot. One call scores a batch and then learns from it:

- ``update(ids, ts, x)`` returns one score per row, finite and in ``[0, 1]``; ``ids`` are unique
  within a call; ``ts`` (event time, seconds) is an input, never read from a clock;
- the same seed and the same input give the same scores;
- ``restore(snapshot())`` into a fresh scorer gives identical scores from then on;
- ``threshold`` is the documented score at and above which a row is anomalous.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Scorer(Protocol):
    """Score-then-learn over a batch of series ids (see module docstring for the contract)."""

    threshold: float

    def update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Scores in ``[0, 1]`` for rows ``x`` (shape ``(n,)`` or ``(n, d)``) of series ``ids``."""
        ...

    def snapshot(self) -> dict[str, np.ndarray]:
        """The whole state as named arrays."""
        ...

    def restore(self, data: dict[str, np.ndarray]) -> None:
        """Replace the state with a snapshot."""
        ...


class Evaluation(Protocol):
    """What :meth:`SeriesScorer.evaluate` returns per row (a scorer may carry more for its ``learn``)."""

    score: np.ndarray  # in [0, 1], the documented ``threshold`` means anomalous
    novelty: np.ndarray  # in [0, 1]: how new the row is against the series' own extremes (0: unknown)
    warm: np.ndarray  # bool: the series' baseline means something (no score before)


@runtime_checkable
class SeriesScorer(Protocol):
    """What :class:`streams.detect.DetectorBank` calls: the per-series detector it runs in production.

    A scorer of many series (dense ids; an id freed by :meth:`clear` is reused for a new series) that
    scores a round without learning (:meth:`evaluate`) and then learns from the rows the bank says are
    normal (:meth:`learn`): the bank keeps anomalous samples out of the baseline. Selected by the
    ``scorer`` setting from :data:`streams.detect.SCORERS`; one module per scorer under
    ``streams/scorers/``.
    """

    threshold: float

    def register(self, sid: int, direction: int) -> None:
        """Declare series ``sid`` with its bad direction (1 up, -1 down, 0 both)."""
        ...

    def clear(self, ids: np.ndarray) -> None:
        """Forget series ``ids`` (their ids will be reused): as :meth:`register` leaves a new one."""
        ...

    def evaluate(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> Evaluation:
        """Score one round (``ids`` unique) without learning."""
        ...

    def learn(self, ids: np.ndarray, x: np.ndarray, ev: Any, mask: np.ndarray | None = None) -> None:
        """Learn the round ``evaluate`` scored (``ev``), only the rows of ``mask`` when given."""
        ...

    def clean(self, ids: np.ndarray) -> np.ndarray:
        """Whether each series has learned a level and scale of zero (a fault counter that never erred)."""
        ...

    def snapshot(self, n: int | np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The state of the first ``n`` series (all by default), or of the ids listed in that order (an
        index array), as named arrays, names prefixed with the scorer's own."""
        ...

    def restore(self, data: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Replace the state with a snapshot (the arrays with this scorer's prefix): of the first series, or
        of ``rows``, one id per snapshot row (ids not listed keep their state)."""
        ...

    @property
    def nbytes_per_series(self) -> float:
        """State bytes per series."""
        ...
