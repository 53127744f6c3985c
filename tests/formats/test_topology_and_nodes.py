"""Real captures of fabric topology (ibnetdiscover -p, iblinkinfo, lldpctl json0/keyvalue) and Slurm (jobs,
node states as JSON and text) -> inventory events, and what the inventory index makes of them.

Provenance of every fixture: the README beside it in tests/fixtures/formats/<format>/.
"""

from __future__ import annotations

import pytest

from models.inventory import inventory_adapter
from streams.formats.lldp import SKIP_HOST_PEER
from streams.formats.slurm import node_state
from streams.inventory import InventoryIndex

from .helpers import T0, run


def _index(*outs) -> InventoryIndex:  # type: ignore[no-untyped-def]
    index = InventoryIndex()
    for out in outs:
        for e in out.inventory:
            index.apply(inventory_adapter.validate_python(e))
    return index


# -- ibnetdiscover -p ------------------------------------------------------------------------------

def test_ibnetdiscover_ports_report_gives_one_link_per_host_port_and_tiers_from_the_cabling():
    out = run("ibnetdiscover", "ibnetdiscover/ports.txt")
    links = [e for e in out.inventory if e["kind"] == "link"]
    assert [(e["node"], e["device"], e["port"], e["switch"], e["switch_port"]) for e in links] == [
        ("o0001", "HCA-1", "1", "ib-i1l1s01", "10"),
        ("o0002", "HCA-1", "1", "ib-i1l1s01", "11"),
        ("p0001", "HCA-1", "1", "ib-i4l1s01", "35")]
    switches = {e["switch"]: (e["tier"], e["uplinks"]) for e in out.inventory if e["kind"] == "switch"}
    assert switches == {"ib-i1l1s01": ("leaf", ["ib-i1l2s01"]), "ib-i4l1s01": ("leaf", []),
                        "ib-i1l2s01": ("spine", [])}
    # each cable is printed from both ends; the unconnected port 37 is skipped, not rejected
    assert out.rejections == [] and out.skipped == {"port with no peer (???)": 1}


def test_ibnetdiscover_topology_reaches_jobs_through_port_leaf_and_spine():
    topo = run("ibnetdiscover", "ibnetdiscover/ports.txt")
    index = _index(topo)
    for job, nodes in (("a", ["o0001", "o0002"]), ("b", ["p0001"])):
        index.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0, "job_id": job, "state": "RUNNING",
                                                       "nodes": nodes, "gpus_per_node": 4}))
    assert [(a.job_id, a.relation) for a in index.affected_jobs("switch", "ib-i1l1s01", {"port": "11"}, T0)] == [
        ("a", "port")]
    assert [(a.job_id, a.relation) for a in index.affected_jobs("switch", "ib-i1l1s01", {}, T0)] == [("a", "switch")]
    assert index.tiers["ib-i1l2s01"] == "spine"
    # job a sits under one leaf only: the spine carries none of its training traffic
    assert index.affected_jobs("switch", "ib-i1l2s01", {}, T0) == []


def test_ibnetdiscover_rejects_a_line_that_is_not_a_port_line_and_needs_a_time():
    out = run("ibnetdiscover", b"CA   134  1 0x7c 4x EDR - SW  1719 10 0x7c ( 'o0001 HCA-1' - 'leaf' )\nhello\n")
    assert [(r.record, r.reason[:30]) for r in out.rejections] == [("line 2", "not an ibnetdiscover -p line: ")]
    assert len([e for e in out.inventory if e["kind"] == "link"]) == 1
    assert "no time" in run("ibnetdiscover", "ibnetdiscover/ports.txt", ts=None).rejections[0].reason


# -- iblinkinfo ------------------------------------------------------------------------------------

