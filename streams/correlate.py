"""Per-job correlation on event time: one timeline per job, the first mover, the domain, the alert.

Inputs are the records of the ``anomalies`` topic for the jobs of one partition: anomaly episodes
(``start``/``end``) and watermarks. The partition's watermark is the minimum over its input
partitions' progress, minus the allowed lateness; a verdict on a degradation with onset ``O`` is
taken only once the watermark passes ``O + grace``, so evidence that happened earlier but arrived
later still counts, and any arrival order within the lateness bound gives the same verdict.

Timeline of the textbook incident (one job, 1 s per column)::

    switch leaf03:17  SymbolErrorCounter  ....X#########     <- first mover (11:42:10)
    nccl   gpu007     coll_exec_time_us   ......X#######
    gpu    gpu0*      DCGM_FI_DEV_GPU_UTIL.........X####
    step   llm-70b    step_time_seconds   ............X#     <- onset O (11:42:18)
                                          |<- lookback ->|O  verdict when watermark >= O + grace

Nothing here imports Faust or reads the clock; ``now_wall`` (used only to skip idle inputs) is an
argument.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models.alerts import Alert
from models.timeutil import MAX_TS, MIN_TS, format_ts, parse_ts
from streams.contention import advice, find_contention, overlap_end
from streams.inventory import InventoryIndex
from streams.rules import Rules, default_rules

#: Tie-break order among anomalies with the same onset: cause before effect.
CAUSAL_RANK = {
    ("switch", None): 0,
    ("nic", None): 1,
    ("gpu", "gpu_fault"): 2,
    ("gpu", "throttle"): 2,
    ("gpu", "temperature"): 2,
    ("storage", None): 2,
    ("host", None): 3,
    ("step", "loader_wait"): 3,
    ("nccl", None): 4,
    ("gpu", None): 5,
    ("step", None): 6,
}

#: An input partition mentioned within this many seconds has a live worker.
ALIVE_S = 3.0

NETWORK_MEANINGS = frozenset({"link_down", "link_errors", "drops", "retransmits", "congestion"})

#: Among anomalies of one entity at the same instant, the more physical signal is named first: a
#: symbol error explains the receive errors it causes, not the other way round.
MEANING_RANK = {"link_down": 0, "link_errors": 1, "drops": 2, "retransmits": 3, "congestion": 4, "gpu_fault": 0,
                "throttle": 1, "temperature": 2}
PHYSICAL_FIRST = ("SymbolErrorCounter", "LinkDownedCounter", "LinkErrorRecoveryCounter", "LocalLinkIntegrityErrors",
                  "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy", "link_down_events_phy")


def evidence_order(rec: dict[str, Any], key: str = "") -> tuple[float, int, int, int, str]:
    """Sort key of evidence: onset, then causal rank, then the more physical signal, then name.

    >>> a = {"ts": 10.0, "layer": "switch", "meaning": "link_errors", "metric": "PortRcvErrors"}
    >>> b = {"ts": 10.0, "layer": "switch", "meaning": "link_errors", "metric": "SymbolErrorCounter"}
    >>> sorted([a, b], key=evidence_order)[0]["metric"]
    'SymbolErrorCounter'
    """
    metric = rec["metric"]
    physical = PHYSICAL_FIRST.index(metric) if metric in PHYSICAL_FIRST else len(PHYSICAL_FIRST)
    return (float(rec["ts"]), causal_rank(rec["layer"], rec["meaning"]), MEANING_RANK.get(rec["meaning"], 9),
            physical, key)


def timing_uncertainty(rec: dict[str, Any]) -> float:
    """How well the onset time of an anomaly is known: half its sampling interval plus its clock's spread."""
    return 0.5 * float(rec.get("interval") or 0.0) + float(rec.get("clock_uncertainty") or 0.0)


def first_mover(causes: list[Any]) -> Any:
    """The earliest cause, never decided on a time difference smaller than the timing uncertainty.

    Causes whose onsets lie within their combined uncertainty of the earliest are simultaneous as
    far as the clocks can tell; among those the causal order (switch/NIC -> collective -> GPU -> step)
    decides, then the more physical signal, then the name.
    """
    if not causes:
        return None
    ordered = sorted(causes, key=lambda e: evidence_order(e.start, e.key))
    earliest = ordered[0]
    u0 = timing_uncertainty(earliest.start)
    tied = [e for e in ordered if e.ts - earliest.ts <= u0 + timing_uncertainty(e.start) + 1e-9]
    return min(tied, key=lambda e: (causal_rank(e.start["layer"], e.start["meaning"]),
                                    MEANING_RANK.get(e.start["meaning"], 9), *evidence_order(e.start, e.key)[3:],
                                    e.ts))


def causal_rank(layer: str, meaning: str) -> int:
    """Rank of a layer/meaning in the causal order switch/NIC -> collective -> GPU -> step.

    >>> causal_rank("switch", "link_errors") < causal_rank("nccl", "latency") < causal_rank("step", "step_time")
    True
    """
    return CAUSAL_RANK.get((layer, meaning), CAUSAL_RANK.get((layer, None), 7))


@dataclass(frozen=True, slots=True)
class CorrelatorConfig:
    allowed_lateness_s: float = 5.0
    grace_s: float = 5.0
    lookback_s: float = 120.0
    resolve_after_s: float = 30.0
    critical_gpus: int = 64
    critical_ratio: float = 2.0
    idle_s: float = 10.0
    orphan_hold_s: float = 60.0
    timeline_limit: int = 40
    public_url: str | None = None
    #: A symptom alert (GPU utilisation) waits this long after it is due for a cause alert to inhibit it.
    symptom_hold_s: float = 10.0
    #: An incident stays firing at least this long; the same cause back within flap_window_s reopens it.
    min_firing_s: float = 30.0
    flap_window_s: float = 120.0
    #: Fraction of a job's GPUs whose utilisation must fall together for a gpu_utilisation alert.
    gpu_fraction: float = 0.25


