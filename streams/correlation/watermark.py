"""The event-time watermark of one ``anomalies`` partition, from the progress of its input partitions.

The watermark is the minimum over the input partitions' progress, minus the allowed lateness; a
verdict on a degradation with onset ``O`` is taken only once it passes ``O + grace``, so evidence that
happened earlier but arrived later still counts. Live, an input stops holding the watermark back when
its worker says it is idle, or when no worker has mentioned it for ``orphan_hold_s``; when none holds,
the watermark catches up with the data (the greatest progress minus the lateness) and stops there.
Live, the input partitions that exist are known (``inputs``: every telemetry partition): one that no
worker has mentioned since this state started or was restored is between owners too (a rebalance
under way, its new owner restoring it) and holds the watermark where it is, for up to
``orphan_hold_s``; a worker that owns a partition without data mentions it idle (at once if it never
held a record, else once nothing was beyond its commit for ``watermark_idle_s``:
agents.offsets.settled_without_data). Without
this, a correlation partition restored from an early snapshot knew only some inputs, followed
the ones the staying worker processed, and a rebalance paged ``job_stalled`` for the jobs whose
step times were on the partitions being moved (the leaving-worker fault test, under load).
In replay (``expected`` origins) it waits for every input, and the end of all of them is
:attr:`Watermark.finished` (verdicts judged at :attr:`Watermark.horizon` = ``inf``), not a watermark::

    input a   progress ....|....|....|          (idle after 12: its worker says so)
    input b   progress ....|....|....|....|...
    watermark (min - lateness)  ....|....|....|....  <- follows b alone once a is idle

Nothing here reads the clock: ``now_wall`` (used only to tell live inputs from idle or orphaned ones)
is an argument.
"""

from __future__ import annotations

import math
from typing import Any

from models.timeutil import MAX_TS, MIN_TS
from streams.correlation.config import CorrelatorConfig

#: An input partition mentioned within this many seconds has a live worker.
ALIVE_S = 3.0


