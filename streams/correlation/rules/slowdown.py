"""Job slowdown: the job's own step time degrades; the verdict names the first mover and its domain.

A slowdown with onset ``O`` (the first symptom episode after the last closed incident) is judged once
the horizon passes ``O + grace``, on the evidence confirmed by then plus the allowed lateness, so any
arrival order within the lateness bound gives the same verdict::

    switch leaf1:12  SymbolErrorCounter ....XXXXXXXXXX     <- first mover
    step   n1        step_time_seconds  ........XXXXXX     <- onset O
                                        |<- lookback ->|O  verdict at O + grace

It resolves ``resolve_after_s`` after its last symptom ended (and no earlier than ``min_firing_s``
after the onset); the same cause back within ``flap_window_s`` reopens the same incident. Evidence that
arrives after the verdict and names an earlier first mover revises the firing alert (same id); a lead
found later (a straggler confirmed after the verdict) revises a verdict that named nothing.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, OtherJob, RootCause, Severity, Symptom, TimelineEntry
from models.timeutil import format_ts
from streams.correlation import evidence
from streams.correlation.domains import Facts, domain_of
from streams.correlation.keys import alert_id_for, dedup_key
from streams.correlation.lifecycle import settled
from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import Episode, EpisodeKey, Fired, JobTimeline, num

UNKNOWN_TAIL = "; no component moved first (domain unknown)"

#: A cause is a *significant* change when it lies at least this many times outside its own series'
#: normal: its value over its median for a rise, its median over its value for a fall (docs/correlation.md).
SIGNIFICANT_MAGNITUDE = 2.0


def magnitude(rec: dict[str, Any]) -> float:
    """How far outside its own normal an anomaly's first value is, as a factor (1: its normal).

    The normal is the series' median (p50) when the episode started; the p99 is no measure of it (the
    percentile window already holds the anomaly's first samples). A fabric counter (errors, drops,
    retransmits, congestion: a rate of whole events) counts at least one event per sampling interval as
    normal: fewer cannot be told from the counter's own quantisation, so a lone pause frame on a NIC that
    pauses now and then is its normal, whatever its median. Any other series whose median is zero (an
    XID field) is infinitely changed by any move, and so is an event series (``mode`` ``event``).

    >>> pause = {"meaning": "congestion", "direction": "up", "value": 1.0, "p50": 0.3, "interval": 1.0}
    >>> storm = {"meaning": "congestion", "direction": "up", "value": 25000.0, "p50": 0.3, "interval": 1.0}
    >>> magnitude(pause), magnitude(storm)
    (1.0, 25000.0)
    >>> magnitude({"meaning": "latency", "direction": "up", "value": 0.016, "p50": 0.002, "interval": 1.0})
    8.0
    >>> magnitude({"meaning": "utilisation", "direction": "down", "value": 19.0, "p50": 95.0, "interval": 1.0})
    5.0
    >>> magnitude({"meaning": "gpu_fault", "direction": "up", "value": 79.0, "p50": 0.0, "interval": 1.0})
    inf
    >>> magnitude({"meaning": "link_down", "mode": "event", "direction": "up", "value": 1.0, "p50": 0.0,
    ...            "interval": 0.0})
    inf
    """
    value = float(rec["value"])
    p50 = rec.get("p50")
    if p50 is None or rec.get("mode") == "event":
        # no baseline yet: nothing to call it small against; or an event (an XID, an Alertmanager alert):
        # a discrete change already judged by its source, not a count of whole events per interval
        return math.inf
    normal = float(p50)
    if rec.get("meaning") in evidence.NETWORK_MEANINGS:
        interval = float(rec.get("interval") or 0.0)
        normal = max(normal, 1.0 / interval if interval > 0 else 1.0)
    if rec.get("direction", "up") == "down":
        if normal <= 0.0:
            return math.inf if value < normal else 1.0
        return math.inf if value <= 0.0 else normal / value
    if normal <= 0.0:
        return math.inf if value > normal else 1.0
    return value / normal


def first_mover(causes: Sequence[Episode]) -> Episode | None:
    """The earliest *significant* cause (:data:`SIGNIFICANT_MAGNITUDE`), with the timing uncertainty and
    causal order of :func:`streams.correlation.evidence.first_mover`; when no cause is significant, the
    earliest of them all (a small change is still a lead, and the domain table says how sure it is).

    Onset alone would let one pause frame 30 s earlier on another node beat the NIC sending 25,000
    pauses/s; magnitude alone would let a large late effect beat its cause. Significance is measured on
    each series against its own normal, so a sparse counter ticking at its usual rate is never the
    first mover while anything moved for real.
    """
    significant = [e for e in causes if magnitude(e.start) >= SIGNIFICANT_MAGNITUDE]
    return evidence.first_mover(significant or causes)


@dataclass
class Incident:
    alert: Alert
    onset: float
    symptom_keys: set[EpisodeKey]
    resolved: bool = False


@dataclass(frozen=True)
class LastResolved:
    """The last resolved incident: a new one with the same cause soon after is the same incident reopened."""

    dedup_key: str
    alert_id: str
    resolved_at: float
    reopened: int


@dataclass
class SlowdownState:
    incident: Incident | None = None
    #: symptoms before this belong to a closed incident
    closed_until: float = -math.inf
    last_resolved: LastResolved | None = None


class SlowdownRule(BaseRule):
    name = "slowdown"
    job_keys: ClassVar[tuple[str, ...]] = ("closed_until", "incident", "last_resolved")

    def _state(self, job: JobTimeline) -> SlowdownState:
        return job.state(self.name, SlowdownState)

    def _held(self, job: JobTimeline | None) -> SlowdownState | None:
        held = job.rule_state.get(self.name) if job is not None else None
        return held if isinstance(held, SlowdownState) else None

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        cfg = ctx.config
        st = self._state(job)
        # Several incidents can become due at once after a watermark jump: take them in time order.
        for _ in range(100):
            inc = st.incident
            if inc is not None and not inc.resolved:
                _join_symptoms(job, inc)
                self._revise(job, inc, horizon, ctx)
                ended = [e.end_ts for e in job.all_episodes() if e.key in inc.symptom_keys]
                if ended and all(t is not None for t in ended):
                    # Flap damping: an incident stays firing at least min_firing_s after its onset.
                    cleared = max(max(t for t in ended if t is not None), inc.onset + cfg.min_firing_s)
                    if horizon >= cleared + cfg.resolve_after_s:
                        for f in job.fired:
                            if f.alert.alert_id == inc.alert.alert_id and f.end is None:
                                f.end = cleared + cfg.resolve_after_s
                        ctx.emit(_resolve(st, inc, cleared), horizon)
                        continue
                return
            symptoms = sorted((e for e in job.all_episodes() if e.role == "symptom" and e.ts > st.closed_until),
                              key=lambda e: (e.ts, e.key))
            if not symptoms or horizon < symptoms[0].ts + max(cfg.grace_s, cfg.job_end_margin_s):
                return  # the end margin passed too, so a job end around the onset is known
            outside = _outside_running_span(symptoms, job.job_id, ctx)
            if outside is not None:
                st.closed_until = outside  # a job starting or ending is never a slowdown
                continue
            onset = symptoms[0].ts
            incident = self._fire(job, st, onset, ctx)
            alert = incident.alert = ctx.emit(incident.alert, onset + cfg.grace_s)
            job.fired = [f for f in job.fired if f.end is None or f.end > horizon - cfg.lookback_s][-8:]
            job.fired.append(Fired(alert, onset + cfg.grace_s))
            ctx.cause_fired(job, alert, horizon)
            self.on_lead(job.job_id, ctx)  # a lead that was known only after the verdict's due time

    def _fire(self, job: JobTimeline, st: SlowdownState, onset: float, ctx: RuleContext) -> Incident:
        cfg = ctx.config
        v = _verdict(job, onset, ctx)
        info = ctx.inventory.job(job.job_id, onset) or ctx.inventory.job(job.job_id)
        gpus = info.gpus if info else 0
        hosts = {e.start["source"] for e in v.window if e.start["layer"] not in ("switch", "storage")}
        nodes = list(info.nodes) if info else sorted(hosts)
        sym = v.symptoms[0].start
        baseline = sym.get("p50") or 0.0
        ratio = (sym["value"] / baseline) if baseline else 0.0
        dkey = dedup_key("job_slowdown", job.job_id, v.domain.value, v.root)
        # Flap damping: the same cause back within the flap window reopens the same incident.
        alert_id, reopened = alert_id_for(dkey, onset), 0
        last = st.last_resolved
        if last is not None and last.dedup_key == dkey and onset - last.resolved_at < cfg.flap_window_s:
            alert_id, reopened = last.alert_id, last.reopened + 1
        timeline = evidence.timeline(v.window, cfg.timeline_limit, v.first)
        root = _root_cause(v.root, v.domain, v.reason)
        details: dict[str, Any] = {"reopened": reopened} if reopened else {}
        summary = _summary(job.job_id, gpus, len(nodes), ratio, onset, root, timeline)
        # The scheduler's own word on the nodes behind the root cause (drained, down, failing).
        states = ctx.inventory.node_state_evidence(root.layer or "", root.source or "", dict(root.labels))
        if states:
            details["node_states"] = states
            summary += "; " + "; ".join(str(s["text"]) for s in states)
        alert = Alert(
            alert_id=alert_id, dedup_key=dkey, type="job_slowdown", status=AlertStatus.FIRING,
            severity=_severity(gpus, ratio, ctx), job_id=job.job_id, gpus=gpus, nodes=nodes,
            started_at=format_ts(onset), detected_at=format_ts(onset + cfg.grace_s), resolved_at=None,
            symptom=Symptom(layer=sym["layer"], metric=sym["metric"], baseline=baseline, value=sym["value"],
                            ratio=round(ratio, 3), onset=format_ts(onset)),
            root_cause=root, timeline=timeline, other_jobs=_other_jobs(job.job_id, v.root, onset, ctx),
            summary=summary,
            labels={"job_id": job.job_id, "domain": v.domain.value, "alertname": "job_slowdown"},
            details=details)
        st.incident = Incident(alert, onset, {e.key for e in v.symptoms})
        return st.incident

    def _revise(self, job: JobTimeline, inc: Incident, horizon: float, ctx: RuleContext) -> None:
        """Evidence that arrived after the verdict (beyond the lateness bound) can name an earlier first
        mover: the firing alert is updated (same id and dedup key), never silently left wrong."""
        cfg = ctx.config
        late = any(e.ts <= inc.onset and float(e.start.get("confirmed_ts", e.ts)) > inc.onset + cfg.grace_s
                   + cfg.allowed_lateness_s for e in job.all_episodes() if e.role == "cause")
        # evidence re-timed by a clock skew learned after the verdict (Correlator._learn_clock)
        retimed = any(e.start.get("retimed") for e in job.all_episodes())
        if not late and not retimed:
            return
        causes = [e for e in job.all_episodes() if e.role == "cause" and inc.onset - cfg.lookback_s <= e.ts
                  <= inc.onset and (e.end_ts is None or e.end_ts >= inc.onset - cfg.grace_s)]
        first = first_mover(causes)
        root = inc.alert.root_cause
        if first is None or (first.start["layer"], first.start["source"], first.start["labels"]) == (
                root.layer, root.source, root.labels):
            return
        domain, reason = domain_of(Facts(first, causes, ctx.inventory, job.job_id, inc.onset))
        window = [e for e in job.all_episodes() if inc.onset - cfg.lookback_s <= e.ts <= inc.onset + cfg.grace_s]
        revised_from = {"domain": root.domain.value, "layer": root.layer, "source": root.source,
                        "labels": dict(root.labels), "metric": root.metric}
        revised = inc.alert.model_copy(update={
            "root_cause": _root_cause(first.start, domain, reason + (
                " (revised: evidence arrived late)" if late else " (revised: evidence re-timed by a clock skew)")),
            "timeline": evidence.timeline(window, cfg.timeline_limit, first),
            "details": dict(inc.alert.details, revised_from=revised_from),
            "labels": dict(inc.alert.labels, domain=domain.value),
        })
        inc.alert = ctx.emit(revised, horizon)

    def on_lead(self, job_id: str, ctx: RuleContext) -> None:
        """A slowdown with no first mover, then a lead found around its onset: the lead becomes its root
        cause (the alert is revised, same id and dedup key)."""
        st = self._held(ctx.jobs.get(job_id))
        inc = st.incident if st is not None else None
        if inc is None or inc.resolved or inc.alert.root_cause.source is not None:
            return
        lead = ctx.lead_for(job_id, inc.onset)
        if lead is None:
            return
        revised = inc.alert.model_copy(update={
            "root_cause": _root_cause(lead.record, lead.domain, lead.revised_reason),
            "details": dict(inc.alert.details, **lead.details, revised_from={"domain": Domain.UNKNOWN.value}),
            "labels": dict(inc.alert.labels, domain=lead.domain.value),
            "summary": inc.alert.summary.replace(UNKNOWN_TAIL, "") + lead.summary,
        })
        inc.alert = ctx.emit(revised, lead.known_at)

    def on_reemit(self, alert: Alert, ctx: RuleContext) -> None:
        for job in ctx.jobs.values():
            st = self._held(job)
            if st is not None and st.incident is not None and st.incident.alert.alert_id == alert.alert_id:
                st.incident.alert = alert

    def pins(self, job: JobTimeline) -> Collection[EpisodeKey]:
        st = self._held(job)
        return st.incident.symptom_keys if st is not None and st.incident is not None else ()

    def keeps(self, job: JobTimeline) -> bool:
        st = self._held(job)
        return st is not None and st.incident is not None

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        st = self._held(job) or SlowdownState()
        inc, last = st.incident, st.last_resolved
        return {
            "closed_until": num(st.closed_until),
            "incident": None if inc is None else {"alert": inc.alert.model_dump(mode="json"), "onset": inc.onset,
                                                  "symptom_keys": sorted(inc.symptom_keys)},
            "last_resolved": None if last is None else {"dedup_key": last.dedup_key, "alert_id": last.alert_id,
                                                        "resolved_at": last.resolved_at, "reopened": last.reopened},
        }

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None:
        st = self._state(job)
        st.closed_until = float(data.get("closed_until", "-inf"))
        inc, last = data.get("incident"), data.get("last_resolved")
        if inc is not None:
            st.incident = Incident(Alert.model_validate(inc["alert"]), float(inc["onset"]),
                                   {EpisodeKey(k) for k in inc["symptom_keys"]})
        if last is not None:
            st.last_resolved = LastResolved(str(last["dedup_key"]), str(last["alert_id"]),
                                            float(last["resolved_at"]), int(last["reopened"]))


@dataclass(frozen=True)
class Verdict:
    window: list[Episode]  # the evidence the verdict may use
    symptoms: list[Episode]  # the job's symptoms from the onset, earliest first
    first: Episode | None  # the first mover
    root: dict[str, Any] | None  # the root cause as an evidence record: the first mover's, or a lead's
    domain: Domain
    reason: str


def _verdict(job: JobTimeline, onset: float, ctx: RuleContext) -> Verdict:
    """The first mover and domain of a slowdown with onset ``onset``.

    Only evidence guaranteed to have arrived by the verdict (confirmed within the lateness bound of its
    due time) is used, so the verdict never depends on arrival timing.
    """
    cfg = ctx.config
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
    domain, reason = domain_of(Facts(first, causes, ctx.inventory, job.job_id, onset))
    if first is not None:
        return Verdict(window, symptoms, first, first.start, domain, reason)
    # No component moved first; a lead (a worker that lags its peers since about the onset) is the root.
    # A lead known only after the verdict (a watermark jump judged both at once) revises it instead.
    lead = ctx.lead_for(job.job_id, onset)
    if lead is not None and lead.known_at <= horizon:
        return Verdict(window, symptoms, None, lead.record, lead.domain, lead.reason)
    return Verdict(window, symptoms, None, None, domain, reason)


def _outside_running_span(symptoms: list[Episode], job_id: str, ctx: RuleContext) -> float | None:
    """The onset of the last of the leading ``symptoms`` that fall outside the job's RUNNING span less the
    settling margin (:mod:`streams.correlation.lifecycle`), None when the first counts. A job the scheduler
    never named is judged as before: nothing to tell its span by."""
    if ctx.inventory.job(job_id) is None:
        return None
    last = None
    for e in symptoms:
        info = ctx.inventory.job(job_id, e.ts)
        if info is not None and settled(info, e.ts, ctx.config.job_end_margin_s):
            break
        last = e.ts
    return last


def _root_cause(rec: dict[str, Any] | None, domain: Domain, reason: str) -> RootCause:
    if rec is None:
        return RootCause(domain=domain, layer=None, source=None, labels={}, metric=None, first_seen=None,
                         meaning=None, reason=reason)
    return RootCause(domain=domain, layer=rec["layer"], source=rec["source"], labels=dict(rec["labels"]),
                     metric=rec["metric"], first_seen=format_ts(rec["ts"]), meaning=rec["meaning"], reason=reason)


def _other_jobs(job_id: str, root: dict[str, Any] | None, onset: float, ctx: RuleContext) -> list[OtherJob]:
    """The other jobs behind the root cause (same port, switch or pool), with how they relate to it."""
    if root is None:
        return []
    return [OtherJob(job_id=other_id, gpus=gpus, relation=relation) for other_id, gpus, relation in
            ctx.inventory.neighbours(job_id, root["layer"], root["source"], root["labels"], onset)]


def _join_symptoms(job: JobTimeline, inc: Incident) -> None:
    for e in job.all_episodes():
        if e.role == "symptom" and e.ts >= inc.onset and e.key not in inc.symptom_keys and e.end_ts is None:
            inc.symptom_keys.add(e.key)


def _resolve(st: SlowdownState, inc: Incident, cleared: float) -> Alert:
    alert = inc.alert.model_copy(update={
        "status": AlertStatus.RESOLVED, "resolved_at": format_ts(cleared),
        "summary": inc.alert.summary + f"; resolved at {format_ts(cleared)[11:19]}"})
    inc.resolved = True
    st.closed_until = max(st.closed_until, cleared)
    st.incident = None
    reopened = alert.details.get("reopened", 0)
    st.last_resolved = LastResolved(alert.dedup_key, alert.alert_id, cleared,
                                    int(reopened) if isinstance(reopened, int | float) else 0)
    return alert


def _severity(gpus: int, ratio: float, ctx: RuleContext) -> Severity:
    cfg = ctx.config
    if gpus >= cfg.critical_gpus or ratio >= cfg.critical_ratio:
        return Severity.CRITICAL
    if ratio >= 1.5 or gpus >= cfg.critical_gpus // 4:
        return Severity.ERROR
    return Severity.WARNING


def _summary(job_id: str, gpus: int, n_nodes: int, ratio: float, onset: float, root: RootCause,
             timeline: list[TimelineEntry]) -> str:
    head = f"job {job_id} ({gpus} GPUs, {n_nodes} nodes) slowed"
    if ratio:
        head += f": step time x{ratio:.1f}"
    head += f" since {format_ts(onset)[11:19]}"
    if root.source is None:
        return head + UNKNOWN_TAIL
    where = f"{root.layer} {root.source}" + (f" {evidence.labels_text(root.labels)}" if root.labels else "")
    order = " -> ".join(dict.fromkeys(e.layer for e in timeline))
    first = (root.first_seen or "")[11:19]
    return f"{head}; {root.domain.value}: {where} moved first at {first} ({root.metric}); {order}"
