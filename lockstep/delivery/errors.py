"""Delivery errors: the two leaves of ``DeliveryError`` with what a retry or a dead letter needs.

Branch on the class (``retryable``), never on the text. Messages never contain a URL, a secret or a
receiver's answer: they name the receiver, the HTTP status and a short sanitised reason
(:func:`lockstep.delivery.redaction.describe_answer`).
"""

from __future__ import annotations

from models.errors import DeliveryRejected, DeliveryRetryable


class ReceiverUnavailable(DeliveryRetryable):
    """429, 5xx, a timeout or a refused connection. ``retry_after`` (seconds) when the receiver said."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ReceiverRejected(DeliveryRejected):
    """A 4xx other than 408/429: the payload is wrong for the receiver and never will be right."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
