"""Routing as data: which receivers hear about an alert, grouped and timed as Alertmanager does.

Everything here is pure: no I/O, no clock (``now`` is an argument, Unix seconds), no environment.
The delivery service (:mod:`lockstep.delivery`) is the thin layer that feeds it.

The routing file (YAML) has two keys, validated on load with ``path: message`` errors::

    route:                     # the root: no matchers, a default receiver
      receiver: slack-oncall
      group_by: [job, type]    # '...' groups by every label
      group_wait: 0s           # wait before the first notification of a new group
      group_interval: 1m       # wait before notifying about changes to a notified group
      repeat_interval: 4h      # re-send an unchanged, still-firing group after this long
      routes:
        - matchers: ['severity="critical"']
          receiver: pagerduty
          continue: true       # keep matching the following siblings
    receivers:
      - name: slack-oncall
        slack: {webhook_url: {secret: slack_oncall}}

Matching (Alertmanager's ``Route.Match``): a route matches when all its matchers match the alert's
label set (:func:`alert_labels`); its children are tried in order and the first matching child
wins unless it says ``continue: true``; a route none of whose children match is itself the
answer. Children inherit ``receiver`` and the four grouping/timing options they do not set.

Grouping and timing (:class:`Dispatcher`) follow Alertmanager's dispatcher and notification log:
a new group waits ``group_wait`` before its first flush, then flushes every ``group_interval``; a
flush notifies when the group has news (an alert not yet notified in its current status), or when
``repeat_interval`` has passed since the last notification and something still fires. Notified
resolved alerts leave the group; an empty group is dropped.

Silences (:meth:`Dispatcher.flush`, docs/delivery.md "Silences"): a muted alert is not notified and
does not count for repeats; it stays in its group, so once its silence ends and it still fires it
is news again and notified. A muted alert's resolve is sent only if the receiver was told it fires.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from models.errors import ConfigError

# --------------------------------------------------------------------------------------------------
# Durations and matchers
# --------------------------------------------------------------------------------------------------

_DURATION = re.compile(
    r"^(?:(?P<y>\d+)y)?(?:(?P<w>\d+)w)?(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?"
    r"(?:(?P<s>\d+)s)?(?:(?P<ms>\d+)ms)?$"
)
_UNIT_S = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: object) -> float:
    """Seconds in a Prometheus/Alertmanager duration string (``30s``, ``5m``, ``1h30m``, ``0s``).

    >>> parse_duration("1h30m")
    5400.0
    >>> parse_duration("250ms")
    0.25
    >>> parse_duration("5x")
    Traceback (most recent call last):
    ...
    ValueError: not a valid duration string: "5x"
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(f"not a valid duration string: {text!r} (write e.g. \"30s\", \"5m\", \"4h\")")
    m = _DURATION.match(text)
    if not text or m is None or not any(m.groupdict().values()):
        raise ValueError(f'not a valid duration string: "{text}"')
    return sum(int(v) * _UNIT_S[k] for k, v in m.groupdict().items() if v)


Duration = Annotated[float, BeforeValidator(parse_duration)]

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"\s]*))\s*$')


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher: ``name op value`` with op ``=``, ``!=``, ``=~`` or ``!~``.

    Regexes are fully anchored, as in Alertmanager. A missing label is the empty string.

    >>> Matcher.parse('severity=~"critical|error"').matches({"severity": "error"})
    True
    >>> Matcher.parse('domain!="network"').matches({})
    True
    """

    name: str
    op: Literal["=", "!=", "=~", "!~"]
    value: str
    regex: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """Parse ``text``; raise ``ValueError`` with Alertmanager's wording when it is malformed."""
        m = _MATCHER.match(text)
        if m is None:
            raise ValueError(f'bad matcher format: "{text}"')
        name, op, quoted, bare = m.groups()
        value = bytes(quoted, "utf-8").decode("unicode_escape") if quoted is not None else bare
        regex = None
        if op in ("=~", "!~"):
            try:
                re.compile(value)  # alone first, so the error's position is in the user's text
                regex = re.compile(f"^(?:{value})$")
            except re.error as exc:
                raise ValueError(f'bad regular expression in matcher "{text}": {exc}') from None
        return cls(name, op, value, regex)  # type: ignore[arg-type]

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        assert self.regex is not None
        hit = self.regex.match(got) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'


