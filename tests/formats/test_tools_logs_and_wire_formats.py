"""Issue 20's adapters on real captures: Influx line protocol, nvidia-smi XML/CSV, kernel Xid and NCCL
WARN lines as events, OTLP protobuf, Prometheus remote-write bodies (fixture READMEs: provenance)."""

from __future__ import annotations

import struct

import orjson
import pytest

from models.inventory import inventory_adapter
from streams.catalogue import Meaning, Mode, lookup
from streams.detect import DetectorConfig
from streams.formats import AdapterState, convert
from streams.formats import remote_write as rw
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

from .helpers import FIXTURES, T0, load, one, run

# -- InfluxDB line protocol ------------------------------------------------------------------------

def test_telegraf_infiniband_line_protocol_becomes_nic_counters_of_the_host_tag():
    out = run("influx", "influx/telegraf_infiniband.lp", ts=None)
    assert out.rejections == [] and len(out.samples) == 50  # 21 port counters + 29 hw_counters fields
    xmit = one(out, "infiniband_port_xmit_data")
    assert (xmit["layer"], xmit["source"], xmit["value"], xmit["ts"]) == ("nic", "hop-r640-12", 85378896588.0,
                                                                            1737652060.0)
    assert xmit["labels"] == {"device": "mlx5_bond_0", "host": "hop-r640-12", "port": "1"}
    assert lookup("infiniband_port_xmit_data").scale == 4.0  # the same catalogue row as Telegraf JSON
    assert one(out, "infiniband_rx_write_requests")["value"] == 19000.0
    assert lookup("infiniband_req_remote_access_errors").meaning is Meaning.RETRANSMITS


def test_line_protocol_escapes_and_types_follow_the_spec():
    out = run("influx", "influx/telegraf_nvidia_smi.lp", ts=None)
    assert len(out.samples) == 21 and out.rejections == []
    util = one(out, "nvidia_smi_utilization_gpu", index="1")
    assert util["labels"]["name"] == "GeForce GTX 1080" and util["source"] == "8218cf" and util["layer"] == "gpu"
    raw = b'gpu,host=n\\ 1,tag=a\\,b\\=c ok=true,s="a \\"q\\" ,=",n=-3i,u=7u,f=1.5e3 1764502930\n'
    out = run("influx", raw, ts=None)
    assert [(s["metric"], s["value"]) for s in out.samples] == [("gpu_n", -3.0), ("gpu_u", 7.0), ("gpu_f", 1500.0)]
    assert out.samples[0]["labels"] == {"host": "n 1", "tag": "a,b=c"} and out.samples[0]["ts"] == 1764502930.0
    assert out.skipped == {"non-numeric Telegraf field (string or boolean)": 2}


@pytest.mark.parametrize("line, reason", [
    (b"cpu usage", "has no '=value'"),
    (b"cpu,host usage=1", "tag 'host' has no '='"),
    (b"cpu usage=12x", "is not a number, boolean or string"),
    (b"cpu usage=1u2u", "is not a 64-bit integer"),
    (b'cpu s="open', "unterminated string"),
    (b"cpu usage=1 17645029301234567890123", "not a 64-bit integer"),
    (b"cpu usage=1 99", "is not a time in 2000..2100"),
])
def test_bad_line_protocol_is_rejected_with_the_line_and_the_reason(line, reason):
    out = run("influx", b"ok,host=h v=1 1764502930\n" + line + b"\n", ts=None)
    assert len(out.samples) == 1
    assert [(r.record, reason in r.reason) for r in out.rejections] == [("line 2", True)], out.rejections


def test_line_protocol_without_timestamps_takes_the_collection_time_or_is_rejected():
    assert run("influx", b"cpu,host=h usage_idle=97.5\n", ts=T0).samples[0]["ts"] == T0
    out = run("influx", b"cpu,host=h usage_idle=97.5\n", ts=None)
    assert out.samples == [] and "no collection time" in out.rejections[0].reason


# -- nvidia-smi ------------------------------------------------------------------------------------

