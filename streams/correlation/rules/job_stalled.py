"""Job stalled: a RUNNING job stops sending step times (reason ``no_data``), said honestly.

A job that hangs (a deadlocked collective, a dead rank the others wait for) sends no step times and its
GPUs idle; it is not slower, it does nothing. The rule follows, per job that sent step times, the last
second that had one (``L``, from :class:`streams.lanes.StepProgress`) and the job's usual interval between
such seconds. When none came for ``max(job_stall_s, job_stall_steps x usual interval)`` the stall is due
(``L`` + that); it fires ``job_end_margin_s`` later unless the scheduler ended the job's RUNNING span by
then (a job end is never a stall). It resolves when step times come back (``end_reason: resumed``) or
the job stops running (``end_reason: job_ended``). As a cause alert of the job it inhibits the job's
``gpu_utilisation`` symptom (the default inhibition rules)::

    step  j  step_time_seconds  XXXXXXXX.........................XXXXXX    (step times, then none)
                                       L        due=L+15   +margin: fires   resumed: resolved
    gpu   j  DCGM_FI_DEV_GPU_UTIL ......XXXXXXXXXXXXXXXXXXXXXXXXXX.......  (symptom: inhibited)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, RootCause, Severity, Symptom
from models.timeutil import format_ts
from streams.correlation.keys import alert_id_for
from streams.correlation.lifecycle import running_end
from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import Fired, JobTimeline
from streams.lanes import StepProgress

#: How fast the usual interval between step times follows the job (an exponentially weighted mean).
INTERVAL_WEIGHT = 0.1


@dataclass
class StepTrack:
    """A job's step times as the rule follows them."""

    last: float  # the last second that had step times
    interval: float | None = None  # the usual interval between such seconds
    alert: Alert | None = None  # the firing job_stalled alert


