"""Input partitions that stopped making progress although records are waiting: find them, heal them.

Seen on the embedded broker under load, right after a restart with a backlog (the SIGKILL fault
test failed about one run in two with two CPU hogs beside it): one assigned partition stops in the
middle of its backlog while the others go on. The broker still serves the records (a fresh consumer
reads them) and the worker is idle. Two shapes were seen:

- the group's committed offset stays behind what the worker processed: Faust commits the highest run
  of acknowledged offsets and never moves while the next two offsets are not acknowledged;
- nothing more is processed although records follow the last processed offset.

So the worker watches every assigned input partition (telemetry and anomalies): one with nothing
delivered for ``stall_after_s`` while the worker is idle is a *suspect*. If its commit is behind the
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

    >>> w = StallWatch(stall_after_s=30.0)
    >>> w.assigned(["t:0", "t:1"], now=0.0)
    >>> w.delivered("t:0", now=25.0)
    >>> w.suspects(now=40.0, busy=False)
    ['t:1']
    >>> w.suspects(now=40.0, busy=True)  # a long batch or a catch-up is not a stall
    []
    >>> w.healed("t:1", now=40.0)  # checked: it gets stall_after_s again to show progress
    >>> w.suspects(now=60.0, busy=False)
    ['t:0']
    >>> w.suspects(now=71.0, busy=False)
    ['t:0', 't:1']
    """

    stall_after_s: float = 30.0
    last: dict[str, float] = field(default_factory=dict)

    def assigned(self, origins: Iterable[str], now: float) -> None:
        """The current assignment: new partitions start their clock now, revoked ones are forgotten."""
        keep = set(origins)
        self.last = {o: t for o, t in self.last.items() if o in keep}
        for o in keep:
            self.last.setdefault(o, now)

    def delivered(self, origin: str, now: float) -> None:
        if origin in self.last:
            self.last[origin] = now

    def suspects(self, now: float, busy: bool) -> list[str]:
        """Partitions silent for ``stall_after_s`` (none while the worker is busy)."""
        if busy:
            return []
        return sorted(o for o, t in self.last.items() if now - t >= self.stall_after_s)

    def healed(self, origin: str, now: float) -> None:
        """A suspect was checked (or re-read): give it ``stall_after_s`` again."""
        if origin in self.last:
            self.last[origin] = now
