"""lustre_exporter's per-job families (a real scrape, tests/fixtures/formats/lustre_exporter/README.md):
the pool is the source, ``jobid`` becomes ``job_id``, and per-job write bytes are a write rate."""

from __future__ import annotations

from streams.catalogue import lookup

from .helpers import T0, one, run

CAPTURE = "lustre_exporter/jobstats.prom"


def test_per_job_write_bytes_name_the_pool_and_the_job() -> None:
    out = run("prometheus", CAPTURE)
    assert out.rejections == []
    w = one(out, "lustre_job_write_bytes_total", jobid="dd.0", target="fs-OST0001")
    assert w == {"ts": T0, "layer": "storage", "source": "fs", "metric": "lustre_job_write_bytes_total",
                 "value": 59670528.0, "kind": "counter",
                 "labels": {"component": "ost", "target": "fs-OST0001", "jobid": "dd.0", "job_id": "dd.0"}}
    assert len(out.samples) == 8 and {s["source"] for s in out.samples} == {"fs"}


def test_the_source_header_names_the_pool_as_the_inventory_does() -> None:
    out = run("prometheus", CAPTURE, headers={"source": "lustre-a"})
    assert {s["source"] for s in out.samples} == {"lustre-a"}


def test_the_oss_instance_label_does_not_become_the_source() -> None:
    # A scrape forwarded by Prometheus carries the OSS as ``instance``; the OSS runs no job, the pool is the
    # file system of ``target``.
    raw = b'lustre_job_write_bytes_total{component="ost",target="fs-OST0000",jobid="4242",instance="oss01:9169"} 7\n'
    assert one(run("prometheus", raw), "lustre_job_write_bytes_total")["source"] == "fs"


def test_per_job_bytes_are_storage_throughput_rates_that_contention_reads() -> None:
    for name in ("lustre_job_write_bytes_total", "lustre_job_read_bytes_total"):
        entry = lookup(name)
        assert entry is not None and entry.meaning.value == "throughput", name


def test_the_carriers_record_key_does_not_become_the_pool() -> None:
    # On the carrier path the record key (the scraped OSS) is the default source; the target still names the pool.
    raw = b'lustre_job_write_bytes_total{component="ost",target="fs-OST0000",jobid="4242"} 7\n'
    assert one(run("prometheus", raw, default_source="oss01"), "lustre_job_write_bytes_total")["source"] == "fs"
    # Without a target (a family of the whole server), the key is still the source.
    assert one(run("prometheus", b"lustre_mem_used 960353731\n", default_source="oss01"),
               "lustre_mem_used")["source"] == "oss01"
