"""``lockstep topology``: the switches by tier, the links, and what is missing, from real captures."""

from __future__ import annotations

import io

from lockstep.cli import build_parser
from lockstep.commands.topology import detect_format, topology_files

from .helpers import FIXTURES, T0


def _run(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["topology", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = topology_files(args, out, err, now=T0)
    return code, out.getvalue(), err.getvalue()


def test_ibnetdiscover_with_jobs_and_node_states_prints_tiers_links_and_the_missing():
    code, out, err = _run(str(FIXTURES / "ibnetdiscover/ports.txt"),
                          str(FIXTURES / "slurm-jobs-json/job_gpus_per_node.json"),
                          str(FIXTURES / "slurm-nodes/node_drain_v0044.json"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "lockstep topology: 3 links from 3 nodes; 3 switches (2 leaf, 1 spine, 0 core)"
    assert "  leaf   ib-i1l1s01  2 nodes (o0001, o0002)  uplinks: ib-i1l2s01" in lines
    assert "  spine  ib-i1l2s01  uplinks: none" in lines
    # the uplink cable, from both ends, with its line rate; the hosts' links with theirs
    assert [line for line in lines if line.startswith("         ports:")] == [
        "         ports: 1 -> ib-i1l2s01 at 100 Gb/s", "         ports: 1 -> ib-i1l1s01 at 100 Gb/s"]
    assert "  o0001 HCA-1 port 1 -> ib-i1l1s01 port 10 (infiniband, 100 Gb/s)" in lines
    assert "  links with no line rate (the fabric report's bandwidth question needs it): none" in lines
    # the job's nodes and the drained node are named by Slurm but cabled by nothing in these files
    assert "  nodes with no link: cn2, gpu1, gpu2" in lines
    assert "  leaves with no known uplink: ib-i4l1s01" in lines
    assert '  cn2 is drained ("ECC memory error", since 2025-11-12T10:16:25.000Z)' in lines


def test_lldpctl_needs_its_host_per_file_and_formats_are_recognised():
    code, out, _ = _run(f"{FIXTURES / 'lldpctl/gpu_node_json0.json'}@gpu-node-1")
    assert code == 0 and "lockstep topology: 5 links from 1 nodes; 5 switches (5 leaf, 0 spine, 0 core)" in out
    code, _, err = _run(str(FIXTURES / "lldpctl/gpu_node_json0.json"))
    assert code == 1 and "does not name its host" in err
    assert [detect_format((FIXTURES / f).read_bytes()) for f in (
        "crux_topology.csv", "slurm_sacct.json", "slurm-nodes/scontrol_show_node.txt", "slurm_squeue.json")] == [
        "crux-topology", "slurm-sacct", "scontrol-nodes", "slurm-squeue"]


def test_lldpctl_keyvalue_is_recognised_and_needs_its_host():
    path = FIXTURES / "lldpctl-keyvalue/nxos_host.txt"
    assert detect_format(path.read_bytes()) == "lldpctl-keyvalue"
    code, out, err = _run(f"{path}@openstack1")
    assert code == 0 and err == ""
    assert "lockstep topology: 2 links from 1 nodes; 2 switches (2 leaf, 0 spine, 0 core)" in out
    assert "  openstack1 enp7s0 port 1 -> padkrish-9-26 port Ethernet1/5 (roce)" in out.splitlines()
    # LLDP says nothing of speeds: the bandwidth question's missing input is named
    assert "  links with no line rate (the fabric report's bandwidth question needs it): 2" in out.splitlines()
    code, _, err = _run(str(path))
    assert code == 1 and "does not name its host" in err


def test_iblinkinfo_is_recognised_and_prints_its_leaf_and_links():
    path = FIXTURES / "iblinkinfo/teaker.txt"
    assert detect_format(path.read_bytes()) == "iblinkinfo"
    code, out, err = _run(str(path))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "lockstep topology: 9 links from 8 nodes; 1 switches (1 leaf, 0 spine, 0 core)"
    assert "  teaker-9 HCA-1 port 2 -> Infiniscale-IV Mellanox Technologies port 14 (infiniband, 40 Gb/s)" in lines
