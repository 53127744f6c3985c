"""Silences, maintenance windows and inhibition rules: data, validated on load, applied as pure functions.

The rules file (``LOCKSTEP_RULES_FILE``, YAML; see ``deploy/rules.example.yaml``)::

    inhibit_rules:              # a firing source alert mutes matching target alerts (Alertmanager's meaning)
      - source_matchers: ['alertname="job_slowdown"', 'domain=~"network|storage|compute|dataloader"']
        target_matchers: ['alertname="gpu_utilisation"']
        equal: [job_id]
    silences:                   # mute alerts whose labels match, between two times
      - id: leaf03-firmware
        kind: maintenance       # or "silence" (the default)
        matchers: ['switch="leaf03"']
        starts_at: 2025-11-30T11:00:00Z
        ends_at: 2025-11-30T13:00:00Z
        created_by: netops
        comment: leaf03 firmware upgrade

Silences also arrive at run time on the ``silences`` topic (``POST /silences``; equality matchers).

What they do, exactly:
- An alert is evaluated against the silences active at its event time. Matching silences are listed
  in its ``silenced_by``; the alert is still recorded (on ``alerts``, in the API) but receivers do
  not notify it. A maintenance window is a silence whose matchers name infrastructure (a switch,
  a node, a pool); it is marked ``kind: maintenance`` so the page can show it.
- When a window ends and the alert is still firing, Lockstep re-emits it with ``silenced_by``
  empty, so it is notified then; an alert that resolved during the window is never notified.
- An inhibited alert is not emitted at all: the source alert's ``details.inhibited`` lists it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from models.errors import ConfigError
from models.timeutil import parse_ts
from streams.matchers import Matcher, MatcherTexts, alert_labels, equality_matchers, matches_all, parse_matchers

DEFAULT_INHIBIT_RULES: tuple[dict[str, Any], ...] = (
    {"source_matchers": ['alertname="job_slowdown"', 'domain=~"network|storage|compute|dataloader"'],
     "target_matchers": ['alertname="gpu_utilisation"'], "equal": ["job_id"]},
    # A stalled job's GPUs idle because it does nothing: job_stalled says so, not a utilisation page.
    {"source_matchers": ['alertname="job_stalled"'], "target_matchers": ['alertname="gpu_utilisation"'],
     "equal": ["job_id"]},
)


def match_labels(alert: Mapping[str, Any]) -> dict[str, str]:
    """The labels silences and inhibition rules match on: routing's labels plus where the root cause is.

    >>> sorted(match_labels({"type": "job_slowdown", "job_id": "j", "root_cause": {"domain": "network",
    ...        "layer": "switch", "source": "leaf03", "labels": {"port": "17"}}}).items())[:4]
    [('alertname', 'job_slowdown'), ('dedup_key', ''), ('domain', 'network'), ('job', 'j')]
    """
    labels = alert_labels(alert)
    root = alert.get("root_cause") or {}
    layer, source = root.get("layer"), root.get("source")
    if layer and source:
        labels.setdefault("root_layer", str(layer))
        labels.setdefault("root_source", str(source))
        if layer == "switch":
            labels.setdefault("switch", str(source))
            port = (root.get("labels") or {}).get("port")
            if port is not None:
                labels.setdefault("port", str(port))
        elif layer == "storage":
            labels.setdefault("pool", str(source))
        else:
            labels.setdefault("node", str(source))
    return labels


@dataclass(frozen=True)
class Silence:
    silence_id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    kind: str = "silence"
    created_by: str = ""
    comment: str = ""

    def active(self, t: float) -> bool:
        return self.starts_at <= t < self.ends_at

    def matches(self, labels: Mapping[str, str]) -> bool:
        return matches_all(self.matchers, labels)

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Silence:
        """From a ``silences`` topic record (equality matchers, see models.operator.SilenceRecord)."""
        return cls(str(rec["silence_id"]), equality_matchers(rec["matchers"]), float(rec["starts_at"]),
                   float(rec["ends_at"]), str(rec.get("kind", "silence")), str(rec.get("created_by", "")),
                   str(rec.get("comment", "")))


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    def inhibits(self, source_labels: Mapping[str, str], target_labels: Mapping[str, str]) -> bool:
        return (matches_all(self.source, source_labels) and matches_all(self.target, target_labels)
                and all(source_labels.get(n, "") == target_labels.get(n, "") for n in self.equal))


@dataclass
class Rules:
    """The silences and inhibition rules in force (file + topic), queried with event times."""

    inhibit: list[InhibitRule] = field(default_factory=list)
    silences: dict[str, Silence] = field(default_factory=dict)

    def silenced_by(self, alert: Mapping[str, Any], t: float) -> list[str]:
        labels = match_labels(alert)
        return sorted(s.silence_id for s in self.silences.values() if s.active(t) and s.matches(labels))

    def inhibited_by(self, target: Mapping[str, Any], sources: Iterable[Mapping[str, Any]]) -> list[str]:
        tl = match_labels(target)
        out = []
        for src in sources:
            sl = match_labels(src)
            if any(rule.inhibits(sl, tl) for rule in self.inhibit):
                out.append(str(src["alert_id"]))
        return sorted(out)

    def ended_between(self, ids: Iterable[str], t: float) -> bool:
        """True if none of ``ids`` is still active at ``t`` (a window the alert was muted by ended)."""
        return all(not (s := self.silences.get(i)) or not s.active(t) for i in ids)

    def apply_record(self, rec: Mapping[str, Any]) -> None:
        """Fold a ``silences`` topic record in (the latest record per id wins)."""
        silence = Silence.from_record(rec)
        self.silences[silence.silence_id] = silence


# -- the file ---------------------------------------------------------------------------------------

class _InhibitModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source_matchers: MatcherTexts = Field(min_length=1)
    target_matchers: MatcherTexts = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)


class _SilenceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128)
    kind: Literal["silence", "maintenance"] = "silence"
    matchers: MatcherTexts = Field(min_length=1)
    starts_at: float
    ends_at: float
    created_by: str = Field(min_length=1)
    comment: str = ""

    @field_validator("starts_at", "ends_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> float:
        if hasattr(value, "isoformat"):  # YAML parses unquoted timestamps into datetimes
            value = value.isoformat()
        return parse_ts(value)


class _RulesModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inhibit_rules: list[_InhibitModel] | None = None
    silences: list[_SilenceModel] = Field(default_factory=list)


def load_rules(text: str, source: str = "rules") -> Rules:
    """Parse and validate a rules file; raise :class:`ConfigError` naming the file, path and problem.

    Without ``inhibit_rules`` the defaults apply (infrastructure causes of a job's slowdown, and a stalled
    job, mute its GPU-utilisation symptom alerts); ``inhibit_rules: []`` turns inhibition off.

    >>> r = load_rules("silences: [{id: s1, matchers: ['job_id=\\"j\\"'], starts_at: 2025-11-30T11:00:00Z, "
    ...                "ends_at: 2025-11-30T12:00:00Z, created_by: me}]")
    >>> r.silenced_by({"type": "job_slowdown", "job_id": "j"}, 1764502930.0), len(r.inhibit)
    (['s1'], 2)
    """
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        model = _RulesModel.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{source}: {where}: {err['msg']}") from None
    except ValueError as exc:  # a matcher's own error, raised from a validator
        raise ConfigError(f"{source}: {exc}") from None
    rules = Rules()
    inhibit = model.inhibit_rules if model.inhibit_rules is not None else [
        _InhibitModel.model_validate(r) for r in DEFAULT_INHIBIT_RULES]
    for rule in inhibit:
        rules.inhibit.append(InhibitRule(parse_matchers(rule.source_matchers), parse_matchers(rule.target_matchers),
                                         tuple(rule.equal)))
    for i, s in enumerate(model.silences):
        if s.ends_at <= s.starts_at:
            raise ConfigError(f"{source}: silences.{i}: ends_at must be after starts_at")
        if s.id in rules.silences:
            raise ConfigError(f"{source}: silences.{i}: duplicate id {s.id!r}")
        rules.silences[s.id] = Silence(s.id, parse_matchers(s.matchers), s.starts_at, s.ends_at,
                                       s.kind, s.created_by, s.comment)
    return rules


def default_rules() -> Rules:
    """The rules in force when no file is configured: the default inhibition, no silences."""
    return load_rules("")