def test_iblinkinfo_of_a_qdr_switch_gives_one_link_per_host_port_from_either_side():
    out = run("iblinkinfo", "iblinkinfo/teaker.txt")
    links = [(e["node"], e["device"], e["port"], e["switch"], e["switch_port"])
             for e in out.inventory if e["kind"] == "link"]
    sw = "Infiniscale-IV Mellanox Technologies"
    assert links == [("teaker-4", "HCA-1", "1", sw, "9"), ("teaker-5", "HCA-1", "1", sw, "7"),
                     ("teaker-6", "HCA-1", "1", sw, "6"), ("teaker-7", "HCA-1", "1", sw, "5"),
                     ("teaker-8", "HCA-1", "1", sw, "4"), ("teaker-11", "HCA-1", "1", sw, "1"),
                     # a dual-port HCA: both ports, each to its own switch port
                     ("teaker-9", "HCA-1", "1", sw, "3"), ("teaker-9", "HCA-1", "2", sw, "14"),
                     # teaker-10's own section comes last: its link is learned from the switch's port 2 first
                     ("teaker-10", "HCA-1", "1", sw, "2")]
    switches = [(e["switch"], e["tier"], e["uplinks"]) for e in out.inventory if e["kind"] == "switch"]
    assert switches == [(sw, "leaf", [])]
    # "4X 10.0 Gbps": QDR, 40 Gb/s as ibnetdiscover gives 4x QDR; no switch-to-switch port here
    assert {e.get("speed_gbps") for e in out.inventory if e["kind"] == "link"} == {40.0}
    assert all("ports" not in e for e in out.inventory if e["kind"] == "switch")
    # every cable printed from both ends is used once; the 9 Down/Polling switch ports are counted
    assert out.rejections == [] and out.skipped == {"port with no peer (Down)": 9}
    assert _index(out).nodes_behind_port(sw, "14") == ["teaker-9"]


def test_iblinkinfo_tiers_from_switch_to_switch_cables_and_a_host_learned_from_its_section():
    # two leaves and a spine (MF0; managed names) in iblinkinfo's layout; gpu2 only in its own CA section
    raw = (b'Switch: 0x01 MF0;leaf-a:MQM8700/U1:\n'
           b'  11  1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  5  1[  ] "gpu1 mlx5_0" ( )\n'
           b'  11 40[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==> 13  1[  ] "MF0;spine-1:MQM8700/U1" ( )\n'
           b'Switch: 0x02 MF0;leaf-b:MQM8700/U1:\n'
           b'  12 40[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==> 13  2[  ] "MF0;spine-1:MQM8700/U1" ( )\n'
           b'Switch: 0x03 MF0;spine-1:MQM8700/U1:\n'
           b'  13  1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==> 11 40[  ] "MF0;leaf-a:MQM8700/U1" ( )\n'
           b'  13  2[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==> 12 40[  ] "MF0;leaf-b:MQM8700/U1" ( )\n')
    ca = (b'CA: gpu2 mlx5_0:\n'
          b'  0xa1  6  1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  12  7[  ] "MF0;leaf-b:MQM8700/U1" ( )\n')
    out = run("iblinkinfo", ca + raw)
    assert [(e["node"], e["switch"], e["switch_port"]) for e in out.inventory if e["kind"] == "link"] == [
        ("gpu2", "leaf-b", "7"), ("gpu1", "leaf-a", "1")]
    assert {e["switch"]: (e["tier"], e["uplinks"]) for e in out.inventory if e["kind"] == "switch"} == {
        "leaf-a": ("leaf", ["spine-1"]), "leaf-b": ("leaf", ["spine-1"]), "spine-1": ("spine", [])}
    assert out.rejections == []
    # 4X 53.125 Gbps is HDR: 200 Gb/s for the hosts' links and at both ends of each switch-to-switch cable
    assert [e["speed_gbps"] for e in out.inventory if e["kind"] == "link"] == [200.0, 200.0]
    hdr = 200.0
    assert {e["switch"]: e["ports"] for e in out.inventory if e["kind"] == "switch"} == {
        "leaf-a": {"40": {"peer": "spine-1", "speed_gbps": hdr}},
        "leaf-b": {"40": {"peer": "spine-1", "speed_gbps": hdr}},
        "spine-1": {"1": {"peer": "leaf-a", "speed_gbps": hdr}, "2": {"peer": "leaf-b", "speed_gbps": hdr}}}


