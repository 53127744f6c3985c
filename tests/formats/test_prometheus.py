"""Prometheus text / OpenMetrics scrapes and the exporter profiles riding on them."""

from __future__ import annotations

import pytest

from streams.catalogue import lookup
from streams.formats import convert
from streams.formats.prometheus import ParseError, parse_sample_line

from .helpers import T0, one, run


def test_node_exporter_scrape_without_timestamps_takes_the_collection_time_and_source_header():
    out = run("prometheus", "node_exporter.prom", headers={"source": "gpu001"})
    assert out.rejections == []
    assert len(out.samples) == 19
    s = one(out, "node_infiniband_symbol_error_total", device="mlx5_0")
    assert s == {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "node_infiniband_symbol_error_total",
                 "value": 12.0, "labels": {"device": "mlx5_0", "port": "1"}, "kind": "counter"}
    assert one(out, "node_infiniband_state_id")["kind"] == "gauge"
    assert one(out, "node_disk_reads_completed_total")["layer"] == "host"
    assert one(out, "node_cpu_seconds_total", cpu="1", mode="user")["value"] == 70.0
    assert out.unknown_metrics == 0


def test_scrape_without_timestamps_or_collection_time_is_rejected_whole():
    out = run("prometheus", "node_exporter.prom", headers={"source": "gpu001"}, ts=None)
    assert out.samples == []
    assert len(out.rejections) == 1
    assert out.rejections[0].record is None
    assert "no timestamp and no collection time" in out.rejections[0].reason


def test_collection_time_may_come_from_the_ts_header():
    out = run("prometheus", b"node_load1 0.5\n", headers={"source": "n1", "ts": "2025-11-30T11:42:10Z"}, ts=None)
    assert [s["ts"] for s in out.samples] == [T0]


def test_text_format_timestamps_are_milliseconds_and_instance_loses_its_port():
    out = run("prometheus", b'up{instance="gpu007:9100",job="node"} 1 1764502930250\n', ts=None)
    assert out.samples[0]["ts"] == 1764502930.25
    assert out.samples[0]["source"] == "gpu007"
    assert out.samples[0]["labels"]["instance"] == "gpu007:9100"  # the raw label is kept


def test_seconds_in_a_text_format_scrape_are_rejected_as_out_of_range_milliseconds():
    out = run("prometheus", b'up{instance="a:1"} 1 1764502930\n', ts=None)
    assert out.samples == []
    assert "milliseconds" in out.rejections[0].reason and "2000-01-01" in out.rejections[0].reason


def test_openmetrics_seconds_created_exemplars_escapes_nan_and_step_layer():
    out = run("prometheus", "openmetrics.txt", ts=None)
    assert out.rejections == []
    assert {s["ts"] for s in out.samples} == {1764502930.25}
    step = one(out, "step_time_seconds")
    assert (step["layer"], step["source"], step["labels"]["job_id"]) == ("step", "gpu001", "llm-70b")
    assert one(out, "dataloader_wait_seconds")["layer"] == "step"
    counter = one(out, "train_samples_total")
    assert counter["kind"] == "counter" and counter["value"] == 102400.0  # the exemplar is ignored
    assert one(out, "step_latency_seconds_bucket", le="+Inf")["kind"] == "counter"
    assert one(out, "step_latency_seconds_sum")["value"] == 11.9
    assert not [s for s in out.samples if s["metric"].endswith("_created")]
    assert out.skipped == {"OpenMetrics _created sample (a creation time, not a measurement)": 2,
                           "non-finite value (NaN or Inf)": 1}
    assert one(out, "loss")["labels"]["note"] == 'label with "quotes", a } brace and a \\ backslash'


def test_untyped_total_is_a_counter_and_other_untyped_names_are_left_to_the_catalogue():
    out = run("prometheus", b"my_events_total{host=\"h\"} 3\nmy_level{host=\"h\"} 2\n")
    assert one(out, "my_events_total")["kind"] == "counter"
    assert "kind" not in one(out, "my_level")
    assert out.unknown_metrics == 2 and out.unknown_names == {"my_events_total", "my_level"}


def test_bad_lines_are_rejected_with_their_line_and_the_rest_converts():
    raw = (b'good{host="h"} 1\n'
           b'bad{host="h" 2\n'
           b'worse{host="h"} twelve\n'
           b'dup{host="h",host="i"} 1\n'
           b'{"utf8.name", host="h"} 4\n'
           b'fine{host="h"} 5\n')
    out = run("prometheus", raw)
    assert [s["metric"] for s in out.samples] == ["good", "utf8.name", "fine"]
    reasons = {r.record: r.reason for r in out.rejections}
    assert set(reasons) == {"line 2", "line 3", "line 4"}
    assert "not a sample line" in reasons["line 2"]
    assert "value 'twelve' is not a number" in reasons["line 3"]
    assert "repeated" in reasons["line 4"]
    assert all(r.format == "prometheus" for r in out.rejections)


def test_a_sample_without_any_source_is_rejected_naming_what_was_tried():
    out = run("prometheus", b"orphan 1\n")
    assert out.samples == []
    assert "no source" in out.rejections[0].reason and "instance" in out.rejections[0].reason
    assert run("prometheus", b"orphan 1\n", default_source="fallback").samples[0]["source"] == "fallback"


