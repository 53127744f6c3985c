"""Input partitions that stopped making progress although records are waiting: find them, heal them.

Seen on the embedded broker under load, right after a restart with a backlog (the SIGKILL fault
test failed about one run in two with two CPU hogs beside it): one assigned partition stops in the
middle of its backlog while the others go on. The broker still serves the records (a fresh consumer
reads them) and the worker is idle. Two shapes were seen:

- the group's committed offset stays behind what the worker processed: Faust commits the highest run
  of acknowledged offsets and never moves while the next two offsets are not acknowledged;
- nothing more is processed although records follow the last processed offset.

A third shape follows a rebalance: a partition handed to this worker delivers nothing at all (Faust's
read offset for it is still the one from before the rebalance, behind the group's commit: it was not
sought to the commit; no Faust warning says why). So a partition that has delivered nothing since it
was assigned is checked sooner (``first_after_s``), once; after that the usual ``stall_after_s``
applies.

So the worker watches every assigned input partition (telemetry, anomalies, and the carriers it reads):
one with nothing
delivered for ``stall_after_s`` (``first_after_s`` when newly assigned) while the worker is idle is a
*suspect*. If its commit is behind the
offset processed, the partition is read again from the commit (what is already in the state is
skipped and acknowledged); otherwise a side consumer checks whether a record exists right after the
last processed offset, and if so the partition is resumed and read again from there. Each case is
logged with Faust's view of the partition and counted (``lockstep_partition_stalls_total``).

This module is the bookkeeping only (time is an argument); the checks and the seek live in
:mod:`agents.app`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class StallWatch:
    """When each assigned input partition last delivered, and which ones look stalled.

    >>> w = StallWatch(stall_after_s=30.0, first_after_s=10.0)
    >>> w.assigned(["t:0", "t:1"], now=0.0)
    >>> w.delivered("t:0", now=5.0)
    >>> w.suspects(now=9.0, busy=False)
    []
    >>> w.suspects(now=10.0, busy=False)  # t:1 delivered nothing since it was assigned
    ['t:1']
    >>> w.suspects(now=10.0, busy=True)  # a long batch or a catch-up is not a stall
    []
    >>> w.silent_for("t:1", now=10.0)
    10.0
    >>> w.healed("t:1", now=10.0)  # checked: it gets stall_after_s to show progress
    >>> w.suspects(now=35.0, busy=False)
    ['t:0']
    >>> w.suspects(now=40.0, busy=False)
    ['t:0', 't:1']
    >>> w.assigned(["t:1", "t:2"], now=40.0)  # a rebalance: t:0 gone, t:2 new (checked at 50 s)
    >>> w.suspects(now=49.0, busy=False)
    ['t:1']
    >>> w.suspects(now=50.0, busy=False)
    ['t:1', 't:2']
    """

    stall_after_s: float = 30.0
    first_after_s: float = 10.0
    last: dict[str, float] = field(default_factory=dict)
    fresh: set[str] = field(default_factory=set)  # assigned, nothing delivered or checked since

    def assigned(self, origins: Iterable[str], now: float) -> None:
        """The current assignment: new partitions start their clock now, revoked ones are forgotten."""
        keep = set(origins)
        self.last = {o: t for o, t in self.last.items() if o in keep}
        self.fresh &= keep
        for o in keep:
            if o not in self.last:
                self.last[o] = now
                self.fresh.add(o)

    def delivered(self, origin: str, now: float) -> None:
        if origin in self.last:
            self.last[origin] = now
            self.fresh.discard(origin)

    def suspects(self, now: float, busy: bool) -> list[str]:
        """Partitions silent for ``stall_after_s``, or ``first_after_s`` when newly assigned (none while
        the worker is busy)."""
        if busy:
            return []
        return sorted(o for o, t in self.last.items()
                      if now - t >= (self.first_after_s if o in self.fresh else self.stall_after_s))

    def silent_for(self, origin: str, now: float) -> float:
        """Seconds since ``origin`` last delivered (or was assigned, or checked)."""
        return now - self.last.get(origin, now)

    def healed(self, origin: str, now: float) -> None:
        """A suspect was checked (or re-read): give it ``stall_after_s`` again."""
        if origin in self.last:
            self.last[origin] = now
            self.fresh.discard(origin)