def alert_labels(alert: Mapping[str, Any]) -> dict[str, str]:
    """The label set routing sees for an alert (a dict in the ``models.alerts.Alert`` shape).

    ``alertname`` and ``type`` are the alert type, ``severity``, ``domain`` (of the root cause),
    ``job`` and ``job_id`` (empty when none) and ``dedup_key``; then the alert's own ``labels``,
    which never override these.

    >>> alert_labels({"type": "job_slowdown", "severity": "critical", "job_id": "llm",
    ...               "dedup_key": "k", "root_cause": {"domain": "network"}, "labels": {"team": "ml"}})["domain"]
    'network'
    """
    root = alert.get("root_cause") or {}
    job = alert.get("job_id") or ""
    own = {str(k): str(v) for k, v in (alert.get("labels") or {}).items()}
    return own | {
        "alertname": str(alert.get("type", "")), "type": str(alert.get("type", "")),
        "severity": str(alert.get("severity", "")), "domain": str(root.get("domain") or "unknown"),
        "job": str(job), "job_id": str(job), "dedup_key": str(alert.get("dedup_key", "")),
    }


# --------------------------------------------------------------------------------------------------
# The file: pydantic models, validated with path-qualified errors
# --------------------------------------------------------------------------------------------------

class SecretRef(BaseModel):
    """``{secret: NAME}``: a value held in the settings' delivery secrets, never in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: str = Field(pattern=r"^[A-Za-z0-9_]+$")


def _secret_only(value: object) -> object:
    if isinstance(value, str):
        raise ValueError("must be a secret reference {secret: NAME}, not a literal value")
    return value


SecretOnly = Annotated[SecretRef, BeforeValidator(_secret_only)]
UrlOrSecret = str | SecretRef


class RetryConfig(BaseModel):
    """Backoff of one receiver: ``initial`` doubling up to ``max`` (full jitter), give up after ``max_age``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    initial: Duration = 1.0
    max: Duration = 60.0
    max_age: Duration = 24 * 3600.0


class _Integration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    send_resolved: bool = True
    timeout: Duration = 10.0


class SlackConfig(_Integration):
    webhook_url: SecretOnly
    rate_per_s: float = Field(default=1.0, gt=0, le=10, description="Slack allows about 1 message/s per webhook")


class PagerDutyConfig(_Integration):
    routing_key: SecretOnly
    url: str = "https://events.pagerduty.com/v2/enqueue"
    source: str | None = Field(default=None, description="default: the root-cause source, else the job")


class AlertmanagerConfig(_Integration):
    url: UrlOrSecret = Field(description="base URL; alerts are POSTed to <url>/api/v2/alerts")
    bearer_token: SecretRef | None = None
    firing_ttl: Duration = Field(default=3600.0, description="endsAt of a firing alert = now + firing_ttl")


class WebhookConfig(_Integration):
    url: UrlOrSecret
    bearer_token: SecretRef | None = None
    max_alerts: int = Field(default=0, ge=0, description="0 = all; more are counted in truncatedAlerts")


class OcsfConfig(_Integration):
    topic: str = Field(default="alerts.ocsf", pattern=r"^[A-Za-z0-9._-]+$", description="topic_prefix applied")


class SyslogConfig(_Integration):
    host: str
    port: int = Field(default=514, ge=1, le=65535)
    protocol: Literal["udp", "tcp"] = "udp"
    format: Literal["ocsf", "cef"] = "ocsf"
    app_name: str = Field(default="lockstep", pattern=r"^[!-~]{1,48}$")


class KafkaConfig(_Integration):
    topic: str = Field(pattern=r"^[A-Za-z0-9._{}-]+$",
                       description="topic_prefix applied; {type}, {domain}, {severity} are substituted")

    @field_validator("topic")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        unknown = set(re.findall(r"{([^}]*)}", value)) - {"type", "domain", "severity"}
        if unknown:
            raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}} (use {{type}}, {{domain}}, {{severity}})")
        return value


INTEGRATIONS: dict[str, type[_Integration]] = {
    "slack": SlackConfig, "pagerduty": PagerDutyConfig, "alertmanager": AlertmanagerConfig,
    "webhook": WebhookConfig, "ocsf": OcsfConfig, "syslog": SyslogConfig, "kafka": KafkaConfig,
}


