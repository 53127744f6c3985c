"""Label matchers: the one syntax silences, inhibition rules and routes match alerts with.

Alertmanager's syntax, one matcher a string: ``name="value"``, ``name!="value"``, ``name=~"regex"``,
``name!~"regex"``; the value may be written bare when it has no space or quote (``domain=network``).
Files write a list of them (``matchers: ['severity="critical"', 'job!=""']``), all of which must
match; a ``silences`` topic record carries a mapping ``{name: value}``, equality matchers
(:func:`equality_matchers`). Regexes are fully anchored and a missing label is the empty string,
as in Alertmanager.

Errors keep Alertmanager's wording, which the fixture files of both the rules and the routing
file quote exactly: ``bad matcher format: "<text>"`` and ``bad regular expression in matcher
"<text>": <re's message>``.

Pure: no I/O, no environment, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"\s]*))\s*$')

Op = Literal["=", "!=", "=~", "!~"]


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher: ``name op value`` with op ``=``, ``!=``, ``=~`` or ``!~``.

    >>> Matcher.parse('severity=~"critical|error"').matches({"severity": "error"})
    True
    >>> Matcher.parse('domain!="network"').matches({})
    True
    >>> Matcher.parse('job=~"llm"').matches({"job": "llm-70b"})   # anchored
    False
    >>> Matcher.parse("severity critical")
    Traceback (most recent call last):
    ...
    ValueError: bad matcher format: "severity critical"
    """

    name: str
    op: Op
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
        return cls(name, cast(Op, op), value, regex)

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


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    """Every matcher of a file's list, in order; the first malformed one raises ``ValueError``."""
    return tuple(Matcher.parse(t) for t in texts)


def _check_matchers(texts: list[str]) -> list[str]:
    parse_matchers(texts)
    return texts


#: A file's ``matchers:`` list, checked when the file is validated (errors name the field).
MatcherTexts = Annotated[list[str], AfterValidator(_check_matchers)]


def equality_matchers(pairs: Mapping[str, Any]) -> tuple[Matcher, ...]:
    """``{name: value}`` (a ``silences`` topic record's matchers) as ``name="value"`` matchers, by name.

    >>> [str(m) for m in equality_matchers({"switch": "leaf03", "job_id": "llm"})]
    ['job_id="llm"', 'switch="leaf03"']
    """
    return tuple(Matcher(str(k), "=", str(v)) for k, v in sorted(pairs.items()))


def matches_all(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    """True when every matcher matches ``labels`` (no matchers: everything matches)."""
    return all(m.matches(labels) for m in matchers)


def alert_labels(alert: Mapping[str, Any]) -> dict[str, str]:
    """The label set matchers see for an alert (a dict in the ``models.alerts.Alert`` shape).

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
