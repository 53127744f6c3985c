"""The one dead-letter builder: every path (ingest, convert, inventory, replay, delivery, catch-up) makes
its ``dlq`` record here, validated against :class:`models.records.DeadLetter`.

>>> from models.errors import ValidationFailed
>>> rec = dead_letter_record(stage="validate", error=ValidationFailed, reason="value is not finite",
...                          original=b'{"value": NaN}', topic="lockstep.telemetry.gpu", partition=2, offset=41,
...                          key=b"gpu001", ts=1764502930.0, record="samples[3]")
>>> rec["error"], rec["original"], rec["original_size"], rec["key"], rec["retryable"]
('ValidationFailed', 'eyJ2YWx1ZSI6IE5hTn0=', 14, 'gpu001', False)
"""

from __future__ import annotations

import base64
from typing import Any

from models.errors import LockstepError
from models.records import DeadLetter


def dead_letter_record(*, stage: str, error: type[LockstepError], reason: str, original: bytes,
                       topic: str | None, partition: int | None, offset: int | None,
                       key: bytes | str | None = None, ts: float = 0.0, record: str | None = None,
                       retryable: bool | None = None, include_original: bool = True) -> dict[str, Any]:
    """A ``dlq`` record. ``error`` is a class of the error tree (its name is the record's ``error``; its
    ``retryable`` the default of the record's). ``include_original=False`` keeps the size and a
    fingerprint only (a message too large to carry: it stays at topic/partition/offset)."""
    import hashlib

    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    extra: dict[str, Any] = {}
    if not include_original:
        extra = {"original_truncated": True, "original_sha256": hashlib.sha256(original).hexdigest()}
    dl = DeadLetter(stage=stage, reason=reason, error=error.__name__, topic=topic, partition=partition,
                    offset=offset, record=record,
                    original=base64.b64encode(original).decode("ascii") if include_original else "",
                    original_size=len(original), key=key, ts=float(ts),
                    retryable=error.retryable if retryable is None else retryable, **extra)
    return dl.model_dump()