class ReceiverConfig(BaseModel):
    """A named receiver with exactly one integration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    slack: SlackConfig | None = None
    pagerduty: PagerDutyConfig | None = None
    alertmanager: AlertmanagerConfig | None = None
    webhook: WebhookConfig | None = None
    ocsf: OcsfConfig | None = None
    syslog: SyslogConfig | None = None
    kafka: KafkaConfig | None = None
    retry: RetryConfig = RetryConfig()
    max_in_flight: int = Field(default=4, ge=1, le=64)

    @property
    def kind(self) -> str:
        return next(k for k in INTEGRATIONS if getattr(self, k) is not None)

    @property
    def integration(self) -> _Integration:
        value = getattr(self, self.kind)
        assert isinstance(value, _Integration)
        return value

    def secret_refs(self) -> list[tuple[str, str]]:
        """``(field path, secret name)`` for every secret this receiver uses."""
        out = []
        for fname, value in self.integration:
            if isinstance(value, SecretRef):
                out.append((f"{self.kind}.{fname}", value.secret))
        return out


class RouteConfig(BaseModel):
    """One node of the routing tree as written; unset options inherit from the parent."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    receiver: str | None = None
    matchers: list[str] = Field(default_factory=list)
    continue_: bool = Field(default=False, alias="continue")
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    routes: list[RouteConfig] = Field(default_factory=list)

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, value: list[str]) -> list[str]:
        for text in value:
            Matcher.parse(text)
        return value

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        seen: set[str] = set()
        for name in value:
            if name in seen:
                raise ValueError(f"duplicated label {name!r} in group_by")
            if name != "..." and not _LABEL_NAME.match(name):
                raise ValueError(f"invalid label name {name!r} in group_by")
            seen.add(name)
        if "..." in seen and len(seen) > 1:
            raise ValueError("cannot have wildcard group_by ('...') and other labels at the same time")
        return value


class RoutingFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    route: RouteConfig
    receivers: list[ReceiverConfig] = Field(min_length=1)


# --------------------------------------------------------------------------------------------------
# The compiled tree
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RouteOptions:
    """Grouping and timing of one route, inheritance resolved (seconds)."""

    receiver: str
    group_by: tuple[str, ...]
    group_wait: float
    group_interval: float
    repeat_interval: float

    @property
    def group_by_all(self) -> bool:
        return self.group_by == ("...",)


DEFAULT_OPTIONS = {"group_by": (), "group_wait": 30.0, "group_interval": 300.0, "repeat_interval": 4 * 3600.0}


@dataclass(frozen=True, slots=True)
class Route:
    """A compiled route: ``id`` is its position (``"0"``, ``"0.2"``, ...) and part of every group key."""

    id: str
    matchers: tuple[Matcher, ...]
    continue_: bool
    options: RouteOptions
    routes: tuple[Route, ...]

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        """The routes (leaves of the walk) an alert with ``labels`` goes to; empty if this one does not match."""
        if not all(m.matches(labels) for m in self.matchers):
            return []
        found: list[Route] = []
        for child in self.routes:
            hit = child.match(labels)
            found.extend(hit)
            if hit and not child.continue_:
                break
        return found or [self]

    def walk(self) -> Iterable[Route]:
        yield self
        for child in self.routes:
            yield from child.walk()


@dataclass(frozen=True)
class RoutingConfig:
    """A validated routing file: the compiled tree and the receivers by name."""

    root: Route
    receivers: dict[str, ReceiverConfig]
    digest: str = ""

    def routes_for(self, alert: Mapping[str, Any]) -> list[Route]:
        return self.root.match(alert_labels(alert))

    def receivers_for(self, alert: Mapping[str, Any]) -> list[str]:
        """Receiver names in routing order, each once."""
        return list(dict.fromkeys(r.options.receiver for r in self.routes_for(alert)))

    def secret_refs(self) -> list[tuple[str, str]]:
        """``(path, secret name)`` of every secret the receivers reference."""
        out = []
        for i, rc in enumerate(self.receivers.values()):
            out += [(f"receivers[{i}].{path}", name) for path, name in rc.secret_refs()]
        return out


