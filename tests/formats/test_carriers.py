"""Metric carriers: prometheus-kafka-adapter, Telegraf JSON, Vector JSON, OTLP/JSON."""

from __future__ import annotations

import orjson

from streams.formats import AdapterState

from .helpers import T0, one, run

# -- prometheus-kafka-adapter ----------------------------------------------------------------------


def test_prom_kafka_adapter_string_values_rfc3339_times_and_the_flat_legacy_form():
    out = run("prom-kafka-adapter", "prom_kafka_adapter.jsonl", ts=None)
    assert out.rejections == []
    ib = one(out, "node_infiniband_symbol_error_total")
    assert ib == {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "node_infiniband_symbol_error_total",
                  "value": 4211.0, "labels": {"device": "mlx5_0", "instance": "gpu001:9100", "job": "node",
                                              "port": "1"}, "kind": "counter"}
    gpu = one(out, "DCGM_FI_DEV_GPU_UTIL")
    assert (gpu["source"], gpu["ts"], gpu["layer"]) == ("gpu001", T0 + 0.5, "gpu")  # Hostname beats instance
    assert "__name__" not in gpu["labels"]
    legacy = one(out, "up")
    assert (legacy["ts"], legacy["source"], legacy["value"]) == (T0, "gpu003", 1.0)
    assert out.skipped == {"non-finite value (NaN or Inf)": 1}


def test_prom_kafka_adapter_rejects_bad_values_and_times_per_message():
    lines = [
        {"timestamp": "2025-11-30T11:42:10Z", "value": "12abc", "name": "m", "labels": {"instance": "a:1"}},
        {"timestamp": "yesterday", "value": "1", "name": "m", "labels": {"instance": "a:1"}},
        {"timestamp": "2025-11-30T11:42:10", "value": "1", "name": "m", "labels": {"instance": "a:1"}},
        {"timestamp": "2025-11-30T11:42:10Z", "value": "1", "name": "m", "labels": {"instance": 5}},
        {"timestamp": "2025-11-30T11:42:10Z", "value": "1", "name": "ok", "labels": {"instance": "a:1"}},
    ]
    raw = b"\n".join(orjson.dumps(x) for x in lines)
    out = run("prom-kafka-adapter", raw)
    assert [s["metric"] for s in out.samples] == ["ok"]
    reasons = [r.reason for r in out.rejections]
    assert "'12abc' is not a number" in reasons[0]
    assert "neither a number nor RFC 3339" in reasons[1]
    assert "neither a number nor RFC 3339" in reasons[2]  # no offset: not RFC 3339
    assert "label 'instance' is not a string" in reasons[3]
    assert [r.record for r in out.rejections] == ["line 1", "line 2", "line 3", "line 4"]


# -- Telegraf --------------------------------------------------------------------------------------

def test_telegraf_single_metric_becomes_measurement_field_samples():
    out = run("telegraf", "telegraf_single.json", ts=None)
    assert out.rejections == [] and len(out.samples) == 12
    s = one(out, "infiniband_symbol_error")
    assert s == {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "infiniband_symbol_error", "value": 12.0,
                 "labels": {"device": "mlx5_0", "host": "gpu001", "port": "1"}}
    assert out.unknown_metrics == 0  # every infiniband_* field is in the catalogue


def test_telegraf_batch_with_millisecond_timestamps_and_string_fields():
    out = run("telegraf", "telegraf_batch.json", ts=None)
    assert out.rejections == []
    pause = one(out, "ethtool_rx_prio3_pause")
    assert (pause["ts"], pause["layer"], pause["source"], pause["value"]) == (T0, "nic", "gpu041", 118.0)
    assert pause["labels"]["interface"] == "ens1f0np0"
    assert one(out, "nvidia_smi_utilization_gpu")["layer"] == "gpu"
    assert out.skipped == {"non-numeric Telegraf field (string or boolean)": 2}


def test_telegraf_rejects_a_metric_without_fields_and_keeps_the_batch_going():
    raw = orjson.dumps({"metrics": [
        {"name": "x", "fields": {}, "tags": {"host": "h"}, "timestamp": T0},
        {"name": "y", "fields": {"v": 1}, "tags": {"host": "h"}, "timestamp": "not a time"},
        {"name": "z", "fields": {"v": 2}, "tags": {"host": "h"}, "timestamp": T0},
    ]})
    out = run("telegraf", raw)
    assert [s["metric"] for s in out.samples] == ["z_v"]
    assert [r.record for r in out.rejections] == ["metrics[0]", "metrics[1]"]
    assert "fields" in out.rejections[0].reason


# -- Vector ----------------------------------------------------------------------------------------

