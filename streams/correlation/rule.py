"""What a correlation rule is, and what it is given.

A rule is one module under :mod:`streams.correlation.rules` with one class, registered once in
:data:`streams.correlation.registry.RULES`. It judges jobs at the partition's horizon
(:meth:`Rule.evaluate`), may take records of its own kind (``inputs``: ``clock`` records, straggler
``peer`` events), and keeps state it snapshots itself: per partition (:meth:`Rule.snapshot`) and per
job (:meth:`Rule.snapshot_job`, on the job's :class:`~streams.correlation.timeline.JobTimeline` under
the rule's name). The snapshot keys a rule writes are its own (``keys``, ``job_keys``; no two rules
share one), so a snapshot holds every rule's state side by side and a rule reads only its keys back.

Rules talk to each other only through the context: a cause alert that fired (:meth:`Rule.on_cause`,
so a symptom alert it explains can be superseded), a lead that explains a slowdown with no first mover
(:meth:`Rule.lead_for`, :meth:`Rule.on_lead`), an alert re-emitted unmuted (:meth:`Rule.on_reemit`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from models.alerts import Alert, AlertStatus, Domain
from streams.correlation.config import CorrelatorConfig
from streams.correlation.timeline import EpisodeKey, JobTimeline
from streams.inventory import InventoryIndex
from streams.rules import Rules


@dataclass
class CorrelatorOutput:
    """What one input produced: alerts as dicts in the ``models.alerts.Alert`` JSON shape (the edge)."""

    alerts: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    inhibited: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False


@dataclass(frozen=True)
class Lead:
    """Something that explains a job slowdown with no first mover (a straggler), as its root cause."""

    record: dict[str, Any]  # the root as an evidence record: layer, source, labels, metric, ts, meaning
    domain: Domain
    reason: str
    #: the root cause's reason when a verdict that named nothing is revised to name the lead
    revised_reason: str
    #: when the lead was known (event time): a slowdown revised to name it is emitted at this time
    known_at: float
    #: what a revised slowdown says about it: details merged in, and the text appended to the summary
    details: dict[str, object]
    summary: str


def as_record(alert: Alert) -> dict[str, Any]:
    """An alert as silences and inhibition rules (:mod:`streams.rules`) read it."""
    return alert.model_dump(mode="json")


class Emitter:
    """The alerts of the partition that still fire (inhibition sources; silences re-checked), and output."""

    def __init__(self, silences: Rules) -> None:
        self.silences = silences
        self.open_alerts: dict[str, Alert] = {}

    def emit(self, alert: Alert, t: float, out: CorrelatorOutput) -> Alert:
        """Stamp the silences active at event time ``t``, track it while firing, and output it."""
        record = as_record(alert)
        alert.silenced_by = self.silences.silenced_by(record, t)
        record["silenced_by"] = list(alert.silenced_by)
        if alert.status == AlertStatus.FIRING:
            self.open_alerts[alert.alert_id] = alert
        else:
            self.open_alerts.pop(alert.alert_id, None)
        out.alerts.append(record)
        return alert

    def inhibited_by(self, target: Alert, sources: Iterable[Alert]) -> list[str]:
        return self.silences.inhibited_by(as_record(target), [as_record(s) for s in sources])

    def snapshot(self) -> dict[str, Any]:
        return {"open_alerts": {k: a.model_dump(mode="json") for k, a in self.open_alerts.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        self.open_alerts = {k: Alert.model_validate(a) for k, a in data.get("open_alerts", {}).items()}


@dataclass
class RuleContext:
    """What a rule sees while it judges: settings, inventory, the partition's jobs, emission, the others."""

    config: CorrelatorConfig
    inventory: InventoryIndex
    jobs: dict[str, JobTimeline]
    emitter: Emitter
    rules: tuple[Rule, ...]
    out: CorrelatorOutput

    def emit(self, alert: Alert, t: float) -> Alert:
        return self.emitter.emit(alert, t, self.out)

    def inhibit(self, alert: Alert) -> None:
        """A symptom alert that a cause alert explains: reported, not emitted."""
        self.out.inhibited.append(alert.model_dump(mode="json"))

    def cause_fired(self, job: JobTimeline, alert: Alert, horizon: float) -> None:
        for rule in self.rules:
            rule.on_cause(job, alert, horizon, self)

    def lead_for(self, job_id: str, onset: float) -> Lead | None:
        """The first lead any rule holds for a slowdown of ``job_id`` with onset ``onset``."""
        for rule in self.rules:
            lead = rule.lead_for(job_id, onset, self)
            if lead is not None:
                return lead
        return None

    def lead_found(self, job_id: str) -> None:
        for rule in self.rules:
            rule.on_lead(job_id, self)

    def reemitted(self, alert: Alert) -> None:
        for rule in self.rules:
            rule.on_reemit(alert, self)


class Rule(Protocol):
    """One correlation rule (see the module docstring). :class:`BaseRule` gives every hook a no-op."""

    name: str
    inputs: ClassVar[frozenset[str]]
    keys: ClassVar[tuple[str, ...]]
    job_keys: ClassVar[tuple[str, ...]]

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        """Judge ``job`` at event time ``horizon``; emit through ``ctx``."""

    def observe(self, rec: Any, ctx: RuleContext) -> None:
        """One input of a kind in :attr:`inputs`."""

    def on_cause(self, job: JobTimeline, cause: Alert, horizon: float, ctx: RuleContext) -> None: ...

    def lead_for(self, job_id: str, onset: float, ctx: RuleContext) -> Lead | None: ...

    def on_lead(self, job_id: str, ctx: RuleContext) -> None: ...

    def on_reemit(self, alert: Alert, ctx: RuleContext) -> None: ...

    def holds(self, job: JobTimeline) -> bool:
        """Whether the job must be kept whole at this eviction (its state still needs its episodes)."""

    def pins(self, job: JobTimeline) -> Collection[EpisodeKey]:
        """Series whose episodes are kept however old."""

    def keeps(self, job: JobTimeline) -> bool:
        """Whether the job's timeline is kept with no episodes left."""

    def evict(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        """Drop the job's state that ``horizon`` (the oldest event time still judged) left behind."""

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, data: dict[str, Any]) -> None: ...

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]: ...

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None: ...


class BaseRule:
    """Every :class:`Rule` hook doing nothing: a rule overrides what it uses."""

    name: str = ""
    inputs: ClassVar[frozenset[str]] = frozenset()
    keys: ClassVar[tuple[str, ...]] = ()
    job_keys: ClassVar[tuple[str, ...]] = ()

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        return None

    def observe(self, rec: Any, ctx: RuleContext) -> None:
        return None

    def on_cause(self, job: JobTimeline, cause: Alert, horizon: float, ctx: RuleContext) -> None:
        return None

    def lead_for(self, job_id: str, onset: float, ctx: RuleContext) -> Lead | None:
        return None

    def on_lead(self, job_id: str, ctx: RuleContext) -> None:
        return None

    def on_reemit(self, alert: Alert, ctx: RuleContext) -> None:
        return None

    def holds(self, job: JobTimeline) -> bool:
        return False

    def pins(self, job: JobTimeline) -> Collection[EpisodeKey]:
        return ()

    def keeps(self, job: JobTimeline) -> bool:
        return False

    def evict(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, data: dict[str, Any]) -> None:
        return None

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        return {}

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None:
        return None
