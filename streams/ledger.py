"""The GPU-time lost ledger: what each incident cost in GPU-seconds, and whom to blame for it.

For every costed incident (a ``job_slowdown`` or ``straggler`` alert, firing or resolved)::

    GPU-seconds lost = GPUs x fraction of step time lost x duration
    fraction lost    = 1 - baseline / value = 1 - 1 / ratio      (0 when the step did not slow)
    duration         = [onset, resolved_at), or [onset, now) while it still fires

``baseline`` and ``value`` are the job's own step time before and during the incident (the
alert's :class:`~models.alerts.Symptom`: the p50 the detector learned for the job, and the step
time that moved); a straggler alert's ``ratio`` is how much slower than usual the lagging worker
runs, and a synchronous job runs at its pace. So a job of 256 GPUs whose step went from 1.0 s to
2.0 s for 60 s lost ``256 x 0.5 x 60 = 7,680`` GPU-seconds: half of every GPU's time was spent
waiting. Assumptions (docs/capacity.md): every GPU of the job waits alike (synchronous data
parallel training), the ratio at the verdict holds for the whole incident, and other alert
types cost nothing here (a checkpoint contention or a GPU-utilisation drop that slowed a job
shows up as that job's slowdown; clock skew slows nothing).

The loss is attributed to the root cause's entities (:func:`entities_of`): a switch port and its
switch (kind ``leaf``, ``spine`` or ``core`` from the inventory's tiers), a NIC and its node, a
GPU and its node, a node, a storage pool; ``unattributed`` when nothing moved first.

One job loses a second at most once: while several of its incidents overlap, the second is
charged to the one losing the largest fraction (ties: the earliest onset, then the key). Roll-ups
(:meth:`Ledger.rollup`) are computed from the set of incidents held, so a ledger built from every
partition's records in any order, or merged from per-partition ledgers (:meth:`Ledger.merge`), gives
exactly the same figures. Nothing here reads the clock: ``now`` is an argument.

>>> alert = {"alert_id": "a1", "type": "job_slowdown", "status": "resolved", "job_id": "llm", "gpus": 256,
...          "started_at": "2025-11-30T11:42:18Z", "detected_at": "2025-11-30T11:42:48Z",
...          "resolved_at": "2025-11-30T11:43:18Z",
...          "symptom": {"layer": "step", "metric": "step_time_seconds", "baseline": 1.0, "value": 2.0,
...                      "ratio": 2.0, "onset": "2025-11-30T11:42:18Z"},
...          "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"}}}
>>> entry = entry_of(alert, {"leaf03": "leaf"})
>>> entry.fraction_lost, entry.gpu_seconds(now=0.0), [f"{e.kind}:{e.id}" for e in entry.entities]
(0.5, 7680.0, ['port:leaf03:17', 'leaf:leaf03'])
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from models.timeutil import format_ts, parse_ts

#: Alert types whose symptom is the job's step time (what the ledger costs).
COSTED_TYPES = frozenset({"job_slowdown", "straggler"})
#: Entity kinds an incident is attributed to.
ENTITY_KINDS = ("port", "leaf", "spine", "core", "switch", "nic", "gpu", "node", "pool", "unattributed")
#: What ``by`` may be in :meth:`Ledger.rollup`: every entity, one kind of entity, jobs, domains.
GROUPINGS = ("entity", *ENTITY_KINDS, "job", "domain")
#: Named windows (the API and CLI also take ``<n>h``, ``<n>d``, ``<n>w``).
WINDOWS = {"hour": 3600.0, "day": 86_400.0, "week": 604_800.0}
_WINDOW = re.compile(r"([1-9][0-9]{0,4})([smhdw])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
#: Record type on the ``capacity`` topic.
RECORD_TYPE = "incident_cost"


class LedgerError(ValueError):
    """A ``capacity`` record or a roll-up question that does not have the documented shape."""


def parse_window(text: str) -> float:
    """Seconds of a window: ``hour``, ``day``, ``week``, or ``<n>`` + ``s|m|h|d|w`` (``7d``, ``24h``).

    >>> parse_window("7d"), parse_window("hour"), parse_window("90m")
    (604800.0, 3600.0, 5400.0)
    """
    if text in WINDOWS:
        return WINDOWS[text]
    m = _WINDOW.fullmatch(text)
    if m is None:
        raise LedgerError(f"window must be hour, day, week or <n>s|m|h|d|w (e.g. 7d), not {text[:40]!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def fraction_lost(ratio: float) -> float:
    """The share of step time lost when a step takes ``ratio`` times its baseline.

    >>> fraction_lost(2.0), fraction_lost(1.25), fraction_lost(0.9), fraction_lost(float("nan"))
    (0.5, 0.2, 0.0, 0.0)
    """
    if not math.isfinite(ratio) or ratio <= 1.0:
        return 0.0
    return (ratio - 1.0) / ratio


@dataclass(frozen=True, slots=True, order=True)
class Entity:
    """Something an incident's loss is charged to: ``kind`` in :data:`ENTITY_KINDS`, ``id`` its name."""

    kind: str
    id: str


