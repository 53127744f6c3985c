"""NCCL Inspector JSON (old self-contained records and v4.3 marker context) and nccl-tests tables."""

from __future__ import annotations

import pytest

from streams.formats import AdapterState

from .helpers import FIXTURES, T0, one, run


def test_old_self_contained_records_give_latency_and_bandwidth_with_comm_labels():
    out = run("nccl-inspector", "nccl_inspector_v4_0.jsonl", ts=None, headers={"job_id": "4242"})
    assert out.rejections == []
    t = one(out, "coll_exec_time_us", coll="AllReduce")
    assert t == {"ts": T0 + 0.25, "layer": "nccl", "source": "gpu001", "metric": "coll_exec_time_us",
                 "value": 61974.0, "kind": "gauge",
                 "labels": {"comm_id": "0x7f8c496ae9f661", "rank": "2", "n_ranks": "8", "nnodes": "1",
                            "pid": "1639453", "coll": "AllReduce", "coll_msg_size_bytes": "17179869184",
                            "job_id": "4242"}}
    rs = one(out, "coll_busbw_gbs", coll="ReduceScatter")
    assert rs["ts"] == 1764502931.235064  # verbose mode: the collective's own stop time
    assert rs["labels"]["coll_timing_source"] == "kernel_gpu"


def test_v4_3_records_inherit_header_and_metadata_from_their_marker():
    out = run("nccl-inspector", "nccl_inspector_v4_3.jsonl", ts=None)
    assert out.rejections == []
    ar = one(out, "coll_exec_time_us", coll="AllReduce")
    assert ar["source"] == "gpu001" and ar["labels"]["comm_name"] == "DP Group 0"
    assert ar["labels"]["rank"] == "2" and ar["labels"]["coll_algo"] == "RING"
    assert ar["value"] == (61974 + 62026) / 2  # two operations of one series in one dump: their mean
    p2p = one(out, "p2p_exec_time_us")
    assert (p2p["value"], p2p["labels"]["p2p_peer"], p2p["labels"]["comm_id"]) == (1154.0, "3", "0x7f8c496ae9f661")
    rs = one(out, "coll_exec_time_us", coll="ReduceScatter")  # follows the second marker
    assert rs["ts"] == 1764502931.276116
    assert out.skipped == {"NCCL Inspector dump_stats marker (context, not a measurement)": 2,
                           "NCCL Inspector proxy_trace record": 1,
                           "NCCL sample merged into the mean of its series at the same time (one dump)": 3}


def test_old_and_new_inspector_json_agree_on_the_same_operation():
    old = one(run("nccl-inspector", "nccl_inspector_v4_0.jsonl"), "coll_busbw_gbs", coll="ReduceScatter")
    new = one(run("nccl-inspector", "nccl_inspector_v4_3.jsonl"), "coll_busbw_gbs", coll="ReduceScatter")
    assert old["value"] == new["value"] and old["metric"] == new["metric"] and old["source"] == new["source"]


def test_v4_3_context_is_carried_across_messages_of_one_stream_with_state():
    lines = (FIXTURES / "nccl_inspector_v4_3.jsonl").read_bytes().splitlines(keepends=True)
    state = AdapterState()
    outs = [run("nccl-inspector", line, state=state, headers={"stream": "gpu001-pid1639453.log"}) for line in lines]
    assert all(o.rejections == [] for o in outs)
    assert sum(len(o.samples) for o in outs) == 12  # 4 operations x 3 metrics, none merged (one per message)
    # Another stream has no marker yet; without state a lone record has no context either.
    orphan = run("nccl-inspector", lines[1], state=state, headers={"stream": "gpu002-pid1.log"})
    assert orphan.samples == [] and "without a preceding dump_stats marker" in orphan.rejections[0].reason
    assert run("nccl-inspector", lines[1]).rejections[0].record == "message"


def test_records_beyond_what_the_marker_announced_are_rejected():
    lines = (FIXTURES / "nccl_inspector_v4_3.jsonl").read_bytes().splitlines(keepends=True)
    raw = lines[0] + lines[1] + lines[2] + lines[3] + lines[1]  # marker announced 2 coll + 1 p2p records
    out = run("nccl-inspector", raw)
    assert [r.record for r in out.rejections] == ["line 5"]
    assert "beyond the records its dump_stats marker announced" in out.rejections[0].reason


def test_nccl_inspector_garbage_records_are_rejected_precisely():
    raw = (b'{"header": {"id": "x", "rank": 0}, "metadata": {"hostname": "h", "dump_timestamp_us": 1764502930000000},'
           b' "coll_perf": {"coll": "AllReduce", "coll_exec_time_us": "fast"}}\n'
           b'{"hello": "world"}\n'
           b'not json\n'
           b'{"header": {"id": "x"}, "metadata": {"hostname": "h", "dump_timestamp_us": 17}, '
           b'"coll_perf": {"coll": "AllReduce", "coll_exec_time_us": 5}}\n')
    out = run("nccl-inspector", raw)
    assert out.samples == []
    reasons = {r.record: r.reason for r in out.rejections}
    assert "coll_exec_time_us is not a number" in reasons["line 1"]
    assert "not an NCCL Inspector record" in reasons["line 2"]
    assert "not JSON" in reasons["line 3"]
    assert "2000-01-01" in reasons["line 4"]


def test_nccl_tests_rows_per_size_and_placement():
    out = run("nccl-tests", "nccl_tests.txt", headers={"collective": "all_reduce_perf"})
    assert out.rejections == []
    s = one(out, "nccl_tests_busbw_gbs", size="2097152", placement="in-place")
    assert s == {"ts": T0, "layer": "nccl", "source": "gpu001", "metric": "nccl_tests_busbw_gbs", "value": 33.24,
                 "labels": {"size": "2097152", "count": "524288", "type": "float", "redop": "sum", "root": "-1",
                            "collective": "all_reduce_perf", "placement": "in-place"}, "kind": "gauge"}
    assert one(out, "nccl_tests_time_us", size="1048576", placement="out-of-place")["value"] == 45.01
    assert not [x for x in out.samples if x["metric"] == "nccl_tests_wrong" and x["labels"]["size"] == "4194304"]
    assert len(out.samples) == 3 * 2 * 4 - 2


def test_nccl_tests_older_table_without_root_and_with_error_column():
    out = run("nccl-tests", "nccl_tests_old.txt", headers={"source": "gpu009"})
    assert out.rejections == []
    s = one(out, "nccl_tests_wrong", size="8", placement="out-of-place")
    assert s["value"] == 0.0 and "root" not in s["labels"] and s["source"] == "gpu009"


@pytest.mark.parametrize("raw, reason", [
    (b"     8   2   float   sum   -1   1.0   0.0   0.0   0\n", "before the column header"),
    (b"#  size count type redop root time algbw busbw #wrong\n  8 2 float\n", "3 cells"),
    (b"#  size count type redop root time algbw busbw #wrong\n  8 2 float sum -1 slow 0 0 0\n", "'slow'"),
])
def test_nccl_tests_bad_rows(raw, reason):
    out = run("nccl-tests", raw, headers={"source": "h"})
    assert len(out.rejections) == 1 and reason in out.rejections[0].reason
    assert not [s for s in out.samples if s["metric"] == "nccl_tests_time_us"]  # other cells of a row still count
