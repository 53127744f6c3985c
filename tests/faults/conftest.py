"""Fixtures of the fault tests (helpers in :mod:`tests.faults.kit`)."""

from __future__ import annotations

from .kit import broker, workers

__all__ = ["broker", "workers"]
