"""OpenTelemetry OTLP/JSON metrics: ``ExportMetricsServiceRequest`` / ``MetricsData`` documents.

Reference: https://github.com/open-telemetry/opentelemetry-proto (``examples/metrics.json``,
``opentelemetry/proto/metrics/v1/metrics.proto``) and the OTLP/JSON mapping rules (camelCase field
names, 64-bit integers as decimal strings, enums as integers).

    resourceMetrics[].resource.attributes[] + scopeMetrics[].metrics[] -> gauge | sum .dataPoints[]

- Labels: resource attributes, then data point attributes (a data point wins on a clash). String,
  int, double and bool values become strings; array and kvlist values are rejected with a reason.
- Source: ``host.name``, ``k8s.node.name`` (then the generic rules, the header, the default).
- ``gauge`` -> ``kind: gauge``. ``sum`` with ``isMonotonic`` -> ``kind: counter``, otherwise a gauge;
  ``aggregationTemporality`` 2 (cumulative) is sent as is, 1 (delta) is accumulated per series in
  the adapter state into a cumulative value, 0 (unspecified) is rejected.
- ``timeUnixNano`` (nanoseconds, string or number) is the sample time.
- Data points flagged ``FLAG_NO_RECORDED_VALUE``, and histogram / exponential histogram / summary
  metrics, are skipped and counted (only gauge and sum are single measurements).
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context, parse_number, ts_in_unit
from streams.formats.jsonrecords import json_documents
from streams.formats.metrics import MetricEmitter
from streams.formats.state import SEP

SKIP_NOT_SCALAR = "OTLP histogram/exponentialHistogram/summary metric (not a single measurement)"
SKIP_NO_VALUE = "OTLP data point flagged no-recorded-value"
SKIP_STALE_DELTA = "OTLP delta point at the series' last time (added to the running total, not a new point)"
_FLAG_NO_RECORDED_VALUE = 1
_TEMPORALITY_DELTA = 1
_TEMPORALITY_CUMULATIVE = 2


def _attr_value(value: Any) -> str:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError("attribute value must hold exactly one of stringValue/intValue/doubleValue/boolValue")
    (key, inner), = value.items()
    if key == "stringValue" and isinstance(inner, str):
        return inner
    if key == "intValue" and isinstance(inner, int | str) and not isinstance(inner, bool):
        text = str(inner)
        if not text.lstrip("-").isdigit():
            raise ValueError(f"intValue {text[:40]!r} is not an integer")
        return text
    if key == "doubleValue" and isinstance(inner, int | float) and not isinstance(inner, bool):
        return repr(float(inner))
    if key == "boolValue" and isinstance(inner, bool):
        return "true" if inner else "false"
    raise ValueError(f"{key} values are not supported as labels")


def _attributes(items: Any, where: str) -> dict[str, str]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise ValueError(f"{where}.attributes is not an array")
    out: dict[str, str] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ValueError(f"{where}.attributes[{i}] has no string key")
        try:
            text = _attr_value(item.get("value"))
        except ValueError as exc:
            raise ValueError(f"{where}.attributes[{i}] ({item['key']}): {exc}") from None
        if text:
            out[item["key"]] = text
    return out


def _point_value(point: dict[str, Any]) -> float:
    if "asDouble" in point:
        v = point["asDouble"]
        if isinstance(v, str):  # OTLP/JSON writes NaN and Infinity as strings
            parsed = parse_number(v.replace("Infinity", "inf"))
            if parsed is None:
                raise ValueError(f"asDouble {v[:40]!r} is not a number")
            return parsed
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        raise ValueError("asDouble is not a number")
    if "asInt" in point:
        v = point["asInt"]
        if isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, str) and v.lstrip("-").isdigit():
            return float(int(v))
        raise ValueError("asInt is not an integer (a decimal string or a number)")
    raise ValueError("no asDouble or asInt value")


def _time(point: dict[str, Any]) -> float:
    raw = point.get("timeUnixNano")
    # Integer microseconds first: nanoseconds since 1970 do not fit a float's 53 bits exactly.
    if isinstance(raw, str) and raw.isdigit():
        return ts_in_unit(int(raw) // 1000, 1e6, "timeUnixNano")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return ts_in_unit(raw // 1000, 1e6, "timeUnixNano")
    raise ValueError("timeUnixNano is missing or not an integer")


def convert(raw: bytes, ctx: Context) -> None:
    emitter = MetricEmitter(ctx)
    for record, doc in json_documents(raw, ctx, split_arrays=False):
        base = record or "message"
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceMetrics"), list):
            ctx.reject(base, 'expected an object with a "resourceMetrics" array')
            continue
        for ri, rm in enumerate(doc["resourceMetrics"]):
            rwhere = f"resourceMetrics[{ri}]"
            if not isinstance(rm, dict):
                ctx.reject(rwhere, "not an object")
                continue
            resource = rm.get("resource") or {}
            try:
                res_labels = _attributes(resource.get("attributes") if isinstance(resource, dict) else None,
                                         f"{rwhere}.resource")
            except ValueError as exc:
                ctx.reject(rwhere, str(exc))
                continue
            scopes = rm.get("scopeMetrics", rm.get("instrumentationLibraryMetrics"))
            if not isinstance(scopes, list):
                ctx.reject(rwhere, 'no "scopeMetrics" array')
                continue
            for si, sm in enumerate(scopes):
                swhere = f"{rwhere}.scopeMetrics[{si}]"
                metrics = sm.get("metrics") if isinstance(sm, dict) else None
                if not isinstance(metrics, list):
                    ctx.reject(swhere, 'no "metrics" array')
                    continue
                for mi, metric in enumerate(metrics):
                    _metric(metric, f"{swhere}.metrics[{mi}]", res_labels, ctx, emitter)


def _metric(metric: Any, where: str, res_labels: dict[str, str], ctx: Context, emitter: MetricEmitter) -> None:
    if not isinstance(metric, dict) or not isinstance(metric.get("name"), str) or not metric["name"]:
        ctx.reject(where, "metric has no name")
        return
    name = metric["name"]
    temporality: Any
    if "gauge" in metric:
        body, kind, temporality = metric["gauge"], "gauge", _TEMPORALITY_CUMULATIVE
    elif "sum" in metric:
        body = metric["sum"]
        if not isinstance(body, dict):
            ctx.reject(where, f"{name}: sum is not an object")
            return
        kind = "counter" if body.get("isMonotonic") is True else "gauge"
        temporality = body.get("aggregationTemporality")
        if temporality not in (_TEMPORALITY_DELTA, _TEMPORALITY_CUMULATIVE):
            ctx.reject(where, f"{name}: sum aggregationTemporality must be 1 (delta) or 2 (cumulative), "
                              f"got {str(temporality)[:20]!r}")
            return
    elif any(k in metric for k in ("histogram", "exponentialHistogram", "summary")):
        ctx.skip(SKIP_NOT_SCALAR)
        return
    else:
        ctx.reject(where, f"{name}: no gauge or sum data")
        return
    points = body.get("dataPoints") if isinstance(body, dict) else None
    if not isinstance(points, list):
        ctx.reject(where, f"{name}: no dataPoints array")
        return
    for pi, point in enumerate(points):
        pwhere = f"{where}.dataPoints[{pi}]"
        if not isinstance(point, dict):
            ctx.reject(pwhere, f"{name}: data point is not an object")
            continue
        flags = point.get("flags", 0)
        if isinstance(flags, int) and flags & _FLAG_NO_RECORDED_VALUE:
            ctx.skip(SKIP_NO_VALUE)
            continue
        try:
            value = _point_value(point)
            ts = _time(point)
            labels = {**res_labels, **_attributes(point.get("attributes"), pwhere)}
        except ValueError as exc:
            ctx.reject(pwhere, f"{name}: {exc}")
            continue
        if temporality == _TEMPORALITY_DELTA:
            key = SEP.join(("otlp", name, *(f"{k}={v}" for k, v in sorted(labels.items()))))
            total, advanced = ctx.state.accumulate(key, ts, value)
            if not advanced:
                ctx.skip(SKIP_STALE_DELTA)
                continue
            value = total
        emitter.emit(pwhere, ts, name, labels, value, kind)
