"""Dead letters of the agents: one builder for a Faust event or an aiokafka record read around Faust.

The record itself is built by :func:`models.deadletter.dead_letter_record` (the one builder every path
uses, validated against :class:`models.records.DeadLetter`); here are the agents' coordinates of a
message and the size limit of the dead-letter topic.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from agents.topics import MAX_RECORD_BYTES
from models.deadletter import dead_letter_record
from models.errors import LockstepError


def raw_bytes(value: Any) -> bytes:
    """A message value as bytes; a tombstone (no value) is empty, not the text ``None``.

    >>> raw_bytes(None), raw_bytes(bytearray(b"ab")), raw_bytes(b"x")
    (b'', b'ab', b'x')
    """
    if value is None:
        return b""
    return value if isinstance(value, bytes) else bytes(value) if isinstance(value, bytearray | memoryview) else (
        str(value).encode())


def dead_letter_of(stage: str, error: type[LockstepError], reason: str, event: Any) -> dict[str, Any]:
    """The dead letter of a Faust event, or of an aiokafka record read around Faust (a hole, a catch-up:
    its time is in milliseconds)."""
    msg = getattr(event, "message", None)
    ts = (msg.timestamp or 0.0) if msg is not None else (event.timestamp or 0) / 1000.0
    msg = msg if msg is not None else event
    return dead_letter_record(stage=stage, error=error, reason=reason, original=raw_bytes(event.value),
                              topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key, ts=ts)


def fit_dead_letter(record: dict[str, Any], limit: int = MAX_RECORD_BYTES - 64 * 1024) -> dict[str, Any]:
    """Keep a dead letter under the record size limit: a too-large original is cut to its first MiB,
    flagged, and fingerprinted (the whole message stays at its topic/partition/offset)."""
    if len(record.get("original", "")) <= limit:
        return record
    raw = base64.b64decode(record["original"])
    out = dict(record)
    out["original"] = base64.b64encode(raw[: 1024 * 1024]).decode("ascii")
    out["original_truncated"] = True
    out["original_sha256"] = hashlib.sha256(raw).hexdigest()
    return out