def test_nvidia_smi_xml_of_an_a100_gives_its_gauges_and_skips_what_is_not_available():
    out = run("nvidia-smi-xml", "nvidia_smi/a100_sxm4_v12.xml", headers={"source": "gpu001"}, ts=None)
    assert out.rejections == []
    assert {s["ts"] for s in out.samples} == {1691149470.0}  # <timestamp>Fri Aug  4 11:44:30 2023, as UTC
    labels = {"gpu": "0", "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "pci_bus_id": "00000000:01:00.0",
              "name": "NVIDIA A100-SXM4-80GB"}
    values = {s["metric"]: s["value"] for s in out.samples}
    assert values == {
        "nvidia_smi_memory_total": 81920.0, "nvidia_smi_memory_used": 50.0, "nvidia_smi_memory_free": 80999.0,
        "nvidia_smi_memory_reserved": 869.0, "nvidia_smi_temperature_gpu": 27.0, "nvidia_smi_temperature_memory": 44.0,
        "nvidia_smi_power_draw": 67.03, "nvidia_smi_power_limit": 500.0, "nvidia_smi_clocks_current_graphics": 1275.0,
        "nvidia_smi_clocks_current_sm": 1275.0, "nvidia_smi_clocks_current_memory": 1593.0,
        "nvidia_smi_clocks_current_video": 1275.0, "nvidia_smi_pcie_link_gen_current": 4.0,
        "nvidia_smi_pcie_link_width_current": 16.0, "nvidia_smi_pcie_replay_counter": 0.0,
        "nvidia_smi_ecc_errors_volatile_dram_uncorrectable": 0.0,
        "nvidia_smi_ecc_errors_volatile_sram_uncorrectable": 0.0, "nvidia_smi_clocks_event_reasons_active": 0.0}
    assert all(s["labels"] == labels and s["layer"] == "gpu" and s["source"] == "gpu001" for s in out.samples)
    # MIG mode: utilisation and fan speed are N/A (4 utilisations + fan), skipped and counted, not zero
    assert out.skipped == {"nvidia-smi value N/A or not supported": 5}
    assert out.unknown_names == set()
    # the collection time wins over the tool's zone-less local time
    assert {s["ts"] for s in run("nvidia-smi-xml", "nvidia_smi/a100_sxm4_v12.xml", ts=T0,
                                 headers={"source": "gpu001"}).samples} == {T0}


def test_nvidia_smi_xml_throttle_reasons_count_active_faults_not_idle():
    xml = (b"<nvidia_smi_log><gpu id='00000000:18:00.0'><uuid>GPU-1</uuid><clocks_throttle_reasons>"
           b"<clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>"
           b"<clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"
           b"<clocks_throttle_reason_sw_thermal_slowdown>Active</clocks_throttle_reason_sw_thermal_slowdown>"
           b"</clocks_throttle_reasons></gpu></nvidia_smi_log>")
    out = run("nvidia-smi-xml", xml, headers={"source": "n"})
    s = one(out, "nvidia_smi_clocks_event_reasons_active")
    assert s["value"] == 2.0 and s["labels"]["pci_bus_id"] == "00000000:18:00.0"
    assert lookup("nvidia_smi_clocks_event_reasons_active").mode is Mode.EVENT
    assert "expected <nvidia_smi_log>" in run("nvidia-smi-xml", b"<other/>").rejections[0].reason


def test_nvidia_smi_query_gpu_csv_strips_units_and_numbers_the_gpus():
    out = run("nvidia-smi-csv", "nvidia_smi/query_gpu.csv", headers={"source": "desk"})
    assert out.rejections == [] and len(out.samples) == 16
    assert one(out, "nvidia_smi_utilization_gpu", gpu="0")["value"] == 36.0
    power = one(out, "nvidia_smi_power_draw", gpu="1")
    assert power["value"] == 5.68 and power["labels"] == {"gpu": "1", "name": "GeForce GTX 1060 6GB"}
    assert one(out, "nvidia_smi_clocks_current_graphics", gpu="0")["value"] == 1936.0
    assert out.unknown_names == set()


def test_nvidia_smi_csv_timestamps_na_values_and_noheader_output():
    csv = (b"index, timestamp, utilization.gpu [%], memory.used [MiB], pstate, clocks.sm [MHz]\n"
           b"3, 2020/11/12 13:48:11.412, 99 %, 30994 MiB, P0, [N/A]\n")
    out = run("nvidia-smi-csv", csv, headers={"source": "n"}, ts=None)
    assert [(s["metric"], s["value"], s["labels"], s["ts"]) for s in out.samples] == [
        ("nvidia_smi_utilization_gpu", 99.0, {"gpu": "3"}, 1605188891.412),
        ("nvidia_smi_memory_used", 30994.0, {"gpu": "3"}, 1605188891.412)]
    assert out.skipped == {"nvidia-smi text property (not a measurement)": 1,
                           "nvidia-smi value N/A or not supported": 1}
    # with --loop a file holds many rows per GPU: each row keeps its own time over the collection time
    assert {s["ts"] for s in run("nvidia-smi-csv", csv, headers={"source": "n"}, ts=T0).samples} == {1605188891.412}
    loop = (b"timestamp, utilization.gpu [%]\n2020/11/12 13:48:11.412, 99 %\n2020/11/12 13:48:11.412, 98 %\n"
            b"2020/11/12 13:48:16.415, 97 %\n")
    assert [s["labels"]["gpu"] for s in run("nvidia-smi-csv", loop, headers={"source": "n"}).samples] == ["0", "1", "0"]
    noheader = run("nvidia-smi-csv", b"99 %, 30994 MiB\n", headers={"source": "n"})
    assert "noheader" in noheader.rejections[0].reason and noheader.samples == []


