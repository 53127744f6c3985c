"""The readiness rules behind ``/readyz``: whether correlation keeps up with ingest (``correlation``),
whether the broker answers (``broker``) and whether the consumer group has assigned this worker its
partitions (``group``).

Correlation: a worker is not ready when its ingest has kept processing samples for ``stall_s`` seconds
of wall time since any of its correlation partitions' watermarks last moved: alerts would then be judged
late or not at all. A lull (no input at all) is not a stall: both sides stand still, and when input resumes the
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
from collections.abc import Sequence


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


class GroupWatch:
    """How long this worker has waited for its consumer group to assign it partitions; says so once the
    wait is longer than a rebalance should take, again every ``repeat_s``, and once when it ends.

    A worker waits at start and in every rebalance: the group coordinator collects every member's join,
    the leader computes the assignment and hands it out. Some seconds is normal (about half the rebalance
    timeout on the embedded broker). Longer means the group cannot complete a rebalance, most often
    because a member joined and never finished (it died between its join and its sync, or never
    heartbeats): Apache Kafka removes such a member after its session or rebalance timeout; the embedded
    broker has been seen keeping one for good (docs/operations.md, "A worker waits for its group").
    Until the wait ends the worker consumes nothing, so it is not ready. Time is an input.

    >>> w = GroupWatch(warn_s=30.0, repeat_s=60.0, now=0.0)  # a worker starting
    >>> w.overdue(10.0) is None, w.waiting(10.0) is None, w.wait_s(10.0)
    (True, True, 10.0)
    >>> w.overdue(31.0)
    'no partitions assigned by the consumer group after 31 s'
    >>> w.overdue(40.0) is None, w.waiting(40.0)  # said once; not ready meanwhile
    (True, 'no partitions assigned by the consumer group for 40 s')
    >>> w.overdue(91.0)
    'no partitions assigned by the consumer group after 91 s'
    >>> w.assigned(100.0), w.wait_s(100.0), w.waiting(100.0) is None
    ('partitions assigned by the consumer group after 100 s of waiting', 0.0, True)
    >>> w.revoked(200.0); w.revoked(203.0); w.wait_s(205.0)  # a rebalance: the wait runs from its start
    5.0
    >>> w.assigned(206.0) is None  # a rebalance of normal length: nothing to say
    True
    """

    def __init__(self, warn_s: float, repeat_s: float = 60.0, *, now: float | None) -> None:
        """``now``: when the worker began waiting (None: not yet, e.g. before its consumer starts; then
        :meth:`revoked` starts the wait)."""
        self.warn_s = warn_s
        self.repeat_s = repeat_s
        #: since when this worker has waited for an assignment (None: it holds one, or has not asked yet)
        self._since: float | None = now
        self._said: float | None = None  # when overdue() last said so during this wait

    def revoked(self, now: float) -> None:
        """A rebalance began (the partitions held, if any, were revoked): waiting from now, unless already."""
        if self._since is None:
            self._since, self._said = now, None

    def assigned(self, now: float) -> str | None:
        """The group assigned this worker its partitions (possibly none: more workers than partitions);
        the line to log when the wait had been reported as overdue."""
        since, said = self._since, self._said
        self._since, self._said = None, None
        if since is None or said is None:
            return None
        return f"partitions assigned by the consumer group after {now - since:.0f} s of waiting"

    def wait_s(self, now: float) -> float:
        """Seconds this worker has waited for an assignment (0 while it holds one)."""
        return 0.0 if self._since is None else max(0.0, now - self._since)

    def overdue(self, now: float) -> str | None:
        """The line to log when the wait is past ``warn_s``: the first time, then every ``repeat_s``."""
        if self._since is None or now - self._since < self.warn_s:
            return None
        if self._said is not None and now - self._said < self.repeat_s:
            return None
        self._said = now
        return f"no partitions assigned by the consumer group after {now - self._since:.0f} s"

    def waiting(self, now: float) -> str | None:
        """Why the worker is not ready (the wait is past ``warn_s``), or None."""
        if self._since is None or now - self._since < self.warn_s:
            return None
        return f"no partitions assigned by the consumer group for {now - self._since:.0f} s"


def group_line(state: str, protocol: str, members: Sequence[tuple[str, str, str, bool]]) -> str:
    """One line for the log from the broker's DescribeGroups answer: the group's state, its protocol and
    its members (``(member_id, client_id, host, has_assignment)``).

    >>> group_line("Unknown", "", [("faust-0.15.3-86942c90", "", "", False)])
    "the broker says: group state Unknown, protocol '', 1 member: faust-0.15.3-86942c90 (no assignment)"
    >>> group_line("Stable", "faust", [("a", "faust-1", "/10.0.0.7", True), ("b", "c", "/h", False)])
    "the broker says: group state Stable, protocol 'faust', 2 members: a (faust-1 at /10.0.0.7, assigned), b (c at
    /h, no assignment)"
    """
    def one(member_id: str, client_id: str, host: str, assigned: bool) -> str:
        where = f"{client_id} at {host}, " if client_id or host else ""
        return f"{member_id} ({where}{'assigned' if assigned else 'no assignment'})"

    listed = ", ".join(one(*m) for m in members[:10]) + (f", and {len(members) - 10} more" if len(members) > 10 else "")
    noun = "member" if len(members) == 1 else "members"
    return f"the broker says: group state {state}, protocol {protocol!r}, {len(members)} {noun}" + (
        f": {listed}" if members else "")
