"""GPU utilisation: many of a job's GPUs fall idle together, and no cause alert explains it.

At ``t*`` at least ``gpu_fraction`` of the job's GPUs are in a utilisation-down episode at once; the
alert is due ``grace_s + symptom_hold_s`` later (the hold gives a cause alert the time to arrive). A
cause alert firing at the due time (another job's, or this job's over the interval it fired) that an
inhibition rule matches inhibits it; one that fires after it supersedes it (resolved, naming the
cause). GPUs idle outside the job's RUNNING span less ``job_end_margin_s`` at either end
(:mod:`streams.correlation.lifecycle`), or when it stops running within that margin after the alert's
due time, are the job starting or ending: no alert::

    gpu  n1 gpu0..7  DCGM_FI_DEV_GPU_UTIL ....XXXXXXXXXX    <- t*: 8 of 32 GPUs down
                                              |<-hold->|   due: t* + grace + symptom_hold
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, RootCause, Severity, Symptom
from models.timeutil import format_ts
from streams.correlation import evidence
from streams.correlation.keys import alert_id_for
from streams.correlation.lifecycle import running_end, settled
from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import Episode, EpisodeKey, JobTimeline, num
from streams.inventory import JobInfo


@dataclass
class GpuSymptom:
    start: float
    keys: list[EpisodeKey]
    resolved: bool = False
    alert: Alert | None = None
    inhibited_by: list[str] = field(default_factory=list)


@dataclass
class GpuState:
    symptom: GpuSymptom | None = None
    closed_until: float = -math.inf


class GpuIdleRule(BaseRule):
    name = "gpu_idle"
    job_keys: ClassVar[tuple[str, ...]] = ("gpu", "gpu_closed_until")

    def _held(self, job: JobTimeline) -> GpuState | None:
        held = job.rule_state.get(self.name)
        return held if isinstance(held, GpuState) else None

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        cfg = ctx.config
        st = job.state(self.name, GpuState)
        if st.symptom is not None and not st.symptom.resolved:
            _resolve_when_cleared(st, st.symptom, job, horizon, ctx)
            return
        info = ctx.inventory.job(job.job_id)
        if info is None or info.gpus <= 0:
            return
        need = max(1, math.ceil(cfg.gpu_fraction * info.gpus))
        drops = sorted((e for e in job.all_episodes() if e.start["layer"] == "gpu"
                        and e.start["meaning"] == "utilisation" and e.start.get("direction") == "down"
                        and e.ts > st.closed_until), key=lambda e: (e.ts, e.key))
        together = _idle_together(drops, need)
        if together is None:
            return
        t_star, members = together
        due = t_star + cfg.grace_s + cfg.symptom_hold_s
        if horizon < due + cfg.job_end_margin_s:
            return
        running = ctx.inventory.job(job.job_id, t_star)
        end = running_end(running) if running is not None else None
        if running is None or running.state != "RUNNING" or not settled(running, t_star, cfg.job_end_margin_s) or (
                end is not None and end <= due + cfg.job_end_margin_s):
            # The job was not running (or only starting), or it stopped running (COMPLETING, COMPLETED, ...)
            # around these idle GPUs: a job end is never a slowdown. Its drops are done with.
            st.closed_until = max(d.ts for d in drops)
            return
        members = [d for d in members if float(d.start.get("confirmed_ts", d.ts)) <= due + cfg.allowed_lateness_s]
        if len(members) < need:
            return
        alert = _alert(job, info, members, t_star, due, ctx)
        # The cause alerts firing at the symptom's due time (not merely now: a jump of the watermark
        # may have settled the cause's resolution in the same step).
        sources = [a for a in ctx.emitter.open_alerts.values() if a.job_id != job.job_id]
        sources += [f.alert for f in job.fired if f.start <= due and (f.end is None or f.end > due)]
        inhibited_by = ctx.emitter.inhibited_by(alert, sources)
        st.symptom = GpuSymptom(t_star, sorted(d.key for d in drops if d.ts <= due), inhibited_by=inhibited_by)
        if inhibited_by:
            ctx.inhibit(alert)
            return
        st.symptom.alert = ctx.emit(alert, due)
        _resolve_when_cleared(st, st.symptom, job, horizon, ctx)  # a watermark jump may have passed both

    def on_cause(self, job: JobTimeline, cause: Alert, horizon: float, ctx: RuleContext) -> None:
        """A cause alert that arrives after the job's GPU symptom alert fired inhibits it after the fact:
        the symptom alert is resolved, naming the alert that explains it."""
        st = self._held(job)
        state = st.symptom if st is not None else None
        if state is None or state.resolved or state.alert is None:
            return
        if not ctx.emitter.inhibited_by(state.alert, [cause]):
            return
        done = state.alert.model_copy(update={
            "status": AlertStatus.RESOLVED, "resolved_at": cause.detected_at,
            "details": dict(state.alert.details, superseded_by=cause.alert_id),
            "summary": state.alert.summary + f"; explained by {cause.type} {cause.alert_id}"})
        state.alert = ctx.emit(done, horizon)
        state.resolved = True
        state.inhibited_by = [cause.alert_id]

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        st = self._held(job) or GpuState()
        s = st.symptom
        return {"gpu": None if s is None else {
                    "start": s.start, "keys": list(s.keys), "resolved": s.resolved,
                    "alert": None if s.alert is None else s.alert.model_dump(mode="json"),
                    "inhibited_by": list(s.inhibited_by)},
                "gpu_closed_until": num(st.closed_until)}

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None:
        st = job.state(self.name, GpuState)
        st.closed_until = float(data.get("gpu_closed_until", "-inf"))
        s = data.get("gpu")
        if s is not None:
            st.symptom = GpuSymptom(float(s["start"]), [EpisodeKey(k) for k in s["keys"]], bool(s["resolved"]),
                                    None if s["alert"] is None else Alert.model_validate(s["alert"]),
                                    list(s["inhibited_by"]))


def _idle_together(drops: list[Episode], need: int) -> tuple[float, list[Episode]] | None:
    """The first instant ``t*`` at which ``need`` of the utilisation drops are on at once, and those drops."""
    if len(drops) < need:
        return None
    for e in drops:
        active = [d for d in drops if d.ts <= e.ts and (d.end_ts is None or e.ts < d.end_ts)]
        if len(active) >= need:
            return e.ts, active
    return None


def _resolve_when_cleared(st: GpuState, symptom: GpuSymptom, job: JobTimeline, horizon: float,
                          ctx: RuleContext) -> None:
    """The symptom resolves ``resolve_after_s`` after every one of its GPUs' drops ended."""
    ends = [e.end_ts for e in job.all_episodes() if e.key in symptom.keys]
    if not ends or any(t is None for t in ends):
        return
    cleared = max(t for t in ends if t is not None)
    if horizon < cleared + ctx.config.resolve_after_s:
        return
    symptom.resolved = True
    st.closed_until = cleared
    if symptom.alert is not None:
        done = symptom.alert.model_copy(update={"status": AlertStatus.RESOLVED, "resolved_at": format_ts(cleared)})
        symptom.alert = ctx.emit(done, cleared)


