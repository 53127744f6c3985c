"""The routing file: its receivers and its route tree, validated on load, reloaded without a restart.

The file (YAML, ``LOCKSTEP_DELIVERY_ROUTES_FILE``; see ``deploy/routes.example.yaml``) has two
keys, validated with ``<file>: <path>: <message>`` errors::

    route:                     # the route tree: streams/routes.py
      receiver: slack-oncall
      routes:
        - matchers: ['severity="critical"']
          receiver: pagerduty
    receivers:
      - name: slack-oncall
        slack: {webhook_url: {secret: slack_oncall}}
        retry: {initial: 1s, max: 1m, max_age: 1d}   # optional, every receiver
        max_in_flight: 4                             # optional, every receiver

A receiver has exactly one integration, keyed by its kind; the kinds and their schemas are the
modules of :mod:`lockstep.delivery.receivers`, so the schema of a receiver definition is built
from that registry (:data:`RECEIVER_KINDS`). Secrets are ``{secret: NAME}`` references to the
settings' ``delivery_secrets`` (:mod:`lockstep.delivery.redaction`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from lockstep.delivery.base import IntegrationConfig
from lockstep.delivery.receivers import RECEIVERS
from lockstep.delivery.redaction import SecretRef, SecretResolver
from models.errors import ConfigError
from models.settings import LockstepSettings
from streams.matchers import alert_labels
from streams.routes import Duration, Route, RouteConfig, compile_routes

C = TypeVar("C", bound=IntegrationConfig)

#: The receiver kinds, in the order the routing file's messages list them.
RECEIVER_KINDS: tuple[str, ...] = tuple(RECEIVERS)


class RetryConfig(BaseModel):
    """Backoff of one receiver: ``initial`` doubling up to ``max`` (full jitter), give up after ``max_age``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    initial: Duration = 1.0
    max: Duration = 60.0
    max_age: Duration = 24 * 3600.0


class ReceiverConfig(BaseModel):
    """A named receiver with exactly one integration (validated as :func:`receiver_config` builds it).

    The integrations are fields named by kind, added from the registry; :attr:`kind` and
    :attr:`integration` say which one this receiver has.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    retry: RetryConfig = RetryConfig()
    max_in_flight: int = Field(default=4, ge=1, le=64)

    def integrations(self) -> list[str]:
        """The kinds this definition sets (valid: exactly one)."""
        return [k for k in RECEIVER_KINDS if getattr(self, k, None) is not None]

    @property
    def kind(self) -> str:
        return self.integrations()[0]

    @property
    def integration(self) -> IntegrationConfig:
        value = getattr(self, self.kind)
        assert isinstance(value, IntegrationConfig)
        return value

    def integration_as(self, model: type[C]) -> C:
        """The integration, checked to be a ``model`` (what a sender of that kind reads its options as)."""
        value = self.integration
        if not isinstance(value, model):
            raise TypeError(f"receiver {self.name} is a {self.kind} receiver, not {model.__name__}")
        return value

    def secret_refs(self) -> list[tuple[str, str]]:
        """``(field path, secret name)`` for every secret this receiver uses."""
        return [(f"{self.kind}.{fname}", value.secret) for fname, value in self.integration
                if isinstance(value, SecretRef)]


_Receiver: type[ReceiverConfig] = create_model(  # type: ignore[call-overload]
    "ReceiverConfig", __base__=ReceiverConfig, __doc__=ReceiverConfig.__doc__,
    **{kind: (sender.config_model | None, None) for kind, sender in RECEIVERS.items()})


class _RoutingFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    route: RouteConfig
    receivers: list[_Receiver] = Field(min_length=1)  # type: ignore[valid-type]


def receiver_config(data: Mapping[str, Any]) -> ReceiverConfig:
    """One receiver definition (a ``receivers:`` item) validated; raises pydantic's ``ValidationError``."""
    return _Receiver.model_validate(data)


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


_UNION_TAGS = ("function-after", "function-before", "str", "SecretRef")


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS:
            continue  # pydantic's union/validator tags carry no meaning for the reader
        else:
            out += ("." if out else "") + str(part)
    return out


def load_routing(text: str, source: str = "routes") -> RoutingConfig:
    """Parse and validate a routing file; raise :class:`ConfigError` ``"<source>: <path>: <message>"``.

    Checks beyond the shapes, with Alertmanager's rules: receiver names are unique; each receiver
    has exactly one integration; the route tree's rules (:func:`streams.routes.compile_routes`);
    and each kind's own rule between its options and the routes that use it
    (:meth:`IntegrationConfig.route_problem`: an Alertmanager receiver's ``firing_ttl`` exceeds
    every such route's ``repeat_interval``).
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
        parsed = _RoutingFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{source}: {_loc(err['loc'])}: {str(err['msg']).removeprefix('Value error, ')}") from None

    names: dict[str, int] = {}
    rcs: list[ReceiverConfig] = parsed.receivers
    for i, rc in enumerate(rcs):
        if rc.name in names:
            raise ConfigError(f'{source}: receivers[{i}].name: notification config name "{rc.name}" is not unique')
        names[rc.name] = i
        kinds = rc.integrations()
        if len(kinds) != 1:
            which = ", ".join(kinds) if kinds else "none"
            raise ConfigError(f"{source}: receivers[{i}]: needs exactly one of {', '.join(RECEIVER_KINDS)} "
                              f"(got {which})")

    compiled = compile_routes(parsed.route, names, source)
    receivers = {rc.name: rc for rc in rcs}
    for route in compiled.walk():
        rc = receivers[route.options.receiver]
        problem = rc.integration.route_problem(route)
        if problem is not None:
            option, message = problem
            raise ConfigError(f"{source}: receivers[{names[rc.name]}].{rc.kind}.{option}: {message}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return RoutingConfig(compiled, receivers, digest)


def load_routing_file(settings: LockstepSettings, path: Path | None = None) -> RoutingConfig:
    """Read and validate the routing file and check that every secret it references is set."""
    path = path or settings.delivery_routes_file
    if path is None:
        raise ConfigError("no routing file: set LOCKSTEP_DELIVERY_ROUTES_FILE (see deploy/routes.example.yaml)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the routing file: {exc.strerror}") from None
    config = load_routing(text, str(path))
    SecretResolver(settings.delivery_secrets).check(config, str(path))
    return config


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
