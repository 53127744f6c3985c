"""Vector metric events as JSON: the ``native_json`` codec (``{"metric": {...}}``) or the ``json`` codec.

Reference: https://vector.dev/docs/architecture/data-model/metric/ ::

    {"metric": {"name": "cpu_seconds_total", "namespace": "host",
                "tags": {"host": "gpu001", "cpu": "0", "mode": "idle"},
                "timestamp": "2025-11-30T11:42:10.666956352Z", "kind": "absolute",
                "counter": {"value": 100.0}}}

The sample name is ``<namespace>_<name>`` (how Vector's Prometheus sinks join them). ``kind``:

- ``absolute`` counter -> ``kind: counter``; absolute gauge -> ``kind: gauge``;
- ``incremental`` counter or gauge: the value is a change, so the running total per series is kept
  in the adapter state and sent as the cumulative value (the first increment starts the total).

Set, distribution, histogram and summary values are not single measurements: skipped and counted.
Tags with several values (Vector's multi-value tags) are rejected with a reason.
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context, parse_time_value
from streams.formats.jsonrecords import json_documents
from streams.formats.metrics import MetricEmitter
from streams.formats.state import SEP

SKIP_AGGREGATE = "Vector set/distribution/histogram/summary value (not a single measurement)"
SKIP_STALE_DELTA = "incremental value at the series' last time (added to the running total, not a new point)"
_AGGREGATES = ("set", "distribution", "aggregated_histogram", "aggregated_summary", "histogram", "summary",
               "sketch")


def convert(raw: bytes, ctx: Context) -> None:
    emitter = MetricEmitter(ctx)
    for record, doc in json_documents(raw, ctx):
        rec = record or "message"
        if isinstance(doc, dict) and isinstance(doc.get("metric"), dict):
            doc = doc["metric"]
        elif isinstance(doc, dict) and "log" in doc:
            ctx.reject(rec, "a Vector log event, not a metric event", "UnsupportedFormat")
            continue
        if not isinstance(doc, dict):
            ctx.reject(rec, f"expected a metric object, got {type(doc).__name__}")
            continue
        _metric(doc, rec, ctx, emitter)


def _metric(doc: dict[str, Any], rec: str, ctx: Context, emitter: MetricEmitter) -> None:
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        ctx.reject(rec, '"name" is not a non-empty string')
        return
    namespace = doc.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        ctx.reject(rec, f'{name}: "namespace" is not a string')
        return
    full = f"{namespace}_{name}" if namespace else name
    kind = doc.get("kind")
    if kind not in ("absolute", "incremental"):
        ctx.reject(rec, f'{full}: "kind" must be absolute or incremental, got {str(kind)[:40]!r}')
        return
    value_type = next((k for k in ("counter", "gauge") if k in doc), None)
    if value_type is None:
        if any(k in doc for k in _AGGREGATES):
            ctx.skip(SKIP_AGGREGATE)
        else:
            ctx.reject(rec, f"{full}: no counter or gauge value")
        return
    holder = doc[value_type]
    value = holder.get("value") if isinstance(holder, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        ctx.reject(rec, f"{full}: {value_type}.value is not a number")
        return
    tags = doc.get("tags") or {}
    if not isinstance(tags, dict):
        ctx.reject(rec, f'{full}: "tags" is not an object')
        return
    labels: dict[str, str] = {}
    for key, tag in tags.items():
        if isinstance(tag, list):
            if len(tag) != 1 or not isinstance(tag[0], str):
                ctx.reject(rec, f"{full}: tag {key!r} has {len(tag)} values; a series needs one")
                return
            tag = tag[0]
        if not isinstance(tag, str):
            ctx.reject(rec, f"{full}: tag {key!r} is not a string")
            return
        if tag:
            labels[key] = tag
    if "timestamp" in doc and doc["timestamp"] is not None:
        try:
            ts = parse_time_value(doc["timestamp"], "timestamp")
        except ValueError as exc:
            ctx.reject(rec, f"{full}: {exc}")
            return
    else:
        collected = ctx.collection_ts()
        if collected is None:
            ctx.reject(rec, f'{full}: no "timestamp" and no collection time given')
            return
        ts = collected
    out_value = float(value)
    if kind == "incremental":
        if value_type == "counter" and out_value < 0:
            ctx.reject(rec, f"{full}: incremental counter value {out_value} is negative")
            return
        key = SEP.join(("vector", full, *(f"{k}={v}" for k, v in sorted(labels.items()))))
        total, advanced = ctx.state.accumulate(key, ts, out_value)
        if not advanced:
            ctx.skip(SKIP_STALE_DELTA)
            return
        out_value = total
    emitter.emit(rec, ts, full, labels, out_value, value_type)
