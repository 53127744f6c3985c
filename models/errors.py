"""Lockstep's one error tree. Branch on the class, never on ``str(exc)``.

``retryable`` says whether trying the same thing again later can succeed (a receiver 503 can; a
malformed message never will).
"""

from __future__ import annotations


class LockstepError(Exception):
    """Base of every error Lockstep raises on purpose."""

    retryable: bool = False


class ConfigError(LockstepError):
    """Settings, rules or routes that cannot be used; raised at load time with the offending path."""


class InputError(LockstepError):
    """Bad input: a message or record that cannot be used. Becomes a dead letter, never a crash."""


class DecodeFailed(InputError):
    """The bytes are not the expected encoding (not JSON, not UTF-8, truncated, too large)."""


class ValidationFailed(InputError):
    """Decoded, but breaks the contract (missing field, NaN, unknown layer, absurd time, ...)."""


class UnsupportedFormat(InputError):
    """A record of a format or version no adapter reads."""


class LateData(InputError):
    """Evidence older than the watermark minus the allowed lateness: counted and reported."""


class SeriesLimitExceeded(InputError):
    """A sample of a new series that the partition's or its source's series cap refused."""


class BrokerError(LockstepError):
    """The Kafka broker is unreachable or refused a request."""

    retryable = True


class BrokerStartFailed(BrokerError):
    """The embedded broker binary is missing or did not answer in time."""

    retryable = False


class DeliveryError(LockstepError):
    """A receiver did not accept an alert."""


class DeliveryRetryable(DeliveryError):
    """429, 5xx, timeouts, refused connections: try again with backoff."""

    retryable = True


class DeliveryRejected(DeliveryError):
    """4xx other than 429: the payload is wrong for the receiver; goes to the dead-letter topic."""


class InternalError(LockstepError):
    """Processing raised where it should not (a bug): the message it was processing is dead-lettered
    alone, with its bytes, and everything else goes on."""


def error_class(name: str) -> type[LockstepError]:
    """The class of the tree with this name (what a dead letter's ``error`` says).

    >>> error_class("LateData").__mro__[1].__name__
    'InputError'
    """
    found = {c.__name__: c for c in _subclasses(LockstepError)}.get(name)
    if found is None:
        raise ValueError(f"no error class {name!r} in models.errors")
    return found


def _subclasses(cls: type[LockstepError]) -> list[type[LockstepError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out
