"""Straggler: one worker of a job persistently lags its peers (:mod:`streams.peers` decides when).

One alert per (job, lane, worker) episode: firing when the worker is confirmed a straggler
(``started_at`` = its first outlying step), resolved with the same identity when it is back among its
peers or its job stops sending per-worker values. A straggler is also a :class:`Lead`: a job slowdown
with no first mover whose onset lies within ``lookback_s`` before to ``grace_s`` after the straggler's
start names it as the root cause (at the verdict, or by revising the verdict). A straggler that already
ended still leads a slowdown whose onset it was acting at: after a jump of the watermark (a replay judged
at its end, a catch-up) the straggler can start and end before the slowdown is judged.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, RootCause, Severity, Symptom
from models.timeutil import format_ts, parse_ts
from streams.correlation.keys import alert_id_for
from streams.correlation.rule import BaseRule, Lead, RuleContext
from streams.correlation.timeline import JobTimeline
from streams.lanes import PeerEvent


class StragglerRule(BaseRule):
    name = "straggler"
    inputs: ClassVar[frozenset[str]] = frozenset({"peer"})
    keys: ClassVar[tuple[str, ...]] = ("straggler_open", "straggler_ended")

    def __init__(self) -> None:
        #: dedup key -> the firing straggler alert
        self.open: dict[str, Alert] = {}
        #: dedup key -> the last resolved straggler alert, a lead until eviction passes its end
        self.ended: dict[str, Alert] = {}

    def observe(self, rec: Any, ctx: RuleContext) -> None:
        ev: PeerEvent = rec
        tr = ev.transition
        dkey = f"straggler/{tr.job_id}/{ev.lane}/{tr.worker}"
        if tr.phase == "start":
            if dkey not in self.open:
                alert = self.open[dkey] = _alert(ev, dkey, ctx)
                ctx.emit(alert, tr.step)
                ctx.lead_found(tr.job_id)
            return
        firing = self.open.pop(dkey, None)
        if firing is None:
            return
        ended = tr.onset_step
        details = dict(firing.details, end_reason=tr.reason)
        if tr.reason == "no_data":
            summary = f"{firing.summary}; no per-worker values since {format_ts(ended)[11:19]}"
        else:
            details.update(final_ratio=round(tr.ratio, 3))
            summary = f"{tr.worker} of {tr.job_id} back among its peers since {format_ts(ended)[11:19]}"
        self.ended[dkey] = ctx.emit(firing.model_copy(update={
            "status": AlertStatus.RESOLVED, "resolved_at": format_ts(ended), "details": details,
            "summary": summary}), tr.step)

    def lead_for(self, job_id: str, onset: float, ctx: RuleContext) -> Lead | None:
        """The straggler of ``job_id`` that began around ``onset`` and was still lagging then (firing, or
        resolved no earlier than ``grace_s`` before it), the earliest if several."""
        cfg = ctx.config
        acting = [*self.open.values(), *(a for a in self.ended.values()
                                         if a.resolved_at is None or parse_ts(a.resolved_at) >= onset - cfg.grace_s)]
        found = [a for a in acting if a.job_id == job_id
                 and onset - cfg.lookback_s <= parse_ts(a.started_at) <= onset + cfg.grace_s]
        if not found:
            return None
        alert = min(found, key=lambda a: (a.started_at, a.dedup_key))
        rc, d = alert.root_cause, alert.details
        worker, ratio, peers = str(d["worker"]), _number(d["ratio_to_median"]), int(_number(d["workers_compared"]))
        reason = (f"no component moved first, but {worker} lags its {peers - 1} peers (x{ratio:.2f} their median "
                  f"step) since {alert.started_at[11:19]}: the job waits for it")
        return Lead(
            record={"layer": rc.layer, "source": rc.source, "labels": dict(rc.labels), "metric": rc.metric,
                    "ts": parse_ts(alert.started_at), "meaning": "straggler"},
            domain=Domain.COMPUTE, reason=reason,
            revised_reason=reason + " (revised: the straggler was confirmed after the verdict)",
            known_at=parse_ts(alert.detected_at), details={"straggler_alert": alert.alert_id},
            summary=f"; compute: straggler {worker} (x{ratio:.2f} its peers) since {alert.started_at[11:19]}")

    def evict(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        """An ended straggler (of any job: its job's timeline may be gone) leads no slowdown judged from now
        on once its end is ``lookback_s`` behind ``horizon`` (the oldest event time still judged)."""
        for dkey in [k for k, a in self.ended.items() if a.resolved_at is not None
                     and parse_ts(a.resolved_at) + ctx.config.lookback_s < horizon]:
            del self.ended[dkey]

    def snapshot(self) -> dict[str, Any]:
        return {"straggler_open": {k: a.model_dump(mode="json") for k, a in self.open.items()},
                "straggler_ended": {k: a.model_dump(mode="json") for k, a in self.ended.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        self.open = {k: Alert.model_validate(a) for k, a in data.get("straggler_open", {}).items()}
        self.ended = {k: Alert.model_validate(a) for k, a in data.get("straggler_ended", {}).items()}


def _number(v: object) -> float:
    if not isinstance(v, int | float):
        raise TypeError(f"not a number: {v!r}")
    return float(v)


def _alert(ev: PeerEvent, dkey: str, ctx: RuleContext) -> Alert:
    tr = ev.transition
    node, _, rank = tr.worker.partition("/rank")
    info = ctx.inventory.job(tr.job_id, tr.onset_step)
    gpus = info.gpus if info else 0
    slower = tr.ratio / tr.usual if tr.usual > 0 else math.nan
    why = (f"{(tr.ratio - 1) * 100:.0f}% slower than the job's median worker" if tr.reason == "gross" else
           f"{(tr.ratio - tr.usual) * 100:.0f} points slower than its own usual ratio ({tr.usual:.2f}) "
           "while its peers stayed put")
    job_text = f"{tr.job_id} ({gpus} GPUs)" if gpus else tr.job_id
    summary = (f"straggler in {job_text}: {tr.worker}'s {ev.lane.replace('_', ' ')} is x{tr.ratio:.2f} the "
               f"median of its {ev.workers - 1} peers since {format_ts(tr.onset_step)[11:19]} ({why}); "
               "in synchronous training every rank waits for it: look at that node's GPUs, host and NIC")
    # The whole job runs at the straggler's pace: weigh it like a slowdown of that size.
    cfg = ctx.config
    severity = Severity.WARNING
    if gpus >= cfg.critical_gpus and tr.ratio >= 1.5:
        severity = Severity.CRITICAL
    elif gpus >= cfg.critical_gpus // 4 or tr.ratio >= 1.5:
        severity = Severity.ERROR
    return Alert(
        alert_id=alert_id_for(dkey, tr.onset_step), dedup_key=dkey, type="straggler", status=AlertStatus.FIRING,
        severity=severity, job_id=tr.job_id, gpus=gpus, nodes=[node], started_at=format_ts(tr.onset_step),
        detected_at=format_ts(tr.step),
        symptom=Symptom(layer="step", metric=ev.lane, baseline=round(tr.usual, 4), value=round(tr.ratio, 4),
                        ratio=round(slower, 4) if math.isfinite(slower) else 0.0, onset=format_ts(tr.onset_step)),
        root_cause=RootCause(domain=Domain.COMPUTE, layer="step", source=node, labels={"rank": rank} if rank else {},
                             metric=ev.lane, first_seen=format_ts(tr.onset_step), meaning="straggler", reason=why),
        timeline=[], other_jobs=[], summary=summary,
        labels={"alertname": "straggler", "job_id": tr.job_id, "worker": tr.worker, "lane": ev.lane},
        details={"worker": tr.worker, "ratio_to_median": round(tr.ratio, 4), "usual_ratio": round(tr.usual, 4),
                 "rule": tr.reason, "workers_compared": ev.workers})
