"""The operator surface's answers: pure queries over the read model and the inventory.

Every function here takes the worker's :class:`~streams.readstore.ReadStore` (what the output
topics said) and :class:`~streams.inventory.InventoryIndex` (the cluster), plus the parameters of
the question, and returns plain JSON-able values. No I/O, no clock: the API passes ``now`` (wall
clock, only for silences) where it matters; everything else is answered in event time, "as of" the
latest second the read model holds (:attr:`ReadStore.event_time`).

The questions (docs/api.md shows each answer):

- :func:`job_list`, :func:`job_detail` — which jobs, their live status; one job's GPUs, nodes,
  NIC -> leaf -> spine paths and pools;
- :func:`timeline` — the job's lanes aligned on one time axis with their p50/p99 bands, the anomaly
  episodes, the first mover and the incident window;
- :func:`diagnosis` — the seven answers with their evidence;
- :func:`alert_list`, :func:`alert_detail` — alerts with their lifecycle (and the silences that
  match them);
- :func:`fabric_port` — who is behind a switch port, with GPU counts;
- :func:`new_annotation`, :func:`new_silence`, :func:`expire_silence`, :func:`silence_view` — the
  records operator writes become.

Bad parameters raise :class:`QueryError` (the API turns it into a 400 with its message); unknown
jobs, alerts and ports give ``None`` (a 404).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import hostlist
import numpy as np

from models.errors import InputError
from models.operator import AnnotationRecord, AnnotationRequest, SilenceRecord, SilenceRequest
from models.timeutil import format_ts, parse_ts
from streams.correlate import evidence_order
from streams.inventory import InventoryIndex, JobInfo
from streams.lanes import LANE_ORDER, lane_of
from streams.matchers import equality_matchers, matches_all
from streams.readstore import LANE_INDEX, MAX, MIN, P50, P99, AlertEntry, EpisodeView, N, ReadStore
from streams.rules import match_labels

#: How each lane is titled and in which unit its values are (the page and the CLI print these).
LANE_INFO: dict[str, dict[str, str]] = {
    "fabric_errors": {"title": "Fabric errors", "unit": "errors/s", "layers": "switch, nic"},
    "congestion": {"title": "Congestion", "unit": "events/s", "layers": "switch, nic"},
    "collective_time": {"title": "Collective time", "unit": "µs", "layers": "nccl"},
    "gpu_faults": {"title": "GPU faults", "unit": "events/s", "layers": "gpu"},
    "gpu_util": {"title": "GPU utilisation", "unit": "%", "layers": "gpu"},
    "storage_latency": {"title": "Storage latency", "unit": "s", "layers": "storage"},
    "cpu_util": {"title": "CPU", "unit": "%", "layers": "host"},
    "loader_wait": {"title": "Data-loader wait", "unit": "s", "layers": "step"},
    "step_time": {"title": "Step time", "unit": "s", "layers": "step"},
}

#: Lane of an anomaly whose (layer, meaning) is not a lane of its own (e.g. GPU temperature).
LAYER_LANE = {"switch": "fabric_errors", "nic": "fabric_errors", "nccl": "collective_time", "gpu": "gpu_util",
              "storage": "storage_latency", "host": "cpu_util", "step": "step_time"}
GPU_FAULT_MEANINGS = frozenset({"gpu_fault", "throttle", "temperature"})

#: Default width of a timeline window, and the most points per lane a response carries.
DEFAULT_WINDOW_S = 900
MAX_WINDOW_S = 6 * 3600
MAX_POINTS = 900
MAX_STEP_S = 60
#: Seconds before an incident used as its "before" baseline, and after a fix as its "after".
BASELINE_S = 300
AFTER_S = 300
#: Anomaly marker groups one timeline response carries at most.
MAX_MARKERS = 500
#: Nodes per page of a job's detail (``limit``): the default, and the most one request may ask.
DEFAULT_PAGE = 1000
MAX_PAGE = 10_000

#: The label names a silence may match (:func:`streams.rules.match_labels` of the alerts the
#: correlator emits): routing's (:func:`streams.matchers.alert_labels`), where the root cause is, and
#: the alerts' own ``labels`` (``source``/``layer`` of clock skew, ``worker``/``lane`` of stragglers).
SILENCE_LABELS = frozenset({
    "alertname", "type", "severity", "domain", "job", "job_id", "dedup_key",
    "root_layer", "root_source", "switch", "port", "pool", "node",
    "source", "layer", "worker", "lane",
})

QUESTIONS = (
    ("gpus", "Which GPUs take part in the job?"),
    ("nodes", "Which nodes host them?"),
    ("paths", "Which network paths connect them?"),
    ("storage", "Which storage system feeds it?"),
    ("change", "What exactly changed when performance fell?"),
    ("domain", "Is the bottleneck compute, network, storage or data loading?"),
    ("after_fix", "What happened after the fix?"),
)


class QueryError(InputError):
    """A question the API cannot answer as asked (bad time range, unknown lane, ...): a 400."""


# -- small helpers ------------------------------------------------------------------------------
def lane_for(layer: str, meaning: str | None) -> str | None:
    """The timeline lane an anomaly of ``layer``/``meaning`` is drawn on.

    >>> lane_for("switch", "link_errors"), lane_for("gpu", "temperature"), lane_for("nccl", "latency")
    ('fabric_errors', 'gpu_faults', 'collective_time')
    """
    lane = lane_of(layer, meaning or "")
    if lane is not None:
        return lane
    if layer == "gpu" and meaning in GPU_FAULT_MEANINGS:
        return "gpu_faults"
    return LAYER_LANE.get(layer)


def _ts(value: Any) -> float | None:
    return None if value is None else parse_ts(value)


def _iso(ts: float | None) -> str | None:
    return None if ts is None or not math.isfinite(ts) else format_ts(ts)


def _num(x: float | None, digits: int = 6) -> float | None:
    if x is None:
        return None
    f = float(x)
    return None if not math.isfinite(f) else round(f, digits)


def _nanmedian(a: np.ndarray) -> float | None:
    if a.size == 0 or not np.isfinite(a).any():
        return None
    return float(np.nanmedian(a))


def _where(source: str | None, labels: dict[str, str] | None) -> str:
    """``leaf03 port 17``, ``gpu001 gpu=0``: an entity as operators say it."""
    if not source:
        return "-"
    labels = {k: v for k, v in (labels or {}).items() if k not in ("job_id", "hpc_job", "UUID")}
    if list(labels) == ["port"]:
        return f"{source} port {labels['port']}"
    return " ".join([source, *(f"{k}={v}" for k, v in sorted(labels.items()))])


def compact_hosts(nodes: list[str]) -> str:
    """A Slurm host list: ``gpu[001-020,025-036]``.

    >>> compact_hosts(["gpu001", "gpu002", "gpu003", "gpu025"])
    'gpu[001-003,025]'
    """
    return str(hostlist.collect_hostlist(nodes)) if nodes else ""


def _fmt(v: float | None, unit: str = "") -> str:
    """A value as operators read it; seconds below one are shown in milliseconds.

    >>> _fmt(0.00301, "s"), _fmt(0.9998, "s"), _fmt(2.0043, "s"), _fmt(95.04, "%"), _fmt(30644.5), _fmt(None)
    ('3.01 ms', '1.00 s', '2.00 s', '95.0%', '30,644', '-')
    """
    if v is None or not math.isfinite(v):
        return "-"
    if unit == "s":
        if v != 0 and abs(v) * 1000 < 999.5:
            return f"{v * 1000:.3g} ms"
        return f"{v:.2f} s"
    if unit == "%":
        return f"{v:.1f}%"
    a = abs(v)
    if a >= 1000:
        s = f"{v:,.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 0.01 or v == 0:
        s = f"{v:.3f}".rstrip("0").rstrip(".")
    else:
        s = f"{v:.2e}"
    return f"{s} {unit}".strip()


def _hms(ts: float | str | None) -> str:
    if ts is None:
        return "-"
    t = parse_ts(ts) if isinstance(ts, str) else ts
    return format_ts(t)[11:19]


# -- lanes ----------------------------------------------------------------------------------------
def lane_values(store: ReadStore, job_id: str, lane: str, start: float, end: float, field: int = P50) -> np.ndarray:
    """The per-second ``field`` (default p50) of one lane in ``[start, end)``, NaN where missing."""
    ring = store.lanes.get(job_id)
    if ring is None or end <= start:
        return np.empty(0)
    return ring.column(math.floor(start), math.ceil(end), LANE_INDEX[lane], field)


def lane_change(store: ReadStore, job_id: str, lane: str, before: tuple[float, float],
                during: tuple[float, float]) -> dict[str, Any]:
    """Median of a lane's per-second p50 (and its p99) in two windows, and their ratio."""
    b = _nanmedian(lane_values(store, job_id, lane, *before))
    d = _nanmedian(lane_values(store, job_id, lane, *during))
    d99 = _nanmedian(lane_values(store, job_id, lane, *during, field=P99))
    ratio = (d / b) if b not in (None, 0) and d is not None else None
    return {"lane": lane, "unit": LANE_INFO[lane]["unit"], "before_p50": _num(b), "during_p50": _num(d),
            "during_p99": _num(d99), "ratio": _num(ratio, 3)}