def test_negative_counter_is_rejected_by_the_native_contract():
    out = run("prometheus", b'# TYPE c counter\nc_total{host="h"} -1\n')
    assert out.samples == [] and "counter value is negative" in out.rejections[0].reason


@pytest.mark.parametrize("line, reason", [
    ('m{a="1"', "label block not closed"),
    ('m{a=1} 2', "not quoted"),
    ('m{a="\\q"} 2', "invalid escape"),
    ("m", "no value"),
])
def test_parse_errors_say_what_is_wrong(line, reason):
    with pytest.raises(ParseError, match=reason):
        parse_sample_line(line)


# -- dcgm-exporter ---------------------------------------------------------------------------------

def test_dcgm_exporter_hostname_label_names_the_source_and_hpc_job_gives_job_id():
    out = run("dcgm-exporter", "dcgm_exporter.prom", ts=None, headers={"ts": "2025-11-30T11:42:10Z"})
    assert out.rejections == []
    util = one(out, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert (util["layer"], util["source"], util["value"]) == ("gpu", "gpu001", 97.0)
    assert util["labels"]["UUID"] == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    assert util["labels"]["pod"] == "llm-70b-worker-0" and util["labels"]["namespace"] == "training"
    assert util["labels"]["hpc_job"] == "4242" and util["labels"]["job_id"] == "4242"
    clock = one(out, "DCGM_FI_DEV_SM_CLOCK")
    assert "pod" not in clock["labels"] and "job_id" not in clock["labels"]  # empty labels dropped
    xid = one(out, "DCGM_FI_DEV_XID_ERRORS")
    assert xid["value"] == 79.0
    assert xid["labels"]["err_code"] == "79" and xid["labels"]["err_msg"] == "GPU has fallen off the bus"
    assert lookup(xid["metric"]).meaning.value == "gpu_fault"
    assert out.skipped == {"DCGM blank value (field not supported or not found)": 1}
    assert one(out, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")["kind"] == "counter"


def test_dcgm_exporter_newer_lowercase_hostname_label_is_read_the_same_way():
    old = run("dcgm-exporter", "dcgm_exporter.prom")
    new = run("dcgm-exporter", "dcgm_exporter_hostname.prom")
    assert one(new, "DCGM_FI_DEV_GPU_UTIL")["source"] == "gpu002"
    assert one(old, "DCGM_FI_DEV_GPU_UTIL", gpu="0")["source"] == "gpu001"
    xids = one(new, "DCGM_EXP_XID_ERRORS_COUNT")
    assert xids["labels"]["xid"] == "48" and lookup(xids["metric"]).meaning.value == "gpu_fault"


def test_plain_prometheus_format_routes_dcgm_names_to_the_gpu_layer_too():
    out = run("prometheus", "dcgm_exporter_hostname.prom")
    assert {s["layer"] for s in out.samples} == {"gpu"} and {s["source"] for s in out.samples} == {"gpu002"}


# -- UFM -------------------------------------------------------------------------------------------

def test_ufm_extended_counters_with_guid_labels_and_millisecond_times():
    out = run("ufm", "ufm.prom", ts=None)
    assert out.rejections == [] and out.unknown_metrics == 0
    sym = one(out, "SymbolErrorCounterExtended")
    assert sym["ts"] == 1628683905.941
    assert (sym["layer"], sym["source"]) == ("switch", "0x0002c90300f172a0")
    assert sym["labels"]["port_num"] == "2" and sym["labels"]["port"] == "2"
    assert sym["labels"]["port_guid"] == "2c90300f172a2"
    assert lookup("PortXmitDataExtended").scale == 4.0


def test_ufm_relabelled_endpoint_names_the_switch():
    out = run("ufm", "ufm_labelled.prom", ts=None)
    assert one(out, "SymbolErrorCounterExtended")["source"] == "leaf03"


def test_ufm_and_perfquery_names_share_one_meaning_and_scale():
    for base in ("SymbolErrorCounter", "LinkDownedCounter", "PortXmitDiscards", "PortXmitWait", "PortXmitData"):
        assert lookup(base) == lookup(base + "Extended"), base


# -- NCCL Inspector Prometheus -------------------------------------------------------------------

def test_nccl_inspector_prometheus_node_is_the_source_and_slurm_job_id_the_job():
    out = run("nccl-prometheus", "nccl_inspector.prom")
    t = one(out, "nccl_collective_exec_time_microseconds")
    assert (t["layer"], t["source"], t["value"]) == ("nccl", "gpu001", 9498.47)
    assert t["labels"]["job_id"] == "4242" and t["labels"]["collective"] == "AllReduce"
    p2p = one(out, "nccl_p2p_exec_time_microseconds")
    assert "job_id" not in p2p["labels"]  # slurm_job_id="unknown" is a placeholder, not a job
    assert lookup("nccl_collective_exec_time_microseconds").meaning.value == "latency"


def test_convert_entry_point_rejects_unknown_formats_loudly():
    with pytest.raises(KeyError, match="unknown format"):
        convert("not-a-format", b"")


def test_blanks_before_a_sample_and_windows_line_ends_are_accepted():
    out = run("prometheus", b'  \tup{host="h"} 1\r\n# TYPE x gauge\r\nx{host="h"} 2\r\n')
    assert [(s["metric"], s["value"]) for s in out.samples] == [("up", 1.0), ("x", 2.0)] and out.rejections == []