def _compile(cfg: RouteConfig, parent: RouteOptions | None, rid: str) -> Route:
    base: dict[str, Any] = (
        {"receiver": parent.receiver, "group_by": parent.group_by, "group_wait": parent.group_wait,
         "group_interval": parent.group_interval, "repeat_interval": parent.repeat_interval}
        if parent else dict(DEFAULT_OPTIONS, receiver=cfg.receiver or "")
    )
    opts = RouteOptions(
        receiver=cfg.receiver if cfg.receiver is not None else base["receiver"],
        group_by=tuple(cfg.group_by) if cfg.group_by is not None else tuple(base["group_by"]),
        group_wait=cfg.group_wait if cfg.group_wait is not None else base["group_wait"],
        group_interval=cfg.group_interval if cfg.group_interval is not None else base["group_interval"],
        repeat_interval=cfg.repeat_interval if cfg.repeat_interval is not None else base["repeat_interval"],
    )
    children = tuple(_compile(c, opts, f"{rid}.{i}") for i, c in enumerate(cfg.routes))
    return Route(rid, tuple(Matcher.parse(m) for m in cfg.matchers), cfg.continue_, opts, children)


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in INTEGRATIONS or part in ("function-after", "function-before", "str", "SecretRef"):
            # pydantic's union/validator tags carry no meaning for the reader; keep integration names
            out += f".{part}" if part in INTEGRATIONS else ""
        else:
            out += ("." if out else "") + str(part)
    return out


def _pydantic_message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def load_routing(text: str, source: str = "routes") -> RoutingConfig:
    """Parse and validate a routing file; raise :class:`ConfigError` ``"<source>: <path>: <message>"``.

    Checks beyond the shapes, with Alertmanager's rules: the root route has a receiver and no
    matchers and no ``continue``; every route's receiver is defined; receiver names are unique;
    each receiver has exactly one integration; ``group_interval`` and ``repeat_interval`` are
    positive; an Alertmanager receiver's ``firing_ttl`` exceeds the ``repeat_interval`` of every
    route that uses it (else Alertmanager would resolve a still-firing alert on its own).
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise ConfigError(f"{source}: {where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the file must be a mapping with 'route' and 'receivers'")
    try:
        parsed = RoutingFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{source}: {_loc(err['loc'])}: {_pydantic_message(err)}") from None

    names: dict[str, int] = {}
    for i, rc in enumerate(parsed.receivers):
        if rc.name in names:
            raise ConfigError(f'{source}: receivers[{i}].name: notification config name "{rc.name}" is not unique')
        names[rc.name] = i
        kinds = [k for k in INTEGRATIONS if getattr(rc, k) is not None]
        if len(kinds) != 1:
            which = ", ".join(kinds) if kinds else "none"
            raise ConfigError(f"{source}: receivers[{i}]: needs exactly one of {', '.join(INTEGRATIONS)} "
                              f"(got {which})")

    root = parsed.route
    if root.matchers:
        raise ConfigError(f"{source}: route: root route must not have any matchers")
    if root.continue_:
        raise ConfigError(f"{source}: route: cannot have continue in root route")
    if not root.receiver:
        raise ConfigError(f"{source}: route: root route must specify a default receiver")

    def check(cfg: RouteConfig, path: str) -> None:
        if cfg.receiver is not None and cfg.receiver not in names:
            raise ConfigError(f'{source}: {path}.receiver: undefined receiver "{cfg.receiver}" used in route')
        for opt in ("group_interval", "repeat_interval"):
            if getattr(cfg, opt) == 0:
                raise ConfigError(f"{source}: {path}.{opt}: {opt} cannot be zero")
        for i, child in enumerate(cfg.routes):
            check(child, f"{path}.routes[{i}]")

    check(root, "route")
    compiled = _compile(root, None, "0")
    receivers = {rc.name: rc for rc in parsed.receivers}
    for route in compiled.walk():
        rc = receivers[route.options.receiver]
        if rc.alertmanager is not None and rc.alertmanager.firing_ttl <= route.options.repeat_interval:
            raise ConfigError(
                f"{source}: receivers[{names[rc.name]}].alertmanager.firing_ttl: must exceed repeat_interval "
                f"({route.options.repeat_interval:g}s) of route {route.id}, or Alertmanager resolves firing alerts")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return RoutingConfig(compiled, receivers, digest)


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did: the config now in force, and which receivers came, went or changed."""

    config: RoutingConfig
    changed: bool
    added: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    modified: frozenset[str] = frozenset()
    error: str | None = None


