"""Secrets stay secret: resolve ``{secret: NAME}`` references and redact values everywhere else.

:class:`Redactor` replaces every known secret value (and its URL-encoded form) in a string with
``[REDACTED]``. The service installs :class:`RedactingFilter` on every log handler, and the
worker passes error texts and dead-letter records through :meth:`Redactor.text` /
:meth:`Redactor.record` before they leave the process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from models.errors import ConfigError
from streams.routing import RoutingConfig, SecretRef, missing_secrets

MASK = "[REDACTED]"


class Redactor:
    """Masks known secret values. Values shorter than 4 characters are not masked (too common)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        forms = set(self._values)
        for v in values:
            if v and len(v) >= 4:
                forms.update({v, quote(v, safe=""), quote(v, safe="/:")})
        self._values = sorted(forms, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._values:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def record(self, value: Any) -> Any:
        """A deep copy of ``value`` (dicts, lists, strings) with every secret masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.record(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.record(v) for v in value]
        return value


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
