"""The read model's state: what every worker keeps of the output topics, in bounded memory.

Every worker folds the records of ``timelines``, ``alerts``, ``stats``, the ``anomaly`` records of
``anomalies``, and the operator topics ``annotations`` and ``silences`` into one :class:`ReadStore`
(the consumer in :mod:`agents.readmodel` reads every partition, without a consumer group, so each
worker can answer for any job whichever worker correlates it). :mod:`streams.views` answers the
API's questions from it together with the worker's :class:`~streams.inventory.InventoryIndex`.

Bounds (see :class:`ReadStoreConfig`):

- per job, the last ``history_s`` seconds of per-second lanes in a fixed numpy ring
  (``history_s`` x lanes x 5 float32: about 650 KB per job for an hour), at most ``max_jobs`` jobs
  (the job updated longest ago is dropped first);
- per job, at most ``max_episodes_per_job`` anomaly episodes, none older than ``history_s`` before
  the job's latest second;
- the latest ``max_alerts`` alerts with their lifecycle; the latest stats record per job, and the
  ``annotation_effect`` records (step time before/after an annotation) of the ``stats`` topic;
- per job, the latest ``max_annotations_per_job`` annotations; at most ``max_silences`` silences;
- the ``capacity`` topic's incidents in a :class:`~streams.ledger.Ledger`, at most ``max_incidents``.
- the fabric rollup (:class:`streams.fabric.FabricRollup`): per NIC and switch port, its last
  counter values, a ring of recent transmit rates and congestion/error totals (O(ports)).

Nothing here reads the clock or does I/O. Records that do not have the documented shape are counted
in :attr:`ReadStore.rejected` and otherwise ignored (they come from Lockstep's own stages; a bad one
must not stop the page).

>>> store = ReadStore()
>>> store.apply("timelines", {"type": "timeline", "job_id": "j", "ts": 100.0,
...             "lanes": {"step_time": {"n": 4, "p50": 1.0, "p99": 1.2, "min": 0.9, "max": 1.3}}})
True
>>> store.lanes["j"].latest, float(store.lanes["j"].window(100, 101)[0][0, LANE_INDEX["step_time"], P50])
(100, 1.0)
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from models.operator import AnnotationRecord, SilenceRecord
from streams.fabric import FabricRollup
from streams.lanes import LANE_ORDER
from streams.ledger import Ledger, LedgerEntry

#: Index of each lane in the ring's second axis.
LANE_INDEX = {lane: i for i, lane in enumerate(LANE_ORDER)}
#: The per-second aggregates kept per lane, in the ring's third axis.
FIELDS = ("n", "p50", "p99", "min", "max")
N, P50, P99, MIN, MAX = range(len(FIELDS))

#: Fields an anomaly record must have for the views (see :class:`models.records.AnomalyRecord`).
ANOMALY_FIELDS = ("layer", "source", "labels", "metric", "meaning", "role", "value")

#: The kinds of record the store folds (one per topic).
KINDS = ("timelines", "alerts", "stats", "anomalies", "annotations", "silences", "capacity")


@dataclass(frozen=True, slots=True)
class ReadStoreConfig:
    history_s: int = 3600
    max_jobs: int = 1000
    max_episodes_per_job: int = 5000
    max_alerts: int = 5000
    max_annotations_per_job: int = 500
    max_silences: int = 10_000
    #: incidents the GPU-time lost ledger keeps (the oldest-ending go first)
    max_incidents: int = 10_000


class LaneRing:
    """The last ``capacity`` seconds of one job's lanes: slot ``sec % capacity`` holds second ``sec``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.secs = np.full(capacity, -1, dtype=np.int64)
        self.data = np.full((capacity, len(LANE_ORDER), len(FIELDS)), np.nan, dtype=np.float32)
        self.latest = -1

    def put(self, sec: int, lanes: dict[str, dict[str, float]]) -> bool:
        """Store second ``sec``; False if it is older than the ring holds (or than its slot's second)."""
        if sec <= self.latest - self.capacity:
            return False
        slot = sec % self.capacity
        if self.secs[slot] > sec:
            return False
        row = self.data[slot]
        if self.secs[slot] != sec:
            row[:] = np.nan
            self.secs[slot] = sec
        rows: list[int] = []
        values: list[tuple[float, float, float, float, float]] = []
        for lane, agg in lanes.items():
            i = LANE_INDEX.get(lane)
            if i is None:
                continue  # a lane this version does not draw
            rows.append(i)
            values.append((float(agg["n"]), float(agg["p50"]), float(agg["p99"]), float(agg["min"]),
                           float(agg["max"])))
        if rows:
            row[rows] = values  # one numpy assignment per second
        if sec > self.latest:
            self.latest = sec
        return True

    @property
    def earliest(self) -> int:
        """The oldest second the ring holds (-1 when empty)."""
        held = self.secs[self.secs > self.latest - self.capacity]
        return int(held.min()) if held.size and self.latest >= 0 else -1

    def window(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """``(data[end - start, lanes, fields], present[end - start])`` for seconds ``[start, end)``.

        Seconds the ring does not hold are NaN and not present.
        """
        secs = np.arange(start, end, dtype=np.int64)
        slots = secs % self.capacity
        present = (self.secs[slots] == secs) & (secs > self.latest - self.capacity)
        data = np.where(present[:, None, None], self.data[slots], np.float32(np.nan))
        return data, present

    def column(self, start: int, end: int, lane: int, field: int) -> np.ndarray:
        """One lane's ``field`` for seconds ``[start, end)`` (float64, NaN where not held): what
        :meth:`window` gives for it, without copying the other lanes."""
        secs = np.arange(start, end, dtype=np.int64)
        slots = secs % self.capacity
        present = (self.secs[slots] == secs) & (secs > self.latest - self.capacity)
        return np.where(present, self.data[slots, lane, field].astype(np.float64), np.nan)


@dataclass(slots=True)
class AlertEntry:
    """An alert and its lifecycle: the record first seen firing, the latest record, every transition."""

    alert_id: str
    latest: dict[str, Any]
    firing: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class EpisodeView:
    """One anomaly episode of one series of one job (``start`` is its ``phase: start`` record)."""

    key: str
    start: dict[str, Any]
    end_ts: float | None = None

    @property
    def ts(self) -> float:
        return float(self.start["ts"])


def episode_key(rec: dict[str, Any]) -> str:
    """The series an anomaly record belongs to (same as :func:`streams.correlate.episode_key`).

    >>> episode_key({"layer": "switch", "source": "leaf03", "metric": "SymbolErrorCounter",
    ...              "labels": {"port": "17"}})
    'switch/leaf03/SymbolErrorCounter{port=17}'
    """
    labels = ",".join(f"{k}={v}" for k, v in sorted(rec["labels"].items()))
    return f"{rec['layer']}/{rec['source']}/{rec['metric']}{{{labels}}}"


class ReadStore:
    """See the module docstring. Fold records with :meth:`apply`."""

    def __init__(self, config: ReadStoreConfig | None = None) -> None:
        self.config = config or ReadStoreConfig()
        self.lanes: OrderedDict[str, LaneRing] = OrderedDict()
        self.episodes: dict[str, deque[EpisodeView]] = {}
        self.open_episodes: dict[tuple[str, str], EpisodeView] = {}
        self.alerts: OrderedDict[str, AlertEntry] = OrderedDict()
        self.stats: dict[str, dict[str, Any]] = {}
        self.effects: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.annotations: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self.silences: dict[str, dict[str, Any]] = {}
        self.applied: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.rejected: dict[str, int] = dict.fromkeys(KINDS, 0)
        #: The ``capacity`` topic's incidents (streams.ledger): the GPU-time lost ledger.
        self.ledger = Ledger()
        #: The latest second any job's lanes reached: the read model's event-time "now".
        self.event_time: float | None = None
        #: NIC and switch-port counters per entity, for the fabric report (:mod:`streams.fabric`); the
        #: read model folds the ``telemetry.nic`` and ``telemetry.switch`` messages into it.
        self.fabric = FabricRollup()

    # -- folding --------------------------------------------------------------------------------
    def apply(self, kind: str, value: Any, key: str | None = None) -> bool:
        """Fold one decoded record of topic ``kind`` (one of :data:`KINDS`); False if not used.

        ``value`` None is a tombstone (only meaningful on the compacted ``silences`` topic, where it
        deletes ``key``). Records of ``anomalies`` other than ``type: anomaly`` (points, watermarks)
        are skipped without counting as rejected.
        """
        try:
            used = self._apply(kind, value, key)
        except (KeyError, TypeError, ValueError, IndexError, ValidationError):
            used = None
        if used is None:
            self.rejected[kind] = self.rejected.get(kind, 0) + 1
            return False
        if used:
            self.applied[kind] = self.applied.get(kind, 0) + 1
        return used

    def _apply(self, kind: str, value: Any, key: str | None) -> bool | None:
        if kind == "silences":
            return self._silence(value, key)
        if not isinstance(value, dict):
            return None
        if kind == "timelines":
            return self._timeline(value)
        if kind == "alerts":
            return self._alert(value)
        if kind == "stats":
            if value.get("type") == "annotation_effect":  # step time before/after an annotation (correlation)
                self.effects[str(value["annotation_id"])] = value
                while len(self.effects) > self.config.max_annotations_per_job * 10:
                    self.effects.popitem(last=False)
                return True
            if value.get("type", "stats") != "stats":
                return False
            job = str(value["job_id"])
            current = self.stats.get(job)
            if current is None or float(value["ts"]) >= float(current["ts"]):
                self.stats[job] = value
            return True
        if kind == "anomalies":
            if value.get("type") != "anomaly":
                return False
            return self._anomaly(value)
        if kind == "capacity":
            return self._capacity(value)
        if kind == "annotations":
            rec = AnnotationRecord.model_validate(value).model_dump()
            notes = self.annotations.setdefault(rec["job_id"], OrderedDict())
            notes[rec["annotation_id"]] = rec
            while len(notes) > self.config.max_annotations_per_job:
                notes.popitem(last=False)
            return True
        return None

    def _timeline(self, rec: dict[str, Any]) -> bool:
        job = str(rec["job_id"])
        ts = float(rec["ts"])
        if not math.isfinite(ts):
            raise ValueError("ts is not finite")
        lanes = rec["lanes"]
        if not isinstance(lanes, dict):
            raise TypeError("lanes is not an object")
        ring = self.lanes.get(job)
        if ring is None:
            ring = self.lanes[job] = LaneRing(self.config.history_s)
            while len(self.lanes) > self.config.max_jobs:
                gone, _ = self.lanes.popitem(last=False)
                self._forget_job(gone)
        else:
            self.lanes.move_to_end(job)
        sec = math.floor(ts)
        ok = ring.put(sec, lanes)
        if self.event_time is None or sec > self.event_time:
            self.event_time = float(sec)
        self._prune_episodes(job, ring.latest)
        return ok

    def _forget_job(self, job: str) -> None:
        self.episodes.pop(job, None)
        for k in [k for k in self.open_episodes if k[0] == job]:
            del self.open_episodes[k]

    def _anomaly(self, rec: dict[str, Any]) -> bool:
        job = str(rec["job_id"])
        key = episode_key(rec)
        ts = float(rec["ts"])
        if rec["phase"] == "start":
            current = self.open_episodes.get((job, key))
            if current is not None and abs(current.ts - ts) < 1e-9:
                return False  # a duplicate under at-least-once delivery
            missing = [f for f in ANOMALY_FIELDS if f not in rec]
            if missing:
                raise KeyError(f"anomaly record without {missing}")
            ep = EpisodeView(key, rec)
            eps = self.episodes.setdefault(job, deque())
            eps.append(ep)
            self.open_episodes[(job, key)] = ep
            while len(eps) > self.config.max_episodes_per_job:
                old = eps.popleft()
                if self.open_episodes.get((job, old.key)) is old:
                    del self.open_episodes[(job, old.key)]
            return True
        if rec["phase"] == "end":
            closing = self.open_episodes.pop((job, key), None)
            if closing is None:
                return False  # its start is older than the store holds
            closing.end_ts = ts
            return True
        raise ValueError(f"unknown phase {rec['phase']!r}")

    def _prune_episodes(self, job: str, latest: int) -> None:
        eps = self.episodes.get(job)
        horizon = latest - self.config.history_s
        while eps and (eps[0].end_ts if eps[0].end_ts is not None else math.inf) < horizon:
            old = eps.popleft()
            if self.open_episodes.get((job, old.key)) is old:
                del self.open_episodes[(job, old.key)]

    def _alert(self, rec: dict[str, Any]) -> bool:
        alert_id = str(rec["alert_id"])
        status = str(rec["status"])
        at = rec.get("resolved_at") if status == "resolved" else rec.get("detected_at")
        entry = self.alerts.get(alert_id)
        if entry is None:
            entry = self.alerts[alert_id] = AlertEntry(alert_id, rec)
            while len(self.alerts) > self.config.max_alerts:
                self.alerts.popitem(last=False)
        event = {"status": status, "at": at}
        if event in entry.events:
            return False  # a duplicate
        entry.events.append(event)
        if status == "firing" and entry.firing is None:
            entry.firing = rec
        # The latest state: a resolved record wins over a firing one that arrives after it.
        if status == "resolved" or entry.latest.get("status") != "resolved":
            entry.latest = rec
        return True

    def _capacity(self, rec: dict[str, Any]) -> bool:
        """One incident's cost, in its partition's order (a bad record raises LedgerError: rejected)."""
        changed = self.ledger.add(LedgerEntry.from_record(rec))
        cap = self.config.max_incidents
        if len(self.ledger.entries) > cap + cap // 10:
            self.ledger.evict(-math.inf, max_entries=cap)
        return changed

    def _silence(self, value: Any, key: str | None) -> bool | None:
        if value is None:
            if key is None:
                return None
            return self.silences.pop(key, None) is not None
        rec = SilenceRecord.model_validate(value).model_dump()
        self.silences[rec["silence_id"]] = rec
        if len(self.silences) > self.config.max_silences:
            oldest = min(self.silences.values(), key=lambda s: s["ends_at"])
            del self.silences[oldest["silence_id"]]
        return True

    # -- reading --------------------------------------------------------------------------------
    def job_ids(self) -> set[str]:
        """Every job the store has anything about."""
        jobs = set(self.lanes) | set(self.episodes) | set(self.stats) | set(self.annotations)
        jobs |= {e.latest["job_id"] for e in self.alerts.values() if e.latest.get("job_id")}
        return jobs

    def alerts_of(self, job_id: str) -> list[AlertEntry]:
        """The job's alerts, oldest first (by onset)."""
        out = [e for e in self.alerts.values() if e.latest.get("job_id") == job_id]
        out.sort(key=_onset)
        return out

    def alerts_by_job(self) -> dict[str, list[AlertEntry]]:
        """Every job's alerts, oldest first (by onset): :meth:`alerts_of` of all jobs in one pass."""
        out: dict[str, list[AlertEntry]] = {}
        for e in self.alerts.values():
            job = e.latest.get("job_id")
            if job:
                out.setdefault(str(job), []).append(e)
        for entries in out.values():
            entries.sort(key=_onset)
        return out


def _onset(entry: AlertEntry) -> tuple[str, str]:
    return str(entry.latest.get("started_at") or ""), entry.alert_id