def entities_of(root: Mapping[str, Any], tiers: Mapping[str, str]) -> tuple[Entity, ...]:
    """The entities a root cause stands for, narrowest first.

    >>> entities_of({"layer": "nic", "source": "gpu014", "labels": {"device": "mlx5_0", "port": "1"}}, {})
    (Entity(kind='nic', id='gpu014:mlx5_0'), Entity(kind='node', id='gpu014'))
    >>> entities_of({"layer": "switch", "source": "spine2", "labels": {}}, {"spine2": "spine"})
    (Entity(kind='spine', id='spine2'),)
    >>> entities_of({"layer": None, "source": None, "labels": {}}, {})
    (Entity(kind='unattributed', id='unattributed'),)
    """
    layer, source = root.get("layer"), root.get("source")
    labels: Mapping[str, Any] = root.get("labels") or {}
    if not source:
        return (Entity("unattributed", "unattributed"),)
    source = str(source)
    if layer == "switch":
        tier = tiers.get(source)
        switch = Entity(tier if tier in ("leaf", "spine", "core") else "switch", source)
        port = labels.get("port")
        return (Entity("port", f"{source}:{port}"), switch) if port is not None else (switch,)
    if layer == "storage":
        return (Entity("pool", source),)
    node = Entity("node", source)
    if layer == "nic" and labels.get("device") is not None:
        return Entity("nic", f"{source}:{labels['device']}"), node
    if layer == "gpu" and labels.get("gpu") is not None:
        return Entity("gpu", f"{source}:{labels['gpu']}"), node
    return (node,)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One incident's cost: ``key`` is ``alert_id@onset`` (a reopened incident is a new entry)."""

    key: str
    alert_id: str
    alert_type: str
    status: str
    job_id: str
    gpus: int
    ratio: float
    onset: float
    end: float | None  # None while it fires
    domain: str
    root: dict[str, Any]
    entities: tuple[Entity, ...]
    baseline: float = 0.0
    value: float = 0.0
    #: :func:`fraction_lost` of ``ratio`` (kept: roll-ups ask it for every incident)
    fraction: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fraction", fraction_lost(self.ratio))

    @property
    def fraction_lost(self) -> float:
        return self.fraction

    @property
    def gpus_lost(self) -> float:
        """GPU-seconds lost per second of the incident."""
        return self.gpus * self.fraction

    def until(self, now: float) -> float:
        """Where the incident ends for a question asked at ``now``."""
        return self.end if self.end is not None else max(self.onset, now)

    def gpu_seconds(self, now: float, start: float = -math.inf, stop: float = math.inf) -> float:
        """GPU-seconds lost within ``[start, stop)``, standing alone (no overlap with the job's other
        incidents taken off: that is :meth:`Ledger.rollup`'s job)."""
        return self.gpus_lost * max(0.0, min(stop, self.until(now)) - max(start, self.onset))

    def to_record(self) -> dict[str, Any]:
        """The ``capacity`` topic record (docs/contracts.md)."""
        closed = self.end is not None
        return {
            "type": RECORD_TYPE, "key": self.key, "alert_id": self.alert_id, "alert_type": self.alert_type,
            "status": self.status, "job_id": self.job_id, "gpus": self.gpus,
            "symptom": {"baseline": self.baseline, "value": self.value, "ratio": self.ratio},
            "fraction_lost": round(self.fraction_lost, 6), "gpus_lost": round(self.gpus_lost, 6),
            "onset": self.onset, "onset_iso": format_ts(self.onset),
            "end": self.end, "end_iso": format_ts(self.end) if self.end is not None else None,
            "duration_s": round(self.end - self.onset, 3) if closed and self.end is not None else None,
            "gpu_seconds": round(self.gpu_seconds(0.0), 3) if closed else None,
            "domain": self.domain, "root": self.root,
            "entities": [{"kind": e.kind, "id": e.id} for e in self.entities],
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> LedgerEntry:
        """Read a ``capacity`` record back; raises :class:`LedgerError` on a bad one."""
        try:
            if rec.get("type") != RECORD_TYPE:
                raise LedgerError(f"not an {RECORD_TYPE} record: type {str(rec.get('type'))[:40]!r}")
            end = rec.get("end")
            entry = cls(
                key=str(rec["key"]), alert_id=str(rec["alert_id"]), alert_type=str(rec["alert_type"]),
                status=str(rec["status"]), job_id=str(rec["job_id"]), gpus=int(rec["gpus"]),
                ratio=float(rec["symptom"]["ratio"]), onset=float(rec["onset"]),
                end=None if end is None else float(end), domain=str(rec["domain"]), root=dict(rec["root"]),
                entities=tuple(Entity(str(e["kind"]), str(e["id"])) for e in rec["entities"]),
                baseline=float(rec["symptom"]["baseline"]), value=float(rec["symptom"]["value"]))
        except (KeyError, TypeError) as exc:
            raise LedgerError(f"malformed {RECORD_TYPE} record: {exc!r}") from None
        if not math.isfinite(entry.onset) or (entry.end is not None and not entry.end >= entry.onset) \
                or entry.gpus < 0 or not entry.entities:
            raise LedgerError("an incident_cost record needs a finite onset, an end not before it, GPUs >= 0 and "
                              "an entity")
        return entry


def entry_of(alert: Mapping[str, Any], tiers: Mapping[str, str]) -> LedgerEntry | None:
    """The ledger entry of one alert record (``models.alerts.Alert`` JSON), or None when its type is
    not costed (:data:`COSTED_TYPES`) or it names no job. ``tiers``: switch -> ``leaf|spine|core``."""
    if alert.get("type") not in COSTED_TYPES or not alert.get("job_id"):
        return None
    symptom = alert.get("symptom") or {}
    onset = parse_ts(symptom.get("onset") or alert["started_at"])
    resolved = alert.get("status") == "resolved" and alert.get("resolved_at")
    end = max(onset, parse_ts(alert["resolved_at"])) if resolved else None
    baseline, value = float(symptom.get("baseline") or 0.0), float(symptom.get("value") or 0.0)
    ratio = float(symptom.get("ratio") or 0.0)
    if not ratio and baseline > 0:
        ratio = value / baseline
    root = alert.get("root_cause") or {}
    return LedgerEntry(
        key=f"{alert['alert_id']}@{format_ts(onset)}", alert_id=str(alert["alert_id"]),
        alert_type=str(alert["type"]), status=str(alert["status"]), job_id=str(alert["job_id"]),
        gpus=int(alert.get("gpus") or 0), ratio=ratio, onset=onset, end=end,
        domain=str(root.get("domain") or "unknown"),
        root={"layer": root.get("layer"), "source": root.get("source"), "labels": dict(root.get("labels") or {})},
        entities=entities_of(root, tiers), baseline=baseline, value=value)


def _rank(entry: LedgerEntry) -> tuple[int, str]:
    """Which of two versions of one incident is current: resolved over firing; between two of the same
    status (never seen in one stream, where the later replaces the earlier) a digest, so merging is
    commutative."""
    digest = hashlib.sha1(orjson.dumps(entry.to_record(), option=orjson.OPT_SORT_KEYS)).hexdigest()
    return (1 if entry.end is not None else 0, digest)


@dataclass(slots=True)
class Row:
    """One line of a roll-up."""

    group: str  # what was grouped by: an entity kind, "job" or "domain"
    id: str
    gpu_seconds: float = 0.0
    incidents: set[str] = field(default_factory=set)
    open: set[str] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)
    domains: set[str] = field(default_factory=set)
    last_end: float = -math.inf

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.group, "id": self.id, "gpu_seconds": round(self.gpu_seconds, 3),
            "gpu_hours": round(self.gpu_seconds / 3600.0, 4), "incidents": len(self.incidents),
            "open": len(self.open), "fixed": not self.open, "jobs": sorted(self.jobs),
            "domains": sorted(self.domains),
            "last_seen": format_ts(self.last_end) if math.isfinite(self.last_end) else None,
        }