# -- alerts ---------------------------------------------------------------------------------------
def _alert_times(alert: dict[str, Any]) -> tuple[float, float, float | None]:
    """``(first_seen, onset, resolved)`` of an alert in Unix seconds (first_seen falls back to onset)."""
    onset = parse_ts(alert["started_at"])
    first = (alert.get("root_cause") or {}).get("first_seen")
    first_seen = min(parse_ts(first), onset) if first else onset
    resolved = _ts(alert.get("resolved_at"))
    return first_seen, onset, resolved


def silence_matches(silence: dict[str, Any], alert: dict[str, Any]) -> bool:
    """True when every matcher of the silence equals the alert's label of that name (the labels of
    :func:`streams.rules.match_labels`, as the correlation stage matches them).

    >>> silence_matches({"matchers": {"job_id": "j"}}, {"job_id": "j", "type": "job_slowdown", "labels": {}})
    True
    >>> silence_matches({"matchers": {"job_id": "j", "domain": "storage"}}, {"job_id": "j", "labels": {}})
    False
    """
    return matches_all(equality_matchers(silence["matchers"]), match_labels(alert))


def silence_state(silence: dict[str, Any], now: float) -> str:
    """``pending`` before ``starts_at``, ``active`` until ``ends_at``, then ``expired``.

    >>> s = {"starts_at": 10.0, "ends_at": 20.0}
    >>> silence_state(s, 5.0), silence_state(s, 15.0), silence_state(s, 20.0)
    ('pending', 'active', 'expired')
    """
    if now < silence["starts_at"]:
        return "pending"
    return "active" if now < silence["ends_at"] else "expired"


def silence_view(silence: dict[str, Any], now: float) -> dict[str, Any]:
    """A silence as the API shows it: the record, its state, and its times also as RFC 3339."""
    out = dict(silence)
    out["state"] = silence_state(silence, now)
    for name in ("starts_at", "ends_at", "created_at", "updated_at"):
        out[f"{name}_iso"] = _iso(silence[name])
    return out


def silences_for(store: ReadStore, alert: dict[str, Any], now: float) -> list[str]:
    """Ids of the silences active at ``now`` (wall clock) that match ``alert``."""
    return sorted(s["silence_id"] for s in store.silences.values()
                  if silence_state(s, now) == "active" and silence_matches(s, alert))


def alert_summary(entry: AlertEntry, store: ReadStore, now: float) -> dict[str, Any]:
    """One line of the alert list: identity, state, first mover, lifecycle."""
    a = entry.latest
    rc = a.get("root_cause") or {}
    return {
        "alert_id": entry.alert_id, "job_id": a.get("job_id"), "type": a.get("type"), "status": a.get("status"),
        "severity": a.get("severity"), "gpus": a.get("gpus"), "nodes": len(a.get("nodes") or []),
        "started_at": a.get("started_at"), "detected_at": a.get("detected_at"), "resolved_at": a.get("resolved_at"),
        "domain": rc.get("domain"), "first_mover": _first_mover(a), "summary": a.get("summary"),
        "dedup_key": a.get("dedup_key"), "lifecycle": list(entry.events),
        "silenced_by": list(a.get("silenced_by") or []), "matching_silences": silences_for(store, a, now),
    }


def alert_list(store: ReadStore, now: float, *, job_id: str | None = None, status: str | None = None,
               limit: int = 100) -> list[dict[str, Any]]:
    """Alerts, newest onset first, optionally of one job and/or status (``firing``, ``resolved``)."""
    if status is not None and status not in ("firing", "resolved"):
        raise QueryError(f"status must be firing or resolved, not {status[:40]!r}")
    if not 1 <= limit <= 1000:
        raise QueryError("limit must be between 1 and 1000")
    entries = [e for e in store.alerts.values()
               if (job_id is None or e.latest.get("job_id") == job_id)
               and (status is None or e.latest.get("status") == status)]
    entries.sort(key=lambda e: (str(e.latest.get("started_at") or ""), e.alert_id), reverse=True)
    return [alert_summary(e, store, now) for e in entries[:limit]]


def alert_detail(store: ReadStore, alert_id: str, now: float) -> dict[str, Any] | None:
    """The alert's latest record, the record it first fired with, its lifecycle and matching silences."""
    entry = store.alerts.get(alert_id)
    if entry is None:
        return None
    return {**alert_summary(entry, store, now), "alert": entry.latest, "firing": entry.firing}