def episode_key(rec: dict[str, Any]) -> str:
    """Stable key of one series' episode stream within a job."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(rec["labels"].items()))
    return f"{rec['layer']}/{rec['source']}/{rec['metric']}{{{labels}}}"


def dedup_key(alert_type: str, job_id: str, domain: str, root: dict[str, Any] | None) -> str:
    """Stable per (job, root cause): the same cause of the same job always maps to the same key.

    >>> dedup_key("job_slowdown", "llm", "network", {"layer": "switch", "source": "leaf03",
    ...           "labels": {"port": "17"}, "metric": "SymbolErrorCounter"})
    'job_slowdown/llm/network/switch/leaf03/port=17'
    """
    if root is None:
        return f"{alert_type}/{job_id}/{domain}"
    labels = ",".join(f"{k}={v}" for k, v in sorted(root["labels"].items()) if k not in ("job_id",))
    key = f"{alert_type}/{job_id}/{domain}/{root['layer']}/{root['source']}"
    return key + (f"/{labels}" if labels else "")


def alert_id_for(dedup: str, onset: float) -> str:
    """Deterministic id of one incident: a replay after a crash reproduces it."""
    return hashlib.sha1(f"{dedup}@{onset:.3f}".encode()).hexdigest()[:20]


@dataclass
class Episode:
    key: str
    start: dict[str, Any]
    end_ts: float | None = None

    @property
    def ts(self) -> float:
        return float(self.start["ts"])

    @property
    def role(self) -> str:
        return str(self.start["role"])


@dataclass
class Incident:
    alert: dict[str, Any]
    onset: float
    symptom_keys: set[str]
    resolved: bool = False


@dataclass
class JobTimeline:
    job_id: str
    episodes: dict[str, list[Episode]] = field(default_factory=dict)
    incident: Incident | None = None
    closed_until: float = -math.inf  # symptoms before this belong to a closed incident
    #: checkpoint contentions this job's partition raised, by "pool@t*" (alert, resolved)
    contentions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the GPU-utilisation symptom: {"start", "alert" | None, "inhibited_by", "resolved"}
    gpu: dict[str, Any] | None = None
    #: the last resolved incident (a new one with the same cause soon after is the same incident reopened)
    last_resolved: dict[str, Any] | None = None
    #: the job's cause alerts with the event-time interval they fired over ({"alert", "from", "to"}), so
    #: inhibition is judged as of a symptom's due time even when a watermark jump settles both at once
    fired: list[dict[str, Any]] = field(default_factory=list)
    gpu_closed_until: float = -math.inf

    def all_episodes(self) -> list[Episode]:
        return [e for eps in self.episodes.values() for e in eps]


@dataclass
class CorrelatorOutput:
    alerts: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    inhibited: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False


class Correlator:
    """Correlation state for the jobs of one ``anomalies`` partition."""

    def __init__(self, config: CorrelatorConfig, inventory: InventoryIndex,
                 expected_origins: set[str] | None = None, rules: Rules | None = None) -> None:
        self.config = config
        self.inventory = inventory
        self.rules = rules if rules is not None else default_rules()
        #: alerts of this partition still firing, by alert_id (inhibition sources; silence re-checks)
        self.open_alerts: dict[str, dict[str, Any]] = {}
        #: sources with a clock beyond tolerance: the layers showing it, and their alert
        self.clock_open: dict[str, dict[str, Any]] = {}
        #: Called with each new watermark before the jobs are judged at it (the owner advances what
        #: else it keeps on the same watermark, e.g. peer comparison, so verdicts can use it).
        self.on_watermark: Callable[[float, CorrelatorOutput], None] | None = None
        #: dedup key -> the firing straggler alert (see :meth:`on_peer_events`).
        self.straggler_open: dict[str, dict[str, Any]] = {}
        self.expected = expected_origins
        self.origin_wm: dict[str, float] = {}
        self.origin_seen: dict[str, float] = {}
        #: the input partition's worker says it has fetched nothing for it lately (it has no data)
        self.origin_idle: dict[str, bool] = {}
        self.eos: set[str] = set()
        self.jobs: dict[str, JobTimeline] = {}
        self.watermark = -math.inf
        self.max_event_ts = -math.inf
        self.late_count = 0
        self.finished = False
        #: set by :meth:`restore` when the snapshot held an infinite watermark (it was recomputed)
        self.repaired_watermark = False
        self._dirty: set[str] = set()

    # -- inputs ---------------------------------------------------------------------------------
    def on_record(self, rec: dict[str, Any], now_wall: float) -> CorrelatorOutput:
        """Fold one ``anomalies`` record in; return alerts whose verdicts became due."""
        out = CorrelatorOutput()
        kind = rec.get("type")
        if kind == "watermark":
            idle = set(rec.get("idle", ()))
            for origin, wm in rec.get("origins", {}).items():
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
        elif kind == "anomaly":
            self._add_anomaly(rec, out)
        elif kind == "clock":
            self._on_clock(rec, out)
        self._advance(now_wall, out)
        return out

    def _on_clock(self, rec: dict[str, Any], out: CorrelatorOutput) -> None:
        """One clock_skew alert per source, however many of its layers (topics) show the skew."""
        source, layer = rec["source"], rec["layer"]
        state = self.clock_open.get(source)
        if rec["phase"] == "start":
            if state is None:
                alert = self._clock_alert(rec)
                self.clock_open[source] = {"layers": [layer], "alert": alert, "started": float(rec["ts"])}
                self._emit(alert, float(rec["ts"]), out)
            elif layer not in state["layers"]:
                state["layers"].append(layer)
            return
        if state is None or layer not in state["layers"]:
            return
        state["layers"].remove(layer)
        if not state["layers"]:
            del self.clock_open[source]
            self._emit(self._clock_alert(dict(rec, started=state["started"])), float(rec["ts"]), out)

    def _clock_alert(self, rec: dict[str, Any]) -> dict[str, Any]:
        """A source's clock is off by more than the tolerance (firing) or back within it (resolved)."""
        source, offset, unc = rec["source"], float(rec["offset"]), float(rec["uncertainty"])
        ts = float(rec["ts"])
        jobs = self.inventory.affected_jobs(rec["layer"], source, {}, ts)
        others = []
        for a in jobs:
            info = self.inventory.job(a.job_id, ts)
            others.append({"job_id": a.job_id, "gpus": info.gpus if info else 0, "relation": a.relation})
        dkey = f"clock_skew/{source}"
        onset = float(rec.get("started", ts))
        direction = "behind" if offset < 0 else "ahead"
        summary = (f"clock of {rec['layer']} {source} is {abs(offset):.2f} s {direction} (+/- {unc:.2f} s); its "
                   "evidence is re-timed by that much when ordering first movers")
        resolved = rec["phase"] == "end"
        if resolved:
            summary = f"clock of {rec['layer']} {source} back within tolerance (offset {offset:+.2f} s)"
        return Alert.model_validate({
            "alert_id": alert_id_for(dkey, onset), "dedup_key": dkey, "type": "clock_skew",
            "status": "resolved" if resolved else "firing", "severity": "warning",
            "job_id": jobs[0].job_id if len(jobs) == 1 else None,
            "gpus": sum(o["gpus"] for o in others), "nodes": [source] if rec["layer"] != "switch" else [],
            "started_at": format_ts(onset), "detected_at": format_ts(ts),
            "resolved_at": format_ts(ts) if resolved else None, "symptom": None,
            "root_cause": {"domain": "compute" if rec["layer"] != "switch" else "network", "layer": rec["layer"],
                           "source": source, "labels": {}, "metric": "clock_offset_seconds",
                           "first_seen": format_ts(onset), "meaning": "clock_skew",
                           "reason": f"median arrival delay differs from its peers' by {-offset:+.2f} s"},
            "timeline": [], "other_jobs": others, "summary": summary,
            "labels": {"alertname": "clock_skew", "source": source, "layer": rec["layer"]},
            "details": {"offset_s": round(offset, 3), "uncertainty_s": round(unc, 3)},
        }).model_dump(mode="json")

    # -- stragglers ------------------------------------------------------------------------------------
    def on_peer_events(self, events: list[Any], out: CorrelatorOutput) -> None:
        """Straggler transitions (:class:`streams.lanes.PeerEvent`) into ``straggler`` alerts.

        One alert per (job, lane, worker) episode: firing when the worker is confirmed a straggler
        (``started_at`` = its first outlying step), resolved with the same identity when it is back
        among its peers or its job stops sending per-worker values.
        """
        for ev in events:
            tr = ev.transition
            dkey = f"straggler/{tr.job_id}/{ev.lane}/{tr.worker}"
            if tr.phase == "start":
                if dkey not in self.straggler_open:
                    alert = self._straggler_alert(ev)
                    self.straggler_open[dkey] = alert
                    self._emit(alert, tr.step, out)
                    self._explain_with_straggler(tr.job_id, out)
                continue
            firing = self.straggler_open.pop(dkey, None)
            if firing is None:
                continue
            ended = tr.onset_step
            details = dict(firing["details"], end_reason=tr.reason)
            if tr.reason == "no_data":
                summary = f"{firing['summary']}; no per-worker values since {format_ts(ended)[11:19]}"
            else:
                details.update(final_ratio=round(tr.ratio, 3))
                summary = f"{tr.worker} of {tr.job_id} back among its peers since {format_ts(ended)[11:19]}"
            done = dict(firing, status="resolved", resolved_at=format_ts(ended), details=details, summary=summary)
            self._emit(Alert.model_validate(done).model_dump(mode="json"), tr.step, out)

    def _straggler_for(self, job_id: str, onset: float) -> dict[str, Any] | None:
        """The firing straggler alert of ``job_id`` that began around ``onset`` (from ``lookback_s``
        before to ``grace_s`` after it), the earliest if several."""
        cfg = self.config
        found = [a for a in self.straggler_open.values() if a["job_id"] == job_id
                 and onset - cfg.lookback_s <= parse_ts(a["started_at"]) <= onset + cfg.grace_s]
        return min(found, key=lambda a: (a["started_at"], a["dedup_key"])) if found else None

    def _explain_with_straggler(self, job_id: str, out: CorrelatorOutput) -> None:
        """A job slowdown with no first mover, then a straggler confirmed around its onset: the
        straggler becomes its root cause (the alert is revised, same id and dedup key)."""
        job = self.jobs.get(job_id)
        inc = job.incident if job is not None else None
        if inc is None or inc.resolved or inc.alert["root_cause"].get("source") is not None:
            return
        straggler = self._straggler_for(job_id, inc.onset)
        if straggler is None:
            return
        rec, domain, reason = _straggler_root(straggler)
        revised = dict(inc.alert)
        revised["root_cause"] = {"domain": domain, "layer": rec["layer"], "source": rec["source"],
                                 "labels": dict(rec["labels"]), "metric": rec["metric"],
                                 "first_seen": format_ts(rec["ts"]), "meaning": rec["meaning"],
                                 "reason": reason + " (revised: the straggler was confirmed after the verdict)"}
        revised["details"] = dict(revised.get("details") or {}, straggler_alert=straggler["alert_id"],
                                  revised_from={"domain": "unknown"})
        revised["labels"] = dict(revised.get("labels") or {}, domain=domain)
        revised["summary"] = (revised["summary"].replace("; no component moved first (domain unknown)", "")
                              + f"; {domain}: straggler {straggler['details']['worker']} "
                              f"(x{straggler['details']['ratio_to_median']:.2f} its peers) since "
                              f"{straggler['started_at'][11:19]}")
        inc.alert = self._emit(Alert.model_validate(revised).model_dump(mode="json"),
                               parse_ts(straggler["detected_at"]), out)

    def _straggler_alert(self, ev: Any) -> dict[str, Any]:
        tr = ev.transition
        node, _, rank = tr.worker.partition("/rank")
        info = self.inventory.job(tr.job_id, tr.onset_step)
        gpus = info.gpus if info else 0
        dkey = f"straggler/{tr.job_id}/{ev.lane}/{tr.worker}"
        slower = tr.ratio / tr.usual if tr.usual > 0 else math.nan
        why = (f"{(tr.ratio - 1) * 100:.0f}% slower than the job's median worker" if tr.reason == "gross" else
               f"{(tr.ratio - tr.usual) * 100:.0f} points slower than its own usual ratio ({tr.usual:.2f}) "
               "while its peers stayed put")
        job_text = f"{tr.job_id} ({gpus} GPUs)" if gpus else tr.job_id
        summary = (f"straggler in {job_text}: {tr.worker}'s {ev.lane.replace('_', ' ')} is x{tr.ratio:.2f} the "
                   f"median of its {ev.workers - 1} peers since {format_ts(tr.onset_step)[11:19]} ({why}); "
                   "in synchronous training every rank waits for it: look at that node's GPUs, host and NIC")
        # The whole job runs at the straggler's pace: weigh it like a slowdown of that size.
        cfg = self.config
        severity = "warning"
        if gpus >= cfg.critical_gpus and tr.ratio >= 1.5:
            severity = "critical"
        elif gpus >= cfg.critical_gpus // 4 or tr.ratio >= 1.5:
            severity = "error"
        return Alert.model_validate({
            "alert_id": alert_id_for(dkey, tr.onset_step), "dedup_key": dkey, "type": "straggler",
            "status": "firing", "severity": severity, "job_id": tr.job_id, "gpus": gpus,
            "nodes": [node], "started_at": format_ts(tr.onset_step), "detected_at": format_ts(tr.step),
            "symptom": {"layer": "step", "metric": ev.lane, "baseline": round(tr.usual, 4),
                        "value": round(tr.ratio, 4), "ratio": round(slower, 4) if math.isfinite(slower) else 0.0,
                        "onset": format_ts(tr.onset_step)},
            "root_cause": {"domain": "compute", "layer": "step", "source": node,
                           "labels": {"rank": rank} if rank else {}, "metric": ev.lane,
                           "first_seen": format_ts(tr.onset_step), "meaning": "straggler", "reason": why},
            "timeline": [], "other_jobs": [], "summary": summary,
            "labels": {"alertname": "straggler", "job_id": tr.job_id, "worker": tr.worker, "lane": ev.lane},
            "details": {"worker": tr.worker, "ratio_to_median": round(tr.ratio, 4),
                        "usual_ratio": round(tr.usual, 4), "rule": tr.reason, "workers_compared": ev.workers},
        }).model_dump(mode="json")

    def tick(self, now_wall: float) -> CorrelatorOutput:
        """Re-evaluate the watermark (idle inputs drop out as wall time passes)."""
        out = CorrelatorOutput()
        self._advance(now_wall, out)
        return out

    def _add_anomaly(self, rec: dict[str, Any], out: CorrelatorOutput) -> None:
        ts = float(rec["ts"])
        self.max_event_ts = max(self.max_event_ts, float(rec.get("confirmed_ts", ts)))
        if ts < self.watermark:
            self.late_count += 1
            out.late.append(rec)
        offset = float(rec.get("clock_offset") or 0.0)
        if offset:
            # Order evidence on the true time line: undo the source's clock error.
            rec = dict(rec, ts=ts - offset, raw_ts=ts)
        job = self.jobs.setdefault(rec["job_id"], JobTimeline(rec["job_id"]))
        self._dirty.add(job.job_id)
        key = episode_key(rec)
        eps = job.episodes.setdefault(key, [])
        if rec["phase"] == "start":
            if not any(abs(e.ts - ts) < 1e-9 for e in eps):  # duplicates under at-least-once are harmless
                eps.append(Episode(key, rec))
                eps.sort(key=lambda e: e.ts)
        else:
            for ep in reversed(eps):
                if ep.ts <= ts and ep.end_ts is None:
                    ep.end_ts = ts
                    break

    def current_watermark(self, now_wall: float) -> float:
        """The partition's event-time watermark: the least progress of the input partitions that hold it,
        minus the allowed lateness; ``-inf`` before any progress is known. Always finite after that.

        Live, an input partition holds the watermark while its worker reports it active (:meth:`_holds`).
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
            values = [wm for o, wm in self.origin_wm.items() if o not in self.eos and self._holds(o, now_wall)]
        if values:
            return min(values) - lateness
        if not self.origin_wm:
            return -math.inf
        return max(self.origin_wm.values()) - lateness

    @property
    def horizon(self) -> float:
        """What verdicts are judged against: the watermark, or ``inf`` once every input of a replay ended."""
        return math.inf if self.finished else self.watermark

    def _ended(self) -> bool:
        return self.expected is not None and not (self.expected - self.eos)

    def _holds(self, origin: str, now_wall: float) -> bool:
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

    def _advance(self, now_wall: float, out: CorrelatorOutput) -> None:
        wm = self.current_watermark(now_wall)
        end = self._ended() and not self.finished
        if wm <= self.watermark and not end:
            # Late evidence for a job is judged at once against the watermark already reached.
            horizon = self.horizon
            for job_id in sorted(self._dirty & set(self.jobs)):
                if self.jobs[job_id].all_episodes() and horizon > -math.inf:
                    self._evaluate(self.jobs[job_id], horizon, out)
                    self._evaluate_contention(self.jobs[job_id], horizon, out)
                    self._evaluate_gpu(self.jobs[job_id], horizon, out)
            self._dirty.clear()
            return
        if end:  # every input ended: judge everything as if all time had passed, keep the last real watermark
            self.watermark = max(self.watermark, max(self.origin_wm.values(), default=-math.inf))
            wm = math.inf
        else:
            self.watermark = wm
        self._dirty.clear()
        if self.on_watermark is not None:
            self.on_watermark(wm, out)
        for job_id in sorted(self.jobs):
            self._evaluate(self.jobs[job_id], wm, out)
            self._evaluate_contention(self.jobs[job_id], wm, out)
            self._evaluate_gpu(self.jobs[job_id], wm, out)
        self._unsilence(wm, out)
        self._evict(wm)
        if end:
            self.finished = True
            out.finished = True

    # -- verdicts -------------------------------------------------------------------------------
    def _evaluate(self, job: JobTimeline, wm: float, out: CorrelatorOutput) -> None:
        cfg = self.config
        # Several incidents can become due at once after a watermark jump: take them in time order.
        for _ in range(100):
            inc = job.incident
            if inc is not None and not inc.resolved:
                self._join_symptoms(job, inc)
                self._revise(job, inc, wm, out)
                ended = [e.end_ts for e in job.all_episodes() if e.key in inc.symptom_keys]
                if ended and all(t is not None for t in ended):
                    # Flap damping: an incident stays firing at least min_firing_s after its onset.
                    cleared = max(max(t for t in ended if t is not None), inc.onset + cfg.min_firing_s)
                    if wm >= cleared + cfg.resolve_after_s:
                        for f in job.fired:
                            if f["alert"]["alert_id"] == inc.alert["alert_id"] and f["to"] is None:
                                f["to"] = cleared + cfg.resolve_after_s
                        self._emit(self._resolve(job, inc, cleared), wm, out)
                        continue
                return
            symptoms = sorted(
                (e for e in job.all_episodes() if e.role == "symptom" and e.ts > job.closed_until),
                key=lambda e: (e.ts, e.key),
            )
            if not symptoms or wm < symptoms[0].ts + cfg.grace_s:
                return
            alert = self._fire(job, symptoms[0].ts, wm)
            job.incident.alert = self._emit(alert, symptoms[0].ts + cfg.grace_s, out)  # type: ignore[union-attr]
            job.fired = [f for f in job.fired if f["to"] is None or f["to"] > wm - cfg.lookback_s][-8:]
            job.fired.append({"alert": alert, "from": symptoms[0].ts + cfg.grace_s, "to": None})
            self._supersede_gpu(job, alert, wm, out)

    # -- emission: silences, open alerts -------------------------------------------------------------
    def _emit(self, alert: dict[str, Any], t: float, out: CorrelatorOutput) -> dict[str, Any]:
        """Stamp the silences active at event time ``t``, track it while firing, and output it."""
        alert["silenced_by"] = self.rules.silenced_by(alert, t)
        if alert["status"] == "firing":
            self.open_alerts[alert["alert_id"]] = alert
        else:
            self.open_alerts.pop(alert["alert_id"], None)
        out.alerts.append(alert)
        return alert

    def _unsilence(self, wm: float, out: CorrelatorOutput) -> None:
        """A silence or maintenance window ended while its alert still fires: emit it again, unmuted."""
        for alert_id in sorted(self.open_alerts):
            alert = self.open_alerts[alert_id]
            if alert["silenced_by"] and self.rules.ended_between(alert["silenced_by"], wm):
                again = dict(alert, details=dict(alert.get("details") or {}, unsilenced_after=alert["silenced_by"]))
                self._emit(again, wm, out)
                for job in self.jobs.values():
                    if job.incident is not None and job.incident.alert.get("alert_id") == alert_id:
                        job.incident.alert = again

    # -- the GPU-utilisation symptom -------------------------------------------------------------------
    def _evaluate_gpu(self, job: JobTimeline, wm: float, out: CorrelatorOutput) -> None:
        """Many of a job's GPUs idle together: a gpu_utilisation alert, unless a cause alert inhibits it."""
        cfg = self.config
        state = job.gpu
        if state is not None and not state["resolved"]:
            eps = [e for e in job.all_episodes() if e.key in state["keys"]]
            ends = [e.end_ts for e in eps]
            if ends and all(t is not None for t in ends):
                cleared = max(t for t in ends if t is not None)
                if wm >= cleared + cfg.resolve_after_s:
                    state["resolved"] = True
                    job.gpu_closed_until = cleared
                    if state["alert"] is not None:
                        done = dict(state["alert"], status="resolved", resolved_at=format_ts(cleared))
                        state["alert"] = self._emit(Alert.model_validate(done).model_dump(mode="json"), cleared, out)
            return
        info = self.inventory.job(job.job_id)
        if info is None or info.gpus <= 0:
            return
        need = max(1, math.ceil(cfg.gpu_fraction * info.gpus))
        drops = sorted((e for e in job.all_episodes() if e.start["layer"] == "gpu"
                        and e.start["meaning"] == "utilisation" and e.start.get("direction") == "down"
                        and e.ts > job.gpu_closed_until), key=lambda e: (e.ts, e.key))
        if len(drops) < need:
            return
        t_star = None
        for e in drops:
            active = [d for d in drops if d.ts <= e.ts and (d.end_ts is None or e.ts < d.end_ts)]
            if len(active) >= need:
                t_star, members = e.ts, active
                break
        if t_star is None:
            return
        due = t_star + cfg.grace_s + cfg.symptom_hold_s
        if wm < due:
            return
        horizon = due + cfg.allowed_lateness_s
        members = [d for d in members if float(d.start.get("confirmed_ts", d.ts)) <= horizon]
        if len(members) < need:
            return
        alert = self._gpu_alert(job, info, members, t_star, due)
        # The cause alerts firing at the symptom's due time (not merely now: a jump of the watermark
        # may have settled the cause's resolution in the same step).
        sources = [a for a in self.open_alerts.values() if a.get("job_id") != job.job_id]
        sources += [f["alert"] for f in job.fired if f["from"] <= due and (f["to"] is None or f["to"] > due)]
        inhibited_by = self.rules.inhibited_by(alert, sources)
        job.gpu = {"start": t_star, "keys": sorted(d.key for d in drops if d.ts <= due), "resolved": False,
                   "alert": None, "inhibited_by": inhibited_by}
        if inhibited_by:
            out.inhibited.append(alert)
            return
        job.gpu["alert"] = self._emit(alert, due, out)

    def _supersede_gpu(self, job: JobTimeline, cause: dict[str, Any], wm: float, out: CorrelatorOutput) -> None:
        """A cause alert that arrives after the job's GPU symptom alert fired inhibits it after the fact:
        the symptom alert is resolved, naming the alert that explains it."""
        state = job.gpu
        if state is None or state["resolved"] or state["alert"] is None:
            return
        if not self.rules.inhibited_by(state["alert"], [cause]):
            return
        done = dict(state["alert"], status="resolved", resolved_at=cause["detected_at"],
                    details=dict(state["alert"].get("details") or {}, superseded_by=cause["alert_id"]))
        done["summary"] = state["alert"]["summary"] + f"; explained by {cause['type']} {cause['alert_id']}"
        state["alert"] = self._emit(Alert.model_validate(done).model_dump(mode="json"), wm, out)
        state["resolved"] = True
        state["inhibited_by"] = [cause["alert_id"]]

    def _gpu_alert(self, job: JobTimeline, info: Any, members: list[Episode], t_star: float,
                   due: float) -> dict[str, Any]:
        values = sorted(float(m.start["value"]) for m in members)
        base = sorted(float(m.start.get("p50") or 0.0) for m in members)
        value, baseline = values[len(values) // 2], base[len(base) // 2]
        ratio = value / baseline if baseline else 0.0
        dkey = f"gpu_utilisation/{job.job_id}"
        nodes = sorted({m.start["source"] for m in members})
        return Alert.model_validate({
            "alert_id": alert_id_for(dkey, t_star), "dedup_key": dkey, "type": "gpu_utilisation",
            "status": "firing", "severity": "error" if info.gpus >= self.config.critical_gpus else "warning",
            "job_id": job.job_id, "gpus": info.gpus, "nodes": list(info.nodes), "started_at": format_ts(t_star),
            "detected_at": format_ts(due), "resolved_at": None,
            "symptom": {"layer": "gpu", "metric": members[0].start["metric"], "baseline": baseline, "value": value,
                        "ratio": round(ratio, 3), "onset": format_ts(t_star)},
            "root_cause": {"domain": "unknown", "layer": None, "source": None, "labels": {}, "metric": None,
                           "first_seen": None, "reason": "GPU utilisation fell on many of the job's GPUs; no "
                                                         "job slowdown with a cause was found"},
            "timeline": self._timeline(members, t_star), "other_jobs": [],
            "summary": (f"job {job.job_id}: utilisation of {len(members)} of {info.gpus} GPUs on {len(nodes)} "
                        f"nodes fell to {value:.0f}% (p50 {baseline:.0f}%) since {format_ts(t_star)[11:19]}"),
            "labels": {"alertname": "gpu_utilisation", "job_id": job.job_id},
        }).model_dump(mode="json")

    def _evaluate_contention(self, job: JobTimeline, wm: float, out: CorrelatorOutput) -> None:
        cfg = self.config
        episodes = job.all_episodes()
        for c in find_contention(episodes, wm + cfg.allowed_lateness_s):
            key = f"{c.pool}@{c.start:.3f}"
            if key in job.contentions or c.jobs[0] != job.job_id or wm < c.start + cfg.grace_s:
                continue
            # Decide only on evidence guaranteed to be here by the due time (arrival order never matters).
            due = c.start + cfg.grace_s
            settled = [d for d in find_contention(episodes, due + cfg.allowed_lateness_s)
                       if d.pool == c.pool and abs(d.start - c.start) < 1e-9]
            if not settled:
                continue
            alert = self._emit(self._contention_alert(settled[0], due, wm, resolved_at=None), due, out)
            job.contentions[key] = {"alert": alert, "resolved": False, "due": due}
        for key, state in job.contentions.items():
            if state["resolved"]:
                continue
            pool, _, start = key.partition("@")
            current = [c for c in find_contention(episodes, math.inf) if c.pool == pool
                       and abs(c.start - float(start)) < 1e-9]
            if not current:
                continue
            lat_end = current[0].latency.end_ts
            if lat_end is not None and wm >= lat_end + cfg.resolve_after_s:
                alert = self._contention_alert(current[0], float(state["due"]), wm, resolved_at=lat_end)
                state["alert"], state["resolved"] = self._emit(alert, lat_end, out), True

    def _contention_alert(self, c: Any, due: float, wm: float, resolved_at: float | None) -> dict[str, Any]:
        now = resolved_at if resolved_at is not None else due
        gpus: dict[str, int] = {}
        for job_id in c.jobs:
            info = self.inventory.job(job_id, c.start) or self.inventory.job(job_id)
            gpus[job_id] = info.gpus if info else 0
        mover, shift, text = advice(c, gpus, now)
        end = overlap_end(c, now)
        lat = c.latency.start
        baseline = lat.get("p50") or 0.0
        ratio = (lat["value"] / baseline) if baseline else 0.0
        first = min(c.bursts, key=lambda b: (b.ts, b.start["labels"]["job_id"]))
        dkey = f"checkpoint_contention/{c.pool}/{'+'.join(c.jobs)}"
        timeline = [{"ts": format_ts(e.ts), "layer": e.start["layer"], "source": e.start["source"],
                     "labels": dict(e.start["labels"]), "metric": e.start["metric"], "value": e.start["value"],
                     "p50": e.start.get("p50"), "p99": e.start.get("p99"), "score": e.start["score"],
                     "meaning": e.start["meaning"], "entities": 1}
                    for e in sorted([c.latency, *c.bursts], key=lambda e: (e.ts, e.start["metric"]))]
        jobs_text = " and ".join(f"{j} ({gpus[j]} GPUs)" for j in c.jobs)
        summary = (f"checkpoint contention on {c.pool}: {jobs_text} wrote at the same time from "
                   f"{format_ts(c.start)[11:19]} for {end - c.start:.0f} s; write latency x{ratio:.1f}; {text}")
        if resolved_at is not None:
            summary += f"; resolved at {format_ts(resolved_at)[11:19]}"
        alert = Alert.model_validate({
            "alert_id": alert_id_for(dkey, c.start), "dedup_key": dkey, "type": "checkpoint_contention",
            "status": "resolved" if resolved_at is not None else "firing",
            "severity": "critical" if sum(gpus.values()) >= self.config.critical_gpus else "warning",
            "job_id": None, "gpus": sum(gpus.values()), "nodes": [],
            "started_at": format_ts(c.start), "detected_at": format_ts(due),
            "resolved_at": format_ts(resolved_at) if resolved_at is not None else None,
            "symptom": {"layer": "storage", "metric": lat["metric"], "baseline": baseline, "value": lat["value"],
                        "ratio": round(ratio, 3), "onset": format_ts(c.latency.ts)},
            "root_cause": {"domain": "storage", "layer": "storage", "source": c.pool,
                           "labels": dict(first.start["labels"]), "metric": first.start["metric"],
                           "first_seen": format_ts(first.ts), "meaning": "throughput",
                           "reason": f"{len(c.jobs)} jobs burst writes to {c.pool} together while its write "
                                     "latency climbed"},
            "timeline": timeline,
            "other_jobs": [{"job_id": j, "gpus": gpus[j], "relation": "contending"} for j in c.jobs],
            "summary": summary,
            "labels": {"alertname": "checkpoint_contention", "pool": c.pool, "domain": "storage"},
            "details": {"pool": c.pool, "jobs": list(c.jobs),
                        "overlap": {"start": format_ts(c.start), "end": format_ts(end),
                                    "seconds": round(end - c.start, 1)},
                        "advice": {"move": mover, "by_seconds": round(shift, 1), "text": text}},
        }).model_dump(mode="json")
        return alert

    def _join_symptoms(self, job: JobTimeline, inc: Incident) -> None:
        for e in job.all_episodes():
            if e.role == "symptom" and e.ts >= inc.onset and e.key not in inc.symptom_keys and e.end_ts is None:
                inc.symptom_keys.add(e.key)

    def _fire(self, job: JobTimeline, onset: float, wm: float) -> dict[str, Any]:
        cfg = self.config
        # Only evidence guaranteed to have arrived by the verdict (confirmed within the lateness bound
        # of its due time) is used, so the verdict never depends on arrival timing.
        due = onset + cfg.grace_s
        horizon = due + cfg.allowed_lateness_s
        window = [e for e in job.all_episodes()
                  if onset - cfg.lookback_s <= e.ts <= due and float(e.start.get("confirmed_ts", e.ts)) <= horizon]
        symptoms = sorted((e for e in window if e.role == "symptom" and e.ts >= onset), key=lambda e: (e.ts, e.key))
        # A cause must still be acting when the job degrades: an episode that ended well before the
        # onset (a blip during warm-up, a flap a minute ago) is history, not the first mover.
        causes = [e for e in window if e.role == "cause" and e.ts <= onset
                  and (e.end_ts is None or e.end_ts >= onset - cfg.grace_s)]
        first = first_mover(causes)
        domain, reason = self._domain(job.job_id, first, causes, onset)
        root_rec = first.start if first is not None else None
        if root_rec is None:
            # No component moved first; a worker that lags its peers since about the onset is the lead.
            straggler = self._straggler_for(job.job_id, onset)
            if straggler is not None:
                root_rec, domain, reason = _straggler_root(straggler)
        info = self.inventory.job(job.job_id, onset) or self.inventory.job(job.job_id)
        gpus = info.gpus if info else 0
        hosts = {e.start["source"] for e in window if e.start["layer"] not in ("switch", "storage")}
        nodes = list(info.nodes) if info else sorted(hosts)
        sym = symptoms[0].start
        baseline = sym.get("p50") or 0.0
        ratio = (sym["value"] / baseline) if baseline else 0.0
        severity = "warning"
        if gpus >= cfg.critical_gpus or ratio >= cfg.critical_ratio:
            severity = "critical"
        elif ratio >= 1.5 or gpus >= cfg.critical_gpus // 4:
            severity = "error"
        dkey = dedup_key("job_slowdown", job.job_id, domain, root_rec)
        # Flap damping: the same cause back within the flap window reopens the same incident.
        alert_id, reopened = alert_id_for(dkey, onset), 0
        last = job.last_resolved
        if last is not None and last["dedup_key"] == dkey and onset - last["resolved_at"] < cfg.flap_window_s:
            alert_id, reopened = last["alert_id"], last["reopened"] + 1
        timeline = self._timeline(window, onset, first)
        other = []
        if root_rec is not None:
            for other_id, other_gpus, relation in self.inventory.neighbours(
                    job.job_id, root_rec["layer"], root_rec["source"], root_rec["labels"], onset):
                other.append({"job_id": other_id, "gpus": other_gpus, "relation": relation})
        detected = due  # the event time at which the verdict was due (deterministic, unlike arrival)
        root = {
            "domain": domain, "layer": root_rec["layer"] if root_rec else None,
            "source": root_rec["source"] if root_rec else None,
            "labels": dict(root_rec["labels"]) if root_rec else {},
            "metric": root_rec["metric"] if root_rec else None,
            "first_seen": format_ts(root_rec["ts"]) if root_rec else None,
            "meaning": root_rec["meaning"] if root_rec else None, "reason": reason,
        }
        alert = Alert.model_validate({
            "alert_id": alert_id, "dedup_key": dkey, "type": "job_slowdown",
            "status": "firing", "severity": severity, "job_id": job.job_id, "gpus": gpus, "nodes": nodes,
            "started_at": format_ts(onset), "detected_at": format_ts(detected), "resolved_at": None,
            "symptom": {"layer": sym["layer"], "metric": sym["metric"], "baseline": baseline,
                        "value": sym["value"], "ratio": round(ratio, 3), "onset": format_ts(onset)},
            "root_cause": root, "timeline": timeline, "other_jobs": other,
            "summary": self._summary(job.job_id, gpus, len(nodes), ratio, onset, root, timeline),
            "labels": {"job_id": job.job_id, "domain": domain, "alertname": "job_slowdown"},
            "details": {"reopened": reopened} if reopened else {},
        }).model_dump(mode="json")
        job.incident = Incident(alert, onset, {e.key for e in symptoms})
        return alert

    def _domain(self, job_id: str, first: Episode | None, causes: list[Episode], onset: float) -> tuple[str, str]:
        """The bottleneck domain from the first mover and the rest of the evidence (docs/correlation.md)."""
        if first is None:
            return "unknown", "no component moved before the slowdown"
        layer, meaning = first.start["layer"], first.start["meaning"]
        where = f"{first.start['source']} {_labels_text(first.start['labels'])}".strip()
        fabric = [c for c in causes if c.start["layer"] in ("switch", "nic") and c.start["meaning"] in NETWORK_MEANINGS]
        slow_pools = sorted({c.start["source"] for c in causes if c.start["layer"] == "storage"
                             and c.start["meaning"] == "latency"})
        if layer in ("switch", "nic") and meaning in NETWORK_MEANINGS:
            for pool in slow_pools:
                if layer == "switch" and first.start["source"] in self.inventory.pool_switches.get(pool, set()):
                    return "network", (f"storage via network: {where} on pool {pool}'s path moved first "
                                       f"({meaning}) and {pool}'s latency rose with it")
            return "network", f"{layer} {where} {meaning} moved first"
        if layer == "storage":
            pool = first.start["source"]
            pool_switches = self.inventory.pool_switches.get(pool, set())
            job_fabric = self.inventory.fabric_switches(job_id, onset)
            on_path = [c for c in fabric if c.start["layer"] == "switch" and c.start["source"] in pool_switches]
            shared = pool_switches & job_fabric
            if on_path or (shared and fabric):
                via = sorted({c.start["source"] for c in on_path}) or sorted(shared)
                return "network", (f"storage via network: pool {pool}'s latency moved first while {via} on its "
                                   "path took errors; investigate the storage network")
            return "storage", f"pool {pool} {meaning} moved first"
        if layer == "gpu" and meaning in ("gpu_fault", "throttle", "temperature"):
            return "compute", f"{where} {meaning} moved first"
        if (layer == "host" and meaning == "utilisation") or meaning == "loader_wait":
            if fabric or slow_pools:
                return "unknown", (f"data preparation on {first.start['source']} saturated first, but network or "
                                   "storage moved too")
            return "dataloader", f"data preparation on {first.start['source']} saturated first"
        return "unknown", f"{layer} {meaning} moved first; no fabric, storage or GPU fault evidence"

    def _timeline(self, window: list[Episode], onset: float, root: Episode | None = None) -> list[dict[str, Any]]:
        """The evidence in event-time order, one entry per (layer, metric) with how many entities it
        covers; the root cause first (it can only differ from the earliest within timing uncertainty)."""
        groups: dict[tuple[str, str], list[Episode]] = {}
        for e in window:
            groups.setdefault((e.start["layer"], e.start["metric"]), []).append(e)
        entries = []
        for eps in groups.values():
            eps.sort(key=lambda e: evidence_order(e.start, e.key))
            e = root if root is not None and root in eps else eps[0]
            r = e.start
            entries.append((evidence_order(r, e.key), {
                "ts": format_ts(r["ts"]), "layer": r["layer"], "source": r["source"], "labels": dict(r["labels"]),
                "metric": r["metric"], "value": r["value"], "p50": r.get("p50"), "p99": r.get("p99"),
                "score": r["score"], "meaning": r["meaning"], "entities": len({x.key for x in eps}),
                "clock_offset": r.get("clock_offset") or None,
            }))
        entries.sort(key=lambda t: (root is None or t[1]["metric"] != root.start["metric"]
                                    or t[1]["layer"] != root.start["layer"], t[0]))
        return [t[1] for t in entries[: self.config.timeline_limit]]

    def _summary(self, job_id: str, gpus: int, n_nodes: int, ratio: float, onset: float,
                 root: dict[str, Any], timeline: list[dict[str, Any]]) -> str:
        head = f"job {job_id} ({gpus} GPUs, {n_nodes} nodes) slowed"
        if ratio:
            head += f": step time x{ratio:.1f}"
        head += f" since {format_ts(onset)[11:19]}"
        if root["source"] is None:
            return head + "; no component moved first (domain unknown)"
        where = f"{root['layer']} {root['source']}" + (f" {_labels_text(root['labels'])}" if root["labels"] else "")
        order = " -> ".join(dict.fromkeys(e["layer"] for e in timeline))
        first = root["first_seen"][11:19]
        return f"{head}; {root['domain']}: {where} moved first at {first} ({root['metric']}); {order}"

    def _resolve(self, job: JobTimeline, inc: Incident, cleared: float) -> dict[str, Any]:
        alert = dict(inc.alert)
        alert["status"] = "resolved"
        alert["resolved_at"] = format_ts(cleared)
        alert["summary"] = inc.alert["summary"] + f"; resolved at {format_ts(cleared)[11:19]}"
        inc.resolved = True
        job.closed_until = max(job.closed_until, cleared)
        job.incident = None
        job.last_resolved = {"dedup_key": alert["dedup_key"], "alert_id": alert["alert_id"], "resolved_at": cleared,
                             "reopened": int((alert.get("details") or {}).get("reopened", 0))}
        return Alert.model_validate(alert).model_dump(mode="json")

    def _revise(self, job: JobTimeline, inc: Incident, wm: float, out: CorrelatorOutput) -> None:
        """Evidence that arrived after the verdict (beyond the lateness bound) can name an earlier first
        mover: the firing alert is updated (same id and dedup key), never silently left wrong."""
        cfg = self.config
        if not any(e.ts <= inc.onset and float(e.start.get("confirmed_ts", e.ts)) > inc.onset + cfg.grace_s
                   + cfg.allowed_lateness_s for e in job.all_episodes() if e.role == "cause"):
            return
        causes = [e for e in job.all_episodes() if e.role == "cause" and inc.onset - cfg.lookback_s <= e.ts
                  <= inc.onset and (e.end_ts is None or e.end_ts >= inc.onset - cfg.grace_s)]
        first = first_mover(causes)
        root = inc.alert["root_cause"]
        if first is None or (first.start["layer"], first.start["source"], first.start["labels"]) == (
                root.get("layer"), root.get("source"), root.get("labels")):
            return
        domain, reason = self._domain(job.job_id, first, causes, inc.onset)
        window = [e for e in job.all_episodes() if inc.onset - cfg.lookback_s <= e.ts <= inc.onset + cfg.grace_s]
        r = first.start
        revised = dict(inc.alert)
        revised["root_cause"] = {"domain": domain, "layer": r["layer"], "source": r["source"],
                                 "labels": dict(r["labels"]), "metric": r["metric"], "first_seen": format_ts(r["ts"]),
                                 "meaning": r["meaning"], "reason": reason + " (revised: evidence arrived late)"}
        revised["timeline"] = self._timeline(window, inc.onset, first)
        details = dict(revised.get("details") or {})
        details["revised_from"] = {k: root.get(k) for k in ("domain", "layer", "source", "labels", "metric")}
        revised["details"] = details
        revised["labels"] = dict(revised.get("labels") or {}, domain=domain)
        inc.alert = self._emit(Alert.model_validate(revised).model_dump(mode="json"), wm, out)

    def _evict(self, wm: float) -> None:
        if not math.isfinite(wm):
            return
        horizon = wm - self.config.lookback_s - self.config.resolve_after_s - self.config.grace_s
        for job_id in list(self.jobs):
            job = self.jobs[job_id]
            if any(not c["resolved"] for c in job.contentions.values()):
                continue  # an open contention still needs its pool's episodes
            job.contentions = {k: c for k, c in job.contentions.items()
                               if float(k.partition("@")[2]) >= horizon - self.config.lookback_s}
            for key in list(job.episodes):
                kept = [e for e in job.episodes[key] if e.end_ts is None or e.end_ts >= horizon
                        or (job.incident and key in job.incident.symptom_keys)]
                if kept:
                    job.episodes[key] = kept
                else:
                    del job.episodes[key]
            if not job.episodes and job.incident is None and not job.contentions:
                del self.jobs[job_id]

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "origin_wm": self.origin_wm, "eos": sorted(self.eos),
            "watermark": self.watermark if math.isfinite(self.watermark) else None,
            "finished": self.finished,
            "max_event_ts": _num(self.max_event_ts), "late_count": self.late_count,
            "open_alerts": self.open_alerts, "clock_open": self.clock_open,
            "straggler_open": self.straggler_open,
            "jobs": {
                jid: {
                    "closed_until": _num(job.closed_until),
                    "episodes": [[e.key, e.start, e.end_ts] for e in job.all_episodes()],
                    "incident": None if job.incident is None else {
                        "alert": job.incident.alert, "onset": job.incident.onset,
                        "symptom_keys": sorted(job.incident.symptom_keys)},
                    "contentions": job.contentions,
                    "gpu": job.gpu, "gpu_closed_until": _num(job.gpu_closed_until),
                    "last_resolved": job.last_resolved, "fired": job.fired,
                } for jid, job in self.jobs.items()
            },
        }

    def restore(self, data: dict[str, Any], now_wall: float) -> None:
        """Take a :meth:`snapshot` back. A non-finite progress or ``+inf`` watermark (written by versions
        whose watermark could run away after a lull) is repaired: progress that is not finite is dropped,
        and the watermark is recomputed from what remains (``-inf`` if nothing does)."""
        self.origin_wm = {k: float(v) for k, v in data["origin_wm"].items() if math.isfinite(float(v))}
        self.origin_seen = dict.fromkeys(self.origin_wm, now_wall)

        self.eos = set(data["eos"])
        self.finished = bool(data.get("finished", False))
        self.watermark = -math.inf if data["watermark"] is None else _unnum(data["watermark"])
        if self.watermark == math.inf:
            progress = max(self.origin_wm.values(), default=-math.inf)
            self.watermark = progress if progress == -math.inf else progress - self.config.allowed_lateness_s
            self.repaired_watermark = True
        self.max_event_ts = _unnum(data["max_event_ts"])
        self.late_count = int(data["late_count"])
        self.open_alerts = dict(data.get("open_alerts", {}))
        self.clock_open = dict(data.get("clock_open", {}))
        self.straggler_open = dict(data.get("straggler_open", {}))
        self.jobs = {}
        for jid, jd in data["jobs"].items():
            job = JobTimeline(jid, closed_until=_unnum(jd["closed_until"]))
            for key, start, end_ts in jd["episodes"]:
                job.episodes.setdefault(key, []).append(Episode(key, start, end_ts))
            if jd["incident"] is not None:
                job.incident = Incident(jd["incident"]["alert"], jd["incident"]["onset"],
                                        set(jd["incident"]["symptom_keys"]))
            job.contentions = dict(jd.get("contentions", {}))
            job.gpu = jd.get("gpu")
            job.last_resolved = jd.get("last_resolved")
            job.fired = list(jd.get("fired", []))
            job.gpu_closed_until = _unnum(jd.get("gpu_closed_until", "-inf"))
            self.jobs[jid] = job


def _straggler_root(alert: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """A straggler alert as a job slowdown's first mover: (root record, domain, reason)."""
    rc, d = alert["root_cause"], alert["details"]
    rec = {"layer": rc["layer"], "source": rc["source"], "labels": dict(rc["labels"]), "metric": rc["metric"],
           "ts": parse_ts(alert["started_at"]), "meaning": "straggler"}
    reason = (f"no component moved first, but {d['worker']} lags its {d['workers_compared'] - 1} peers "
              f"(x{d['ratio_to_median']:.2f} their median step) since {alert['started_at'][11:19]}: the job "
              "waits for it")
    return rec, "compute", reason


def _labels_text(labels: dict[str, str]) -> str:
    if "port" in labels and len(labels) == 1:
        return f"port {labels['port']}"
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def _unnum(v: float | str) -> float:
    return float(v)