def test_iblinkinfo_bad_lines_l_output_and_no_time_are_rejected():
    out = run("iblinkinfo", b"CA: gpu1 mlx5_0:\n  garbage here\n")
    assert [r.record for r in out.rejections] == ["line 2"]
    lline = (b'0xf452140300f55051 "              ib-test-7 mlx4_0"     37    1[  ] ==( 4X       14.0625 Gbps '
             b'Active/  LinkUp)==>  0xf45214030067c630      5   16[  ] "MF0;switch-e1be74:SX6036/U1" ( )\n')
    out = run("iblinkinfo", lline)
    assert out.inventory == [] and "-l output is not read" in out.rejections[0].reason
    assert "no time" in run("iblinkinfo", "iblinkinfo/teaker.txt", ts=None).rejections[0].reason


# -- lldpctl ---------------------------------------------------------------------------------------

def test_lldpctl_json0_of_a_rail_optimised_roce_node_gives_one_link_per_nic():
    out = run("lldpctl", "lldpctl/gpu_node_json0.json", headers={"source": "gpu-node-1"})
    assert [(e["node"], e["device"], e["switch"], e["switch_port"], e["fabric"]) for e in out.inventory] == [
        ("gpu-node-1", "ens1np0", "StorageSW", "Ethernet120", "roce"),
        ("gpu-node-1", "ens841np0", "LEAF03", "Ethernet184", "roce"),
        ("gpu-node-1", "ens842np0", "LEAF04", "Ethernet184", "roce"),
        ("gpu-node-1", "ens110np0", "LEAF02", "Ethernet184", "roce"),
        ("gpu-node-1", "ens108np0", "LEAF01", "Ethernet184", "roce")]
    assert out.rejections == []


def test_lldpctl_without_a_host_name_is_rejected_not_guessed():
    out = run("lldpctl", "lldpctl/gpu_node_json0.json")
    assert out.inventory == [] and "does not name its host" in out.rejections[0].reason


# -- lldpctl -f keyvalue ---------------------------------------------------------------------------

def test_lldpctl_keyvalue_of_a_host_on_two_nxos_switches_gives_their_ports_and_skips_the_hypervisor_peer():
    out = run("lldpctl-keyvalue", "lldpctl-keyvalue/nxos_host.txt", headers={"source": "openstack1"})
    assert [(e["node"], e["device"], e["port"], e["switch"], e["switch_port"], e["fabric"]) for e in out.inventory] == [
        ("openstack1", "enp7s0", "1", "padkrish-9-26", "Ethernet1/5", "roce"),
        ("openstack1", "enp8s0", "1", "padkrish-9-244", "Ethernet1/34", "roce")]
    # enp1s0's neighbour is a KVM host (port id a MAC, tap vnet5): another host's NIC, not a switch port
    assert out.rejections == [] and out.skipped == {SKIP_HOST_PEER: 1}
    # a fault on either leaf port now reaches the host behind it
    index = _index(out)
    assert index.nodes_behind_port("padkrish-9-26", "Ethernet1/5") == ["openstack1"]
    assert index.nodes_behind_port("padkrish-9-244", "Ethernet1/34") == ["openstack1"]