def _first_mover(alert: dict[str, Any]) -> dict[str, Any] | None:
    rc = alert.get("root_cause") or {}
    if not rc.get("source"):
        return None
    first_seen = _ts(rc.get("first_seen"))
    return {"domain": rc.get("domain"), "layer": rc.get("layer"), "source": rc.get("source"),
            "labels": dict(rc.get("labels") or {}), "metric": rc.get("metric"), "meaning": rc.get("meaning"),
            "first_seen": rc.get("first_seen"), "ts": first_seen, "lane": lane_for(rc["layer"], rc.get("meaning")),
            "where": _where(rc.get("source"), rc.get("labels")), "reason": rc.get("reason", "")}


# -- jobs -----------------------------------------------------------------------------------------
def _latest_slowdown(store: ReadStore, job_id: str) -> AlertEntry | None:
    """The job's latest ``job_slowdown`` (the incident the seven answers examine), else its latest alert."""
    alerts = store.alerts_of(job_id)
    slowdowns = [e for e in alerts if e.latest.get("type") == "job_slowdown"]
    picked = slowdowns or alerts
    return picked[-1] if picked else None


def job_status(store: ReadStore, inventory: InventoryIndex, job_id: str,
               alerts: list[AlertEntry] | None = None) -> dict[str, Any]:
    """Live status of one job, in event time (``alerts``: the job's, oldest first, if already at hand).

    ``status`` is ``degraded`` while its latest alert fires, ``recovered`` once that alert resolved,
    ``ok`` when it has lanes and no alert, ``no_data`` when the read model has no lanes for it, and
    ``ended`` when the inventory says the job ended.
    """
    info = inventory.job(job_id)
    ring = store.lanes.get(job_id)
    if alerts is None:
        alerts = store.alerts_of(job_id)
    latest = alerts[-1] if alerts else None
    if info is not None and info.end is not None:
        status = "ended"
    elif latest is not None and latest.latest.get("status") == "firing":
        status = "degraded"
    elif latest is not None:
        status = "recovered"
    elif ring is not None:
        status = "ok"
    else:
        status = "no_data"
    step = None
    util = None
    last_ts = None
    if ring is not None and ring.latest >= 0:
        last_ts = float(ring.latest)
        recent = (ring.latest - 9, ring.latest + 1)
        hour = (ring.latest - store.config.history_s + 1, ring.latest + 1)
        now_p50 = _nanmedian(lane_values(store, job_id, "step_time", *recent))
        base = _nanmedian(lane_values(store, job_id, "step_time", *hour))
        step = {"p50": _num(now_p50), "baseline_p50": _num(base),
                "ratio": _num(now_p50 / base, 3) if now_p50 is not None and base else None}
        util = _num(_nanmedian(lane_values(store, job_id, "gpu_util", *recent)), 2)
    alert = None
    if latest is not None:
        a = latest.latest
        alert = {"alert_id": latest.alert_id, "status": a.get("status"), "severity": a.get("severity"),
                 "domain": (a.get("root_cause") or {}).get("domain"), "started_at": a.get("started_at"),
                 "resolved_at": a.get("resolved_at"), "summary": a.get("summary"), "first_mover": _first_mover(a)}
    return {
        "job_id": job_id, "name": info.name if info else None, "state": info.state if info else "UNKNOWN",
        "status": status, "gpus": info.gpus if info else None, "nodes": len(info.nodes) if info else None,
        "pools": list(info.storage) if info else [], "last_seen": last_ts, "last_seen_iso": _iso(last_ts),
        "step_time": step, "gpu_util": util, "alert": alert,
    }


def job_list(store: ReadStore, inventory: InventoryIndex) -> list[dict[str, Any]]:
    """Every job the inventory or the read model knows, the degraded first, then by id."""
    ids = set(inventory.jobs) | store.job_ids()
    rank = {"degraded": 0, "recovered": 1, "ok": 2, "no_data": 3, "ended": 4}
    by_job = store.alerts_by_job()  # once, not one scan of every alert per job
    rows = [job_status(store, inventory, j, by_job.get(j, [])) for j in ids]
    rows.sort(key=lambda r: (rank.get(r["status"], 9), r["job_id"]))
    return rows


