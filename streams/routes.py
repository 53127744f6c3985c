"""The route tree: which receivers hear about an alert, as Alertmanager's ``dispatch/route.go`` decides.

The ``route:`` part of the routing file (the file itself, with its receivers, is
:mod:`lockstep.delivery.config`)::

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

Matching (Alertmanager's ``Route.Match``): a route matches when all its matchers
(:mod:`streams.matchers`) match the alert's label set; its children are tried in order and the
first matching child wins unless it says ``continue: true``; a route none of whose children
match is itself the answer. Children inherit ``receiver`` and the four grouping/timing options
they do not set.

Pure: no I/O, no clock, no environment. Durations are seconds.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from models.errors import ConfigError
from streams.matchers import LABEL_NAME, Matcher, MatcherTexts, matches_all, parse_matchers

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


#: A duration field of a file: written ``30s``, held as seconds.
Duration = Annotated[float, BeforeValidator(parse_duration)]


class RouteConfig(BaseModel):
    """One node of the routing tree as written; unset options inherit from the parent."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    receiver: str | None = None
    matchers: MatcherTexts = Field(default_factory=list)
    continue_: bool = Field(default=False, alias="continue")
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    routes: list[RouteConfig] = Field(default_factory=list)

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        seen: set[str] = set()
        for name in value:
            if name in seen:
                raise ValueError(f"duplicated label {name!r} in group_by")
            if name != "..." and not LABEL_NAME.match(name):
                raise ValueError(f"invalid label name {name!r} in group_by")
            seen.add(name)
        if "..." in seen and len(seen) > 1:
            raise ValueError("cannot have wildcard group_by ('...') and other labels at the same time")
        return value


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


#: Alertmanager's defaults for a root route that does not set them.
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
        if not matches_all(self.matchers, labels):
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
    return Route(rid, parse_matchers(cfg.matchers), cfg.continue_, opts, children)


def compile_routes(root: RouteConfig, receivers: Collection[str], source: str = "routes") -> Route:
    """The compiled tree of a validated ``route:``; raise :class:`ConfigError` ``"<source>: <path>: <message>"``.

    Alertmanager's rules beyond the shapes: the root route has a receiver, no matchers and no
    ``continue``; every route's receiver is one of ``receivers``; ``group_interval`` and
    ``repeat_interval`` are positive.
    """
    if root.matchers:
        raise ConfigError(f"{source}: route: root route must not have any matchers")
    if root.continue_:
        raise ConfigError(f"{source}: route: cannot have continue in root route")
    if not root.receiver:
        raise ConfigError(f"{source}: route: root route must specify a default receiver")

    def check(cfg: RouteConfig, path: str) -> None:
        if cfg.receiver is not None and cfg.receiver not in receivers:
            raise ConfigError(f'{source}: {path}.receiver: undefined receiver "{cfg.receiver}" used in route')
        for opt in ("group_interval", "repeat_interval"):
            if getattr(cfg, opt) == 0:
                raise ConfigError(f"{source}: {path}.{opt}: {opt} cannot be zero")
        for i, child in enumerate(cfg.routes):
            check(child, f"{path}.routes[{i}]")

    check(root, "route")
    return _compile(root, None, "0")


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