# -- kernel Xid and NCCL WARN lines: events on the job's timeline ---------------------------------

def test_dmesg_ctime_xid_lines_are_one_event_per_gpu_and_instant():
    out = run("kernel-xid", "kernel_xid/dmesg_ctime.txt", headers={"source": "gpu001"}, ts=None)
    assert [(s["ts"], s["value"], s["labels"], s["layer"], s["source"]) for s in out.samples] == [
        (1725018189.0, 13.0, {"pci_bus_id": "0000:cb:00"}, "gpu", "gpu001"),  # Fri Aug 30 11:43:09 2024 (UTC)
        (1725018194.0, 109.0, {"pci_bus_id": "0000:cb:00"}, "gpu", "gpu001")]
    assert out.skipped == {"kernel log line that is not an NVRM Xid": 1,
                           "Xid on the same GPU at the same time as the previous line (one event: the last code)": 2}
    info = lookup("nvrm_xid")
    assert (info.meaning, info.mode) == (lookup("DCGM_FI_DEV_XID_ERRORS").meaning, Mode.EVENT)


def test_journal_and_syslog_xid_lines_take_their_host_and_time():
    out = run("kernel-xid", "kernel_xid/journal_kernel.txt", headers={"source": "gpu007"}, ts=T0)
    assert {s["labels"]["pci_bus_id"] for s in out.samples} == {"0000:dc:00", "0000:ed:00", "0000:ba:00",
                                                                 "0000:97:00"}
    assert {(s["value"], s["ts"], s["source"]) for s in out.samples} == {(45.0, T0, "gpu007")}
    # "Jul 06 20:02:59 gaming kernel:": host from the line, year from the collection time (2025-07-07)
    out = run("kernel-xid", "kernel_xid/syslog.txt", ts=1751850000.0)
    assert [(s["source"], s["ts"], s["value"]) for s in out.samples] == [("gaming", 1751832179.0, 13.0)]
    assert run("kernel-xid", b"2024-08-30T11:43:09+0000 gpu003 kernel: NVRM: Xid (PCI:0000:65:00): 79, GPU has "
                             b"fallen off the bus.\n", ts=None).samples[0]["ts"] == 1725018189.0
    out = run("kernel-xid", "kernel_xid/journal_kernel.txt", ts=T0)
    assert out.samples == [] and "no source header" in out.rejections[0].reason


def test_nccl_warn_lines_count_per_series_and_name_what_failed():
    state = AdapterState()
    out = run("nccl-warn", "nccl_warn/nccl_tests_alltoall_ib.log", headers={"job_id": "360"}, state=state)
    assert [(s["metric"], s["value"], s["labels"], s["source"], s["layer"]) for s in out.samples] == [
        ("nccl_warn_net", 11.0, {"cuda_dev": "0", "job_id": "360"}, "node-0", "nccl"),
        ("nccl_warn_net", 2.0, {"cuda_dev": "1", "job_id": "360"}, "node-0", "nccl")]
    # the next warning of a series is a new value, so a new event (the count is kept in the state)
    later = run("nccl-warn", "nccl_warn/nccl_tests_socket.log", state=state, ts=T0 + 60)
    assert [(s["labels"]["cuda_dev"], s["value"]) for s in later.samples] == [("0", 1.0), ("2", 1.0)]
    assert lookup("nccl_warn_net").meaning is Meaning.RETRANSMITS and lookup("nccl_warn_cuda").meaning is \
        Meaning.GPU_FAULT
    assert "carry no time" in run("nccl-warn", "nccl_warn/nccl_tests_socket.log", ts=None).rejections[0].reason


def _job_on(nodes: str, ts: float) -> InventoryIndex:
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": ts, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": nodes, "gpus_per_node": 8}))
    return inv