def test_vector_native_json_namespace_nanosecond_times_and_kinds():
    out = run("vector", "vector.jsonl", ts=None)
    assert out.rejections == []
    idle = one(out, "host_cpu_seconds_total", mode="idle")
    assert idle["ts"] == 1764502930.666956 and idle["kind"] == "counter" and idle["source"] == "gpu001"
    assert one(out, "host_memory_available_bytes")["kind"] == "gauge"
    step = one(out, "step_time_seconds")  # the plain json codec (no "metric" wrapper)
    assert (step["layer"], step["source"]) == ("step", "gpu002")
    assert out.skipped == {"Vector set/distribution/histogram/summary value (not a single measurement)": 1}


def test_vector_incremental_counters_become_running_totals_across_messages():
    state = AdapterState()
    out = run("vector", "vector.jsonl", ts=None, state=state)
    assert [s["value"] for s in out.samples if s["metric"] == "xid_events"] == [1.0, 3.0]
    more = orjson.dumps({"metric": {"name": "xid_events", "tags": {"host": "gpu001", "gpu": "3"},
                                    "timestamp": "2025-11-30T11:42:12Z", "kind": "incremental",
                                    "counter": {"value": 4.0}}})
    assert [s["value"] for s in run("vector", more, ts=None, state=state).samples] == [7.0]
    fresh = run("vector", more, ts=None)  # without the state the total restarts
    assert [s["value"] for s in fresh.samples] == [4.0]


def test_vector_same_time_increments_are_added_not_lost():
    state = AdapterState()
    doc = {"metric": {"name": "e", "tags": {"host": "h"}, "timestamp": "2025-11-30T11:42:10Z", "kind": "incremental",
                      "counter": {"value": 1.0}}}
    first = run("vector", orjson.dumps(doc), state=state)
    second = run("vector", orjson.dumps(doc), state=state)
    doc["metric"]["timestamp"] = "2025-11-30T11:42:11Z"
    third = run("vector", orjson.dumps(doc), state=state)
    assert [s["value"] for s in first.samples + second.samples + third.samples] == [1.0, 3.0]
    assert sum(second.skipped.values()) == 1


def test_vector_rejects_log_events_and_bad_kinds():
    raw = b'{"log": {"message": "hello"}}\n{"metric": {"name": "m", "kind": "sometimes", "gauge": {"value": 1}}}\n'
    out = run("vector", raw)
    assert out.samples == []
    assert out.rejections[0].error == "UnsupportedFormat"
    assert "kind" in out.rejections[1].reason


# -- OTLP/JSON -------------------------------------------------------------------------------------

def test_otlp_gauge_and_cumulative_sum_with_resource_attributes():
    out = run("otlp-json", "otlp.json", ts=None)
    assert out.rejections == []
    t = one(out, "nccl_collective_exec_time_microseconds")
    assert (t["ts"], t["layer"], t["source"], t["kind"]) == (T0 + 0.25, "nccl", "gpu001", "gauge")
    assert t["labels"]["service.name"] == "nccl-inspector" and t["labels"]["nranks"] == "256"
    dropped = one(out, "system.network.dropped")
    assert (dropped["value"], dropped["kind"], dropped["source"]) == (42.0, "counter", "gpu001")
    assert out.skipped == {"OTLP histogram/exponentialHistogram/summary metric (not a single measurement)": 1}


def test_otlp_delta_sums_are_accumulated_into_a_cumulative_counter():
    out = run("otlp-json", "otlp.json", ts=None)
    assert [(s["ts"], s["value"]) for s in out.samples if s["metric"] == "my.counter"] == [(T0, 5.0), (T0 + 1, 8.0)]


def test_otlp_rejects_unspecified_temporality_and_bad_points_precisely():
    doc = {"resourceMetrics": [{"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "h"}}]},
                                "scopeMetrics": [{"metrics": [
        {"name": "a", "sum": {"aggregationTemporality": 0, "isMonotonic": True, "dataPoints": []}},
        {"name": "b", "gauge": {"dataPoints": [{"asInt": "12x", "timeUnixNano": "1764502930000000000"},
                                              {"asInt": "12", "timeUnixNano": "1764502930000000000"},
                                              {"asDouble": 1.5, "timeUnixNano": "17"}]}},
        {"name": "c", "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1764502930000000000",
                                                "attributes": [{"key": "k", "value": {"arrayValue": {}}}]}]}},
    ]}]}]}
    out = run("otlp-json", orjson.dumps(doc))
    assert [(s["metric"], s["value"]) for s in out.samples] == [("b", 12.0)]
    by_record = {r.record: r.reason for r in out.rejections}
    base = "resourceMetrics[0].scopeMetrics[0].metrics"
    assert "aggregationTemporality" in by_record[f"{base}[0]"]
    assert "asInt" in by_record[f"{base}[1].dataPoints[0]"]
    assert "2000-01-01" in by_record[f"{base}[1].dataPoints[2]"]
    assert "arrayValue" in by_record[f"{base}[2].dataPoints[0]"]
