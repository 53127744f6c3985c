"""NCCL Inspector JSON (``NCCL_INSPECTOR_PROM_DUMP=0``): per-collective performance records.

Reference: NVIDIA/nccl ``plugins/profiler/inspector/README.md`` (formerly ``ext-profiler/inspector``).

Two shapes, one JSON object per line, or the same objects pretty-printed over many lines one after
another (:func:`streams.formats.jsonstream.json_values`):

- **v4.0 - v4.2**: every record is self-contained::

    {"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1748030377748202,
                  "hostname": "example-hostname", "pid": 1639453},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_algobw_gbs": 277.2, "coll_busbw_gbs": 485.1}}

- **v4.3**: each communicator dump starts with a ``dump_stats`` marker carrying ``header`` and
  ``metadata`` once; the next ``coll_records + p2p_records + proxy_records`` objects
  (``{"coll_perf": ...}``, ``{"p2p_perf": ...}``, ``{"proxy_trace": ...}``) belong to it and do not
  repeat them. The context is carried forward per stream (``stream`` header: the file or Kafka key),
  across messages when an :class:`AdapterState` is passed. An operation record with no marker
  before it, or beyond the count its marker announced, is rejected with that reason.

Each collective becomes ``coll_exec_time_us``, ``coll_busbw_gbs`` and ``coll_algobw_gbs`` samples
(P2P: ``p2p_*``) on the ``nccl`` layer, source ``metadata.hostname``, labels ``comm_id`` (header
id), ``comm_name``, ``rank``, ``n_ranks``, ``nnodes``, ``pid``, ``coll`` (``p2p``), ``coll_algo``,
``coll_proto``, ``coll_timing_source``, ``coll_msg_size_bytes`` (``p2p_peer``...) and ``job_id`` from
the ``job_id`` header (the records carry no job id). ``coll_sn`` is not a label (one series per
operation would be unbounded). Time: ``event_trace_ts.coll_stop_ts`` (verbose mode) or the dump's
``dump_timestamp_us``, both microseconds. Several operations of one series at the same time (one
dump) are summarised by their mean, counted in ``skipped``. ``dump_stats`` counters and
``proxy_trace`` records are inspector bookkeeping and proxy traces: skipped and counted.
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import HEADER_JOB_ID, HEADER_STREAM, Context, ts_in_unit
from streams.formats.jsonstream import json_values

_OPS = {
    "coll_perf": ("coll", ("coll_exec_time_us", "coll_busbw_gbs", "coll_algobw_gbs"),
                  ("coll", "coll_algo", "coll_proto", "coll_timing_source", "coll_msg_size_bytes")),
    "p2p_perf": ("p2p", ("p2p_exec_time_us", "p2p_busbw_gbs", "p2p_algobw_gbs"),
                 ("p2p", "p2p_peer", "p2p_timing_source", "p2p_msg_size_bytes")),
}
SKIP_MERGED = "NCCL sample merged into the mean of its series at the same time (one dump)"
SKIP_PROXY = "NCCL Inspector proxy_trace record"
SKIP_DUMP_STATS = "NCCL Inspector dump_stats marker (context, not a measurement)"


def _header_labels(header: dict[str, Any], metadata: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, label in (("id", "comm_id"), ("comm_name", "comm_name"), ("rank", "rank"), ("n_ranks", "n_ranks"),
                       ("nnodes", "nnodes")):
        value = header.get(key)
        if value is not None and value != "":
            labels[label] = str(value)
    if metadata.get("pid") is not None:
        labels["pid"] = str(metadata["pid"])
    return labels


def convert(raw: bytes, ctx: Context) -> None:
    stream = ctx.header(HEADER_STREAM) or ""
    job_id = ctx.header(HEADER_JOB_ID)
    contexts = ctx.state.nccl
    # (source, metric, labels tuple, ts) -> [sum, n, record]
    series: dict[tuple[str, str, tuple[tuple[str, str], ...], float], list[Any]] = {}
    for record, doc in json_values(raw, ctx):
        rec = record or "message"
        if not isinstance(doc, dict):
            ctx.reject(rec, f"expected a JSON object, got {type(doc).__name__}")
            continue
        op_key = next((k for k in _OPS if k in doc), None)
        has_context = isinstance(doc.get("header"), dict) and isinstance(doc.get("metadata"), dict)
        if op_key is None:
            if "proxy_trace" in doc or "record_type" in doc:
                ctx.skip(SKIP_PROXY)
                _consume(contexts, stream)
                continue
            if "dump_stats" in doc and has_context:
                stats = doc["dump_stats"]
                expected = 0
                if isinstance(stats, dict):
                    for key in ("coll_records", "p2p_records", "proxy_records"):
                        n = stats.get(key, 0)
                        expected += n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0
                ts = _dump_ts(doc["metadata"])
                contexts[stream] = {"header": doc["header"], "metadata": doc["metadata"], "remaining": expected,
                                    "ts": ts if ts is not None else ctx.state.watermark or 0.0}
                ctx.skip(SKIP_DUMP_STATS)
                continue
            ctx.reject(rec, "not an NCCL Inspector record (no coll_perf, p2p_perf, dump_stats or proxy_trace)")
            continue
        if has_context:
            header, metadata = doc["header"], doc["metadata"]
        else:
            marker = contexts.get(stream)
            if marker is None:
                ctx.reject(rec, f"{op_key} record without a preceding dump_stats marker in stream {stream!r} "
                                "(v4.3 records are not self-contained)")
                continue
            if marker["remaining"] <= 0:
                ctx.reject(rec, f"{op_key} record beyond the records its dump_stats marker announced")
                continue
            marker["remaining"] -= 1
            header, metadata = marker["header"], marker["metadata"]
        _operation(doc[op_key], op_key, rec, header, metadata, job_id, ctx, series)
    for (source, metric, labels, ts), (total, n, rec) in series.items():
        if n > 1:
            ctx.skip(SKIP_MERGED, n - 1)
        ctx.sample(rec, ts, ctx.layer("nccl"), source, metric, total / n, dict(labels), "gauge")


def _consume(contexts: dict[str, dict[str, Any]], stream: str) -> None:
    marker = contexts.get(stream)
    if marker is not None and marker["remaining"] > 0:
        marker["remaining"] -= 1


def _dump_ts(metadata: dict[str, Any]) -> float | None:
    raw = metadata.get("dump_timestamp_us")
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            return ts_in_unit(raw, 1e6, "dump_timestamp_us")
        except ValueError:
            return None
    return None


def _operation(op: Any, op_key: str, rec: str, header: dict[str, Any], metadata: dict[str, Any],
               job_id: str | None, ctx: Context,
               series: dict[tuple[str, str, tuple[tuple[str, str], ...], float], list[Any]]) -> None:
    prefix, metrics, label_fields = _OPS[op_key]
    if not isinstance(op, dict):
        ctx.reject(rec, f"{op_key} is not an object")
        return
    source = ctx.source(metadata.get("hostname") if isinstance(metadata.get("hostname"), str) else None)
    if source is None:
        ctx.reject(rec, "no metadata.hostname, no source header and no default source")
        return
    trace = op.get("event_trace_ts")
    stop = trace.get(f"{prefix}_stop_ts") if isinstance(trace, dict) else None
    try:
        if isinstance(stop, int | float) and not isinstance(stop, bool):
            ts = ts_in_unit(stop, 1e6, f"event_trace_ts.{prefix}_stop_ts")
        else:
            raw_ts = metadata.get("dump_timestamp_us")
            if isinstance(raw_ts, bool) or not isinstance(raw_ts, int | float):
                ctx.reject(rec, "no metadata.dump_timestamp_us and no event_trace_ts (microseconds)")
                return
            ts = ts_in_unit(raw_ts, 1e6, "metadata.dump_timestamp_us")
    except ValueError as exc:
        ctx.reject(rec, str(exc))
        return
    labels = _header_labels(header, metadata)
    for field in label_fields:
        value = op.get(field)
        if value is not None and value != "":
            labels[field] = str(value)
    if job_id:
        labels["job_id"] = job_id
    if prefix not in labels:
        ctx.reject(rec, f"{op_key} has no {prefix!r} (operation name)")
        return
    key_labels = tuple(sorted(labels.items()))
    present = 0
    for metric in metrics:
        value = op.get(metric)
        if value is None:
            continue
        present += 1
        if isinstance(value, bool) or not isinstance(value, int | float):
            ctx.reject(rec, f"{metric} is not a number")
            continue
        slot = series.get((source, metric, key_labels, ts))
        if slot is None:
            series[(source, metric, key_labels, ts)] = [float(value), 1, rec]
        else:
            slot[0] += float(value)
            slot[1] += 1
    if not present:
        ctx.reject(rec, f"{op_key} has none of {', '.join(metrics)}")
