"""The contract every scorer keeps (checked by ``tests/detect/test_contract.py``).

A scorer holds the state of many series (or entities), addressed by dense integer ids, in plain
arrays or objects it can snapshot. One call scores a batch and then learns from it:

- ``update(ids, ts, x)`` returns one score per row, finite and in ``[0, 1]``; ``ids`` are unique
  within a call; ``ts`` (event time, seconds) is an input, never read from a clock;
- the same seed and the same input give the same scores;
- ``restore(snapshot())`` into a fresh scorer gives identical scores from then on;
- ``threshold`` is the documented score at and above which a row is anomalous.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
