"""Secrets stay secret: ``{secret: NAME}`` references in the routing file, their values, and redaction.

A receiver's config takes a secret as :data:`SecretOnly` (a reference, never a literal) or
:data:`UrlOrSecret`; :class:`SecretResolver` turns references into values from the settings'
``delivery_secrets`` and says which are missing.

:class:`Redactor` replaces every known secret value with ``[REDACTED]`` — and every *part* of it
that identifies it on its own, in every encoding a receiver, a proxy or a library may give it
back in (:func:`secret_forms`). The service installs :class:`RedactingFilter` on every log
handler, and the worker passes error texts, retry records and dead letters through
:meth:`Redactor.text` / :meth:`Redactor.record` before they leave the process. Receivers'
answers never reach those at all: :func:`describe_answer` keeps a status, a short sanitised
reason and the body's size and hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr

from models.errors import ConfigError

if TYPE_CHECKING:
    from lockstep.delivery.config import RoutingConfig

MASK = "[REDACTED]"
MIN_SECRET = 4  # shorter values are too common to mask (and too short to be a secret worth having)


def token_like(part: str) -> bool:
    """Whether a part of a URL (a path segment, a query value, a user name) is an identifier worth masking.

    Long enough and not a plain word: six characters with a digit (``T0LOCK5``), eight of mixed
    case (``XkpQvRsL``), or any sixteen. ``services``, ``hooks``, ``v2``, ``json`` are not.

    >>> [token_like(p) for p in ("services", "T08ZK3L7QHF", "XkpQvRsLm", "api", "abcdefghijklmnopq")]
    [False, True, True, False, True]
    """
    if len(part) >= 16:
        return True
    if len(part) >= 6 and any(c.isdigit() for c in part):
        return True
    return len(part) >= 8 and any(c.isupper() for c in part[1:]) and any(c.islower() for c in part)


def secret_parts(value: str) -> set[str]:
    """The value and, for a URL, each part that reveals it: userinfo (user, password, both), the
    path (whole, with its query, and each token-like segment), the query (whole and each
    token-like value, raw and decoded) and the fragment. Scheme and host are not secret.

    >>> sorted(secret_parts("https://u:pw12@hooks.example/services/T0AB12CD/x?token=abc123XYZ&f=json"))[:4]
    ['/services/T0AB12CD/x', '/services/T0AB12CD/x?token=abc123XYZ&f=json', 'T0AB12CD', 'abc123XYZ']
    """
    parts = {value}
    try:
        url = urlsplit(value)
    except ValueError:
        return parts
    if not (url.scheme and url.netloc):
        return parts
    userinfo, _, _ = url.netloc.rpartition("@")
    if userinfo:
        parts.add(userinfo)
        user, _, password = userinfo.partition(":")
        parts.update(p for p in (password, unquote(password)) if p)
        parts.update(p for p in (user, unquote(user)) if token_like(p))
    if url.path.strip("/"):
        parts.add(url.path)
        if url.query:
            parts.add(f"{url.path}?{url.query}")
        parts.update(seg for seg in url.path.split("/") if token_like(seg) or token_like(unquote(seg)))
        parts.update(unquote(seg) for seg in url.path.split("/") if token_like(unquote(seg)))
    if url.query:
        parts.add(url.query)
        for pair in url.query.split("&"):
            raw = pair.partition("=")[2]
            parts.update(v for v in (raw, unquote(raw.replace("+", " "))) if len(v) >= 8 or token_like(v))
    if url.fragment and len(url.fragment) >= MIN_SECRET:
        parts.add(url.fragment)
    return {p for p in parts if len(p) >= MIN_SECRET}


def secret_forms(value: str) -> set[str]:
    """Every string to mask for one secret: :func:`secret_parts` in plain, percent-encoded (path
    and form style, and twice), and JSON-escaped forms (with and without escaped slashes).

    Matching is case-insensitive (``%2f`` is ``%2F``), so the encodings' hex case does not matter.

    >>> "%2Fservices%2FT0AB12CD%2Fx" in secret_forms("https://hooks.example/services/T0AB12CD/x")
    True
    """
    forms: set[str] = set()
    for part in secret_parts(value):
        encoded = quote(part, safe="")
        for form in (part, encoded, quote(part, safe="/:"), quote_plus(part), quote(encoded, safe="")):
            forms.add(form)
            for js in (json.dumps(form)[1:-1], json.dumps(form, ensure_ascii=False)[1:-1]):
                forms.update({js, js.replace("/", "\\/")})
    return {f for f in forms if len(f) >= MIN_SECRET}


class Redactor:
    """Masks known secrets, their parts and their encodings (:func:`secret_forms`) in text and records."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        for v in values:
            if v and len(v) >= MIN_SECRET:
                self._forms.update(secret_forms(v))
        if self._forms:
            # Longest first, so a whole URL is one mask rather than a mask per part.
            alternatives = "|".join(re.escape(f) for f in sorted(self._forms, key=len, reverse=True))
            self._pattern = re.compile(alternatives, re.IGNORECASE)

    def text(self, value: str) -> str:
        return value if self._pattern is None else self._pattern.sub(MASK, value)

    def record(self, value: Any) -> Any:
        """A deep copy of ``value`` (dicts, lists, strings) with every secret masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.record(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.record(v) for v in value]
        return value


_PATHISH = re.compile(r"\S*[/\\%@]\S*")            # URLs, paths, encodings: never kept from an answer
_TOKENISH = re.compile(r"\b(?:(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}|[A-Za-z0-9_-]{32,})\b")  # keys, tokens
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")
REASON_MAX = 160
ELIDED = "[…]"


def _candidate(body: bytes) -> str:
    """The part of an answer that explains it: JSON ``message``/``error``/``status`` and the first of
    ``errors``, else the first line of a short text answer."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        said = [doc[k] for k in ("message", "error", "status") if isinstance(doc.get(k), str)]
        errors = doc.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], str):
            said.append(errors[0])
        return ": ".join(dict.fromkeys(said))
    first = text.strip().split("\n", 1)[0]
    return first if len(first) <= 80 else ""  # a page or an echo, not a reason