def test_lldpctl_keyvalue_continuation_lines_repeated_keys_and_two_neighbours_on_one_interface():
    raw = (b"lldp.eth0.via=LLDP\nlldp.eth0.chassis.name=leaf01\nlldp.eth0.chassis.descr=Cumulus Linux\n"
           b"  running on Nvidia SN5600\nlldp.eth0.chassis.mgmt-ip=10.0.0.1\nlldp.eth0.chassis.mgmt-ip=fe80::1\n"
           b"lldp.eth0.port.local=Eth1/39\n"
           b"lldp.eth0.via=LLDP\nlldp.eth0.chassis.name=leaf02\nlldp.eth0.port.ifalias=swp7\n"
           b"lldp.eth1.via=LLDP\nlldp.eth1.port.ttl=120\n")
    out = run("lldpctl-keyvalue", raw, default_source="gpu7")
    assert [(e["device"], e["switch"], e["switch_port"]) for e in out.inventory] == [
        ("eth0", "leaf01", "Eth1/39"), ("eth0", "leaf02", "swp7")]
    assert out.skipped == {"interface without an LLDP neighbour": 1} and out.rejections == []


def test_lldpctl_keyvalue_without_host_or_time_is_rejected_and_a_bad_line_is_named():
    good = "lldpctl-keyvalue/nxos_host.txt"
    assert "does not name its host" in run("lldpctl-keyvalue", good).rejections[0].reason
    assert "no time" in run("lldpctl-keyvalue", good, ts=None, default_source="h").rejections[0].reason
    out = run("lldpctl-keyvalue", b"lldp.eth0=x\nlldp.eth0.chassis.name=a\nlldp.eth0.port.ifname=b\n",
              default_source="h")
    assert [r.record for r in out.rejections] == ["line 1"] and len(out.inventory) == 1


# -- Slurm data_parser v0.0.40 (23.11) and v0.0.44 (25.11) GPU counts -----------------------------

@pytest.mark.parametrize("fixture, job_id, nodes, per_node", [
    # --gpus-per-node 1 --nodes 2: tres_alloc_str names no GPU; gres_detail and tres_per_node do
    ("job_gpus_per_node.json", "5680", ["gpu1", "gpu2"], 1),
    # --gpus-per-node h100:1: a typed count
    ("job_gpus_per_node_typed.json", "4716", ["gpu1"], 1),
    # --gpus-per-task 2 --ntasks 2: tres_per_task x tasks, and gres_detail gpu:h100:4(IDX:0-3)
    ("job_gpus_per_task.json", "5512", ["gpu1"], 4),
    # Slurm 23.11, data_parser v0.0.40: gres_detail mixes GPU types on each node (h100:1 and h200:0)
    ("job_gpus_per_node_v0040.json", "502", ["ia1", "ia2"], 1),
    # Slurm 24.05 (v0.0.41) and 25.05 (v0.0.43), --gpus 4: only tres_per_job (gres/gpu:4) and gres_detail name GPUs
    ("job_gpus_per_job_v0041.json", "9", ["gpu1"], 4),
    ("job_gpus_per_job_v0043.json", "4751", ["gpu1"], 4),
])
def test_slurm_23_11_and_25_11_gpu_counts_come_from_gres_detail_and_tres_per_fields(fixture, job_id, nodes, per_node):
    out = run("slurm-squeue", f"slurm-jobs-json/{fixture}", ts=None)
    (job,) = out.inventory
    assert (job["job_id"], job["nodes"], job["gpus_per_node"], job["state"]) == (job_id, nodes, per_node, "RUNNING")
    assert out.rejections == []


def test_gpu_count_is_unknown_when_no_field_names_gpus_and_zero_for_a_cpu_record():
    raw = b'{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n1", "start_time": 1764502000}]}'
    (job,) = run("slurm-squeue", raw).inventory
    assert job["gpus_per_node"] is None
    info = _index(run("slurm-squeue", raw)).job("1")
    assert info is not None and info.gpus_unknown and info.gpus == 0 and info.gpus_text == "? GPUs"
    cpu = raw.replace(b'"nodes"', b'"tres_alloc_str": "cpu=4,mem=1G,node=1", "nodes"')
    assert run("slurm-squeue", cpu).inventory[0]["gpus_per_node"] == 0


def test_licences_become_pools_only_when_configured():
    raw = (b'{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n1", "start_time": 1764502000,'
           b' "tres_alloc_str": "cpu=4", "licenses": "matlab:1,scratch:1"}]}')
    assert run("slurm-squeue", raw).inventory[0]["storage"] == []
    assert run("slurm-squeue", raw, headers={"license-pools": "scratch=lustre-a"}).inventory[0]["storage"] == [
        "lustre-a"]