def _alert(job: JobTimeline, info: JobInfo, members: list[Episode], t_star: float, due: float,
           ctx: RuleContext) -> Alert:
    values = sorted(float(m.start["value"]) for m in members)
    base = sorted(float(m.start.get("p50") or 0.0) for m in members)
    value, baseline = values[len(values) // 2], base[len(base) // 2]
    ratio = value / baseline if baseline else 0.0
    nodes = sorted({m.start["source"] for m in members})
    dkey = f"gpu_utilisation/{job.job_id}"
    return Alert(
        alert_id=alert_id_for(dkey, t_star), dedup_key=dkey, type="gpu_utilisation", status=AlertStatus.FIRING,
        severity=Severity.ERROR if info.gpus >= ctx.config.critical_gpus else Severity.WARNING,
        job_id=job.job_id, gpus=info.gpus, nodes=list(info.nodes), started_at=format_ts(t_star),
        detected_at=format_ts(due), resolved_at=None,
        symptom=Symptom(layer="gpu", metric=members[0].start["metric"], baseline=baseline, value=value,
                        ratio=round(ratio, 3), onset=format_ts(t_star)),
        root_cause=RootCause(domain=Domain.UNKNOWN, layer=None, source=None, labels={}, metric=None, first_seen=None,
                             reason="GPU utilisation fell on many of the job's GPUs; no job slowdown with a cause "
                                    "was found"),
        timeline=evidence.timeline(members, ctx.config.timeline_limit), other_jobs=[],
        summary=(f"job {job.job_id}: utilisation of {len(members)} of {info.gpus} GPUs on {len(nodes)} "
                 f"nodes fell to {value:.0f}% (p50 {baseline:.0f}%) since {format_ts(t_star)[11:19]}"),
        labels={"alertname": "gpu_utilisation", "job_id": job.job_id})
