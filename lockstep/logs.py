"""Logging set-up for Lockstep processes: our loggers at the chosen level, Faust's quieter."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

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
    handler.addFilter(RepeatFilter())
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.ERROR)
    # Faust reports consumer/broker trouble and aborted rebalance recoveries at WARNING; keep those visible.
    for name in ("faust.transport", "faust.tables.recovery"):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))


class RepeatFilter(logging.Filter):
    """Lets a library's repeated message through once per ``every_s`` (per logger and message template).

    A broker that goes away makes aiokafka log the same few errors thousands of times a minute (6,300
    lines in 30 s were seen); the first of each goes through, then one every ``every_s`` that says how
    many were held back. Lockstep's own loggers (``lockstep.*``, ``agents.*``, ...) are never limited.

    >>> f = RepeatFilter(every_s=10.0, clock=iter([0.0, 1.0, 2.0, 11.0]).__next__)
    >>> recs = [logging.LogRecord("aiokafka", logging.ERROR, "", 0, "Unable connect to node %s", (n,), None)
    ...         for n in range(4)]
    >>> [f.filter(r) for r in recs], recs[3].getMessage()
    ([True, False, False, True], 'Unable connect to node 3 (2 more like this in the last 11 s)')
    """

    LIMITED = ("aiokafka", "kafka", "faust", "mode")

    def __init__(self, every_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.LIMITED):
            return True
        key = (record.name, str(record.msg))
        now = self.clock()
        last = self._seen.get(key)
        if last is None:
            self._seen[key] = (now, 0)
            return True
        since, held = last
        if now - since < self.every_s:
            self._seen[key] = (since, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {now - since:.0f} s)"
        if len(self._seen) > 10_000:  # templates are few; a bound all the same
            self._seen.clear()
        return True