class Ledger:
    """Incidents by key; mergeable (see the module docstring). Bounded by :meth:`evict`."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self.entries: dict[str, LedgerEntry] = {}
        for e in entries:
            self.merge_entry(e)

    def add(self, entry: LedgerEntry) -> bool:
        """Fold the next version of an incident from one stream (in its order): it replaces the one held
        unless that one is resolved and this one fires (a firing revision that arrived late). Returns
        whether anything changed."""
        held = self.entries.get(entry.key)
        if held == entry or (held is not None and held.end is not None and entry.end is None):
            return False
        self.entries[entry.key] = entry
        return True

    def merge_entry(self, entry: LedgerEntry) -> bool:
        """Fold a version whose order against the held one is unknown (another partition, a re-read):
        the higher :func:`_rank` wins. Commutative, associative, idempotent."""
        held = self.entries.get(entry.key)
        if held is not None and (held == entry or _rank(held) >= _rank(entry)):
            return False
        self.entries[entry.key] = entry
        return True

    def merge(self, other: Ledger) -> Ledger:
        """Fold every incident of ``other`` in (:meth:`merge_entry`); returns self."""
        for e in other.entries.values():
            self.merge_entry(e)
        return self

    @property
    def latest(self) -> float | None:
        """The latest event time an incident names (an end, or the onset of one still firing)."""
        return max((e.end if e.end is not None else e.onset for e in self.entries.values()), default=None)

    def evict(self, before: float, max_entries: int | None = None) -> int:
        """Drop incidents that ended before ``before`` (and the oldest-ending beyond ``max_entries``)."""
        drop = [k for k, e in self.entries.items() if e.end is not None and e.end < before]
        if max_entries is not None and len(self.entries) - len(drop) > max_entries:
            gone = set(drop)
            rest = sorted((e for k, e in self.entries.items() if k not in gone),
                          key=lambda e: (e.until(math.inf), e.key))
            drop += [e.key for e in rest[:len(rest) - max_entries]]
        for k in drop:
            del self.entries[k]
        return len(drop)

    def _spans(self, now: float, start: float, stop: float) -> dict[str, list[tuple[float, float, LedgerEntry]]]:
        """Per job, each incident's ``(from, to, incident)`` clipped to ``[start, stop)`` (empty ones left out)."""
        by_job: dict[str, list[tuple[float, float, LedgerEntry]]] = {}
        for e in self.entries.values():
            a = e.onset if e.onset > start else start
            b = e.end if e.end is not None else (now if now > e.onset else e.onset)
            if b > stop:
                b = stop
            if b > a:
                by_job.setdefault(e.job_id, []).append((a, b, e))
        return by_job

    @staticmethod
    def _charge(by_job: dict[str, list[tuple[float, float, LedgerEntry]]]) -> list[tuple[LedgerEntry, float, float]]:
        """Sweep each job's spans: every piece of time goes to the active incident losing the most."""
        out: list[tuple[LedgerEntry, float, float]] = []
        for job in sorted(by_job):
            spans = by_job[job]
            if len(spans) == 1:  # the usual case: one incident at a time
                a, b, e = spans[0]
                out.append((e, a, b))
                continue
            entries = {e.key: e for _, _, e in spans}
            events = sorted([(a, 1, e.key) for a, _, e in spans] + [(b, 0, e.key) for _, b, e in spans])
            active: dict[str, LedgerEntry] = {}
            last = events[0][0]
            for t, opens, key in events:
                if t > last and active:
                    best = next(iter(active.values())) if len(active) == 1 else min(
                        active.values(), key=lambda x: (-x.fraction, x.onset, x.key))
                    if out and out[-1][0] is best and out[-1][2] == last:
                        out[-1] = (best, out[-1][1], t)
                    else:
                        out.append((best, last, t))
                last = t
                if opens:
                    active[key] = entries[key]
                else:
                    active.pop(key, None)
        return out

    def charged(self, now: float, start: float = -math.inf, stop: float = math.inf
                ) -> list[tuple[LedgerEntry, float, float]]:
        """``(incident, from, to)`` pieces within ``[start, stop)`` where the incident is the one a job's
        seconds are charged to (the largest fraction among its overlapping incidents; ties: the earliest
        onset, then the key). A sweep over each job's onsets and ends: O(n log n) plus the overlaps."""
        return self._charge(self._spans(now, start, stop))

    def rollup(self, by: str, now: float, window_s: float | None = None, limit: int | None = None
               ) -> dict[str, Any]:
        """GPU-seconds lost in ``[now - window_s, now)`` (all time when None), grouped ``by`` one of
        :data:`GROUPINGS`, largest first: ``{"by", "window_s", "from", "to", "gpu_seconds", "gpu_hours",
        "incidents", "rows": [Row.to_json(), ...]}``. An incident counts for a row when it overlaps the
        window, even if another incident of its job was charged for all of it (it then costs 0)."""
        if by not in GROUPINGS:
            raise LedgerError(f"by must be one of {', '.join(GROUPINGS)}, not {by[:40]!r}")
        if window_s is not None and not (window_s > 0 and math.isfinite(window_s)):
            raise LedgerError("window_s must be a positive number of seconds")
        start = now - window_s if window_s is not None else -math.inf
        stop = now
        rows: dict[tuple[str, str], Row] = {}
        by_job = self._spans(now, start, stop)
        groups_of: dict[str, list[Row]] = {}
        for spans in by_job.values():
            for _, b, e in spans:
                mine = groups_of[e.key] = []
                for g in _groups(e, by):
                    row = rows.get(g)
                    if row is None:
                        row = rows[g] = Row(g[0], g[1])
                    mine.append(row)
                    row.incidents.add(e.key)
                    row.jobs.add(e.job_id)
                    row.domains.add(e.domain)
                    if e.end is None:
                        row.open.add(e.key)
                    if b > row.last_end:
                        row.last_end = b
        total = 0.0
        for e, a, b in self._charge(by_job):
            cost = e.gpus * e.fraction * (b - a)
            total += cost
            for row in groups_of[e.key]:
                row.gpu_seconds += cost
        ordered = sorted(rows.values(), key=lambda r: (-r.gpu_seconds, r.group, r.id))
        if limit is not None:
            ordered = ordered[:limit]
        return {"by": by, "window_s": window_s, "from": start if math.isfinite(start) else None, "to": stop,
                "from_iso": format_ts(start) if math.isfinite(start) else None, "to_iso": format_ts(stop),
                "gpu_seconds": round(total, 3), "gpu_hours": round(total / 3600.0, 4), "incidents": len(groups_of),
                "rows": [r.to_json() for r in ordered]}

    def costs(self, by: str, now: float, window_s: float) -> dict[tuple[str, str], float]:
        """GPU-seconds lost in ``[now - window_s, now)`` per group: :meth:`rollup`'s ``gpu_seconds`` alone
        (no row sets, no JSON), for views that need only the figure."""
        out: dict[tuple[str, str], float] = {}
        for e, a, b in self.charged(now, now - window_s, now):
            cost = e.gpus * e.fraction * (b - a)
            for g in _groups(e, by):
                out[g] = out.get(g, 0.0) + cost
        return out

    def buckets(self, by: str, now: float, bucket_s: float, start: float) -> dict[tuple[str, str], list[float]]:
        """GPU-seconds lost per ``bucket_s`` bucket from ``start`` (aligned on multiples of ``bucket_s``) to
        ``now``, per group: the hour/day/week series (a leaf x time heatmap is ``by="leaf"``)."""
        if by not in GROUPINGS or not bucket_s > 0:
            raise LedgerError("buckets need a grouping of GROUPINGS and a positive bucket")
        first = math.floor(start / bucket_s) * bucket_s
        n = max(0, math.ceil((now - first) / bucket_s))
        out: dict[tuple[str, str], list[float]] = {}
        for e, a, b in self.charged(now, first, now):
            keys = _groups(e, by)
            i = int((a - first) // bucket_s)
            t = a
            while t < b and i < n:
                edge = min(b, first + (i + 1) * bucket_s)
                for k in keys:
                    out.setdefault(k, [0.0] * n)[i] += e.gpus_lost * (edge - t)
                t, i = edge, i + 1
        return out


def _groups(e: LedgerEntry, by: str) -> list[tuple[str, str]]:
    """The rows of a roll-up ``by`` one grouping that incident ``e`` counts for."""
    if by == "job":
        return [("job", e.job_id)]
    if by == "domain":
        return [("domain", e.domain)]
    return [(x.kind, x.id) for x in e.entities if by in ("entity", x.kind)]


def report(ledger: Ledger, by: str, window: str, limit: int | None, event_time: float | None,
           wall: float) -> dict[str, Any]:
    """The answer of ``GET /capacity`` and ``lockstep capacity``: :meth:`Ledger.rollup` as of the latest
    event time known (the read model's, or the latest incident end if later; the wall clock only when
    neither is known), with ``as_of`` and the ``window`` as asked. Raises :class:`LedgerError`."""
    seconds = parse_window(window)
    known = [t for t in (event_time, ledger.latest) if t is not None]
    now = max(known) if known else wall
    out = ledger.rollup(by, now, seconds, limit)
    return {"as_of": now, "as_of_iso": format_ts(now), "window": window, **out}


def heatmap(ledger: Ledger, by: str, window: str, bucket: str, limit: int | None, event_time: float | None,
            wall: float) -> dict[str, Any]:
    """The answer of ``GET /capacity/heatmap`` (the fleet page's leaf x time grid): :meth:`Ledger.buckets`
    over ``window`` in ``bucket`` steps as of the same time :func:`report` uses; rows (one per group,
    ``values`` the GPU-hours lost per bucket) by their total, largest first. The first bucket starts at
    the multiple of ``bucket`` at or before ``as_of - window``. Raises :class:`LedgerError`.

    >>> alert = {"alert_id": "a", "type": "job_slowdown", "status": "resolved", "job_id": "j", "gpus": 8,
    ...          "started_at": "2025-11-30T10:30:00Z", "detected_at": "2025-11-30T10:30:00Z",
    ...          "resolved_at": "2025-11-30T11:30:00Z", "symptom": {"baseline": 1.0, "value": 2.0, "ratio": 2.0},
    ...          "root_cause": {"domain": "network", "layer": "switch", "source": "leaf1", "labels": {}}}
    >>> h = heatmap(Ledger([entry_of(alert, {"leaf1": "leaf"})]), "leaf", "3h", "1h", None, None, 0.0)
    >>> h["starts_iso"][0], [(r["id"], r["values"], r["gpu_hours"]) for r in h["rows"]]
    ('2025-11-30T08:00:00.000Z', [('leaf1', [0.0, 0.0, 2.0, 2.0], 4.0)])
    """
    seconds, step = parse_window(window), parse_window(bucket)
    if step > seconds or seconds / step > 1000:
        raise LedgerError("bucket must be at most the window, and at most 1000 buckets per window")
    known = [t for t in (event_time, ledger.latest) if t is not None]
    now = max(known) if known else wall
    start = now - seconds
    first = math.floor(start / step) * step
    series = ledger.buckets(by, now, step, start)
    n = max(0, math.ceil((now - first) / step))
    rows = sorted(((k, sum(v), v) for k, v in series.items()), key=lambda r: (-r[1], r[0]))
    if limit is not None:
        rows = rows[:limit]
    return {"as_of": now, "as_of_iso": format_ts(now), "by": by, "window": window, "bucket": bucket,
            "bucket_s": step, "starts": [first + i * step for i in range(n)],
            "starts_iso": [format_ts(first + i * step) for i in range(n)],
            "rows": [{"kind": k[0], "id": k[1], "gpu_hours": round(total / 3600.0, 4),
                      "values": [round(v / 3600.0, 4) for v in vals]} for k, total, vals in rows]}