def test_a_kernel_xid_is_a_gpu_fault_anomaly_of_the_job_on_that_node_from_its_first_line():
    out = run("kernel-xid", "kernel_xid/dmesg_ctime.txt", headers={"source": "gpu001"}, ts=None)
    p = PartitionPipeline("telemetry.gpu:0", DetectorConfig(), _job_on("gpu[001-002]", 1725018000.0))
    res = p.process(orjson.dumps(out.samples), Origin("telemetry.gpu", 0, 1))
    assert [(a["job_id"], a["phase"], a["ts"], a["meaning"], a["metric"]) for a in res.anomalies] == [
        ("j1", "start", 1725018189.0, "gpu_fault", "nvrm_xid")]


def test_nccl_transport_warnings_are_anomalies_of_the_job_named_in_the_header():
    out = run("nccl-warn", "nccl_warn/nccl_tests_alltoall_ib.log", headers={"job_id": "j1"}, ts=1725018010.0)
    p = PartitionPipeline("telemetry.nccl:0", DetectorConfig(), _job_on("gpu[001-002]", 1725018000.0))
    res = p.process(orjson.dumps(out.samples), Origin("telemetry.nccl", 0, 1))
    assert {(a["job_id"], a["phase"], a["meaning"], a["metric"]) for a in res.anomalies} == {
        ("j1", "start", "retransmits", "nccl_warn_net")}


# -- OTLP protobuf ---------------------------------------------------------------------------------

def test_the_otlp_proto_fixture_is_the_upstream_example_re_encoded():
    from google.protobuf.json_format import Parse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    request = Parse((FIXTURES / "otlp_proto" / "metrics.json").read_text(), ExportMetricsServiceRequest())
    assert request.SerializeToString(deterministic=True) == load("otlp_proto/metrics.pb")


def test_otlp_protobuf_converts_exactly_like_its_json_form():
    proto = run("otlp-proto", "otlp_proto/metrics.pb", headers={"source": "svc"})
    as_json = run("otlp-json", "otlp_proto/metrics.json", headers={"source": "svc"})
    assert proto.samples == as_json.samples and proto.skipped == as_json.skipped
    assert [(s["metric"], s["value"], s.get("kind"), s["ts"]) for s in proto.samples] == [
        ("my.counter", 5.0, "counter", 1544712660.3), ("my.gauge", 10.0, "gauge", 1544712660.3)]
    assert proto.samples[0]["labels"] == {"service.name": "my.service", "my.counter.attr": "some value"}
    bad = run("otlp-proto", b"\x0a\xff\xff\xff")
    assert bad.samples == [] and bad.rejections[0].error == "DecodeFailed"


# -- Prometheus remote-write -----------------------------------------------------------------------

def test_a_real_remote_write_body_becomes_dcgm_samples_with_prometheus_labels():
    out = run("prometheus-remote-write", "prometheus_remote_write/dcgm_write_request.snappy", ts=None)
    assert out.rejections == []
    util = one(out, "DCGM_FI_DEV_GPU_UTIL")
    assert (util["layer"], util["source"], util["value"]) == ("gpu", "gpu002", 88.0)
    assert util["labels"]["job"] == "dcgm" and util["labels"]["instance"].startswith("127.0.0.1:")
    assert util["ts"] == 1796127735.094  # the scrape time Prometheus stamped, in ms
    assert "up" not in {s["metric"] for s in out.samples}  # Prometheus's own series: noise, skipped
    kept = run("prometheus-remote-write", "prometheus_remote_write/dcgm_write_request.snappy", ts=None,
               headers={"keep-unknown": "true"})
    up = one(kept, "up")
    assert (up["source"], up["value"]) == ("127.0.0.1", 1.0)


def test_remote_write_of_a_real_node_exporter_keeps_the_catalogued_series_and_counts_the_noise():
    """The first request of a real Prometheus remote-write of node_exporter (fixture README): 500
    series, 56 of them of names the catalogue knows; the other 444 never become series."""
    out = run("prometheus-remote-write", "prometheus_remote_write/node_exporter_write_request.snappy", ts=None)
    kept = run("prometheus-remote-write", "prometheus_remote_write/node_exporter_write_request.snappy", ts=None,
               headers={"keep-unknown": "true"})
    assert out.rejections == [] and kept.rejections == []
    assert len(kept.samples) == 500 and len(out.samples) == 56
    assert out.skipped == {rw.SKIP_UNKNOWN: 444} and out.unknown_metrics == 0
    assert {s["metric"] for s in out.samples} == {s["metric"] for s in kept.samples
                                                  if rw.known_to_lockstep(s["metric"])}
    assert not any(s["metric"].startswith(("go_", "process_", "promhttp_", "node_scrape_")) for s in out.samples)
    assert {s["layer"] for s in out.samples} == {"host"} and kept.unknown_metrics > 400


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _series(labels: dict[str, str], samples: list[tuple[float, int]]) -> bytes:
    body = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels.items())
    for value, ts in samples:
        body += _field(2, b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(ts))
    return _field(1, body)


