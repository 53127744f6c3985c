"""Decode and validate telemetry messages, batch by batch, without a model per sample.

A message carries one sample (a JSON object), a batch (a JSON array) or ``{"samples": [...]}``.
Validation applies exactly the rules of :class:`models.samples.TelemetrySample` (a differential test
keeps them equal) and returns the good samples as plain tuples plus one rejection per bad record.
Nothing here raises on bad input: bad input is data.

Two decoders share this contract. :func:`decode_rows` is the hot path: msgspec decodes a message that
is a JSON array of sample objects straight into typed :class:`Row` structs (types checked in C, the
labels kept as their raw JSON bytes), or says ``None`` when the message is anything else; the caller
then takes the general path, :func:`decode_records` (orjson) and :func:`validate_record`, which gives
every record its own reason. The fast path never accepts what the general path would refuse: it
only types what both agree on (numbers for ``ts``, ``value`` and ``ingest_ts``, strings for the
names, ``kind`` one of the two), and the range checks and the labels are the caller's (the pipeline's
validate stage looks the raw labels up among series the general path validated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import msgspec
import orjson

from models.samples import (
    MAX_ABS_VALUE,
    MAX_BATCH_SAMPLES,
    MAX_LABEL_KEY_LEN,
    MAX_LABEL_VALUE_LEN,
    MAX_LABELS,
    MAX_MESSAGE_BYTES,
    MAX_METRIC_LEN,
    MAX_SOURCE_LEN,
    Layer,
)
from models.timeutil import MAX_TS, MIN_TS, TimestampError, parse_ts

LAYERS: frozenset[str] = frozenset(layer.value for layer in Layer)
_KINDS = frozenset({"gauge", "counter"})
_EMPTY: dict[str, str] = {}


class Sample(NamedTuple):
    """A validated sample. ``labels`` is the original mapping (never mutated)."""

    ts: float
    layer: str
    source: str
    metric: str
    value: float
    labels: dict[str, str]
    kind: str | None
    ingest_ts: float | None


class Row(msgspec.Struct, gc=False):
    """One sample as the fast path decodes it: typed, its labels the raw JSON text of the object.

    Not tracked by the cyclic garbage collector (``gc=False``: a row holds no containers), so a batch
    of decoded rows costs the collector nothing. ``labels`` is whatever JSON value the record had
    (raw bytes; ``{}`` when absent): an object of strings only once the caller found it among the
    validated series' labels.
    """

    ts: float
    layer: str
    source: str
    metric: str
    value: float
    labels: msgspec.Raw = msgspec.Raw(b"{}")
    kind: Literal["gauge", "counter"] | None = None
    ingest_ts: float | None = None


_ROWS = msgspec.json.Decoder(list[Row])


def decode_rows(raw: bytes) -> list[Row] | None:
    """The message's samples as typed rows, or None: not a plain non-empty array of well-typed sample
    objects within the size limits (a control, a ``{"samples": ...}`` document, a timestamp as text, a
    value that is not a number, ...), which the general path (:func:`decode_records`) then decides.

    Duplicate keys in a record resolve as orjson resolves them (the last one), and numbers are read
    to the same doubles, so a row holds what the general path would have read.

    >>> rows = decode_rows(b'[{"ts": 1764502930, "layer": "gpu", "source": "n1", "metric": "m", "value": 1,'
    ...                    b' "labels": {"gpu": "0"}}]')
    >>> rows[0].ts, rows[0].value, bytes(rows[0].labels), rows[0].kind
    (1764502930.0, 1.0, b'{"gpu": "0"}', None)
    >>> decode_rows(b'[{"ts": "2026-12-01T00:00:00Z", "layer": "gpu", "source": "n1", "metric": "m", "value": 1}]')
    >>> decode_rows(b'{"lockstep_control": "eos"}'), decode_rows(b"[]"), decode_rows(b"not json")
    (None, None, None)
    """
    if not raw or len(raw) > MAX_MESSAGE_BYTES:
        return None
    try:
        rows = _ROWS.decode(raw)
    except msgspec.MsgspecError:
        return None
    if not rows or len(rows) > MAX_BATCH_SAMPLES:
        return None
    return rows


@dataclass(frozen=True, slots=True)
class Rejection:
    """One record that could not be used. ``index`` is its position in the batch (None: whole message)."""

    index: int | None
    reason: str
    error: str = "ValidationFailed"


@dataclass(slots=True)
class DecodedBatch:
    samples: list[Sample] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    control: str | None = None


def decode_records(raw: bytes) -> tuple[list[Any] | None, Rejection | None, str | None]:
    """Decode a message into its list of records, or a whole-message rejection.

    Returns ``(records, None, None)``, ``(None, rejection, None)`` or, for a control message
    (``{"lockstep_control": "eos"}``), ``(None, None, "eos")``.
    """
    if len(raw) > MAX_MESSAGE_BYTES:
        return None, Rejection(None, f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}", "DecodeFailed"), None
    if not raw:
        return None, Rejection(None, "empty message (a tombstone: a record with no value)", "DecodeFailed"), None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, Rejection(None, f"not JSON: {exc}", "DecodeFailed"), None
    if isinstance(doc, dict):
        if "samples" in doc and "layer" not in doc:
            doc = doc["samples"]
            if not isinstance(doc, list):
                return None, Rejection(None, '"samples" is not an array'), None
        elif "lockstep_control" in doc:
            control = doc["lockstep_control"]
            if control == "eos":
                return None, None, "eos"
            return None, Rejection(None, f"unknown control {str(control)[:40]!r}"), None
        else:
            return [doc], None, None
    if not isinstance(doc, list):
        return None, Rejection(None, f"expected an object or an array, got {type(doc).__name__}"), None
    if len(doc) > MAX_BATCH_SAMPLES:
        return None, Rejection(None, f"batch of {len(doc)} samples exceeds {MAX_BATCH_SAMPLES}"), None
    return doc, None, None


def _time(value: Any, name: str) -> float:
    # Fast path for the common case (a plain number in range); the rest goes through parse_ts.
    if (type(value) is float or type(value) is int) and MIN_TS <= value < MAX_TS:
        return float(value)
    try:
        return parse_ts(value)
    except TimestampError as exc:
        raise ValueError(f"{name}: {exc}") from None


def validate_record(rec: Any) -> Sample:
    """Validate one decoded record; raise ``ValueError`` with the reason."""
    if type(rec) is not dict:
        raise ValueError(f"sample must be an object, got {type(rec).__name__}")
    try:
        ts = rec["ts"]
        layer = rec["layer"]
        source = rec["source"]
        metric = rec["metric"]
        value = rec["value"]
    except KeyError as exc:
        raise ValueError(f"missing field {exc.args[0]!r}") from None
    ts = _time(ts, "ts")
    if type(layer) is not str or layer not in LAYERS:
        raise ValueError(f"unknown layer {str(layer)[:40]!r}")
    if type(source) is not str or not 0 < len(source) <= MAX_SOURCE_LEN:
        raise ValueError(f"source must be a string of 1..{MAX_SOURCE_LEN} characters")
    if type(metric) is not str or not 0 < len(metric) <= MAX_METRIC_LEN:
        raise ValueError(f"metric must be a string of 1..{MAX_METRIC_LEN} characters")
    tv = type(value)
    if tv is float:
        if not math.isfinite(value):
            raise ValueError("value is not finite")
    elif tv is int:
        if not -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:  # before float(): a huge int would overflow it
            raise ValueError(f"value {str(value)[:24]} is beyond +-2^64 (no counter or gauge holds it)")
        value = float(value)
    else:
        raise ValueError(f"value must be a number, got {tv.__name__}")
    if not -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:
        raise ValueError(f"value {value:.6g} is beyond +-2^64 (no counter or gauge holds it)")
    labels = rec.get("labels", _EMPTY)
    if labels is not _EMPTY:
        if type(labels) is not dict:
            raise ValueError("labels must be an object of strings")
        if len(labels) > MAX_LABELS:
            raise ValueError(f"more than {MAX_LABELS} labels")
        for key, val in labels.items():
            if type(val) is not str:
                raise ValueError(f"label {key!r} is not a string")
            if not key or len(key) > MAX_LABEL_KEY_LEN:
                raise ValueError(f"label name {key[:40]!r} is empty or longer than {MAX_LABEL_KEY_LEN}")
            if len(val) > MAX_LABEL_VALUE_LEN:
                raise ValueError(f"label {key!r} longer than {MAX_LABEL_VALUE_LEN}")
    kind = rec.get("kind")
    if kind is not None:
        if kind not in _KINDS:
            raise ValueError(f"kind must be gauge or counter, got {str(kind)[:40]!r}")
        if kind == "counter" and value < 0:
            raise ValueError("counter value is negative")
    ingest = rec.get("ingest_ts")
    ingest_ts = None if ingest is None else _time(ingest, "ingest_ts")
    return Sample(ts, layer, source, metric, value, labels, kind, ingest_ts)


def decode_batch(raw: bytes) -> DecodedBatch:
    """Decode and validate one message. Never raises on bad input.

    >>> b = decode_batch(b'[{"ts": 1764502930, "layer": "gpu", "source": "n1", "metric": "m", "value": 1},'
    ...                  b' {"ts": 1764502930, "layer": "moon", "source": "n1", "metric": "m", "value": 1}]')
    >>> len(b.samples), b.rejections[0].index, b.rejections[0].reason
    (1, 1, "unknown layer 'moon'")
    """
    out = DecodedBatch()
    records, rejection, control = decode_records(raw)
    if control is not None:
        out.control = control
        return out
    if rejection is not None or records is None:
        out.rejections.append(rejection or Rejection(None, "empty message"))
        return out
    append = out.samples.append
    for i, rec in enumerate(records):
        try:
            append(validate_record(rec))
        except ValueError as exc:
            out.rejections.append(Rejection(i, str(exc)))
    return out
