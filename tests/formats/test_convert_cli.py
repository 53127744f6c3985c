"""``lockstep convert``: native JSONL out, rejections on stderr, exit codes."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from lockstep.cli import build_parser
from lockstep.commands.convert import _chunks, convert_files
from models.inventory import inventory_adapter
from models.samples import MAX_MESSAGE_BYTES, TelemetrySample

from .helpers import FIXTURES


def _run(*argv: str) -> tuple[int, list[dict], str]:
    args = build_parser().parse_args(["convert", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = convert_files(args, out, err)
    records = [orjson.loads(line) for line in out.getvalue().splitlines()]
    return code, records, err.getvalue()


def test_converts_a_prometheus_file_to_native_jsonl():
    code, records, err = _run("--from", "dcgm-exporter", "--ts", "2025-11-30T11:42:10Z",
                              str(FIXTURES / "dcgm_exporter.prom"))
    assert code == 0
    assert len(records) == 8 and all(TelemetrySample.model_validate(r) for r in records)
    assert "8 samples" in err and "1 DCGM blank value" in err


def test_two_files_share_state_so_derived_gauges_appear_with_one_ts_per_file():
    code, records, _ = _run("--from", "prometheus", "--source", "gpu001", "--ts", "1764502930", "--ts", "1764502945",
                            str(FIXTURES / "node_exporter.prom"), str(FIXTURES / "node_exporter_next.prom"))
    assert code == 0
    util = [r for r in records if r["metric"] == "cpu_utilization"]
    assert len(util) == 1 and util[0]["value"] == pytest.approx(70.0) and util[0]["ts"] == 1764502945.0


def test_inventory_formats_print_events():
    code, records, err = _run("--from", "slurm-sacct", str(FIXTURES / "slurm_sacct.json"))
    assert code == 0
    assert [r["job_id"] for r in records] == ["4242", "4100"]
    assert all(inventory_adapter.validate_python(r) for r in records)
    assert "slurm_sacct.json: slurm-sacct jobs[2]: job 4101: nodes" in err  # the rejection, on stderr


def test_rejections_only_exit_1(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"{not json at all\n")
    code, records, err = _run("--from", "slurm-squeue", str(bad))
    assert (code, records) == (1, [])
    assert "not JSON" in err and "1 rejected" in err


def test_an_empty_file_converts_nothing_and_is_not_an_error(tmp_path: Path):
    empty = tmp_path / "empty.prom"
    empty.write_bytes(b"# HELP nothing here\n")
    assert _run("--from", "prometheus", "--ts", "1764502930", str(empty))[0] == 0


@pytest.mark.parametrize("argv, message", [
    (["--from", "nope", "x"], "--from must name a format"),
    (["--from", "prometheus"], "no input FILE"),
    (["--from", "prometheus", "/does/not/exist"], "no such file"),
    (["--from", "prometheus", "--ts", "tomorrow", "x"], "neither a number nor RFC 3339"),
    (["--from", "prometheus", "--header", "novalue", "x"], "is not KEY=VALUE"),
    (["--from", "prometheus", "--ts", "1764502930", "--ts", "1764502931", "--ts", "1764502932", "a", "b"],
     "3 --ts values for 2 files"),
])
def test_usage_errors_exit_2(argv, message):
    code, _, err = _run(*argv)
    assert code == 2 and message in err


def test_list_names_every_format():
    args = build_parser().parse_args(["convert", "--list"])
    out = io.StringIO()
    assert convert_files(args, out, io.StringIO()) == 0
    assert "prometheus" in out.getvalue() and "crux-topology" in out.getvalue()


def test_big_line_oriented_inputs_are_cut_at_line_boundaries_under_the_message_limit():
    line = b'{"x": "' + b"a" * 1000 + b'"}\n'
    raw = line * (MAX_MESSAGE_BYTES // len(line) * 2 + 3)
    chunks = _chunks(raw, line_oriented=True)
    assert len(chunks) >= 3 and b"".join(chunks) == raw
    assert all(len(c) <= MAX_MESSAGE_BYTES and c.endswith(b"\n") for c in chunks)
    assert _chunks(raw, line_oriented=False) == [raw]


def test_ts_now_is_accepted_and_is_the_time_of_the_run(tmp_path: Path):
    import time

    path = tmp_path / "scrape.prom"
    path.write_bytes(b'node_load1{instance="gpu001:9100"} 0.5\n')
    before = time.time()
    code, records, _ = _run("--from", "prometheus", "--ts", "now", str(path))
    assert code == 0 and before <= records[0]["ts"] <= time.time()


def test_a_scrape_without_any_source_gives_one_summary_line_not_one_per_sample():
    # node_exporter.prom names no host: every one of its samples lacks a source without --source
    code, records, err = _run("--from", "prometheus", "--ts", "1764502930", str(FIXTURES / "node_exporter.prom"))
    lines = [line for line in err.splitlines() if "no source" in line]
    assert code == 1 and records == []
    assert lines == [f"{FIXTURES / 'node_exporter.prom'}: prometheus: 19 samples name no source (no source label, no "
                     "source header, no --source): give --source HOST"]
    assert "19 rejected" in err.splitlines()[-1]