# -- node states -----------------------------------------------------------------------------------

def test_scontrol_show_node_json_v0044_drained_node_with_reason_and_since():
    out = run("slurm-nodes", "slurm-nodes/node_drain_v0044.json", ts=None)
    assert out.inventory == [{"kind": "node", "ts": 1762942588.0, "node": "cn2", "state": "drained",
                              "flags": ["IDLE", "DRAIN"], "reason": "ECC memory error", "since": 1762942585.0}]


def test_scontrol_show_node_text_slurm_17_11():
    out = run("scontrol-nodes", "slurm-nodes/scontrol_show_node.txt")
    assert [(e["node"], e["state"], e.get("reason")) for e in out.inventory] == [
        ("cortex-01", "alloc", None), ("dumfries-002", "alloc", None),
        ("oxygen-04", "drained", "memory issues? [root@2019-01-29T10:42:12]"), ("cricket", "idle", None)]
    assert out.rejections == []


@pytest.mark.parametrize("words, state", [
    (["IDLE", "DRAIN"], "drained"), (["MIXED", "DRAIN"], "draining"), (["ALLOCATED", "DRAIN"], "draining"),
    (["DOWN", "DRAIN", "NOT_RESPONDING"], "down"), (["DOWN*"], "down"), (["IDLE", "FAIL"], "fail"),
    (["MIXED", "FAIL"], "failing"), (["IDLE"], "idle"), (["MIXED"], "mixed"), (["IDLE", "CLOUD", "POWERED_DOWN"],
                                                                              "idle"),
    (["FUTURE"], "unknown"),
])
def test_node_state_folds_base_state_and_flags(words, state):
    assert node_state(words) == state


def test_the_index_names_the_drained_node_behind_a_switch_port():
    index = _index(run("ibnetdiscover", "ibnetdiscover/ports.txt"))
    index.apply(inventory_adapter.validate_python({"kind": "node", "ts": T0, "node": "o0002", "state": "drained",
                                                   "flags": ["IDLE", "DRAIN"], "reason": "ECC memory error",
                                                   "since": T0 - 60}))
    (status,) = index.unhealthy_nodes("switch", "ib-i1l1s01", {"port": "11"})
    assert status.describe() == 'o0002 is drained ("ECC memory error", since 2025-11-30T11:41:10.000Z)'
    assert index.unhealthy_nodes("switch", "ib-i1l1s01", {"port": "10"}) == []
    assert [s.node for s in index.unhealthy_nodes("gpu", "o0002", {})] == ["o0002"]
    # an older event does not overwrite a newer one
    index.apply(inventory_adapter.validate_python({"kind": "node", "ts": T0 - 600, "node": "o0002", "state": "idle"}))
    assert index.node_state("o0002").state == "drained"  # type: ignore[union-attr]


# -- catalogue names from issue 20, scrape noise, lustre_exporter job attribution -----------------------

@pytest.mark.parametrize("name, meaning", [
    ("req_cqe_error", "retransmits"), ("resp_cqe_error", "retransmits"), ("infiniband_req_cqe_error", "retransmits"),
    ("rx_steer_missed_packets", "drops"), ("tx_mac_control_phy", "congestion"),
    ("ethtool_rx_steer_missed_packets", "drops"), ("DCGM_FI_DEV_SLOWDOWN_TEMP", "temperature"),
    ("DCGM_FI_DEV_PSTATE", "throttle"), ("DCGM_FI_DEV_FAN_SPEED", "temperature"),
    ("lustre_job_read_bytes_total", "throughput"), ("lustre_job_write_bytes_total", "throughput"),
])
def test_names_seen_on_real_clusters_have_a_meaning(name, meaning):
    from streams.catalogue import lookup

    assert lookup(name).meaning.value == meaning


