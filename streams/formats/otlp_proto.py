"""OpenTelemetry OTLP/protobuf metrics: a binary ``ExportMetricsServiceRequest`` (what OTLP/HTTP
with ``Content-Type: application/x-protobuf`` and OTLP/gRPC carry, and the collector's Kafka exporter
writes with ``encoding: otlp_proto``).

Decoded with the generated classes of the official ``opentelemetry-proto`` package, then mapped
exactly like OTLP/JSON (:mod:`streams.formats.otlp`): the protobuf message is turned into its
OTLP/JSON form by protobuf's own JSON mapping (camelCase names, 64-bit integers as decimal strings,
enums as integers), so labels, sources, kinds, delta accumulation and skips are one code path for
both encodings. A message that is not a valid ``ExportMetricsServiceRequest`` is one rejection
(``DecodeFailed``).
"""

from __future__ import annotations

from typing import Any

import orjson

from streams.formats import otlp
from streams.formats.base import Context


def convert(raw: bytes, ctx: Context) -> None:
    try:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    except ImportError:  # pragma: no cover - a main dependency; this names the fix if it is missing
        ctx.reject(None, "OTLP protobuf needs the opentelemetry-proto package (pip install opentelemetry-proto)",
                   "UnsupportedFormat")
        return
    request: Any = ExportMetricsServiceRequest()  # protobuf's runtime is untyped
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        ctx.reject(None, f"not an OTLP ExportMetricsServiceRequest: {exc}", "DecodeFailed")
        return
    to_dict: Any = MessageToDict
    doc = to_dict(request, use_integers_for_enums=True)
    if not doc.get("resourceMetrics"):
        if raw:
            ctx.reject(None, "OTLP request with no resourceMetrics (not OTLP metrics?)", "DecodeFailed")
        return
    otlp.convert(orjson.dumps(doc), ctx)
