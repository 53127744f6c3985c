"""Cross-format guarantees: the native contract, bad input as data, the vocabulary in sync."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.inventory import inventory_adapter
from models.samples import MAX_MESSAGE_BYTES, TelemetrySample
from streams.catalogue import CATALOGUE, FABRICS
from streams.formats import FORMATS, AdapterState, convert
from streams.formats.vocabulary import render

from .helpers import T0, load, run

#: (format, fixture, headers): every fixture file, converted as the tests above do.
CASES = [
    ("prometheus", "node_exporter.prom", {"source": "gpu001"}),
    ("node-exporter", "node_exporter_next.prom", {"source": "gpu001"}),
    ("prometheus", "openmetrics.txt", {}),
    ("dcgm-exporter", "dcgm_exporter.prom", {}),
    ("dcgm-exporter", "dcgm_exporter_hostname.prom", {}),
    ("ufm", "ufm.prom", {}),
    ("ufm", "ufm_labelled.prom", {}),
    ("nccl-prometheus", "nccl_inspector.prom", {}),
    ("prom-kafka-adapter", "prom_kafka_adapter.jsonl", {}),
    ("telegraf", "telegraf_single.json", {}),
    ("telegraf", "telegraf_batch.json", {}),
    ("vector", "vector.jsonl", {}),
    ("otlp-json", "otlp.json", {}),
    ("perfquery", "perfquery.txt", {"source": "gpu001", "device": "mlx5_0"}),
    ("sysfs-infiniband", "sysfs_infiniband.txt", {"source": "gpu001"}),
    ("ethtool", "ethtool.txt", {"source": "gpu041", "device": "ens1f0np0"}),
    ("ethtool", "ethtool_next.txt", {"source": "gpu041", "device": "ens1f0np0"}),
    ("nccl-inspector", "nccl_inspector_v4_0.jsonl", {}),
    ("nccl-inspector", "nccl_inspector_v4_3.jsonl", {}),
    ("nccl-inspector", "nccl_inspector_pretty/v4_3_pretty.json", {}),
    ("nccl-tests", "nccl_tests.txt", {}),
    ("nccl-tests", "nccl_tests_old.txt", {"source": "gpu009"}),
    ("lustre-jobstats", "lustre_jobstats.txt", {}),
    ("lustre-jobstats", "lustre_jobstats_next.txt", {}),
    ("prometheus", "lustre_exporter/jobstats.prom", {}),
    ("slurm-squeue", "slurm_squeue.json", {}),
    ("slurm-squeue", "slurm_squeue_v0037.json", {}),
    ("slurm-sacct", "slurm_sacct.json", {}),
    ("k8s-pods", "k8s_pods.jsonl", {}),
    ("crux-topology", "crux_topology.csv", {}),
    ("ibnetdiscover", "ibnetdiscover/ports.txt", {}),
    ("iblinkinfo", "iblinkinfo/teaker.txt", {}),
    ("lldpctl", "lldpctl/gpu_node_json0.json", {"source": "gpu-node-1"}),
    ("lldpctl-keyvalue", "lldpctl-keyvalue/nxos_host.txt", {"source": "h1"}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_node.json", {}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_node_typed.json", {}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_task.json", {}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_node_v0040.json", {}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_job_v0041.json", {}),
    ("slurm-squeue", "slurm-jobs-json/job_gpus_per_job_v0043.json", {}),
    ("slurm-nodes", "slurm-nodes/node_drain_v0044.json", {}),
    ("scontrol-nodes", "slurm-nodes/scontrol_show_node.txt", {}),
    ("scontrol-jobs", "scontrol-jobs/scontrol_show_job_d.txt", {}),
    ("influx", "influx/telegraf_infiniband.lp", {}),
    ("influx", "influx/telegraf_nvidia_smi.lp", {}),
    ("nvidia-smi-xml", "nvidia_smi/a100_sxm4_v12.xml", {"source": "gpu001"}),
    ("nvidia-smi-csv", "nvidia_smi/query_gpu.csv", {"source": "gpu001"}),
    ("kernel-xid", "kernel_xid/dmesg_ctime.txt", {"source": "gpu001"}),
    ("kernel-xid", "kernel_xid/journal_kernel.txt", {"source": "gpu001"}),
    ("kernel-xid", "kernel_xid/syslog.txt", {}),
    ("nccl-warn", "nccl_warn/nccl_tests_alltoall_ib.log", {"job_id": "360"}),
    ("nccl-warn", "nccl_warn/nccl_tests_socket.log", {}),
    ("otlp-proto", "otlp_proto/metrics.pb", {"source": "gpu001"}),
    ("prometheus-remote-write", "prometheus_remote_write/dcgm_write_request.snappy", {}),
    ("prometheus-remote-write", "prometheus_remote_write/node_exporter_write_request.snappy", {}),
    ("alertmanager-webhook", "alertmanager_webhook/ib_link_down_firing.json", {}),
    ("alertmanager-webhook", "alertmanager_webhook/dcgm_xid_firing.json", {}),
    ("alertmanager-webhook", "alertmanager_webhook/filesystem_firing.json", {}),
    ("alertmanager-webhook", "alertmanager_webhook/instance_down_firing.json", {}),
    ("alertmanager-webhook", "alertmanager_webhook/ib_link_down_resolved.json", {}),
]
#: Subdirectories hold one format's captures with a README of their provenance.
FIXTURE_FILES = {str(p.relative_to(Path(__file__).resolve().parent.parent / "fixtures" / "formats"))
                 for p in (Path(__file__).resolve().parent.parent / "fixtures" / "formats").rglob("*")
                 if p.is_file() and p.name != "README.md" and p.name != "metrics.json"}
#: Formats of logs: a text with no event line in it is a quiet log (skipped and counted), not bad input.
LOG_FORMATS = {"kernel-xid", "nccl-warn"}
#: Names in the fixtures the catalogue deliberately does not know (applications' own metrics).
EXPECTED_UNKNOWN = {"loss", "step_latency_seconds_bucket", "step_latency_seconds_count", "step_latency_seconds_sum",
                    "train_samples_total", "up", "host_memory_available_bytes", "xid_events", "my.counter",
                    # Prometheus's own per-scrape series in a remote-write request, and Telegraf's counter cache
                    # setting of its infiniband input (not a measurement), and the OTLP example's metrics
                    "scrape_series_added", "scrape_samples_post_metric_relabeling", "scrape_samples_scraped",
                    "scrape_duration_seconds", "infiniband_lifespan", "my.gauge"}
FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "formats"


def test_every_fixture_file_is_exercised_and_every_format_has_a_fixture():
    assert {f for _, f, _ in CASES} == FIXTURE_FILES
    assert {fmt for fmt, _, _ in CASES} == set(FORMATS)


@pytest.mark.parametrize("fmt, fixture, headers", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_fixture_output_satisfies_the_native_pydantic_contract(fmt, fixture, headers):
    out = run(fmt, fixture, headers=headers)
    assert out.converted > 0
    for sample in out.samples:
        model = TelemetrySample.model_validate(sample)
        assert model.metric == sample["metric"] and model.source == sample["source"]
    for event in out.inventory:
        assert inventory_adapter.validate_python(event).kind == event["kind"]
    assert out.unknown_names <= EXPECTED_UNKNOWN, out.unknown_names - EXPECTED_UNKNOWN
    assert out.unknown_metrics == sum(1 for s in out.samples if s["metric"] not in CATALOGUE)


def test_the_vocabulary_document_is_generated_from_the_tables():
    doc = Path(__file__).resolve().parents[2] / "docs" / "vocabulary.md"
    assert doc.read_text() == render(), "regenerate: python -m streams.formats.vocabulary > docs/vocabulary.md"


def test_every_catalogue_name_belongs_to_a_fabric():
    assert set(CATALOGUE) == set(FABRICS)


# -- bad input is data ----------------------------------------------------------------------------

GARBAGE = [b"\xff\xfe\x00binary\x9c", b"hello world\n{]\n", b"[1, 2, 3]\n", b'{"unexpected": "shape"}\n']


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("garbage", GARBAGE, ids=["binary", "text", "json-array", "json-object"])
def test_every_adapter_rejects_garbage_with_a_precise_reason(fmt, garbage):
    out = convert(fmt, garbage, headers={"source": "h"}, ts=T0)
    assert out.converted == 0
    if fmt in LOG_FORMATS and not out.rejections:  # readable text without an event line: a quiet log
        assert garbage.decode("utf-8") and sum(out.skipped.values()) == len(garbage.decode().splitlines())
        return
    assert out.rejections, f"{fmt} accepted {garbage!r} silently"
    for r in out.rejections:
        assert r.format == fmt and len(r.reason) > 10 and r.error in ("DecodeFailed", "ValidationFailed",
                                                                      "UnsupportedFormat")
        assert str(r).startswith(fmt)


LINE_CASES = [c for c in CASES if c[0] not in ("otlp-json", "slurm-squeue", "slurm-sacct", "telegraf", "lldpctl",
                                               "slurm-nodes", "otlp-proto", "prometheus-remote-write",
                                               "nvidia-smi-xml", "alertmanager-webhook", *LOG_FORMATS)
              or c[1] == "telegraf_single.json"]
# in lldpctl keyvalue a line without the lldp. prefix continues the previous value (a multi-line description)
LINE_CASES = [c for c in LINE_CASES if c[0] != "lldpctl-keyvalue"]
# a garbage line inside a pretty-printed object costs that object (tests/formats/test_tools_logs_and_wire_formats.py)
LINE_CASES = [c for c in LINE_CASES if c[1] != "nccl_inspector_pretty/v4_3_pretty.json"]


@pytest.mark.parametrize("fmt, fixture, headers", LINE_CASES, ids=[f"{c[0]}:{c[1]}" for c in LINE_CASES])
def test_a_garbage_line_inside_a_good_file_is_rejected_and_the_rest_still_converts(fmt, fixture, headers):
    good = load(fixture)
    base = run(fmt, good, headers=headers)
    lines = good.splitlines(keepends=True)
    middle = len(lines) // 2 if len(lines) > 1 else 1
    bad = b"".join(lines[:middle]) + b"%%% garbage %%%\n" + b"".join(lines[middle:])
    out = run(fmt, bad, headers=headers)
    assert len(out.rejections) == len(base.rejections) + 1
    new = next(r for r in out.rejections if r not in base.rejections)
    assert new.record == f"line {middle + 1}" and new.format == fmt
    assert out.converted == base.converted


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_oversized_message_is_rejected_before_decoding(fmt):
    out = convert(fmt, b"x" * (MAX_MESSAGE_BYTES + 1))
    assert out.converted == 0 and out.rejections[0].error == "DecodeFailed"
    assert "exceeds" in out.rejections[0].reason and out.rejections[0].record is None


TOKENS = [b"{", b"}", b"[", b"]", b":", b",", b'"a"', b"1", b"-", b"\n", b"#", b" ", b"=", b"job_stats:",
          b"NIC statistics:", b"# Port counters: Lid 1 port 1", b'{"jobs": [', b'"coll_perf"', b"size",
          b"ip,DSW,PSW,ASW", b"..."]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)),
       raw=st.one_of(st.binary(max_size=300),
                     st.text(alphabet=st.characters(codec="utf-8"), max_size=300).map(str.encode),
                     st.lists(st.sampled_from(TOKENS), max_size=60).map(b"".join)))
def test_no_input_makes_an_adapter_raise_and_every_output_is_valid(fmt, raw):
    out = convert(fmt, raw, headers={"source": "h"}, ts=T0, state=AdapterState())
    for sample in out.samples:
        TelemetrySample.model_validate(sample)
    for event in out.inventory:
        inventory_adapter.validate_python(event)
    for r in out.rejections:
        assert r.format == fmt and r.reason


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), cut=st.floats(0, 1), junk=st.binary(max_size=8), at=st.floats(0, 1))
def test_damaged_fixtures_never_raise_and_stay_within_the_contract(case, cut, junk, at):
    fmt, fixture, headers = case
    good = load(fixture)
    damaged = good[: int(len(good) * cut)]
    pos = int(len(damaged) * at)
    damaged = damaged[:pos] + junk + damaged[pos:]
    out = convert(fmt, damaged, headers=headers, ts=T0, state=AdapterState())
    for sample in out.samples:
        TelemetrySample.model_validate(sample)
    for event in out.inventory:
        inventory_adapter.validate_python(event)
    assert all(r.format == fmt and r.reason for r in out.rejections)