def reload_routing(current: RoutingConfig, text: str, source: str = "routes") -> ReloadResult:
    """Validate ``text`` and return the config to use: the new one, or ``current`` with ``error`` set.

    A bad file never replaces a good one: the service keeps routing with ``current`` and reports
    the error.
    """
    try:
        new = load_routing(text, source)
    except ConfigError as exc:
        return ReloadResult(current, False, error=str(exc))
    if new.digest == current.digest:
        return ReloadResult(current, False)
    old_names, new_names = set(current.receivers), set(new.receivers)
    modified = {n for n in old_names & new_names if current.receivers[n] != new.receivers[n]}
    return ReloadResult(new, True, frozenset(new_names - old_names), frozenset(old_names - new_names),
                        frozenset(modified))


def missing_secrets(config: RoutingConfig, available: Iterable[str]) -> list[str]:
    """``"path: secret NAME is not set"`` for every referenced secret not in ``available``."""
    have = {name.lower() for name in available}
    return [f'{path}: secret "{name}" is not set' for path, name in config.secret_refs()
            if name.lower() not in have]


# --------------------------------------------------------------------------------------------------
# Keys and the delivery lifecycle
# --------------------------------------------------------------------------------------------------

def group_key(route: Route, labels: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """Alertmanager's group key: ``{route}:{group labels}``, and the group labels themselves.

    >>> r = Route("0.1", (), False, RouteOptions("pd", ("job", "type"), 0, 60, 3600), ())
    >>> group_key(r, {"job": "llm", "type": "job_slowdown", "severity": "critical"})[0]
    '0.1:{job="llm",type="job_slowdown"}'
    """
    if route.options.group_by_all:
        glabels = dict(sorted(labels.items()))
    else:
        glabels = {k: labels.get(k, "") for k in sorted(route.options.group_by)}
    inner = ",".join(f'{k}="{v}"' for k, v in glabels.items())
    return f"{route.id}:{{{inner}}}", glabels


Lifecycle = Literal["new", "update", "duplicate", "stale"]


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a receiver last accepted for one ``dedup_key`` (a row of the delivery ledger)."""

    receiver: str
    dedup_key: str
    alert_id: str
    status: str
    started_at: str
    ts: float


def lifecycle(prev: Delivered | None, alert: Mapping[str, Any]) -> Lifecycle:
    """Whether ``alert`` is news for a receiver that last accepted ``prev`` for its ``dedup_key``.

    - ``new``: nothing delivered yet, or a later incident (another ``alert_id``, later start) —
      a trigger after a resolve is a new incident;
    - ``update``: the same incident moved on (firing -> resolved);
    - ``duplicate``: exactly this was delivered (a replay after a crash);
    - ``stale``: an older state (a firing replayed after its resolve, or an earlier incident).

    >>> d = Delivered("pd", "k", "a1", "resolved", "2025-11-30T11:42:18Z", 0.0)
    >>> lifecycle(d, {"alert_id": "a1", "status": "firing", "started_at": "2025-11-30T11:42:18Z"})
    'stale'
    >>> lifecycle(d, {"alert_id": "a2", "status": "firing", "started_at": "2025-11-30T12:00:00Z"})
    'new'
    """
    if prev is None:
        return "new"
    if prev.alert_id == alert["alert_id"]:
        if prev.status == alert["status"]:
            return "duplicate"
        return "update" if alert["status"] == "resolved" else "stale"
    return "stale" if str(alert["started_at"]) < prev.started_at else "new"


# --------------------------------------------------------------------------------------------------
# Grouping and timing
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Notification:
    """One flush of one group for one receiver.

    ``alerts`` is every alert of the group (firing, and resolved ones not yet notified);
    ``changed`` those that are news since the group's last notification; ``tokens`` are the opaque
    values passed to :meth:`Dispatcher.add` (Kafka offsets) that this notification settles.
    """

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    alerts: list[dict[str, Any]]
    changed: list[dict[str, Any]]
    repeat: bool
    tokens: list[Any] = field(default_factory=list)

    def split(self) -> list[Notification]:
        """One notification per changed alert, without tokens (per-alert receivers: PagerDuty, OCSF, topics).

        A repeat (nothing changed) splits into one per firing alert, marked ``repeat``.
        """
        targets = self.changed or ([a for a in self.alerts if a["status"] == "firing"] if self.repeat else [])
        return [Notification(self.receiver, self.group_key, self.group_labels, [a], [a], self.repeat)
                for a in targets]


@dataclass
class _Entry:
    alert: dict[str, Any]
    notified: tuple[str, str] | None = None  # (alert_id, status) last notified
    told: str | None = None                  # alert_id the receiver was last told is firing
    suppressed: tuple[str, str] | None = None  # (alert_id, status) last reported as muted


@dataclass(frozen=True, slots=True)
class Suppressed:
    """An alert state a receiver was not notified of, and the silences that muted it."""

    receiver: str
    alert: dict[str, Any]
    silenced_by: tuple[str, ...]


#: Which silences mute an alert at a time: ``(alert, now) -> silence ids`` (empty: not muted).
MuteRule = Callable[[Mapping[str, Any], float], Sequence[str]]


def stamped_silences(alert: Mapping[str, Any], now: float) -> list[str]:
    """The default :data:`MuteRule`: the silences the correlator stamped on the alert (``silenced_by``).

    >>> stamped_silences({"silenced_by": ["maint-1"]}, 0.0), stamped_silences({}, 0.0)
    (['maint-1'], [])
    """
    return [str(s) for s in alert.get("silenced_by") or []]


@dataclass
class Group:
    key: str
    labels: dict[str, str]
    options: RouteOptions
    next_flush: float
    alerts: dict[str, _Entry] = field(default_factory=dict)
    last_notified: float | None = None
    tokens: list[Any] = field(default_factory=list)
    in_flight: bool = False


class Dispatcher:
    """Groups alerts for one receiver and says when to notify (time is always an argument).

    ``add`` routes an alert and files it in its groups; ``flush(now)`` returns the notifications
    due; ``settle`` records that a notification was handed over (accepted, or parked for retry),
    which is what later flushes compare against. A group with a notification in flight is not
    flushed again until that one is settled. ``tokens`` of alerts that need no notification
    are returned by ``flush`` in :attr:`settled_tokens` so the caller can commit them.

    ``muted(alert, now)`` names the silences muting an alert at flush time (default: the
    ``silenced_by`` the correlator stamped). At each flush, a muted alert is left out of the
    notification (not news, no repeat, not listed) and reported once per state in
    :attr:`suppressed`; a firing one stays in its group and becomes news again, so it is notified
    at the first flush after its silence ends; a resolved one is dropped — unless the receiver was
    told it fires, since a resolve closes what the receiver shows (and never pages).
    """

    def __init__(self, config: RoutingConfig, receiver: str, *, send_resolved: bool = True,
                 muted: MuteRule = stamped_silences) -> None:
        self.config = config
        self.receiver = receiver
        self.send_resolved = send_resolved
        self.muted = muted
        self.groups: dict[str, Group] = {}
        self.settled_tokens: list[Any] = []
        self.suppressed: list[Suppressed] = []

    def reload(self, config: RoutingConfig, *, send_resolved: bool | None = None) -> None:
        """Use ``config`` for alerts added from now on; existing groups keep their options."""
        self.config = config
        if send_resolved is not None:
            self.send_resolved = send_resolved

    def _routes(self, alert: Mapping[str, Any]) -> list[Route]:
        return [r for r in self.config.routes_for(alert) if r.options.receiver == self.receiver]

    def add(self, alert: dict[str, Any], now: float, token: Any = None) -> bool:
        """File ``alert`` in every group of this receiver it routes to; False if it routes to none.

        A token of an alert that routes nowhere is settled at once (see :attr:`settled_tokens`).
        """
        routes = self._routes(alert)
        if not routes:
            if token is not None:
                self.settled_tokens.append(token)
            return False
        labels = alert_labels(alert)
        for i, route in enumerate(routes):
            key, glabels = group_key(route, labels)
            group = self.groups.get(key)
            if group is None:
                group = Group(key, glabels, route.options, now + route.options.group_wait)
                self.groups[key] = group
            entry = group.alerts.get(alert["dedup_key"])
            if entry is None:
                group.alerts[alert["dedup_key"]] = _Entry(alert)
            else:
                entry.alert = alert
            if token is not None and i == 0:
                group.tokens.append(token)
        return True

    def restore(self, alert: dict[str, Any], notified_at: float) -> None:
        """Re-file a firing alert the ledger says was notified (after a restart): not news."""
        for route in self._routes(alert):
            key, glabels = group_key(route, alert_labels(alert))
            group = self.groups.setdefault(
                key, Group(key, glabels, route.options, notified_at + route.options.group_interval))
            group.alerts[alert["dedup_key"]] = _Entry(alert, (alert["alert_id"], alert["status"]), alert["alert_id"])
            group.last_notified = max(group.last_notified or notified_at, notified_at)

    def next_due(self) -> float | None:
        """The earliest time a group wants flushing (None when none does; groups in flight wait)."""
        return min((g.next_flush for g in self.groups.values() if not g.in_flight), default=None)

    def flush(self, now: float) -> list[Notification]:
        """Notifications due at ``now``; groups with nothing to say settle their tokens."""
        out = []
        for key in list(self.groups):
            group = self.groups[key]
            if group.next_flush > now or group.in_flight:
                continue  # a group waits for its notification in flight, as Alertmanager's does
            group.next_flush = now + group.options.group_interval
            if not self.send_resolved:
                for dk in [dk for dk, e in group.alerts.items() if e.alert["status"] == "resolved"]:
                    del group.alerts[dk]
            shown = self._unmuted(group, now)
            changed = [e.alert for e in shown if e.notified != (e.alert["alert_id"], e.alert["status"])]
            firing = [e.alert for e in shown if e.alert["status"] == "firing"]
            repeat = (not changed and bool(firing) and group.last_notified is not None
                      and now - group.last_notified >= group.options.repeat_interval)
            tokens, group.tokens = group.tokens, []
            if changed or repeat:
                group.in_flight = True
                out.append(Notification(self.receiver, key, dict(group.labels),
                                        [e.alert for e in shown], changed, repeat, tokens))
            else:
                self.settled_tokens.extend(tokens)
                if not group.alerts:
                    del self.groups[key]
        return out

    def _unmuted(self, group: Group, now: float) -> list[_Entry]:
        """The group's entries to show at ``now``; muted ones are reported and held (or dropped)."""
        shown = []
        for dk, e in list(group.alerts.items()):
            alert = e.alert
            if alert["status"] == "resolved" and e.told == alert["alert_id"]:
                shown.append(e)  # the receiver shows it firing: closing it never pages
                continue
            by = self.muted(alert, now)
            if not by:
                shown.append(e)
                continue
            state = (alert["alert_id"], alert["status"])
            if e.suppressed != state:
                e.suppressed = state
                self.suppressed.append(Suppressed(self.receiver, alert, tuple(by)))
            if alert["status"] == "resolved":
                del group.alerts[dk]  # never told it fired: nothing to close
            else:
                e.notified = None  # news again once the silence ends
        return shown

    def settle(self, notification: Notification, now: float) -> None:
        """Record that ``notification`` was handed over at ``now``; drop notified resolved alerts."""
        group = self.groups.get(notification.group_key)
        if group is None:
            return
        group.last_notified = now
        group.in_flight = False
        for alert in notification.changed or notification.alerts:
            entry = group.alerts.get(alert["dedup_key"])
            if entry is None or entry.alert["alert_id"] != alert["alert_id"]:
                continue
            if entry.alert["status"] != alert["status"]:
                continue  # a newer state arrived meanwhile: still news
            entry.notified = (alert["alert_id"], alert["status"])
            entry.suppressed = None  # a later silence is reported again
            if alert["status"] == "firing":
                entry.told = alert["alert_id"]
            if alert["status"] == "resolved":
                del group.alerts[alert["dedup_key"]]
        if not group.alerts and not group.tokens:
            del self.groups[notification.group_key]

    def take_settled(self) -> list[Any]:
        """Tokens settled without a notification since the last call."""
        out, self.settled_tokens = self.settled_tokens, []
        return out

    def take_suppressed(self) -> list[Suppressed]:
        """Alert states left out because a silence muted them, since the last call (once per state)."""
        out, self.suppressed = self.suppressed, []
        return out
