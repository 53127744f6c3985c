"""Telegraf JSON output (``data_format = "json"``): a single metric, a batch, or JSON lines.

Reference: https://docs.influxdata.com/telegraf/v1/data_formats/output/json/

    {"fields": {"field_1": 30, "n_images": 660}, "name": "docker", "tags": {"host": "raynor"},
     "timestamp": 1458229140}
    {"metrics": [ ...the same objects... ]}

Each numeric field becomes one sample named ``<name>_<field>`` (the naming Telegraf's own Prometheus
outputs use), tags become labels, the ``host`` tag names the source. ``timestamp`` follows
``json_timestamp_units`` (1s by default, also ms/us/ns: the unit is the one that lands in
2000..2100) or ``json_timestamp_format`` (RFC 3339). String and boolean fields are not measurements:
skipped and counted. Telegraf JSON has no metric type; the catalogue decides (``infiniband_*`` and
``ethtool_*`` fields are cumulative counters there).
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context, clean_labels, parse_time_value
from streams.formats.jsonrecords import join, json_documents
from streams.formats.metrics import MetricEmitter

SKIP_NON_NUMERIC = "non-numeric Telegraf field (string or boolean)"


def convert(raw: bytes, ctx: Context) -> None:
    emitter = MetricEmitter(ctx)
    for record, doc in json_documents(raw, ctx):
        if isinstance(doc, dict) and "metrics" in doc and "fields" not in doc:
            batch = doc["metrics"]
            if not isinstance(batch, list):
                ctx.reject(record or "message", '"metrics" is not an array')
                continue
            for i, item in enumerate(batch):
                _metric(item, join(record, f"metrics[{i}]"), ctx, emitter)
        else:
            _metric(doc, record or "message", ctx, emitter)


def _metric(doc: Any, rec: str, ctx: Context, emitter: MetricEmitter) -> None:
    if not isinstance(doc, dict):
        ctx.reject(rec, f"expected a metric object, got {type(doc).__name__}")
        return
    name = doc.get("name")
    fields = doc.get("fields")
    tags = doc.get("tags", {})
    if not isinstance(name, str) or not name:
        ctx.reject(rec, '"name" is not a non-empty string')
        return
    if not isinstance(fields, dict) or not fields:
        ctx.reject(rec, f'{name}: "fields" is not a non-empty object')
        return
    if not isinstance(tags, dict) or any(not isinstance(v, str) for v in tags.values()):
        ctx.reject(rec, f'{name}: "tags" is not an object of strings')
        return
    if "timestamp" in doc:
        try:
            ts = parse_time_value(doc["timestamp"], "timestamp")
        except ValueError as exc:
            ctx.reject(rec, f"{name}: {exc}")
            return
    else:
        collected = ctx.collection_ts()
        if collected is None:
            ctx.reject(rec, f'{name}: no "timestamp" and no collection time given')
            return
        ts = collected
    labels = clean_labels(tags)
    for field_name, value in fields.items():
        if isinstance(value, bool | str):
            ctx.skip(SKIP_NON_NUMERIC)
            continue
        if not isinstance(value, int | float):
            ctx.reject(rec, f"{name}.{field_name}: field value is {type(value).__name__}, not a number")
            continue
        emitter.emit(rec, ts, f"{name}_{field_name}", labels, float(value), None)