# A unit test of the noise rule (exposition lines in the shape every Go exporter prints), not a fixture.
NOISY = b"""# TYPE go_goroutines gauge
go_goroutines 7
process_resident_memory_bytes 1.1767808e+07
promhttp_metric_handler_requests_total{code="200"} 1
scrape_duration_seconds 0.01
node_infiniband_symbol_error_total{device="mlx5_0",port="1"} 3
"""


def test_scrape_noise_is_dropped_and_counted_unless_kept():
    out = run("prometheus", NOISY, headers={"source": "gpu001"})
    assert [s["metric"] for s in out.samples] == ["node_infiniband_symbol_error_total"]
    assert out.skipped == {"scrape noise (go_*, process_*, promhttp_*, scrape_*)": 4}
    kept = run("prometheus", NOISY, headers={"source": "gpu001", "keep-noise": "true"})
    assert len(kept.samples) == 5 and kept.skipped == {}


def test_lustre_exporter_job_bytes_are_attributed_to_the_job_like_job_stats():
    from streams.contention import is_job_write_burst

    line = b'lustre_job_write_bytes_total{component="ost",jobid="4242",target="lustre-OST0000"} 1.5e+09\n'
    (sample,) = run("prometheus", line, headers={"source": "lustre-a"}).samples
    assert (sample["layer"], sample["source"], sample["labels"]["job_id"]) == ("storage", "lustre-a", "4242")
    rec = {"layer": sample["layer"], "meaning": "throughput", "metric": sample["metric"], "labels": sample["labels"]}
    assert is_job_write_burst(rec)


# -- scontrol show job -d ----------------------------------------------------------------------------

def test_scontrol_show_job_d_text_jobs_arrays_and_gpu_counts():
    out = run("scontrol-jobs", "scontrol-jobs/scontrol_show_job_d.txt")
    got = [(e["job_id"], e["state"], len(e["nodes"]), e["gpus_per_node"]) for e in out.inventory]
    assert got == [("1", "RUNNING", 3, 0), ("2398463_150", "COMPLETED", 1, 0), ("153291", "RUNNING", 1, 4),
                   ("134238037", "PENDING", 0, 0), ("2423430_72", "RUNNING", 1, 1), ("20547", "PENDING", 0, 0),
                   ("1306093", "RUNNING", 1, 0), ("25686416", "RUNNING", 1, 1), ("25687666", "RUNNING", 1, 1)]
    assert out.rejections == [] and all(e["ts"] == T0 for e in out.inventory)  # local times are not used
    assert out.inventory[0]["user"] == "user1" and out.inventory[0]["nodes"] == ["node-63", "node-64", "node-65"]


def test_scontrol_detail_gres_counts_gpus_by_count_or_index_list():
    from streams.formats.slurm import _detail_gpus

    # the detail GRES values of the fixture's GPU jobs, as printed by three Slurm versions
    assert [_detail_gpus(g) for g in ("gpu(IDX:0,2-3,5)", "gpu(IDX:5)", "gg:g0(CNT:1),gpu:1(IDX:3)",
                                      "gpu:rtx2080:1(IDX:1),gg:g0(CNT:1)", "")] == [4, 1, 1, 1, 0]


def test_node_state_evidence_is_json_ready_for_an_alert():
    import orjson

    index = _index(run("ibnetdiscover", "ibnetdiscover/ports.txt"))
    index.apply(inventory_adapter.validate_python({"kind": "node", "ts": T0, "node": "o0001", "state": "down",
                                                   "flags": ["DOWN"], "reason": "Not responding"}))
    evidence = index.node_state_evidence("switch", "ib-i1l1s01", {"port": "10"})
    assert orjson.loads(orjson.dumps(evidence)) == [{"node": "o0001", "state": "down", "reason": "Not responding",
                                                     "since": None, "text": 'o0001 is down ("Not responding")'}]
    assert index.node_state_evidence("storage", "lustre-a", {}) == []