def answer_reason(body: bytes, redactor: Redactor) -> str:
    """A short, sanitised reason from a receiver's answer (may be empty).

    Secrets masked, then anything path- or URL-like and any long identifier elided, control and
    bidi characters dropped, at most 160 characters.

    >>> answer_reason(b'{"message": "Event object is invalid", "errors": ["key ab12cd34ef56ab12cd34ef is bad"]}',
    ...               Redactor())
    'Event object is invalid: key […] is bad'
    >>> answer_reason(b"500 for POST /services/T0/B0/tok body: {...}", Redactor())
    '500 for POST […] body: {...}'
    """
    text = redactor.text(_candidate(body))
    text = _PATHISH.sub(lambda m: m.group(0) if m.group(0) == MASK else ELIDED, text)
    text = _TOKENISH.sub(ELIDED, text)
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def describe_answer(status: int, body: bytes, redactor: Redactor) -> str:
    """What we keep of a receiver's answer: ``HTTP 429 Too Many Requests: <reason> (body 312 B, sha256 1a2b3c4d5e6f)``.

    The reason is :func:`answer_reason`, else the standard phrase of the status; the body itself
    is never kept (its hash lets an operator match it against the receiver's own logs).
    """
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "unknown status"
    reason = answer_reason(body, redactor)
    digest = hashlib.sha256(body).hexdigest()[:12]
    said = f": {reason}" if reason and reason != phrase else ""
    return f"HTTP {status} {phrase}{said} (body {len(body)} B, sha256 {digest})"


class RedactingFilter(logging.Filter):
    """A handler filter that renders the message (and traceback) and masks secrets in it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep the raw text
            message = str(record.msg)
        record.msg, record.args = self.redactor.text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        return True


def install_redaction(redactor: Redactor, logger: logging.Logger | None = None) -> RedactingFilter:
    """Add a :class:`RedactingFilter` to every handler of ``logger`` (the root by default)."""
    flt = RedactingFilter(redactor)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt


class SecretRef(BaseModel):
    """``{secret: NAME}``: a value held in the settings' delivery secrets, never in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: str = Field(pattern=r"^[A-Za-z0-9_]+$")


def _secret_only(value: object) -> object:
    if isinstance(value, str):
        raise ValueError("must be a secret reference {secret: NAME}, not a literal value")
    return value


#: A config option that must be a secret reference (a Slack webhook URL, a PagerDuty routing key).
SecretOnly = Annotated[SecretRef, BeforeValidator(_secret_only)]
#: A config option written literally or as a secret reference (a URL with or without a token in it).
UrlOrSecret = str | SecretRef


def missing_secrets(config: RoutingConfig, available: Iterable[str]) -> list[str]:
    """``"path: secret NAME is not set"`` for every referenced secret not in ``available``."""
    have = {name.lower() for name in available}
    return [f'{path}: secret "{name}" is not set' for path, name in config.secret_refs()
            if name.lower() not in have]


class SecretResolver:
    """Turns ``{secret: NAME}`` into the value, from the settings' ``delivery_secrets``."""

    def __init__(self, secrets: Mapping[str, SecretStr]) -> None:
        self._secrets = {k.lower(): v for k, v in secrets.items()}
        self.redactor = Redactor(v.get_secret_value() for v in self._secrets.values())

    def check(self, config: RoutingConfig, source: str = "routes") -> None:
        """Raise :class:`ConfigError` naming the first referenced secret that is not set."""
        missing = missing_secrets(config, self._secrets)
        if missing:
            name = missing[0].rsplit('"', 2)[-2]
            raise ConfigError(f"{source}: {missing[0]} (set LOCKSTEP_SECRET_{name.upper()} or "
                              f"LOCKSTEP_SECRET_{name.upper()}_FILE)")

    def value(self, ref: str | SecretRef | None) -> str | None:
        """The value of a literal or a reference (None stays None)."""
        if ref is None or isinstance(ref, str):
            return ref
        secret = self._secrets.get(ref.secret.lower())
        if secret is None:
            raise ConfigError(f'secret "{ref.secret}" is not set')
        return secret.get_secret_value()