def _leaves(inventory: InventoryIndex, paths: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_leaf: dict[str, dict[str, Any]] = {}
    for p in paths:
        leaf = by_leaf.setdefault(str(p["switch"]), {"switch": p["switch"], "tier": inventory.tiers.get(
            str(p["switch"]), "leaf"), "ports": [], "nodes": [], "spines": list(p["spines"])})
        leaf["ports"].append(p["switch_port"])
        if p["node"] not in leaf["nodes"]:
            leaf["nodes"].append(p["node"])
    return [by_leaf[k] for k in sorted(by_leaf)]


def _pools(inventory: InventoryIndex, info: JobInfo) -> list[dict[str, Any]]:
    out = []
    for pool in info.storage:
        sharing = [{"job_id": j.job_id, "gpus": j.gpus} for j in inventory.active_jobs(None)
                   if pool in j.storage and j.job_id != info.job_id]
        out.append({"pool": pool, "switches": sorted(inventory.pool_switches.get(pool, set())),
                    "shared_with": sharing})
    return out


def job_topology(inventory: InventoryIndex, info: JobInfo) -> dict[str, Any]:
    """What the inventory says of a job's place in the cluster, whole: its host list, NIC -> leaf ->
    spine paths (:meth:`InventoryIndex.paths`), spines and fabrics. The costly part of
    :func:`job_detail` (a job of 100,000 nodes takes a second); the API keeps it per inventory version.
    """
    paths = inventory.paths(info.job_id)
    return {"job_id": info.job_id, "hostlist": compact_hosts(info.nodes), "paths": paths,
            "spines": sorted({s for p in paths for s in p["spines"]}),  # type: ignore[attr-defined]
            "fabrics": sorted({str(p["fabric"]) for p in paths}),
            "leaves_total": len({str(p["switch"]) for p in paths})}


def page_bounds(offset: int, limit: int) -> None:
    """Raise :class:`QueryError` unless ``0 <= offset`` and ``1 <= limit <= MAX_PAGE``."""
    if offset < 0:
        raise QueryError("offset must be 0 or more")
    if not 1 <= limit <= MAX_PAGE:
        raise QueryError(f"limit must be between 1 and {MAX_PAGE}")


def job_detail(store: ReadStore, inventory: InventoryIndex, job_id: str, *, offset: int = 0,
               limit: int = DEFAULT_PAGE, topology: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """GPUs, nodes, NIC -> leaf -> spine paths, pools and status of one job (None if unknown).

    ``pools`` (as in :func:`job_status`) names the pools; ``storage`` details each (its switches, and
    the other jobs sharing it). The node list is paged: ``node_list`` holds the nodes
    ``[offset, offset + limit)`` of the job, ``gpu_list``, ``paths`` and ``leaves`` those of these
    nodes; ``page`` gives the totals and ``next_offset`` (None on the last page). ``topology`` is
    :func:`job_topology` of the job if the caller keeps it.

    >>> inv = InventoryIndex()
    >>> inv.jobs["j"].append(JobInfo("j", ["n1", "n2", "n3"], 2, [], 0.0))
    >>> d = job_detail(ReadStore(), inv, "j", offset=1, limit=1)
    >>> d["node_list"], d["gpu_list"], d["page"]
    (['n2'], ['n2:0', 'n2:1'], {'offset': 1, 'limit': 1, 'nodes_total': 3, 'gpus_total': 6, \
'paths_total': 0, 'leaves_total': 0, 'next_offset': 2})
    """
    page_bounds(offset, limit)
    info = inventory.job(job_id)
    if info is None:
        if job_id not in store.job_ids():
            return None
        return {**job_status(store, inventory, job_id), "gpus_per_node": None, "node_list": [], "hostlist": "",
                "gpu_list": [], "paths": [], "leaves": [], "spines": [], "fabrics": [], "storage": [],
                "start": None, "end": None, "inventory": False, "stats": store.stats.get(job_id),
                "page": {"offset": offset, "limit": limit, "nodes_total": 0, "gpus_total": 0, "paths_total": 0,
                         "leaves_total": 0, "next_offset": None}}
    if topology is None or topology.get("job_id") != job_id:
        topology = job_topology(inventory, info)
    nodes = list(info.nodes[offset:offset + limit])
    on_page = set(nodes)
    paths = [p for p in topology["paths"] if p["node"] in on_page]
    end = offset + len(nodes)
    return {
        **job_status(store, inventory, job_id),
        "gpus_per_node": info.gpus_per_node, "node_list": nodes, "hostlist": topology["hostlist"],
        "gpu_list": [f"{node}:{g}" for node in nodes for g in range(info.gpus_per_node)], "paths": paths,
        "leaves": _leaves(inventory, paths), "spines": topology["spines"], "fabrics": topology["fabrics"],
        "storage": _pools(inventory, info),
        "start": info.start, "end": info.end, "start_iso": _iso(info.start), "end_iso": _iso(info.end),
        "inventory": True, "stats": store.stats.get(job_id),
        "page": {"offset": offset, "limit": limit, "nodes_total": len(info.nodes), "gpus_total": info.gpus,
                 "paths_total": len(topology["paths"]), "leaves_total": topology["leaves_total"],
                 "next_offset": end if end < len(info.nodes) else None},
    }


# -- timeline -------------------------------------------------------------------------------------
def timeline_window(store: ReadStore, job_id: str, start: Any = None, end: Any = None,
                    alert_id: str | None = None, fallback_end: float | None = None) -> tuple[int, int]:
    """The seconds ``[start, end)`` a timeline request covers.

    ``start``/``end`` are Unix seconds or RFC 3339 strings. Missing ones default to: one minute
    either side of the incident window of ``alert_id``; else ``end`` = the job's latest second (or
    the read model's, or ``fallback_end``) and ``start`` = ``end`` - :data:`DEFAULT_WINDOW_S`,
    not before the oldest second held for the job.

    >>> timeline_window(ReadStore(), "j", 1764502900, "2025-11-30T11:42:40Z")
    (1764502900, 1764502960)
    >>> timeline_window(ReadStore(), "j", 1764502900)
    (1764502900, 1764503800)
    """
    try:
        a = _ts(start)
        b = _ts(end)
    except ValueError as exc:
        raise QueryError(f"from/to: {exc}") from None
    ring = store.lanes.get(job_id)
    held = ring is not None and ring.latest >= 0
    if a is None and b is None and alert_id is not None:
        entry = store.alerts.get(alert_id)
        if entry is None or entry.latest.get("job_id") != job_id:
            raise QueryError(f"alert {alert_id[:40]!r} is not an alert of job {job_id[:60]!r}")
        first_seen, _, resolved = _alert_times(entry.latest)
        a = first_seen - 60
        b = resolved + 60 if resolved is not None else (ring.latest + 1 if ring is not None and held
                                                        else first_seen + DEFAULT_WINDOW_S)
    if b is None:
        if a is not None:
            b = a + DEFAULT_WINDOW_S
        elif ring is not None and held:
            b = float(ring.latest + 1)
        elif store.event_time is not None:
            b = store.event_time + 1
        elif fallback_end is not None:
            b = fallback_end
        else:
            raise QueryError("nothing is known about this job's time yet: give from and to")
    if a is None:
        a = b - DEFAULT_WINDOW_S
        if ring is not None and held and end is None:
            a = max(a, float(ring.earliest))
    lo, hi = math.floor(a), math.ceil(b)
    if hi <= lo:
        raise QueryError("from must be before to")
    if hi - lo > MAX_WINDOW_S:
        raise QueryError(f"the window is {hi - lo} s; at most {MAX_WINDOW_S} s per request")
    return lo, hi


def _downsample(data: np.ndarray, step: int) -> np.ndarray:
    """Aggregate ``[seconds, lanes, fields]`` into buckets of ``step`` seconds (n, p99, max: max;
    p50: median; min: min)."""
    if step == 1:
        return data
    pad = (-data.shape[0]) % step
    if pad:
        data = np.concatenate([data, np.full((pad, *data.shape[1:]), np.nan, dtype=data.dtype)])
    b = data.reshape(-1, step, *data.shape[1:])
    out = np.full((b.shape[0], *data.shape[1:]), np.nan, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN buckets stay NaN
        out[..., N] = np.nanmax(b[..., N], axis=1)
        out[..., P50] = _bucket_median(b[..., P50])
        out[..., P99] = np.nanmax(b[..., P99], axis=1)
        out[..., MIN] = np.nanmin(b[..., MIN], axis=1)
        out[..., MAX] = np.nanmax(b[..., MAX], axis=1)
    return out


def _bucket_median(b: np.ndarray) -> np.ndarray:
    """``nanmedian(b, axis=1)`` by one sort (NaNs sort last): ``np.nanmedian`` over many small
    buckets takes ten times as long.

    >>> _bucket_median(np.array([[1.0, 3.0, np.nan], [np.nan, np.nan, np.nan], [4.0, 1.0, 2.0]])).tolist()
    [2.0, nan, 2.0]
    """
    ordered = np.sort(b, axis=1)
    held = np.isfinite(b).sum(axis=1)
    lo = np.clip((held - 1) // 2, 0, None)
    hi = np.clip(held // 2, 0, None)
    pick_lo = np.take_along_axis(ordered, lo[:, None, ...], axis=1)[:, 0]
    pick_hi = np.take_along_axis(ordered, np.minimum(hi, b.shape[1] - 1)[:, None, ...], axis=1)[:, 0]
    return np.where(held > 0, (pick_lo + pick_hi) / 2, np.nan)


def _series(values: np.ndarray) -> list[float | None]:
    """Values rounded to 6 decimals, None where not finite (rounded in numpy: a timeline has ~40,000)."""
    rounded = np.round(np.where(np.isfinite(values), values, np.nan), 6).tolist()
    return [None if v != v else v for v in rounded]  # NaN is the only value not equal to itself


def _episodes_in(store: ReadStore, job_id: str, start: float, end: float) -> list[EpisodeView]:
    return [e for e in store.episodes.get(job_id, ()) if e.ts < end and (e.end_ts is None or e.end_ts >= start)]


def anomaly_markers(store: ReadStore, job_id: str, start: float, end: float) -> list[dict[str, Any]]:
    """The job's anomaly episodes overlapping ``[start, end)``, one marker per lane, layer, metric and
    onset second (``entities`` says how many series moved together; the most physical one is named)."""
    groups: dict[tuple[str, str, str, int], list[EpisodeView]] = {}
    for e in _episodes_in(store, job_id, start, end):
        r = e.start
        lane = lane_for(r["layer"], r.get("meaning"))
        if lane is None:
            continue
        groups.setdefault((lane, r["layer"], r["metric"], math.floor(e.ts)), []).append(e)
    markers = []
    for (lane, layer, metric, _), eps in groups.items():
        eps.sort(key=lambda e: evidence_order(e.start, e.key))
        r = eps[0].start
        ends = [e.end_ts for e in eps]
        markers.append({
            "lane": lane, "ts": eps[0].ts, "end_ts": None if any(t is None for t in ends) else max(
                t for t in ends if t is not None),
            "layer": layer, "source": r["source"], "labels": dict(r["labels"]),
            "where": _where(r["source"], r["labels"]),
            "metric": metric, "meaning": r.get("meaning"), "role": r.get("role"), "direction": r.get("direction"),
            "value": _num(r.get("value")), "p50": _num(r.get("p50")), "p99": _num(r.get("p99")),
            "score": _num(max(float(e.start.get("score", 0.0)) for e in eps), 4), "entities": len({e.key for e in eps}),
            "_order": evidence_order(r, eps[0].key),
        })
    # Cause before effect at the same instant, the more physical signal first (as alerts order them).
    markers.sort(key=lambda m: m["_order"])
    for m in markers:
        del m["_order"]
    return markers[:MAX_MARKERS]


def _baselines(store: ReadStore, job_id: str, start: float, end: float) -> tuple[list[float | None],
                                                                                list[float | None]]:
    """Per lane, the median of the per-second p50 and of the p99 in ``[start, end)`` (one window read)."""
    ring = store.lanes.get(job_id)
    if ring is None or end <= start:
        return [None] * len(LANE_ORDER), [None] * len(LANE_ORDER)
    data, _ = ring.window(math.floor(start), math.ceil(end))
    out: list[list[float | None]] = []
    for field in (P50, P99):
        values = data[:, :, field].astype(np.float64)
        held = np.asarray(np.isfinite(values).any(axis=0)).tolist()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN lane is None below
            med = np.nanmedian(values, axis=0)
        out.append([float(m) if h else None for m, h in zip(np.asarray(med).tolist(), held, strict=True)])
    return out[0], out[1]


def incident_view(entry: AlertEntry) -> dict[str, Any]:
    """An alert as a window on the timeline: from the first mover to the resolution (open if firing)."""
    a = entry.latest
    first_seen, onset, resolved = _alert_times(a)
    return {"alert_id": entry.alert_id, "status": a.get("status"), "severity": a.get("severity"),
            "domain": (a.get("root_cause") or {}).get("domain"), "start": first_seen, "onset": onset,
            "detected": _ts(a.get("detected_at")), "end": resolved, "summary": a.get("summary"),
            "first_mover": _first_mover(a)}


def timeline(store: ReadStore, inventory: InventoryIndex, job_id: str, start: Any = None, end: Any = None, *,
             step: int | None = None, alert_id: str | None = None,
             fallback_end: float | None = None) -> dict[str, Any] | None:
    """The job's lanes on one time axis (see docs/api.md for the shape). None if the job is unknown.

    ``ts`` holds the start of each point's bucket (Unix seconds, ``step`` seconds apart); each lane
    carries ``p50``/``p99``/``min``/``max`` across the job's entities and ``n`` (how many entities
    reported), null where nothing did, and a ``baseline`` (median p50 and p99 before the incident in
    view, or over the whole window when there is none). ``incidents`` are the job's alerts whose
    window overlaps the view; ``first_mover`` and ``incident`` are those of ``alert_id``, else of the
    latest incident in view.
    """
    if inventory.job(job_id) is None and job_id not in store.job_ids():
        return None
    lo, hi = timeline_window(store, job_id, start, end, alert_id, fallback_end)
    width = hi - lo
    if step is None:
        step = max(1, math.ceil(width / MAX_POINTS))
    elif not 1 <= step <= MAX_STEP_S:
        raise QueryError(f"step must be between 1 and {MAX_STEP_S} seconds")
    elif math.ceil(width / step) > 4 * MAX_POINTS:
        raise QueryError(f"{math.ceil(width / step)} points; use a larger step (at most {4 * MAX_POINTS} points)")
    ring = store.lanes.get(job_id)
    if ring is not None:
        data, _ = ring.window(lo, hi)
        agg = _downsample(data.astype(np.float64), step)
    else:
        agg = np.full((math.ceil(width / step), len(LANE_ORDER), 5), np.nan)
    ts = [float(lo + i * step) for i in range(agg.shape[0])]

    incidents = []
    for entry in store.alerts_of(job_id):
        view = incident_view(entry)
        if view["start"] < hi and (view["end"] is None or view["end"] >= lo):
            incidents.append(view)
    chosen = None
    if alert_id is not None:
        picked = store.alerts.get(alert_id)
        if picked is None or picked.latest.get("job_id") != job_id:
            raise QueryError(f"alert {alert_id[:40]!r} is not an alert of job {job_id[:60]!r}")
        chosen = incident_view(picked)
    elif incidents:
        slowdowns = [i for i in incidents if store.alerts[i["alert_id"]].latest.get("type") == "job_slowdown"]
        chosen = (slowdowns or incidents)[-1]

    base_end = chosen["start"] if chosen is not None else None
    # The baseline: the minutes before the incident in view (held even when the window starts later),
    # or the whole window without one.
    before = (base_end - BASELINE_S, base_end) if base_end is not None else (lo, hi)
    b50s, b99s = _baselines(store, job_id, before[0], before[1])
    lanes = []
    for i, lane in enumerate(LANE_ORDER):
        b50, b99 = b50s[i], b99s[i]
        col = agg[:, i, :]
        lanes.append({
            "lane": lane, **LANE_INFO[lane], "has_data": bool(np.isfinite(col[:, P50]).any()),
            "p50": _series(col[:, P50]), "p99": _series(col[:, P99]), "min": _series(col[:, MIN]),
            "max": _series(col[:, MAX]), "n": _series(col[:, N]),
            "baseline": {"p50": _num(b50), "p99": _num(b99), "from": before[0], "to": before[1]},
        })
    notes = [n for n in store.annotations.get(job_id, {}).values() if lo <= n["ts"] < hi]
    return {
        "job_id": job_id, "from": float(lo), "to": float(hi), "from_iso": _iso(lo), "to_iso": _iso(hi),
        "step": step, "ts": ts, "lanes": lanes, "anomalies": anomaly_markers(store, job_id, lo, hi),
        "incidents": incidents, "incident": chosen, "first_mover": chosen["first_mover"] if chosen else None,
        "annotations": sorted(notes, key=lambda n: n["ts"]), "as_of": store.event_time,
    }


# -- the seven answers ----------------------------------------------------------------------------
def _answer(key: str, answer: str, evidence: dict[str, Any]) -> dict[str, Any]:
    n = [k for k, _ in QUESTIONS].index(key) + 1
    return {"n": n, "key": key, "question": QUESTIONS[n - 1][1], "answer": answer, "evidence": evidence}


def _pick_alert(store: ReadStore, job_id: str, alert_id: str | None) -> AlertEntry | None:
    if alert_id is None:
        return _latest_slowdown(store, job_id)
    entry = store.alerts.get(alert_id)
    if entry is None or entry.latest.get("job_id") != job_id:
        raise QueryError(f"alert {alert_id[:40]!r} is not an alert of job {job_id[:60]!r}")
    return entry


def diagnosis(store: ReadStore, inventory: InventoryIndex, job_id: str, alert_id: str | None = None, *,
              topology: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The seven answers for one job, each with its evidence (None if the job is unknown).

    The incident examined is ``alert_id``, else the job's latest alert. Answers 1-4 come from the
    inventory; 5 and 6 from the alert (its first mover, timeline and domain) and the lanes before
    and during it; 7 from the first ``fix`` annotation after the incident started, else from the
    alert's resolution, comparing step time before, during and after. The lists in the evidence of
    1-3 (GPUs, nodes, paths) are the first page of :func:`job_detail`; ``page`` there gives the totals.
    """
    info = inventory.job(job_id)
    if topology is None and info is not None:
        topology = job_topology(inventory, info)
    detail = job_detail(store, inventory, job_id, topology=topology)
    if detail is None:
        return None
    entry = _pick_alert(store, job_id, alert_id)
    alert = entry.latest if entry is not None else None
    answers = [
        _answer_gpus(detail), _answer_nodes(detail),
        _answer_paths(detail, alert, topology["paths"] if topology else []), _answer_storage(store, detail, alert),
    ]
    answers += _answers_incident(store, job_id, alert)
    answers.append(_answer_after_fix(store, job_id, alert))
    fm = _first_mover(alert) if alert else None
    return {
        "job_id": job_id, "name": detail.get("name"), "status": detail["status"], "as_of": store.event_time,
        "as_of_iso": _iso(store.event_time), "alert_id": entry.alert_id if entry else None,
        "gpus": detail["gpus"], "nodes": detail["nodes"], "pools": detail["pools"],
        "domain": (alert.get("root_cause") or {}).get("domain") if alert else None, "first_mover": fm,
        "answers": answers,
    }


def _answer_gpus(d: dict[str, Any]) -> dict[str, Any]:
    if not d["inventory"]:
        return _answer("gpus", "unknown: the job is not in the inventory", {})
    text = f"{d['gpus']} GPUs: {d['gpus_per_node']} on each of {d['nodes']} nodes ({d['hostlist']})"
    if d.get("gpu_util") is not None:
        text += f"; GPU utilisation now {_fmt(d['gpu_util'], '%')} (median across the job)"
    return _answer("gpus", text, {"gpus": d["gpus"], "gpus_per_node": d["gpus_per_node"],
                                  "gpu_list": d["gpu_list"], "state": d["state"], "since": d.get("start_iso"),
                                  "page": d["page"]})


def _answer_nodes(d: dict[str, Any]) -> dict[str, Any]:
    if not d["inventory"]:
        return _answer("nodes", "unknown: the job is not in the inventory", {})
    return _answer("nodes", f"{d['nodes']} nodes: {d['hostlist']}",
                   {"nodes": d["node_list"], "hostlist": d["hostlist"], "count": d["nodes"], "page": d["page"]})


def _answer_paths(d: dict[str, Any], alert: dict[str, Any] | None, all_paths: list[dict[str, Any]]) -> dict[str, Any]:
    if not d["paths"]:
        return _answer("paths", "unknown: no NIC -> switch links for these nodes in the inventory", {"paths": []})
    leaves = d["leaves"]
    page = d["page"]
    names = [lf["switch"] for lf in leaves][:20]
    more = ", …" if page["leaves_total"] > len(names) else ""
    text = (f"{page['paths_total']} NIC links ({', '.join(d['fabrics'])}) into {page['leaves_total']} leaf switches "
            f"({', '.join(names)}{more}), up to spines {', '.join(d['spines']) or '-'}")
    evidence: dict[str, Any] = {"leaves": leaves, "spines": d["spines"], "paths": d["paths"], "page": page}
    fm = _first_mover(alert) if alert else None
    if fm and fm["layer"] == "switch":
        port = fm["labels"].get("port")
        on = [p for p in all_paths if p["switch"] == fm["source"] and (port is None or p["switch_port"] == port)]
        if on:
            nodes = sorted({str(p["node"]) for p in on})
            text += f"; the first mover {fm['where']} carries the links of {', '.join(nodes[:20])}"
            text += f" and {len(nodes) - 20} more" if len(nodes) > 20 else ""
            evidence["first_mover_links"] = on[:MAX_PAGE]
    return _answer("paths", text, evidence)


def _answer_storage(store: ReadStore, d: dict[str, Any], alert: dict[str, Any] | None) -> dict[str, Any]:
    if not d["storage"]:
        return _answer("storage", "no storage pool in the job's inventory record", {"pools": []})
    names = ", ".join(p["pool"] for p in d["storage"])
    text = f"{names}"
    ring = store.lanes.get(d["job_id"])
    lat = None
    if ring is not None and ring.latest >= 0:
        lat = _nanmedian(lane_values(store, d["job_id"], "storage_latency", ring.latest - 59, ring.latest + 1))
        if lat is not None:
            text += f"; latency now {_fmt(lat, 's')} (median over the last minute)"
    shared = sorted({s["job_id"] for p in d["storage"] for s in p["shared_with"]})
    if shared:
        text += f"; shared with {', '.join(shared)}"
    return _answer("storage", text, {"pools": d["storage"], "latency_p50_s": _num(lat)})


def _answers_incident(store: ReadStore, job_id: str, alert: dict[str, Any] | None) -> list[dict[str, Any]]:
    if alert is None:
        ring = store.lanes.get(job_id)
        evidence: dict[str, Any] = {"alert": None}
        text = "nothing fell: no slowdown alert for this job in the read model"
        if ring is not None and ring.latest >= 0:
            recent = (ring.latest - 9, ring.latest + 1)
            hour = (ring.latest - store.config.history_s + 1, ring.latest + 1)
            evidence["lanes"] = [lane_change(store, job_id, lane, hour, recent) for lane in LANE_ORDER]
            step = evidence["lanes"][LANE_ORDER.index("step_time")]
            if step["ratio"] is not None:
                text += f"; step time {_fmt(step['during_p50'], 's')} is x{step['ratio']:.2f} of its hour median"
        return [_answer("change", text, evidence),
                _answer("domain", "none: the job is not slowed down", {"domain": None})]
    first_seen, onset, resolved = _alert_times(alert)
    sym = alert.get("symptom") or {}
    fm = _first_mover(alert)
    ring = store.lanes.get(job_id)
    lanes: list[dict[str, Any]] = []
    if ring is not None:
        during_end = resolved if resolved is not None else float(ring.latest + 1)
        before = (first_seen - BASELINE_S, first_seen)
        lanes = [lane_change(store, job_id, lane, before, (onset, during_end)) for lane in LANE_ORDER]
    steps = []
    for e in alert.get("timeline") or []:
        t = parse_ts(e["ts"])
        steps.append({**e, "offset_s": round(t - first_seen, 3), "lane": lane_for(e["layer"], e.get("meaning")),
                      "where": _where(e["source"], e.get("labels"))})
    if sym:
        unit = "s" if str(sym.get("metric", "")).endswith("_seconds") else ""
        text = (f"{sym['metric']} x{float(sym.get('ratio') or 0):.1f} ({_fmt(sym.get('baseline'), unit)} -> "
                f"{_fmt(sym.get('value'), unit)}) from {_hms(sym.get('onset'))}")
    else:
        text = f"slowdown from {_hms(onset)}"
    if fm:
        text += f"; first {fm['where']} {fm['metric']} at {_hms(fm['first_seen'])}"
    later = []
    seen_layers = {fm["layer"]} if fm else set()
    for s in steps:
        if s["layer"] in seen_layers:
            continue
        seen_layers.add(s["layer"])
        who = f"{s['layer']} {s['metric']}"
        if s.get("entities", 1) > 1:
            who += f" ({s['entities']} series)"
        later.append(f"{who} +{s['offset_s']:.1f} s")
    if later:
        text += ", then " + ", ".join(later)
    change = _answer("change", text, {
        "alert_id": alert["alert_id"], "symptom": sym, "first_mover": fm, "sequence": steps,
        "incident": {"start": first_seen, "onset": onset, "end": resolved, "start_iso": _iso(first_seen),
                     "onset_iso": _iso(onset), "end_iso": _iso(resolved)},
        "lanes": lanes,
    })
    rc = alert.get("root_cause") or {}
    order = list(dict.fromkeys(e["layer"] for e in alert.get("timeline") or []))
    domain = rc.get("domain") or "unknown"
    text = f"{domain}: {rc.get('reason') or 'no component moved first'}"
    if order:
        text += f" (order: {' -> '.join(order)})"
    others = alert.get("other_jobs") or []
    if others:
        text += "; also exposed: " + ", ".join(f"{o['job_id']} ({o['gpus']} GPUs, {o['relation']})" for o in others)
    dom = _answer("domain", text, {"domain": domain, "reason": rc.get("reason"), "first_mover": fm,
                                   "order": order, "other_jobs": others, "severity": alert.get("severity")})
    return [change, dom]


def _answer_after_fix(store: ReadStore, job_id: str, alert: dict[str, Any] | None) -> dict[str, Any]:
    notes = sorted(store.annotations.get(job_id, {}).values(), key=lambda n: n["ts"])
    if alert is None:
        text = "no incident to fix"
        if notes:
            text += f"; {len(notes)} annotation(s) recorded"
        return _answer("after_fix", text, {"annotations": notes})
    first_seen, onset, resolved = _alert_times(alert)
    fixes = [n for n in notes if n["kind"] == "fix" and n["ts"] >= first_seen]
    fix = fixes[0] if fixes else None
    ring = store.lanes.get(job_id)
    latest = float(ring.latest + 1) if ring is not None and ring.latest >= 0 else None
    if fix is not None:
        fix_ts, how = float(fix["ts"]), f"fix at {_hms(fix['ts'])} ({fix['text']})"
    elif resolved is not None:
        fix_ts, how = resolved, f"resolved at {_hms(resolved)} (symptom cleared)"
    else:
        fix_ts, how = None, None
    before = (first_seen - BASELINE_S, first_seen)
    evidence: dict[str, Any] = {"alert_id": alert["alert_id"], "fix": fix, "resolved_at": alert.get("resolved_at"),
                                "annotations": notes,
                                "effect": store.effects.get(fix["annotation_id"]) if fix is not None else None}
    b = _nanmedian(lane_values(store, job_id, "step_time", *before))
    if fix_ts is None:
        d = _nanmedian(lane_values(store, job_id, "step_time", onset, latest)) if latest else None
        text = f"no fix yet: firing since {_hms(onset)}"
        if b and d:
            text += f"; step time {_fmt(d, 's')} (x{d / b:.2f} of {_fmt(b, 's')} before)"
        evidence["step_time"] = {"before_p50": _num(b), "during_p50": _num(d), "after_p50": None}
        evidence["recovered"] = False
        return _answer("after_fix", text, evidence)
    d = _nanmedian(lane_values(store, job_id, "step_time", onset, fix_ts))
    after_end = min(fix_ts + AFTER_S, latest) if latest is not None else fix_ts + AFTER_S
    after = _nanmedian(lane_values(store, job_id, "step_time", fix_ts, after_end))
    recovered = bool(after is not None and b and after <= b * 1.1)
    text = how or ""
    if after is not None and b:
        verdict = "back to" if recovered else "still at"
        text += f"; step time {verdict} {_fmt(after, 's')} (x{after / b:.2f} of {_fmt(b, 's')} before"
        text += f", {_fmt(d, 's')} during)" if d is not None else ")"
    elif after is None:
        text += "; no step time after it yet"
    effect = evidence["effect"]
    if effect is not None and effect.get("p50_ratio") is not None:
        text += (f"; slowest rank x{effect['p50_ratio']:.2f} in the {effect.get('window_s', 0):g} s after vs "
                 "before it")
    evidence["step_time"] = {"before_p50": _num(b), "during_p50": _num(d), "after_p50": _num(after),
                             "after_window": [fix_ts, after_end]}
    evidence["recovered"] = recovered
    return _answer("after_fix", text, evidence)


# -- fabric ---------------------------------------------------------------------------------------
def fabric_port(store: ReadStore, inventory: InventoryIndex, switch: str, port: str) -> dict[str, Any] | None:
    """Who is behind a switch port: NICs, nodes, the jobs on them with GPU counts, the other jobs behind
    the same switch, and the port's recent anomalies; None if the inventory knows nothing cabled to it.

    A host's port (a ``link`` event names it) has its NICs in ``nodes``; a switch-to-switch port a
    switch event describes (``ports``) has none, its ``peer`` and ``speed_gbps``, and as ``jobs``
    those whose traffic crosses the link (as correlation maps it: the jobs spanning leaves behind the
    leaf below it), each with its nodes there.
    """
    links = sorted(inventory.by_switch_port.get((switch, port), ()))
    described = None if links else inventory.switch_port(switch, port)  # (a host's port is its link's)
    if not links and described is None:
        return None
    nodes = []
    jobs: dict[str, dict[str, Any]] = {}

    def behind(job_id: str, node: str) -> JobInfo | None:
        """Count ``node`` behind the port for ``job_id``; the job, None for one that ended."""
        info = inventory.job(job_id)
        if info is None or info.end is not None:
            return None
        j = jobs.setdefault(job_id, {"job_id": job_id, "name": info.name, "gpus_total": info.gpus,
                                     "gpus_behind_port": 0, "nodes_behind_port": []})
        if node not in j["nodes_behind_port"]:
            j["nodes_behind_port"].append(node)
            j["gpus_behind_port"] += info.gpus_per_node or 0  # (unknown is counted as 0, as in sums elsewhere)
        return info

    for node, device, nic_port in links:
        link = inventory.links[(node, device, nic_port)]
        on_node = [{"job_id": job_id, "gpus": info.gpus_per_node} for job_id in inventory.jobs_on_node(node, None)
                   if (info := behind(job_id, node)) is not None]
        nodes.append({"node": node, "device": device, "nic_port": nic_port, "fabric": link.fabric, "jobs": on_node})
    if not links:
        crossing = {a.job_id for a in inventory.affected_jobs("switch", switch, {"port": port}, None)}
        for node in inventory.nodes_behind_link(switch, port):
            for job_id in inventory.jobs_on_node(node, None):
                if job_id in crossing:
                    behind(job_id, node)
    switch_jobs: list[dict[str, Any]] = []
    for node in inventory.nodes_behind_switch(switch):
        for job_id in inventory.jobs_on_node(node, None):
            info = inventory.job(job_id)
            if info is not None and info.end is None and job_id not in {s["job_id"] for s in switch_jobs}:
                switch_jobs.append({"job_id": job_id, "gpus": info.gpus,
                                    "behind_this_port": job_id in jobs})
    anomalies = []
    for job_id, eps in store.episodes.items():
        for e in eps:
            r = e.start
            if r["layer"] == "switch" and r["source"] == switch and r["labels"].get("port") == port:
                anomalies.append({"job_id": job_id, "ts": e.ts, "ts_iso": _iso(e.ts), "end_ts": e.end_ts,
                                  "metric": r["metric"], "meaning": r.get("meaning"), "value": _num(r.get("value")),
                                  "p50": _num(r.get("p50"))})
    anomalies.sort(key=lambda x: (-x["ts"], x["metric"], x["job_id"]))
    dedup: dict[tuple[float, str], dict[str, Any]] = {}
    for a in anomalies:
        dedup.setdefault((a["ts"], a["metric"]), {**a, "jobs": []})["jobs"].append(a["job_id"])
    alerts = [alert_summary_min(e) for e in store.alerts.values()
              if (e.latest.get("root_cause") or {}).get("source") == switch
              and ((e.latest.get("root_cause") or {}).get("labels") or {}).get("port") == port]
    speed = described.speed_gbps if described is not None else \
        next((s for k in links if (s := inventory.links[k].speed_gbps) is not None), None)
    return {
        "switch": switch, "port": port, "tier": inventory.tiers.get(switch, "leaf"),
        "uplinks": sorted(inventory.uplinks.get(switch, set())),
        "peer": described.peer if described is not None else None, "speed_gbps": speed,
        "nodes": nodes,
        "jobs": sorted(jobs.values(), key=lambda j: j["job_id"]),
        "gpus_behind_port": sum(j["gpus_behind_port"] for j in jobs.values()),
        "switch_jobs": sorted(switch_jobs, key=lambda j: j["job_id"]),
        "anomalies": [{k: v for k, v in a.items() if k != "job_id"} for a in list(dedup.values())[:50]],
        "alerts": alerts,
    }


def alert_summary_min(entry: AlertEntry) -> dict[str, Any]:
    a = entry.latest
    return {"alert_id": entry.alert_id, "job_id": a.get("job_id"), "status": a.get("status"),
            "severity": a.get("severity"), "started_at": a.get("started_at"), "resolved_at": a.get("resolved_at")}


# -- operator writes ------------------------------------------------------------------------------
def new_annotation(req: AnnotationRequest, annotation_id: str, now: float) -> AnnotationRecord:
    """The ``annotations`` record for a request received at ``now`` (its ``ts`` defaults to ``now``)."""
    return AnnotationRecord(annotation_id=annotation_id, job_id=req.job_id, ts=req.ts if req.ts is not None else now,
                            kind=req.kind, text=req.text, author=req.author, created_at=now)


def new_silence(req: SilenceRequest, silence_id: str, now: float) -> SilenceRecord:
    """The ``silences`` record for a request received at ``now``.

    Raises :class:`QueryError` when the silence would end before it starts or in the past.
    """
    starts = req.starts_at if req.starts_at is not None else now
    ends = req.ends_at if req.ends_at is not None else starts + float(req.duration_s or 0)
    if ends <= starts:
        raise QueryError("ends_at must be after starts_at")
    if ends <= now:
        raise QueryError("the silence would already be over (ends_at is in the past)")
    if ends - starts > 30 * 24 * 3600:
        raise QueryError("a silence lasts at most 30 days")
    unknown = sorted(set(req.matchers) - SILENCE_LABELS)
    if unknown:
        raise QueryError(f"matchers: no alert carries the label {unknown[0][:64]!r}, so the silence would never "
                         f"match; the labels are {', '.join(sorted(SILENCE_LABELS))}")
    return SilenceRecord(silence_id=silence_id, matchers=dict(req.matchers), kind=req.kind, starts_at=starts,
                         ends_at=ends, created_by=req.created_by, comment=req.comment, created_at=now, updated_at=now)


def expire_silence(silence: dict[str, Any], now: float) -> SilenceRecord:
    """The record that ends ``silence`` at ``now`` (an already expired one is returned unchanged)."""
    if silence_state(silence, now) == "expired":
        return SilenceRecord.model_validate(silence)
    return SilenceRecord.model_validate({**silence, "ends_at": max(now, silence["starts_at"]), "updated_at": now})


def silence_list(store: ReadStore, now: float, *, state: str | None = None) -> list[dict[str, Any]]:
    """Silences, active first, then pending, then expired; newest first within each."""
    if state is not None and state not in ("active", "pending", "expired"):
        raise QueryError(f"state must be active, pending or expired, not {state[:40]!r}")
    rank = {"active": 0, "pending": 1, "expired": 2}
    rows = [silence_view(s, now) for s in store.silences.values()]
    rows = [r for r in rows if state is None or r["state"] == state]
    rows.sort(key=lambda r: (rank[r["state"]], -r["created_at"], r["silence_id"]))
    return rows
