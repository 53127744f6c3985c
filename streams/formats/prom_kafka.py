"""prometheus-kafka-adapter JSON: one Prometheus remote-write sample per Kafka message.

Reference: https://github.com/Telefonica/prometheus-kafka-adapter (README, "output"):

    {"timestamp": "1970-01-01T00:00:00Z", "value": "9876543210", "name": "up",
     "labels": {"__name__": "up", "label1": "value1", "label2": "value2"}}

``value`` is a string (Go's float formatting, ``NaN``/``+Inf`` included); ``timestamp`` is RFC 3339.
The adapter's first releases wrote a flat object (``__timestamp__`` in ms, ``__value__``,
``__name__`` and the labels at top level); that form is read too. ``__name__`` is removed from the
labels (it is the metric name). Remote write carries no type: ``*_total`` names are counters, the
rest is left to the catalogue. Source and layer follow the metric's profile
(:mod:`streams.formats.profiles`): ``Hostname`` for DCGM, ``node`` for NCCL, then ``host``,
``instance`` (port stripped), the ``source`` header, the default source.
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context, clean_labels, parse_number, parse_time_value
from streams.formats.jsonrecords import json_documents
from streams.formats.metrics import MetricEmitter, kind_from_name

_RESERVED_FLAT = {"__timestamp__", "__value__", "__name__"}


def convert(raw: bytes, ctx: Context) -> None:
    emitter = MetricEmitter(ctx)
    for record, doc in json_documents(raw, ctx):
        rec = record or "message"
        if not isinstance(doc, dict):
            ctx.reject(rec, f"expected a JSON object, got {type(doc).__name__}")
            continue
        if "__name__" in doc and "name" not in doc:
            _flat(doc, rec, ctx, emitter)
        else:
            _current(doc, rec, ctx, emitter)


def _current(doc: dict[str, Any], rec: str, ctx: Context, emitter: MetricEmitter) -> None:
    name = doc.get("name")
    labels = doc.get("labels", {})
    if not isinstance(labels, dict):
        ctx.reject(rec, '"labels" is not an object')
        return
    if not isinstance(name, str) or not name:
        name = labels.get("__name__")
    if not isinstance(name, str) or not name:
        ctx.reject(rec, 'no metric name ("name" or labels.__name__)')
        return
    value = _value(doc.get("value"), rec, name, ctx)
    if value is None:
        return
    if "timestamp" not in doc:
        ctx.reject(rec, f'{name}: no "timestamp"')
        return
    try:
        ts = parse_time_value(doc["timestamp"], "timestamp")
    except ValueError as exc:
        ctx.reject(rec, f"{name}: {exc}")
        return
    bad = [k for k, v in labels.items() if not isinstance(v, str)]
    if bad:
        ctx.reject(rec, f"{name}: label {bad[0]!r} is not a string")
        return
    emitter.emit(rec, ts, name, clean_labels({k: v for k, v in labels.items() if k != "__name__"}), value,
                 kind_from_name(name))


def _flat(doc: dict[str, Any], rec: str, ctx: Context, emitter: MetricEmitter) -> None:
    name = doc["__name__"]
    if not isinstance(name, str) or not name:
        ctx.reject(rec, "__name__ is not a non-empty string")
        return
    value = _value(doc.get("__value__"), rec, name, ctx)
    if value is None:
        return
    raw_ts = doc.get("__timestamp__")
    if raw_ts is None:
        ctx.reject(rec, f"{name}: no __timestamp__")
        return
    try:
        ts = parse_time_value(raw_ts, "__timestamp__")
    except ValueError as exc:
        ctx.reject(rec, f"{name}: {exc}")
        return
    labels = {k: v for k, v in doc.items() if k not in _RESERVED_FLAT}
    bad = [k for k, v in labels.items() if not isinstance(v, str)]
    if bad:
        ctx.reject(rec, f"{name}: label {bad[0]!r} is not a string")
        return
    emitter.emit(rec, ts, name, clean_labels(labels), value, kind_from_name(name))


def _value(raw: Any, rec: str, name: str, ctx: Context) -> float | None:
    if isinstance(raw, str):
        value = parse_number(raw)
        if value is None:
            ctx.reject(rec, f"{name}: value {raw[:40]!r} is not a number")
        return value
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    ctx.reject(rec, f"{name}: value must be a number or a numeric string, got {type(raw).__name__}")
    return None
