"""Backoff with jitter, and the parked-notification record of the retry topics.

A notification that a receiver could not take (429, 5xx, timeout, refused) is parked on that
receiver's retry topic and its alerts' offsets are committed: parking is as good as delivery for
the ``alerts`` topic, and the retry topic survives a restart. The retry loop takes parked records
strictly in order (head of line), so a trigger is never overtaken by its resolve.
"""

from __future__ import annotations

import random
from typing import Any

from lockstep.delivery.config import RetryConfig
from streams.dispatch import Notification


def backoff_delay(attempt: int, cfg: RetryConfig, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds before try ``attempt + 1``: "equal jitter" on ``initial * 2**attempt`` capped at ``max``,
    never earlier than the receiver's ``Retry-After``.

    >>> cfg = RetryConfig(initial="1s", max="8s")
    >>> all(0.5 <= backoff_delay(0, cfg, random.Random(s)) <= 1.0 for s in range(50))
    True
    >>> all(4.0 <= backoff_delay(10, cfg, random.Random(s)) <= 8.0 for s in range(50))
    True
    >>> backoff_delay(0, cfg, random.Random(1), retry_after=30.0)
    30.0
    """
    cap = min(cfg.max, cfg.initial * float(2 ** min(attempt, 30)))
    delay = cap / 2 + rng.uniform(0, cap / 2)
    return float(max(delay, retry_after or 0.0))


def park_record(n: Notification, *, first_failed: float, not_before: float, attempts: int,
                last_error: str) -> dict[str, Any]:
    """The retry-topic value for a parked notification (no secrets: alerts and a redacted error)."""
    return {"receiver": n.receiver, "group_key": n.group_key, "group_labels": n.group_labels,
            "alerts": n.alerts, "changed": n.changed, "repeat": n.repeat, "first_failed": first_failed,
            "not_before": not_before, "attempts": attempts, "last_error": last_error}


def unpark(rec: dict[str, Any]) -> Notification:
    return Notification(rec["receiver"], rec["group_key"], dict(rec["group_labels"]), list(rec["alerts"]),
                        list(rec["changed"]), bool(rec["repeat"]))
