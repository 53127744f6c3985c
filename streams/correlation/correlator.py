"""Per-job correlation on event time for the jobs of one ``anomalies`` partition.

Inputs are the partition's records: anomaly episodes (``start``/``end``) onto the jobs' timelines,
watermarks into :class:`~streams.correlation.watermark.Watermark`, ``clock`` records and straggler
events to the rules that take them. Each time the watermark moves, every rule of
:data:`~streams.correlation.registry.RULES` judges every job at it; evidence behind the watermark
(late) is judged at once against the watermark already reached. Alerts travel as
:class:`models.alerts.Alert` inside and leave as dicts in :class:`CorrelatorOutput`.

Nothing here imports Faust or reads the clock; ``now_wall`` (used only to skip idle inputs) is an
argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from streams.correlation.config import CorrelatorConfig
from streams.correlation.registry import RULES
from streams.correlation.rule import CorrelatorOutput, Emitter, Rule, RuleContext
from streams.correlation.timeline import Episode, EpisodeKey, Fired, JobTimeline, num
from streams.correlation.watermark import Watermark
from streams.inventory import InventoryIndex
from streams.lanes import PeerEvent
from streams.rules import Rules, default_rules


class Correlator:
    """Correlation state for the jobs of one ``anomalies`` partition."""

    def __init__(self, config: CorrelatorConfig, inventory: InventoryIndex,
                 expected_origins: set[str] | None = None, rules: Rules | None = None,
                 registry: Sequence[Callable[[], Rule]] = RULES, inputs: set[str] | None = None) -> None:
        self.config = config
        self.inventory = inventory
        #: silences and inhibition rules (shared with the worker, which folds the silences topic in)
        self.rules = rules if rules is not None else default_rules()
        self.emitter = Emitter(self.rules)
        self.correlation_rules: tuple[Rule, ...] = tuple(make() for make in registry)
        self.clock = Watermark(config, expected_origins, inputs)  # inputs: live, every input partition
        #: Called with each new watermark before the jobs are judged at it (the owner advances what
        #: else it keeps on the same watermark, e.g. peer comparison, so verdicts can use it).
        self.on_watermark: Callable[[float, CorrelatorOutput], None] | None = None
        self.jobs: dict[str, JobTimeline] = {}
        self.max_event_ts = -math.inf
        self.late_count = 0
        #: clock offsets of skewed sources, from ``clock`` records: evidence of theirs is re-timed by it
        self.offsets: dict[str, float] = {}
        self._dirty: set[str] = set()

    # -- the watermark, as the owner reads it ----------------------------------------------------
    @property
    def watermark(self) -> float:
        return self.clock.value

    @property
    def horizon(self) -> float:
        """What verdicts are judged against: the watermark, or ``inf`` once every input of a replay ended."""
        return self.clock.horizon

    @property
    def finished(self) -> bool:
        return self.clock.finished

    @property
    def repaired_watermark(self) -> bool:
        """Whether :meth:`restore` recomputed an infinite watermark held by the snapshot."""
        return self.clock.repaired

    def current_watermark(self, now_wall: float) -> float:
        return self.clock.current(now_wall)

    def expect_inputs(self, origins: set[str]) -> None:
        """From now on wait for exactly these input partitions, as a replay does (their end-of-input markers
        then end the input: the final flush). For a runner that knows its inputs only at the end."""
        self.clock.expected = set(origins)

    # -- inputs ---------------------------------------------------------------------------------
    def on_record(self, rec: dict[str, Any], now_wall: float) -> CorrelatorOutput:
        """Fold one ``anomalies`` record in; return alerts whose verdicts became due."""
        out = CorrelatorOutput()
        kind = rec.get("type")
        if kind == "watermark":
            self.clock.observe(rec, now_wall)
        elif kind == "anomaly":
            self._add_anomaly(rec, out)
        elif kind == "clock":
            self._learn_clock(rec)
            if not rec.get("retime_only"):  # the copy keyed by source raises the alert, on one partition
                self._observe(kind, rec, out)
        elif isinstance(kind, str):
            self._observe(kind, rec, out)
        self._advance(now_wall, out)
        return out

    def on_peer_events(self, events: list[PeerEvent], out: CorrelatorOutput) -> None:
        """Straggler transitions (:class:`streams.lanes.PeerEvent`) to the rules that take ``peer`` events."""
        self.on_events("peer", events, out)

    def on_events(self, kind: str, events: Sequence[Any], out: CorrelatorOutput) -> None:
        """Inputs of ``kind`` that the owner made (not records of the topic: straggler transitions, step
        progress) to the rules that take them."""
        for ev in events:
            self._observe(kind, ev, out)

    def tick(self, now_wall: float) -> CorrelatorOutput:
        """Re-evaluate the watermark (idle inputs drop out as wall time passes)."""
        out = CorrelatorOutput()
        self._advance(now_wall, out)
        return out

    def _context(self, out: CorrelatorOutput) -> RuleContext:
        return RuleContext(self.config, self.inventory, self.jobs, self.emitter, self.correlation_rules, out)

    def _observe(self, kind: str, rec: Any, out: CorrelatorOutput) -> None:
        ctx = self._context(out)
        for rule in self.correlation_rules:
            if kind in rule.inputs:
                rule.observe(rec, ctx)

    def _add_anomaly(self, rec: dict[str, Any], out: CorrelatorOutput) -> None:
        ts = float(rec["ts"])
        self.max_event_ts = max(self.max_event_ts, float(rec.get("confirmed_ts", ts)))
        if ts < self.clock.value:
            self.late_count += 1
            out.late.append(rec)
        offset = float(rec.get("clock_offset") or 0.0) or self.offsets.get(str(rec.get("source")), 0.0)
        if offset:
            # Order evidence on the true time line: undo the source's clock error.
            rec = dict(rec, ts=ts - offset, raw_ts=ts, clock_offset=offset)
        job = self.jobs.setdefault(rec["job_id"], JobTimeline(rec["job_id"]))
        self._dirty.add(job.job_id)
        job.add(rec, ts)

    def _learn_clock(self, rec: dict[str, Any]) -> None:
        """A source's clock offset became known (``start``) or back within tolerance (``end``). Evidence of
        the source already on a timeline is re-timed by a new offset and its jobs judged again (a verdict
        given before the skew was learned is revised); evidence is never re-timed back at an ``end``:
        it was taken while the clock was off."""
        source = str(rec["source"])
        if rec.get("phase") != "start":
            self.offsets.pop(source, None)
            return
        offset = float(rec.get("offset") or 0.0)
        if self.offsets.get(source) == offset:
            return
        self.offsets[source] = offset
        for job in self.jobs.values():
            if job.retime(source, offset):
                self._dirty.add(job.job_id)

    # -- judging --------------------------------------------------------------------------------
    def _advance(self, now_wall: float, out: CorrelatorOutput) -> None:
        ctx = self._context(out)
        at = self.clock.advance(now_wall)
        if at is None:
            # Late evidence for a job is judged at once against the watermark already reached.
            horizon = self.clock.horizon
            for job_id in sorted(self._dirty & set(self.jobs)):
                if self.jobs[job_id].all_episodes() and horizon > -math.inf:
                    self._judge(self.jobs[job_id], horizon, ctx)
            self._dirty.clear()
            return
        self._dirty.clear()
        if self.on_watermark is not None:
            self.on_watermark(at, out)
        for job_id in sorted(self.jobs):
            self._judge(self.jobs[job_id], at, ctx)
        self._unsilence(at, ctx)
        self._evict(at, ctx)
        if at == math.inf:
            self.clock.finish()
            out.finished = True

    def _judge(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        for rule in self.correlation_rules:
            rule.evaluate(job, horizon, ctx)

    def _unsilence(self, wm: float, ctx: RuleContext) -> None:
        """A silence or maintenance window ended while its alert still fires: emit it again, unmuted."""
        open_alerts = self.emitter.open_alerts
        for alert_id in sorted(open_alerts):
            alert = open_alerts[alert_id]
            if alert.silenced_by and self.rules.ended_between(alert.silenced_by, wm):
                again = alert.model_copy(update={"details": dict(alert.details,
                                                                 unsilenced_after=list(alert.silenced_by))})
                ctx.emit(again, wm)
                ctx.reemitted(again)

    def _evict(self, wm: float, ctx: RuleContext) -> None:
        if not math.isfinite(wm):
            return
        horizon = wm - self.config.lookback_s - self.config.resolve_after_s - self.config.grace_s
        rules = self.correlation_rules
        for job_id in list(self.jobs):
            job = self.jobs[job_id]
            if any(rule.holds(job) for rule in rules):
                continue
            for rule in rules:
                rule.evict(job, horizon, ctx)
            job.evict_episodes(horizon, {k for rule in rules for k in rule.pins(job)})
            if not job.episodes and not any(rule.keeps(job) for rule in rules):
                del self.jobs[job_id]

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The state as JSON: the watermark's and the correlator's keys, each rule's own keys beside them,
        and per job its episodes, the cause alerts it fired and each rule's per-job keys."""
        data: dict[str, Any] = {**self.clock.snapshot(), "max_event_ts": num(self.max_event_ts),
                                "late_count": self.late_count, "clock_offsets": dict(self.offsets),
                                **self.emitter.snapshot()}
        for rule in self.correlation_rules:
            data.update(rule.snapshot())
        data["jobs"] = {jid: self._snapshot_job(job) for jid, job in self.jobs.items()}
        return data

    def _snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        entry: dict[str, Any] = {"episodes": [[e.key, e.start, e.end_ts] for e in job.all_episodes()],
                                 "fired": [f.to_json() for f in job.fired]}
        for rule in self.correlation_rules:
            entry.update(rule.snapshot_job(job))
        return entry

    def restore(self, data: dict[str, Any], now_wall: float) -> None:
        """Take a :meth:`snapshot` back (also one written by the ``Correlator`` class before the rules were
        modules: the keys are the same). A non-finite progress or ``+inf`` watermark is repaired, see
        :meth:`Watermark.restore`."""
        self.clock.restore(data, now_wall)
        self.max_event_ts = float(data["max_event_ts"])
        self.late_count = int(data["late_count"])
        self.offsets = {str(k): float(v) for k, v in data.get("clock_offsets", {}).items()}
        self.emitter.restore(data)
        for rule in self.correlation_rules:
            rule.restore(data)
        self.jobs = {}
        for jid, jd in data["jobs"].items():
            job = JobTimeline(jid)
            for key, start, end_ts in jd["episodes"]:
                job.episodes.setdefault(EpisodeKey(key), []).append(Episode(EpisodeKey(key), start, end_ts))
            job.fired = [Fired.from_json(f) for f in jd.get("fired", [])]
            for rule in self.correlation_rules:
                rule.restore_job(job, jd)
            self.jobs[jid] = job

