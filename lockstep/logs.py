"""Logging set-up for Lockstep processes: our loggers at the chosen level, Faust's quieter."""

from __future__ import annotations

import logging
import sys

_NOISY = ("faust", "mode", "aiokafka", "kafka", "aiohttp.access", "venusian")


def setup_logging(level: str = "info", stream: object = None) -> None:
    """Configure the root logger once. ``level`` is debug|info|warn|error|crit."""
    numeric = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
               "error": logging.ERROR, "crit": logging.CRITICAL}.get(level, logging.INFO)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.ERROR)
    # Faust reports consumer/broker trouble and aborted rebalance recoveries at WARNING; keep those visible.
    for name in ("faust.transport", "faust.tables.recovery"):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