class Watermark:
    def __init__(self, config: CorrelatorConfig, expected: set[str] | None = None,
                 inputs: set[str] | None = None) -> None:
        self.config = config
        self.expected = expected
        #: live: every input partition that exists (one never mentioned is between owners); None: unknown
        self.inputs = inputs
        #: the wall time this state started or was restored (the orphan hold of never-mentioned inputs)
        self.started: float | None = None
        self.origin_wm: dict[str, float] = {}
        self.origin_seen: dict[str, float] = {}
        #: the input partition's worker says it has fetched nothing for it lately (it has no data)
        self.origin_idle: dict[str, bool] = {}
        self.eos: set[str] = set()
        #: the last watermark reached (``-inf`` before any progress is known)
        self.value = -math.inf
        self.finished = False
        #: set by :meth:`restore` when the snapshot held an infinite watermark (it was recomputed)
        self.repaired = False

    def observe(self, rec: dict[str, Any], now_wall: float) -> None:
        """Fold a ``watermark`` record in. Raises ValueError on a progress that is not a valid event time."""
        if self.started is None:
            self.started = now_wall
        idle = set(rec.get("idle", ()))
        origins = rec.get("origins", {})
        for origin in idle.difference(origins):  # owned, no data yet: mentioned, idle, no progress
            self.origin_seen[origin] = now_wall
            self.origin_idle[origin] = True
        for origin, wm in origins.items():
            progress = float(wm)
            if not MIN_TS <= progress < MAX_TS:
                raise ValueError(f"watermark progress of {str(origin)[:80]!r} is not a valid event time: "
                                 f"{progress!r}")
            if progress > self.origin_wm.get(origin, -math.inf):
                self.origin_wm[origin] = progress
            self.origin_seen[origin] = now_wall
            self.origin_idle[origin] = origin in idle
        for origin in rec.get("eos", []):
            self.eos.add(origin)
            self.origin_seen[origin] = now_wall

    def current(self, now_wall: float) -> float:
        """The partition's event-time watermark: the least progress of the input partitions that hold it,
        minus the allowed lateness; ``-inf`` before any progress is known. Always finite after that.

        Live, an input partition holds the watermark while its worker reports it active (:meth:`holds`).
        When none holds (every input idle, paused, or between owners), the watermark is the greatest
        progress any input reached, minus the allowed lateness: each has delivered all it had, so the
        watermark catches up with the data and stops there, and moves on as soon as data resumes. In
        replay (``expected`` origins) it waits for every input; the end of all of them is not a
        watermark but :attr:`finished` (the final flush, judged at :attr:`horizon`).
        """
        lateness = self.config.allowed_lateness_s
        if self.expected is not None:
            pending = self.expected - self.eos
            if any(o not in self.origin_wm for o in pending):
                return -math.inf
            values = [self.origin_wm[o] for o in pending]
        else:
            if self.started is None:
                self.started = now_wall
            if self.waiting_for_owner(now_wall):
                return self.value  # an input between owners: hold where it is (no verdict runs ahead of it)
            values = [wm for o, wm in self.origin_wm.items() if o not in self.eos and self.holds(o, now_wall)]
        if values:
            return min(values) - lateness
        if not self.origin_wm:
            return -math.inf
        return max(self.origin_wm.values()) - lateness

    @property
    def horizon(self) -> float:
        """What verdicts are judged against: the watermark, or ``inf`` once every input of a replay ended."""
        return math.inf if self.finished else self.value

    def ended(self) -> bool:
        return self.expected is not None and not (self.expected - self.eos)

    def holds(self, origin: str, now_wall: float) -> bool:
        """Whether an input partition still holds the watermark back (live mode).

        Its worker mentions it in every watermark record (at least once a second) and says whether it
        is idle (keeping up, nothing fetched for ``idle_s``: it has no data) - only then does it stop
        holding. One not mentioned at all is between owners (a worker died, a rebalance is under way)
        and holds for up to ``orphan_hold_s``, so its evidence is not made late by the move.
        """
        silent = now_wall - self.origin_seen.get(origin, now_wall)
        if silent > self.config.orphan_hold_s:
            return False
        if silent <= ALIVE_S:
            return not self.origin_idle.get(origin, False)
        return True

    def waiting_for_owner(self, now_wall: float) -> bool:
        """Live: whether an input partition that exists has not been mentioned by any worker since this state
        started (or was restored), while that is less than ``orphan_hold_s`` ago: it is between owners,
        and the watermark holds where it is.

        >>> from streams.correlation.config import CorrelatorConfig
        >>> w = Watermark(CorrelatorConfig(), inputs={"t:0", "t:1"})
        >>> t0 = 1764502800.0
        >>> w.observe({"origins": {"t:0": t0}}, now_wall=0.0)
        >>> w.waiting_for_owner(5.0), w.current(5.0)  # t:1 between owners: nothing runs ahead
        (True, -inf)
        >>> w.observe({"origins": {"t:0": t0 + 30}, "idle": ["t:1"]}, now_wall=6.0)  # owned, no data
        >>> w.waiting_for_owner(6.0), w.current(6.0) - t0
        (False, 25.0)
        """
        if self.inputs is None or self.started is None:
            return False
        if now_wall - self.started > self.config.orphan_hold_s:
            return False
        return any(o not in self.origin_seen for o in self.inputs if o not in self.eos)

    def advance(self, now_wall: float) -> float | None:
        """Move to the current watermark: the event time to judge every job at, or None when it did not move
        (then only jobs with new evidence are judged, at :attr:`horizon`).

        When every input of a replay has ended, this is ``inf`` (judge everything as if all time had
        passed) while :attr:`value` keeps the last real watermark; call :meth:`finish` once judged.
        """
        wm = self.current(now_wall)
        end = self.ended() and not self.finished
        if wm <= self.value and not end:
            return None
        if end:
            self.value = max(self.value, max(self.origin_wm.values(), default=-math.inf))
            return math.inf
        self.value = wm
        return wm

    def finish(self) -> None:
        self.finished = True

    def snapshot(self) -> dict[str, Any]:
        return {"origin_wm": self.origin_wm, "eos": sorted(self.eos),
                "watermark": self.value if math.isfinite(self.value) else None, "finished": self.finished}

    def restore(self, data: dict[str, Any], now_wall: float) -> None:
        """Take a :meth:`snapshot` back. A non-finite progress or ``+inf`` watermark (written by versions
        whose watermark could run away after a lull) is repaired: progress that is not finite is dropped,
        and the watermark is recomputed from what remains (``-inf`` if nothing does)."""
        self.origin_wm = {k: float(v) for k, v in data["origin_wm"].items() if math.isfinite(float(v))}
        self.origin_seen = dict.fromkeys(self.origin_wm, now_wall)
        self.started = now_wall
        self.eos = set(data["eos"])
        self.finished = bool(data.get("finished", False))
        self.value = -math.inf if data["watermark"] is None else float(data["watermark"])
        if self.value == math.inf:
            progress = max(self.origin_wm.values(), default=-math.inf)
            self.value = progress if progress == -math.inf else progress - self.config.allowed_lateness_s
            self.repaired = True
