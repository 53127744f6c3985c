"""Checkpoint contention: two or more jobs burst writes to one pool while its write latency climbs.

The pattern is found by :func:`streams.contention.find_contention` (its docstring draws the timeline);
this rule raises it once (from the partition of the job with the smallest id), on the evidence settled
by its due time ``t* + grace``, and resolves it ``resolve_after_s`` after the pool's latency episode ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, OtherJob, RootCause, Severity, Symptom, TimelineEntry
from models.timeutil import format_ts
from streams.contention import Contention, advice, find_contention, overlap_end
from streams.correlation.keys import ContentionKey, alert_id_for
from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import JobTimeline


@dataclass
class ContentionState:
    alert: Alert
    resolved: bool
    due: float


class ContentionRule(BaseRule):
    name = "contention"
    job_keys: ClassVar[tuple[str, ...]] = ("contentions",)

    def _held(self, job: JobTimeline) -> dict[ContentionKey, ContentionState]:
        held = job.rule_state.get(self.name)
        return held if isinstance(held, dict) else {}

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        cfg = ctx.config
        raised: dict[ContentionKey, ContentionState] = job.state(self.name, dict)
        episodes = job.all_episodes()
        for c in find_contention(episodes, horizon + cfg.allowed_lateness_s):
            key = ContentionKey.of(c.pool, c.start)
            if key in raised or c.jobs[0] != job.job_id or horizon < c.start + cfg.grace_s:
                continue
            # Decide only on evidence guaranteed to be here by the due time (arrival order never matters).
            due = c.start + cfg.grace_s
            settled = [d for d in find_contention(episodes, due + cfg.allowed_lateness_s)
                       if d.pool == c.pool and abs(d.start - c.start) < 1e-9]
            if not settled:
                continue
            alert = ctx.emit(_alert(settled[0], due, None, ctx), due)
            raised[key] = ContentionState(alert, False, due)
        for key, state in raised.items():
            if state.resolved:
                continue
            current = [c for c in find_contention(episodes, math.inf) if c.pool == key.pool
                       and abs(c.start - key.start) < 1e-9]
            if not current:
                continue
            lat_end = current[0].latency.end_ts
            if lat_end is not None and horizon >= lat_end + cfg.resolve_after_s:
                state.alert, state.resolved = ctx.emit(_alert(current[0], state.due, lat_end, ctx), lat_end), True

    def holds(self, job: JobTimeline) -> bool:
        return any(not c.resolved for c in self._held(job).values())  # it still needs its pool's episodes

    def evict(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        raised = self._held(job)
        for key in [k for k in raised if k.start < horizon - ctx.config.lookback_s]:
            del raised[key]

    def keeps(self, job: JobTimeline) -> bool:
        return bool(self._held(job))

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        return {"contentions": {k.text: {"alert": c.alert.model_dump(mode="json"), "resolved": c.resolved,
                                         "due": c.due} for k, c in self._held(job).items()}}

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None:
        raised: dict[ContentionKey, ContentionState] = job.state(self.name, dict)
        for text, c in data.get("contentions", {}).items():
            raised[ContentionKey.parse(text)] = ContentionState(Alert.model_validate(c["alert"]), bool(c["resolved"]),
                                                                float(c["due"]))


def _alert(c: Contention, due: float, resolved_at: float | None, ctx: RuleContext) -> Alert:
    now = resolved_at if resolved_at is not None else due
    gpus: dict[str, int] = {}
    for job_id in c.jobs:
        info = ctx.inventory.job(job_id, c.start) or ctx.inventory.job(job_id)
        gpus[job_id] = info.gpus if info else 0
    mover, shift, text = advice(c, gpus, now)
    end = overlap_end(c, now)
    lat = c.latency.start
    baseline = lat.get("p50") or 0.0
    ratio = (lat["value"] / baseline) if baseline else 0.0
    first = min(c.bursts, key=lambda b: (b.ts, b.start["labels"]["job_id"]))
    dkey = f"checkpoint_contention/{c.pool}/{'+'.join(c.jobs)}"
    timeline = [TimelineEntry(ts=format_ts(e.ts), layer=e.start["layer"], source=e.start["source"],
                              labels=dict(e.start["labels"]), metric=e.start["metric"], value=e.start["value"],
                              p50=e.start.get("p50"), p99=e.start.get("p99"), score=e.start["score"],
                              meaning=e.start["meaning"], entities=1)
                for e in sorted([c.latency, *c.bursts], key=lambda e: (e.ts, e.start["metric"]))]
    jobs_text = " and ".join(f"{j} ({gpus[j]} GPUs)" for j in c.jobs)
    summary = (f"checkpoint contention on {c.pool}: {jobs_text} wrote at the same time from "
               f"{format_ts(c.start)[11:19]} for {end - c.start:.0f} s; write latency x{ratio:.1f}; {text}")
    if resolved_at is not None:
        summary += f"; resolved at {format_ts(resolved_at)[11:19]}"
    return Alert(
        alert_id=alert_id_for(dkey, c.start), dedup_key=dkey, type="checkpoint_contention",
        status=AlertStatus.RESOLVED if resolved_at is not None else AlertStatus.FIRING,
        severity=Severity.CRITICAL if sum(gpus.values()) >= ctx.config.critical_gpus else Severity.WARNING,
        job_id=None, gpus=sum(gpus.values()), nodes=[], started_at=format_ts(c.start), detected_at=format_ts(due),
        resolved_at=format_ts(resolved_at) if resolved_at is not None else None,
        symptom=Symptom(layer="storage", metric=lat["metric"], baseline=baseline, value=lat["value"],
                        ratio=round(ratio, 3), onset=format_ts(c.latency.ts)),
        root_cause=RootCause(domain=Domain.STORAGE, layer="storage", source=c.pool, labels=dict(first.start["labels"]),
                             metric=first.start["metric"], first_seen=format_ts(first.ts), meaning="throughput",
                             reason=f"{len(c.jobs)} jobs burst writes to {c.pool} together while its write latency "
                                    "climbed"),
        timeline=timeline, other_jobs=[OtherJob(job_id=j, gpus=gpus[j], relation="contending") for j in c.jobs],
        summary=summary, labels={"alertname": "checkpoint_contention", "pool": c.pool, "domain": "storage"},
        details={"pool": c.pool, "jobs": list(c.jobs),
                 "overlap": {"start": format_ts(c.start), "end": format_ts(end), "seconds": round(end - c.start, 1)},
                 "advice": {"move": mover, "by_seconds": round(shift, 1), "text": text}})