def test_remote_write_metadata_kinds_stale_markers_and_series_without_a_name():
    import cramjam

    counter_meta = _field(3, b"\x08\x01" + _field(2, b"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"))
    stale = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
    request = (_series({"__name__": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Hostname": "gpu005", "gpu": "1"},
                       [(2.0, 1764502930000), (stale, 1764502931000)])
               + _series({"gpu": "1"}, [(1.0, 1764502930000)]) + counter_meta)
    request += _series({"__name__": "go_goroutines", "instance": "gpu005:9400"}, [(12.0, 1764502930000)])
    out = convert("prometheus-remote-write", bytes(cramjam.snappy.compress_raw(request)))
    assert [(s["metric"], s["source"], s["value"], s.get("kind")) for s in out.samples] == [
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu005", 2.0, "counter")]
    assert out.skipped == {"non-finite value (NaN or Inf)": 1, rw.SKIP_UNKNOWN: 1}
    assert [(r.record, "no __name__" in r.reason) for r in out.rejections] == [("timeseries[1]", True)]


def test_remote_write_refuses_a_bomb_before_inflating_and_garbage_as_one_rejection():
    bomb = _varint(rw.MAX_MESSAGE_BYTES + 1) + b"\x00" * 16
    out = convert("prometheus-remote-write", bomb)
    assert out.rejections[0].error == "DecodeFailed" and "more than" in out.rejections[0].reason
    out = convert("prometheus-remote-write", b"\x05hello")
    assert out.rejections[0].record is None and out.rejections[0].error == "DecodeFailed"


# -- pretty-printed NCCL Inspector JSON ------------------------------------------------------------

def test_pretty_printed_inspector_objects_convert_like_json_lines():
    out = run("nccl-inspector", "nccl_inspector_pretty/v4_3_pretty.json", ts=None)
    assert out.rejections == []
    assert [(s["metric"], s["value"], s["labels"]["coll"], s["ts"]) for s in out.samples] == [
        ("coll_exec_time_us", 61974.0, "AllReduce", 1748030377.748202),
        ("coll_busbw_gbs", 485.119099, "AllReduce", 1748030377.748202),
        ("coll_algobw_gbs", 277.210914, "AllReduce", 1748030377.748202),
        ("coll_exec_time_us", 41057.0, "ReduceScatter", 1752867229.235064),  # verbose: coll_stop_ts
        ("coll_busbw_gbs", 366.134533, "ReduceScatter", 1752867229.235064),
        ("coll_algobw_gbs", 418.439467, "ReduceScatter", 1752867229.235064)]
    assert {s["labels"]["comm_id"] for s in out.samples} == {"0x7f8c496ae9f661"}  # from the marker
    assert out.skipped == {"NCCL Inspector dump_stats marker (context, not a measurement)": 1,
                           "NCCL Inspector proxy_trace record": 1}
    compact = b"\n".join(orjson.dumps(doc) for doc in _objects(load("nccl_inspector_pretty/v4_3_pretty.json")))
    assert run("nccl-inspector", compact, ts=None).samples == out.samples


def _objects(raw: bytes) -> list[object]:
    import json

    decoder, text, pos, docs = json.JSONDecoder(), raw.decode(), 0, []
    while pos < len(text.rstrip()):
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return docs


def test_a_damaged_pretty_printed_object_costs_that_object_only():
    raw = load("nccl_inspector_pretty/v4_3_pretty.json")
    damaged = raw.replace(b'"coll_algo": "RING",\n    "coll_proto": "LL"', b'"coll_algo": RING')
    out = run("nccl-inspector", damaged, ts=None)
    assert [(r.record, r.error) for r in out.rejections] == [("line 32", "DecodeFailed")]
    assert {s["labels"]["coll"] for s in out.samples} == {"ReduceScatter"} and len(out.samples) == 3
    assert "NaN is not JSON" in run("nccl-inspector", b'{\n "coll_perf": NaN\n}\n').rejections[0].reason