class JobStalledRule(BaseRule):
    name = "job_stalled"
    inputs: ClassVar[frozenset[str]] = frozenset({"steps"})
    keys: ClassVar[tuple[str, ...]] = ("step_tracks",)

    def __init__(self) -> None:
        self.tracks: dict[str, StepTrack] = {}

    def observe(self, rec: Any, ctx: RuleContext) -> None:
        progress: StepProgress = rec
        for job_id in sorted(progress.seconds):
            for sec in progress.seconds[job_id]:
                self._step(job_id, sec, ctx)
        for job_id in sorted(self.tracks):
            self._judge(job_id, progress.at, ctx)

    def keeps(self, job: JobTimeline) -> bool:
        """A stalled job's timeline holds the alert as a cause (inhibition) until it resolves."""
        track = self.tracks.get(job.job_id)
        return track is not None and track.alert is not None

    def _step(self, job_id: str, sec: float, ctx: RuleContext) -> None:
        track = self.tracks.get(job_id)
        if track is None:
            self.tracks[job_id] = StepTrack(sec)
            return
        if sec <= track.last:
            return
        self._judge(job_id, sec, ctx)  # the gap up to this step, judged as of its end (a jump of the watermark)
        track = self.tracks.get(job_id)
        if track is None:
            self.tracks[job_id] = StepTrack(sec)
            return
        gap = sec - track.last
        if track.alert is not None:
            self._resolve(job_id, track, sec, "resumed", ctx)
        elif gap < _stall_after(track, ctx):
            track.interval = gap if track.interval is None else track.interval + INTERVAL_WEIGHT * (
                gap - track.interval)
        track.last = sec

    def _judge(self, job_id: str, at: float, ctx: RuleContext) -> None:
        """As of event time ``at``: the job's stall fires, or ends with the job, or the job is forgotten."""
        cfg = ctx.config
        track = self.tracks[job_id]
        info = ctx.inventory.job(job_id, track.last)
        if info is None:  # the scheduler has forgotten it
            self._resolve(job_id, track, at, "job_ended", ctx)
            del self.tracks[job_id]
            return
        end = running_end(info)
        if track.alert is not None:
            if end is not None and at >= end:
                self._resolve(job_id, track, end, "job_ended", ctx)
                del self.tracks[job_id]
            return
        due = track.last + _stall_after(track, ctx)
        if end is not None and end <= due + cfg.job_end_margin_s:
            if at >= end:
                del self.tracks[job_id]  # its step times stopped because it ended: a job end is never a stall
            return
        if at < due + cfg.job_end_margin_s:
            return
        alert = ctx.emit(_alert(job_id, track, due, info.gpus, ctx), due)
        track.alert = alert
        job = ctx.jobs.setdefault(job_id, JobTimeline(job_id))
        job.fired.append(Fired(alert, due))
        ctx.cause_fired(job, alert, at)

    def _resolve(self, job_id: str, track: StepTrack, at: float, why: str, ctx: RuleContext) -> None:
        firing = track.alert
        if firing is None:
            return
        track.alert = None
        again = "step times again" if why == "resumed" else "the scheduler ended its RUNNING span"
        done = firing.model_copy(update={
            "status": AlertStatus.RESOLVED, "resolved_at": format_ts(at),
            "details": dict(firing.details, end_reason=why),
            "summary": f"{firing.summary}; {again} at {format_ts(at)[11:19]}"})
        ctx.emit(done, at)
        job = ctx.jobs.get(job_id)
        for f in job.fired if job is not None else ():
            if f.alert.alert_id == firing.alert_id and f.end is None:
                f.end = at

    def snapshot(self) -> dict[str, Any]:
        return {"step_tracks": {job: {"last": t.last, "interval": t.interval,
                                      "alert": None if t.alert is None else t.alert.model_dump(mode="json")}
                                for job, t in self.tracks.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        self.tracks = {job: StepTrack(float(t["last"]), None if t["interval"] is None else float(t["interval"]),
                                      None if t["alert"] is None else Alert.model_validate(t["alert"]))
                       for job, t in data.get("step_tracks", {}).items()}


def _stall_after(track: StepTrack, ctx: RuleContext) -> float:
    cfg = ctx.config
    return max(cfg.job_stall_s, cfg.job_stall_steps * (track.interval or 0.0))


def _alert(job_id: str, track: StepTrack, due: float, gpus: int, ctx: RuleContext) -> Alert:
    cfg = ctx.config
    dkey = f"job_stalled/{job_id}"
    silent = due - track.last
    since = format_ts(track.last)
    severity = (Severity.CRITICAL if gpus >= cfg.critical_gpus else
                Severity.ERROR if gpus >= cfg.critical_gpus // 4 else Severity.WARNING)
    usual = f"every {track.interval:.1f} s" if track.interval else "before"
    reason = (f"no step times since {since[11:19]} ({silent:.0f} s; they came {usual}) while the scheduler says "
              "the job is RUNNING: a hang (a collective waiting on a dead or stuck rank) or its step telemetry "
              "stopped; no component is known to have moved (no_data)")
    info = ctx.inventory.job(job_id, track.last)
    return Alert(
        alert_id=alert_id_for(dkey, track.last), dedup_key=dkey, type="job_stalled", status=AlertStatus.FIRING,
        severity=severity, job_id=job_id, gpus=gpus, nodes=list(info.nodes) if info else [],
        started_at=since, detected_at=format_ts(due), resolved_at=None,
        symptom=Symptom(layer="step", metric="step_time", baseline=round(track.interval or 0.0, 3),
                        value=round(silent, 3), ratio=0.0, onset=since),
        root_cause=RootCause(domain=Domain.UNKNOWN, layer="step", source=None, labels={}, metric="step_time",
                             first_seen=since, meaning="no_data", reason=reason),
        timeline=[], other_jobs=[],
        summary=f"job {job_id} ({gpus} GPUs) stalled: no step times since {since[11:19]} while RUNNING",
        labels={"alertname": "job_stalled", "job_id": job_id},
        details={"reason": "no_data", "last_step": since, "stall_after_s": round(silent, 3)})
