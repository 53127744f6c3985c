"""Slurm squeue/sacct JSON, Kubernetes pods and the Crux topology CSV -> native inventory events."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from models.inventory import inventory_adapter
from streams.formats import AdapterState
from streams.inventory import InventoryIndex

from .helpers import T0, load, run

REAL_TOPOLOGY = Path("/work/shared/data/topology/crux-topo.csv")


def _index(*events: dict) -> InventoryIndex:
    index = InventoryIndex()
    for e in events:
        index.apply(inventory_adapter.validate_python(e))
    return index


def test_squeue_json_wrapped_numbers_hostlists_gpu_counts_and_licenses():
    out = run("slurm-squeue", "slurm_squeue.json", ts=None, headers={"license-pools": "lustre-a"})
    by_id = {e["job_id"]: e for e in out.inventory}
    job = by_id["4242"]
    assert job == {"kind": "job", "ts": 1764502870.0, "job_id": "4242", "state": "RUNNING",
                   "nodes": ["gpu001", "gpu002", "gpu003", "gpu004"], "gpus_per_node": 8, "storage": ["lustre-a"],
                   "name": "llm-70b-pretrain", "user": "alice"}
    pending = by_id["4240_3"]  # an array task, named as Slurm prints it
    assert (pending["state"], pending["nodes"], pending["gpus_per_node"], pending["ts"]) == ("PENDING", [], 0,
                                                                                            1764502100.0)
    reasons = {r.record: r.reason for r in out.rejections}
    assert reasons == {"jobs[2]": "job 4250: 10 GPUs (tres_alloc_str) over 3 nodes is not a whole number per node",
                       "jobs[3]": "job 4251: job_state 'SHOUTING' is not a Slurm job state Lockstep knows"}


def test_squeue_v0_0_37_plain_numbers_and_string_state():
    out = run("slurm-squeue", "slurm_squeue_v0037.json", ts=None)
    (job,) = out.inventory
    assert (job["job_id"], job["state"], job["nodes"], job["gpus_per_node"], job["ts"]) == (
        "977", "RUNNING", ["gpu021", "gpu022"], 8, 1764502800.0)


def test_sacct_json_nested_state_tres_allocated_and_ended_jobs():
    out = run("slurm-sacct", "slurm_sacct.json", ts=None)
    by_id = {e["job_id"]: e for e in out.inventory}
    assert by_id["4242"]["gpus_per_node"] == 8 and by_id["4242"]["state"] == "RUNNING"
    assert by_id["4242"]["ts"] == 1764502870.0
    ended = by_id["4100"]
    assert (ended["state"], ended["ts"], ended["nodes"], ended["gpus_per_node"]) == (
        "NODE_FAIL", 1764502900.0, ["gpu005", "gpu006"], 8)
    assert [r.record for r in out.rejections] == ["jobs[2]"]
    assert "is not a hostlist" in out.rejections[0].reason


def test_slurm_jobs_answer_node_and_gpu_questions_from_the_index():
    squeue = run("slurm-squeue", "slurm_squeue.json").inventory
    sacct = run("slurm-sacct", "slurm_sacct.json").inventory
    index = _index(*squeue, *sacct)
    assert index.jobs_on_node("gpu003", T0) == ["4242"]
    assert index.job("4242", T0).gpus == 32
    assert index.jobs_on_node("gpu005", T0) == []  # 4100 ended at 11:41:40 on node failure


def test_slurm_rejects_what_is_not_a_jobs_document():
    out = run("slurm-sacct", b'{"jobs": {"not": "a list"}}\n[1, 2]\n')
    assert [r.reason for r in out.rejections] == ['expected an object with a "jobs" array'] * 2
    out = run("slurm-squeue", orjson.dumps({"jobs": [{"job_state": ["RUNNING"]}, "x"]}))
    assert [r.reason for r in out.rejections] == ["job_id is missing", "job is str, not an object"]


def test_slurm_job_without_times_uses_the_collection_time_or_is_rejected():
    doc = orjson.dumps({"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n1", "tres_alloc_str": "gres/gpu=4"}]})
    (job,) = run("slurm-squeue", doc, ts=T0).inventory
    assert job["ts"] == T0 and job["gpus_per_node"] == 4
    out = run("slurm-squeue", doc, ts=None)
    assert out.inventory == [] and "no start time" in out.rejections[0].reason


def test_kubernetes_pod_events_build_one_job_across_messages():
    state = AdapterState()
    lines = load("k8s_pods.jsonl").splitlines()
    first = run("k8s-pods", lines[0], state=state)
    (job,) = first.inventory
    assert (job["job_id"], job["state"], job["nodes"], job["gpus_per_node"], job["storage"]) == (
        "training/llm-70b", "RUNNING", ["gpu001"], 8, ["lustre-a"])
    second = run("k8s-pods", lines[1], state=state)  # worker-1 pending: the job still runs on gpu001
    assert second.inventory[0]["nodes"] == ["gpu001"]
    third = run("k8s-pods", lines[2], state=state)  # worker-1 running
    assert third.inventory[0]["nodes"] == ["gpu001", "gpu002"]
    assert third.inventory[0]["ts"] == pytest.approx(T0 - 65)  # 11:41:05, the latest pod start


def test_kubernetes_whole_stream_skips_system_pods_and_cancels_deleted_gpu_pods():
    out = run("k8s-pods", "k8s_pods.jsonl", ts=None)
    assert out.rejections == []
    by_id = {e["job_id"]: e for e in out.inventory}
    assert set(by_id) == {"training/llm-70b", "alice/notebook"}
    assert by_id["alice/notebook"]["state"] == "CANCELLED"  # a labelless GPU pod is its own job
    assert by_id["training/llm-70b"]["nodes"] == ["gpu001", "gpu002"]
    assert out.skipped == {"pod without a training-job label and without GPUs": 1}


def test_kubernetes_uneven_gpus_per_node_and_bad_quantities_are_rejected():
    def pod(name: str, node: str, gpus: str) -> bytes:
        return orjson.dumps({"type": "ADDED", "object": {
            "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": name,
                                        "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Running", "startTime": "2025-11-30T11:41:00Z"}}})
    out = run("k8s-pods", pod("a", "n1", "8") + b"\n" + pod("b", "n2", "4") + b"\n" + pod("c", "n3", "2.5"))
    assert out.inventory == []
    assert [r.reason for r in out.rejections] == ["nvidia.com/gpu quantity '2.5' is not a whole number",
                                                  "job ns/js: GPUs per node differ across the job's nodes: [4, 8]"]


def test_crux_topology_links_and_switch_tiers_with_pod_qualified_leaves():
    out = run("crux-topology", "crux_topology.csv")
    assert out.rejections == []
    links = [e for e in out.inventory if e["kind"] == "link"]
    switches = {e["switch"]: e for e in out.inventory if e["kind"] == "switch"}
    assert len(links) == 6
    assert links[0] == {"kind": "link", "ts": T0,
                        "node": "0c9d9de1b19e7f39b08f49ddfa26744ae26d3adf8bd59af1b16e203b6fa5fe4b",
                        "device": "unknown", "port": "unknown", "switch": "P10/S14", "switch_port": "unknown",
                        "fabric": "infiniband"}
    assert switches["P10/S14"] == {"kind": "switch", "ts": T0, "switch": "P10/S14", "tier": "leaf", "uplinks": ["P10"]}
    assert switches["P12/S14"]["uplinks"] == ["P12"]  # S14 under P12 is another switch
    assert switches["P10"]["tier"] == "spine" and switches["P10"]["uplinks"] == ["G6"]
    assert switches["G6"]["tier"] == "core"
    index = _index(*out.inventory)
    first = "0c9d9de1b19e7f39b08f49ddfa26744ae26d3adf8bd59af1b16e203b6fa5fe4b"
    assert index.nodes_behind_switch("P10/S14") == sorted([first, "b2e1"])
    assert len(index.nodes_behind_switch("P10")) == 4  # a spine: every host under its leaves


def test_crux_global_leaf_names_and_extra_columns():
    raw = b"ip,DSW,PSW,ASW,device,port,switch_port,fabric\nn1,G1,P1,leaf01,mlx5_0,1,17,roce\n"
    out = run("crux-topology", raw, headers={"leaf-names": "global"})
    link = out.inventory[0]
    assert (link["switch"], link["device"], link["port"], link["switch_port"], link["fabric"]) == (
        "leaf01", "mlx5_0", "1", "17", "roce")


def test_crux_rejects_bad_header_rows_and_missing_time():
    assert "lacks ASW" in run("crux-topology", b"ip,DSW,PSW\n1,2,3\n").rejections[0].reason
    out = run("crux-topology", b"ip,DSW,PSW,ASW\nn1,G,P,S\nn2,G,P\nn1,G,P,S\n,G,P,S\n")
    assert [r.record for r in out.rejections] == ["line 3", "line 4", "line 5"]
    assert "no time" in run("crux-topology", "crux_topology.csv", ts=None).rejections[0].reason


@pytest.mark.skipif(not REAL_TOPOLOGY.exists(), reason="shared topology data not present")
def test_the_published_crux_topology_converts_whole():
    out = run("crux-topology", REAL_TOPOLOGY.read_bytes())
    assert out.rejections == []
    links = [e for e in out.inventory if e["kind"] == "link"]
    tiers = [e["tier"] for e in out.inventory if e["kind"] == "switch"]
    assert len(links) == sum(1 for _ in REAL_TOPOLOGY.open()) - 1
    assert tiers.count("core") >= 1 and tiers.count("spine") >= 1 and tiers.count("leaf") >= tiers.count("spine")
    index = _index(*out.inventory)
    # Every leaf answers "which hosts hang off me", and every host sits under exactly one leaf.
    leaves = [e["switch"] for e in out.inventory if e["kind"] == "switch" and e["tier"] == "leaf"]
    assert sum(len(index.nodes_behind_switch(leaf)) for leaf in leaves) == len(links)


def test_deleted_and_finished_pods_are_evicted_from_the_state_after_the_idle_horizon():
    state = AdapterState(max_idle_s=600)
    run("k8s-pods", "k8s_pods.jsonl", ts=None, state=state)
    assert "55bb" in state.pods  # the deleted notebook is kept a while (its job event said CANCELLED)
    later = orjson.dumps({"type": "ADDED", "object": {
        "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "later", "labels": {"job-name": "j"}},
        "spec": {"nodeName": "n9"}, "status": {"phase": "Running", "startTime": "2025-11-30T13:00:00Z"}}})
    run("k8s-pods", later, state=state)
    assert "55bb" not in state.pods and "7f1c-0" in state.pods  # running pods stay, however quiet
