"""Storage (diskstats, NFS mountstats, Lustre job_stats) and host (CPU) signals, incl. derived gauges."""

from __future__ import annotations

import pytest

from streams.catalogue import lookup
from streams.formats import AdapterState

from .helpers import T0, one, run


def _two_scrapes(state: AdapterState):
    first = run("prometheus", "node_exporter.prom", headers={"source": "gpu001"}, state=state)
    second = run("prometheus", "node_exporter_next.prom", headers={"source": "gpu001"}, ts=T0 + 15, state=state)
    return first, second


def test_first_scrape_gives_no_derived_gauge():
    first, _ = _two_scrapes(AdapterState())
    assert not [s for s in first.samples if s.get("kind") == "gauge" and "latency" in s["metric"]]
    assert not [s for s in first.samples if s["metric"] in ("cpu_utilization", "cpu_iowait_percent")]


def test_disk_and_nfs_latency_is_delta_time_over_delta_ops():
    _, second = _two_scrapes(AdapterState())
    read = one(second, "disk_read_latency_seconds")
    assert read["value"] == pytest.approx(0.2 / 100)
    assert (read["ts"], read["labels"], read["layer"], read["kind"]) == (T0 + 15, {"device": "nvme0n1"}, "host",
                                                                        "gauge")
    # No write completed between the scrapes: a latency is undefined, not zero.
    assert not [s for s in second.samples if s["metric"] == "disk_write_latency_seconds"]
    nfs = one(second, "nfs_request_latency_seconds", operation="READ")
    assert nfs["value"] == pytest.approx(1.0 / 50)
    assert nfs["labels"]["export"] == "nfs01:/home"
    assert lookup("nfs_request_latency_seconds").meaning.value == "latency"


def test_cpu_seconds_become_host_utilisation_and_iowait_share():
    _, second = _two_scrapes(AdapterState())
    util = one(second, "cpu_utilization")
    # cpu0: +5 idle of +10; cpu1: +1 idle of +10 -> busy 14 of 20 seconds.
    assert util["value"] == pytest.approx(70.0) and util["labels"] == {} and util["source"] == "gpu001"
    assert one(second, "cpu_iowait_percent")["value"] == pytest.approx(10.0)


def test_a_counter_reset_starts_a_new_baseline_and_gives_no_ratio():
    state = AdapterState()
    _two_scrapes(state)
    reset = (b'node_disk_reads_completed_total{device="nvme0n1"} 5\n'
             b'node_disk_read_time_seconds_total{device="nvme0n1"} 0.01\n')
    out = run("prometheus", reset, headers={"source": "gpu001"}, ts=T0 + 30, state=state)
    assert not [s for s in out.samples if s["metric"] == "disk_read_latency_seconds"]
    after = (b'node_disk_reads_completed_total{device="nvme0n1"} 15\n'
             b'node_disk_read_time_seconds_total{device="nvme0n1"} 0.03\n')
    out = run("prometheus", after, headers={"source": "gpu001"}, ts=T0 + 45, state=state)
    assert one(out, "disk_read_latency_seconds")["value"] == pytest.approx(0.002)


def test_a_scrape_at_the_same_time_again_gives_no_ratio():
    state = AdapterState()
    run("prometheus", "node_exporter.prom", headers={"source": "gpu001"}, state=state)
    again = run("prometheus", "node_exporter_next.prom", headers={"source": "gpu001"}, state=state)
    assert not [s for s in again.samples if s["kind"] == "gauge" and s["metric"].endswith("latency_seconds")]


def test_derived_state_round_trips_through_a_snapshot():
    state = AdapterState()
    run("prometheus", "node_exporter.prom", headers={"source": "gpu001"}, state=state)
    restored = AdapterState.restore(state.snapshot())
    out = run("prometheus", "node_exporter_next.prom", headers={"source": "gpu001"}, ts=T0 + 15, state=restored)
    assert one(out, "cpu_utilization")["value"] == pytest.approx(70.0)


def test_idle_series_are_evicted_from_the_state():
    state = AdapterState(max_idle_s=60)
    run("prometheus", "node_exporter.prom", headers={"source": "gpu001"}, state=state)
    assert state.ratios
    run("prometheus", b'other{host="x"} 1\n', ts=T0 + 3600, state=state)
    assert state.ratios == {}


def test_lustre_jobstats_counters_per_job_and_target():
    out = run("lustre-jobstats", "lustre_jobstats.txt", ts=None)
    assert out.rejections == [] and out.unknown_metrics == 0
    rb = one(out, "jobstats_read_bytes_sum", job_id="4242:1000:gpu001", target="lustre-OST0000")
    assert rb == {"ts": T0, "layer": "storage", "source": "lustre", "metric": "jobstats_read_bytes_sum",
                  "value": 1073741824.0, "kind": "counter",
                  "labels": {"job_id": "4242:1000:gpu001", "unit": "bytes", "target": "lustre-OST0000"}}
    assert one(out, "jobstats_read_samples", job_id="4242:1000:gpu001")["labels"]["unit"] == "usecs"
    quoted = one(out, "jobstats_read_bytes_samples", job_id="backup rsync.5678")
    assert quoted["ts"] == pytest.approx(1764502900.617452934) and quoted["value"] == 50.0
    assert one(out, "jobstats_open_sum")["labels"]["target"] == "lustre-MDT0000"
    assert not [s for s in out.samples if s["metric"].endswith(("_min", "_max", "_sumsq"))]
    pool = run("lustre-jobstats", "lustre_jobstats.txt", headers={"source": "lustre-a"})
    assert {s["source"] for s in pool.samples} == {"lustre-a"}


def test_lustre_read_latency_from_usecs_sums_between_snapshots():
    state = AdapterState()
    run("lustre-jobstats", "lustre_jobstats.txt", state=state)
    out = run("lustre-jobstats", "lustre_jobstats_next.txt", state=state)
    lat = one(out, "jobstats_read_latency_seconds")
    assert lat["value"] == pytest.approx((230000 - 180000) / (356 - 256) * 1e-6)
    assert lat["ts"] == T0 + 10 and lat["labels"]["job_id"] == "4242:1000:gpu001"
    assert not [s for s in out.samples if s["metric"] == "jobstats_read_bytes_latency_seconds"]


def test_lustre_garbage_is_rejected_per_line():
    raw = (b"obdfilter.fs-OST0001.job_stats=\njob_stats:\n- job_id: j1\n  snapshot_time: 1764502930\n"
           b"  read_bytes: { samples: lots, unit: bytes, sum: 5 }\n  weird line\n  write: nope\n"
           b"  write_bytes: { samples: 1, unit: bytes, sum: 5 }\n")
    out = run("lustre-jobstats", raw)
    assert {s["metric"] for s in out.samples} == {"jobstats_read_bytes_sum", "jobstats_write_bytes_samples",
                                                  "jobstats_write_bytes_sum"}
    reasons = {r.record: r.reason for r in out.rejections}
    assert "samples 'lots' is not a number" in reasons["line 5"]
    assert "not a job_stats line" in reasons["line 6"]
    assert "unexpected value" in reasons["line 7"]
