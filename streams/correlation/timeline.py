"""A job's timeline: the anomaly episodes of every series that describes it, and the cause alerts it fired.

An episode is one anomaly of one series (``start`` record, then an ``end`` time); a series is named by
its :data:`EpisodeKey`. Rules keep their own per-job state on the timeline under their name
(:meth:`JobTimeline.state`), so a new rule needs no new field here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NewType, TypeVar, cast

from models.alerts import Alert

#: The series of one episode stream within a job: ``layer/source/metric{labels}``.
EpisodeKey = NewType("EpisodeKey", str)

S = TypeVar("S")


def episode_key(rec: dict[str, Any]) -> EpisodeKey:
    """Stable key of one series' episode stream within a job.

    >>> episode_key({"layer": "switch", "source": "leaf1", "metric": "SymbolErrorCounter", "labels": {"port": "3"}})
    'switch/leaf1/SymbolErrorCounter{port=3}'
    """
    labels = ",".join(f"{k}={v}" for k, v in sorted(rec["labels"].items()))
    return EpisodeKey(f"{rec['layer']}/{rec['source']}/{rec['metric']}{{{labels}}}")


@dataclass
class Episode:
    key: EpisodeKey
    start: dict[str, Any]
    end_ts: float | None = None

    @property
    def ts(self) -> float:
        return float(self.start["ts"])

    @property
    def role(self) -> str:
        return str(self.start["role"])

    @property
    def stated_ts(self) -> float:
        """The start as the source's clock stated it (``ts`` is on the true time line)."""
        return float(self.start.get("raw_ts", self.start["ts"]))

    def retime(self, offset: float) -> bool:
        """Put the episode on the true time line for a source clock ``offset`` seconds off (``ts - offset``);
        whether it moved."""
        old = float(self.start.get("clock_offset") or 0.0)
        if old == offset:
            return False
        stated = self.stated_ts
        self.start = dict(self.start, ts=stated - offset, raw_ts=stated, clock_offset=offset, retimed=True)
        if self.end_ts is not None:
            self.end_ts += old - offset
        return True


@dataclass
class Fired:
    """A cause alert of the job and the event-time interval it fired over (``end`` None: still firing), so
    inhibition is judged as of a symptom's due time even when a watermark jump settles both at once."""

    alert: Alert
    start: float
    end: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"alert": self.alert.model_dump(mode="json"), "from": self.start, "to": self.end}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fired:
        return cls(Alert.model_validate(data["alert"]), float(data["from"]),
                   None if data["to"] is None else float(data["to"]))


@dataclass
class JobTimeline:
    job_id: str
    episodes: dict[EpisodeKey, list[Episode]] = field(default_factory=dict)
    fired: list[Fired] = field(default_factory=list)
    #: each rule's own state for this job, by rule name (see :meth:`state`)
    rule_state: dict[str, object] = field(default_factory=dict)

    def all_episodes(self) -> list[Episode]:
        return [e for eps in self.episodes.values() for e in eps]

    def state(self, rule: str, new: Callable[[], S]) -> S:
        """The state ``rule`` keeps for this job, made by ``new()`` the first time it is asked for."""
        held = self.rule_state.get(rule)
        if held is None:
            held = self.rule_state[rule] = new()
        return cast(S, held)

    def add(self, rec: dict[str, Any], ts: float) -> None:
        """Fold one anomaly ``start``/``end`` record into its episode stream.

        ``rec`` is on the true time line (its ``ts`` corrected for the source's clock); ``ts`` is the time
        the record states, which dedups starts and finds the episode an end closes (both as stated, so a
        re-timed episode is still found). An end is kept on the true time line too.
        """
        key = episode_key(rec)
        eps = self.episodes.setdefault(key, [])
        if rec["phase"] == "start":
            if not any(abs(e.stated_ts - ts) < 1e-9 for e in eps):  # duplicates under at-least-once are harmless
                eps.append(Episode(key, rec))
                eps.sort(key=lambda e: e.ts)
        else:
            for ep in reversed(eps):
                if ep.stated_ts <= ts and ep.end_ts is None:
                    ep.end_ts = ts - float(ep.start.get("clock_offset") or 0.0)
                    break

    def retime(self, source: str, offset: float) -> bool:
        """Re-time every episode of ``source`` for its clock ``offset``; whether any moved."""
        moved = False
        for eps in self.episodes.values():
            changed = [ep.retime(offset) for ep in eps if ep.start.get("source") == source]
            if any(changed):
                eps.sort(key=lambda e: e.ts)
                moved = True
        return moved

    def evict_episodes(self, horizon: float, pinned: set[EpisodeKey]) -> None:
        """Drop the episodes that ended before ``horizon``, except those of the ``pinned`` series."""
        for key in list(self.episodes):
            kept = [e for e in self.episodes[key] if e.end_ts is None or e.end_ts >= horizon or key in pinned]
            if kept:
                self.episodes[key] = kept
            else:
                del self.episodes[key]


def num(v: float) -> float | str:
    """A float as JSON can hold it (``inf``/``-inf`` as text)."""
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")
