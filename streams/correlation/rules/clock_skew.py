"""Clock skew: a source's clock is off by more than the tolerance; one alert per source.

The offsets are estimated upstream (:mod:`streams.clocks`) per (source, layer) and arrive as ``clock``
records (``start`` when beyond tolerance, ``end`` when back). A source whose clock shows on several
layers (topics) is one alert, firing at the first ``start`` and resolved at the last ``end``; its layer
is the host's (or the switch's) whichever layer showed it first (:func:`clock_layer`), so a replay
gives the same alert whatever order the topics' records arrive in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from models.alerts import Alert, AlertStatus, Domain, OtherJob, RootCause, Severity
from models.timeutil import format_ts
from streams.correlation.keys import alert_id_for
from streams.correlation.rule import BaseRule, RuleContext


@dataclass
class ClockState:
    layers: list[str]
    alert: Alert
    started: float


class ClockSkewRule(BaseRule):
    name = "clock_skew"
    inputs: ClassVar[frozenset[str]] = frozenset({"clock"})
    keys: ClassVar[tuple[str, ...]] = ("clock_open",)

    def __init__(self) -> None:
        #: sources with a clock beyond tolerance: the layers showing it, and their alert
        self.open: dict[str, ClockState] = {}

    def observe(self, rec: Any, ctx: RuleContext) -> None:
        source, layer = rec["source"], rec["layer"]
        state = self.open.get(source)
        if rec["phase"] == "start":
            if state is None:
                alert = _alert(rec, float(rec["ts"]), ctx)
                self.open[source] = ClockState([layer], alert, float(rec["ts"]))
                ctx.emit(alert, float(rec["ts"]))
            elif layer not in state.layers:
                state.layers.append(layer)
            return
        if state is None or layer not in state.layers:
            return
        state.layers.remove(layer)
        if not state.layers:
            del self.open[source]
            # resolved with the labels it fired with (an alert of an older snapshot may carry another layer)
            ctx.emit(_alert(rec, state.started, ctx, state.alert.labels.get("layer")), float(rec["ts"]))

    def snapshot(self) -> dict[str, Any]:
        return {"clock_open": {s: {"layers": list(c.layers), "alert": c.alert.model_dump(mode="json"),
                                   "started": c.started} for s, c in self.open.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        self.open = {s: ClockState(list(c["layers"]), Alert.model_validate(c["alert"]), float(c["started"]))
                     for s, c in data.get("clock_open", {}).items()}


def clock_layer(layer: str) -> str:
    """The layer a clock belongs to: a switch's or a storage system's own, else the host's, whichever
    exporter's samples (gpu, nic, nccl, ...) showed it first: the alert must not depend on which topic's
    record arrived first.

    >>> clock_layer("gpu"), clock_layer("nccl"), clock_layer("switch"), clock_layer("storage")
    ('host', 'host', 'switch', 'storage')
    """
    return layer if layer in ("switch", "storage") else "host"


def _alert(rec: dict[str, Any], onset: float, ctx: RuleContext, layer: str | None = None) -> Alert:
    """Firing (a ``start`` record) or resolved (an ``end`` record) for a skew that began at ``onset``
    (``layer``: the firing alert's, for its resolve)."""
    source, offset, unc = rec["source"], float(rec["offset"]), float(rec["uncertainty"])
    layer = layer or clock_layer(str(rec["layer"]))
    ts = float(rec["ts"])
    jobs = ctx.inventory.affected_jobs(layer, source, {}, ts)
    others = []
    for a in jobs:
        info = ctx.inventory.job(a.job_id, ts)
        others.append(OtherJob(job_id=a.job_id, gpus=info.gpus if info else 0, relation=a.relation))
    dkey = f"clock_skew/{source}"
    direction = "behind" if offset < 0 else "ahead"
    summary = (f"clock of {layer} {source} is {abs(offset):.2f} s {direction} (+/- {unc:.2f} s); its "
               "evidence is re-timed by that much when ordering first movers")
    resolved = rec["phase"] == "end"
    if resolved:
        summary = f"clock of {layer} {source} back within tolerance (offset {offset:+.2f} s)"
    return Alert(
        alert_id=alert_id_for(dkey, onset), dedup_key=dkey, type="clock_skew",
        status=AlertStatus.RESOLVED if resolved else AlertStatus.FIRING, severity=Severity.WARNING,
        job_id=jobs[0].job_id if len(jobs) == 1 else None, gpus=sum(o.gpus for o in others),
        nodes=[source] if layer != "switch" else [], started_at=format_ts(onset), detected_at=format_ts(ts),
        resolved_at=format_ts(ts) if resolved else None, symptom=None,
        root_cause=RootCause(domain=Domain.COMPUTE if layer != "switch" else Domain.NETWORK, layer=layer, source=source,
                             labels={}, metric="clock_offset_seconds", first_seen=format_ts(onset),
                             meaning="clock_skew",
                             reason=f"median arrival delay differs from its peers' by {-offset:+.2f} s"),
        timeline=[], other_jobs=others, summary=summary,
        labels={"alertname": "clock_skew", "source": source, "layer": layer},
        details={"offset_s": round(offset, 3), "uncertainty_s": round(unc, 3)})
