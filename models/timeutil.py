"""Event-time helpers shared by every stage.

Lockstep carries time as Unix seconds (``float``) internally and as RFC 3339 UTC strings on the wire
in alerts. Nothing here reads the clock: time is always an input.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

#: Timestamps outside this range are "absurd" and rejected at the edge (2000-01-01 .. 2100-01-01).
MIN_TS = 946_684_800.0
MAX_TS = 4_102_444_800.0


class TimestampError(ValueError):
    """A timestamp that is not a finite number or an RFC 3339 string with an offset."""


def parse_ts(value: object) -> float:
    """Return Unix seconds for ``value`` (a number, or an RFC 3339 string with an offset).

    Raises :class:`TimestampError` with a reason for booleans, non-finite numbers, naive or
    unparseable strings and times outside ``[MIN_TS, MAX_TS)``.

    >>> parse_ts(1764502930.25)
    1764502930.25
    >>> parse_ts("2025-11-30T11:42:10Z")
    1764502930.0
    >>> parse_ts("2025-11-30T12:42:10+01:00")
    1764502930.0
    """
    if isinstance(value, bool):
        raise TimestampError("timestamp must be a number or an RFC 3339 string, got a boolean")
    if isinstance(value, int | float):
        ts = float(value)
        if not math.isfinite(ts):
            raise TimestampError("timestamp is not finite")
    elif isinstance(value, str):
        if len(value) > 64:
            raise TimestampError("timestamp string longer than 64 characters")
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise TimestampError(f"timestamp {value!r} is not RFC 3339") from None
        if parsed.tzinfo is None:
            raise TimestampError(f"timestamp {value!r} has no UTC offset")
        ts = parsed.timestamp()
    else:
        raise TimestampError(f"timestamp must be a number or an RFC 3339 string, got {type(value).__name__}")
    if not MIN_TS <= ts < MAX_TS:
        raise TimestampError(f"timestamp {value!r} is outside 2000-01-01..2100-01-01")
    return ts


def format_ts(ts: float) -> str:
    """Format Unix seconds as RFC 3339 UTC with millisecond precision and a ``Z`` suffix.

    >>> format_ts(1764502930.25)
    '2025-11-30T11:42:10.250Z'
    """
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
