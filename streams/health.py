"""Whether correlation keeps up with ingest: the readiness rule behind ``/readyz``'s ``correlation`` check.

A worker is not ready when its ingest has kept processing samples for ``stall_s`` seconds of wall time
since any of its correlation partitions' watermarks last moved: alerts would then be judged late or not
at all. A lull (no input at all) is not a stall: both sides stand still, and when input resumes the
watermark has ``stall_s`` to follow. Time is an input (``now``, monotonic seconds); nothing here reads
the clock.

>>> w = ProgressWatch(stall_s=60.0)
>>> w.correlation(0, 10.0, 1_000.0); w.ingest(10.0, 100)
>>> w.ingest(65.0, 200); w.stalled(65.0) is None  # ingest since 10 s, the watermark moved at 10 s: 55 s
True
>>> w.ingest(80.0, 300); w.stalled(80.0)
'correlation watermark has not moved for 70 s while ingest processed 300 samples'
>>> w.correlation(0, 81.0, 1_030.0); w.stalled(81.0) is None
True
>>> w.stalled(500.0) is None  # a lull afterwards: nothing is moving, nothing is stalled
True
"""

from __future__ import annotations

import math


class ProgressWatch:
    """Tracks when ingest and correlation last made progress (one per worker process)."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._samples = 0
        self._ingest_moved = -math.inf
        #: when ingest first moved after the last watermark move (None: it has not since)
        self._ingest_since: float | None = None
        self._samples_since = 0
        self._watermarks: dict[int, float] = {}

    def ingest(self, now: float, samples_total: int) -> None:
        """The ingest agent's running count of samples processed."""
        if samples_total == self._samples:
            return
        if self._ingest_since is None:
            self._ingest_since = now
            self._samples_since = 0
        self._samples_since += samples_total - self._samples
        self._samples = samples_total
        self._ingest_moved = now

    def correlation(self, partition: int, now: float, watermark: float) -> None:
        """A correlation partition's watermark as of ``now`` (non-finite: none yet)."""
        if math.isfinite(watermark) and watermark > self._watermarks.get(partition, -math.inf):
            self._watermarks[partition] = watermark
            self._ingest_since = None

    def forget(self, partition: int) -> None:
        """A correlation partition left this worker (a rebalance)."""
        self._watermarks.pop(partition, None)

    def stalled(self, now: float) -> str | None:
        """Why correlation is stalled, or None when it is not."""
        since = self._ingest_since
        if since is None or now - since <= self.stall_s or now - self._ingest_moved > self.stall_s:
            return None
        return (f"correlation watermark has not moved for {now - since:.0f} s while ingest processed "
                f"{self._samples_since} samples")


class BrokerWatch:
    """Whether the broker answers, from periodic probes; says once when it goes and once when it is back.

    >>> w = BrokerWatch()
    >>> w.answered(0.0), w.failed(5.0, "connection refused"), w.failed(7.0, "connection refused")
    (None, 'broker unreachable: connection refused; not ready until it answers again', None)
    >>> w.unreachable(8.0)
    'broker unreachable for 3 s: connection refused'
    >>> w.answered(40.0)
    'broker reachable again after 35 s'
    >>> w.unreachable(41.0) is None
    True
    """

    def __init__(self) -> None:
        self._since: float | None = None
        self._error = ""

    def answered(self, now: float) -> str | None:
        """A probe got an answer; the log line to write when this ends an outage."""
        if self._since is None:
            return None
        gone, self._since = now - self._since, None
        return f"broker reachable again after {gone:.0f} s"

    def failed(self, now: float, error: str) -> str | None:
        """A probe failed; the log line to write when this starts an outage."""
        self._error = error
        if self._since is not None:
            return None
        self._since = now
        return f"broker unreachable: {error}; not ready until it answers again"

    def unreachable(self, now: float) -> str | None:
        """Why the broker counts as unreachable, or None."""
        if self._since is None:
            return None
        return f"broker unreachable for {now - self._since:.0f} s: {self._error}"
