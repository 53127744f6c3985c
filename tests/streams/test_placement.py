"""Placement advice (streams/placement.py) on small drawn topologies and on the real 3-tier Crux fabric.

Small topologies are drawn as ``pod: leaf=nodes leaf=nodes``; every node offers 8 GPUs unless said.
"""

from __future__ import annotations

from pathlib import Path

import hostlist
import pytest

from models.inventory import LinkEvent, NodeEvent, PoolEvent, SwitchEvent, inventory_adapter
from streams.formats import convert
from streams.inventory import InventoryIndex
from streams.ledger import Ledger, entry_of
from streams.placement import (
    Avoid,
    Fabric,
    PlacementError,
    Request,
    avoid_from,
    exclude_hostlist,
    leaf_spread,
    place,
    slurm_topology,
)

T0 = 1_764_502_800.0
CRUX = Path("/work/shared/data/topology/crux-topo.csv")


def drawn(*pods: str, gpus: int = 8) -> Fabric:
    """``"s1: l1=a,b l2=c"`` -> leaves l1 (a, b) and l2 (c) under spine s1."""
    leaf_of: dict[str, str] = {}
    spines: dict[str, frozenset[str]] = {}
    for pod in pods:
        spine, _, rest = pod.partition(":")
        for leaf_text in rest.split():
            leaf, _, nodes = leaf_text.partition("=")
            spines[leaf] = frozenset(spine.strip().split("+"))
            for node in nodes.split(","):
                leaf_of[node] = leaf
    return Fabric(leaf_of, spines, {}, dict.fromkeys(leaf_of, gpus))


def best(fabric: Fabric, gpus: int, avoid: Avoid | None = None, klass: str = "tightly-coupled") -> tuple[str, ...]:
    return place(fabric, Request(gpus, klass), avoid).candidates[0].nodes


def test_one_leaf_beats_two_and_the_tightest_fitting_leaf_is_first() -> None:
    f = drawn("s1: l1=a,b,c,d l2=e,f", "s2: l3=g,h,i")
    p = place(f, Request(16))
    assert [c.leaves for c in p.candidates] == [("l2",), ("l3",), ("l1",)]  # best fit: the fullest use first
    assert p.candidates[0].nodes == ("e", "f") and p.candidates[0].reason == (
        "16 GPUs on 2 nodes under 1 leaf (l2): no spine hop")
    assert p.min_leaves == 1 and p.free_gpus == 72


def test_no_leaf_big_enough_then_one_pod_with_the_fewest_leaves() -> None:
    f = drawn("s1: l1=a,b l2=c,d l3=e", "s2: l4=f,g l5=h")
    c = place(f, Request(40)).candidates[0]  # 5 nodes: s1 holds them in 3 leaves, s2 has only 3 nodes
    assert c.leaves == ("l1", "l2", "l3") and c.pods == 1 and c.spines == ("s1",)
    assert c.reason == "40 GPUs on 5 nodes under 3 leaves of 1 pod (spines s1)"
    c = place(f, Request(24)).candidates[0]  # 3 nodes: both pods can; s2 in 2 leaves, s1 in 2 leaves too
    assert len(c.leaves) == 2 and c.gpus == 24


def test_no_pod_big_enough_then_the_fewest_pods() -> None:
    f = drawn("s1: l1=a,b", "s2: l2=c,d,e", "s3: l3=f")
    c = place(f, Request(40)).candidates[0]
    assert c.pods == 2 and set(c.leaves) == {"l1", "l2"} and c.reason.endswith("under 2 leaves in 2 pods")
    assert leaf_spread(f, c.nodes) == (2, 2)


def test_leaves_with_no_known_uplink_are_not_taken_for_one_pod() -> None:
    f = Fabric({"a": "l1", "b": "l2"}, {"l1": frozenset(), "l2": frozenset()}, {}, {"a": 8, "b": 8})
    c = place(f, Request(16)).candidates[0]
    assert c.pods == 2 and c.reason == "16 GPUs on 2 nodes under 2 leaves in 2 pods"
    assert leaf_spread(f, c.nodes) == (2, 2)


def test_drained_nodes_and_nodes_behind_a_degraded_port_are_left_out() -> None:
    inv = InventoryIndex()
    for i, node in enumerate(["a", "b", "c", "d"]):
        inv.apply(LinkEvent(ts=T0, node=node, device="mlx5_0", port="1", switch="l1", switch_port=str(i + 1)))
    for i, node in enumerate(["e", "f", "g"]):
        inv.apply(LinkEvent(ts=T0, node=node, device="mlx5_0", port="1", switch="l2", switch_port=str(i + 1)))
    inv.apply(SwitchEvent(ts=T0, switch="l1", tier="leaf", uplinks=["s1"]))
    inv.apply(SwitchEvent(ts=T0, switch="l2", tier="leaf", uplinks=["s1"]))
    inv.apply(NodeEvent(ts=T0, node="a", state="drained", reason="ECC memory error"))
    avoid = avoid_from(inv, [("port", "l1:2")])
    assert avoid.nodes == {"a": 'a is drained ("ECC memory error")', "b": "behind degraded port l1:2"}
    f = Fabric.from_inventory(inv)
    assert best(f, 16) == ("e", "f")  # best fit: l2 (3 nodes) rather than l1 (4)
    assert best(f, 16, avoid) == ("c", "d")  # l1 keeps two healthy nodes: now the tight fit
    assert best(f, 24, avoid) == ("e", "f", "g")
    assert "a" not in best(f, 32, avoid) and "b" not in best(f, 32, avoid)
    assert exclude_hostlist(avoid) == "a,b"


def test_a_degraded_leaf_or_spine_ranks_below_a_clean_path() -> None:
    f = drawn("s1: l1=a,b l2=c,d", "s2: l3=e,f l4=g,h")
    assert best(f, 16, Avoid(degraded={"l1": "open incident"})) == ("c", "d")
    p = place(f, Request(32), Avoid(degraded={"s1": "open incident"}))
    assert p.candidates[0].spines == ("s2",) and p.candidates[1].degraded == ("s1",)
    assert "crosses degraded s1" in p.candidates[1].reason
    # a single leaf under a degraded spine does not cross it
    assert place(f, Request(16), Avoid(degraded={"s1": "x"})).candidates[0].degraded == ()


def test_data_loader_heavy_jobs_keep_off_a_contended_pool_even_at_more_spread() -> None:
    f = drawn("s1: l1=a,b,c,d", "s2: l2=e,f l3=g,h")
    avoid = Avoid(contended={"l1": "on contended pool lustre-a's path"})
    assert best(f, 32, avoid) == ("a", "b", "c", "d")  # tightly coupled: one leaf wins
    c = place(f, Request(32, "data-loader-heavy"), avoid).candidates[0]
    assert c.nodes == ("e", "f", "g", "h") and c.contended == ()
    inv = InventoryIndex()
    inv.apply(PoolEvent(ts=T0, pool="lustre-a", switches=["l1", "s1"]))
    assert avoid_from(inv, contended_pools=["lustre-a"]).contended == {
        "l1": "on contended pool lustre-a's path", "s1": "on contended pool lustre-a's path"}


def test_a_request_larger_than_what_is_free_gets_no_candidate_and_says_why() -> None:
    f = drawn("s1: l1=a,b")
    p = place(f, Request(24), Avoid(nodes={"a": "busy"}))
    assert p.candidates == [] and p.reason == "only 8 GPUs are free and healthy; 24 asked"
    with pytest.raises(PlacementError):
        Request(0)
    with pytest.raises(PlacementError):
        Request(8, "fast")


def test_open_incidents_of_the_ledger_are_what_placement_avoids() -> None:
    inv = InventoryIndex()
    for node, port in (("a", "1"), ("b", "2")):
        inv.apply(LinkEvent(ts=T0, node=node, device="mlx5_0", port="1", switch="l1", switch_port=port))
    led = Ledger()
    alert = {"alert_id": "x", "type": "job_slowdown", "status": "firing", "job_id": "j", "gpus": 8,
             "started_at": "2025-11-30T11:40:00Z",
             "symptom": {"baseline": 1.0, "value": 2.0, "ratio": 2.0, "onset": "2025-11-30T11:40:00Z"},
             "root_cause": {"domain": "network", "layer": "switch", "source": "l1", "labels": {"port": "2"}}}
    entry = entry_of(alert, inv.tiers)
    assert entry is not None and led.add(entry)
    open_entities = [(e.kind, e.id) for x in led.entries.values() if x.end is None for e in x.entities]
    avoid = avoid_from(inv, open_entities)
    assert avoid.nodes == {"b": "behind degraded port l1:2"}
    assert avoid.degraded == {"l1": "leaf l1 has an open incident"}


@pytest.fixture(scope="module")
def crux() -> tuple[InventoryIndex, Fabric]:
    res = convert("crux-topology", CRUX.read_bytes(), ts=T0)
    assert not res.rejections
    inv = InventoryIndex()
    for doc in res.inventory:
        inv.apply(inventory_adapter.validate_python(doc))
    return inv, Fabric.from_inventory(inv)


def test_on_the_real_crux_fabric_256_gpus_take_the_fewest_leaves_it_allows(crux: tuple[InventoryIndex, Fabric]) -> None:
    _, f = crux
    assert len(f.leaf_of) == 847
    p = place(f, Request(256))
    c = p.candidates[0]
    # Crux leaves hold at most 8 hosts (64 GPUs): 256 GPUs need 4 leaves; one pod holds them
    assert p.min_leaves == 4 and len(c.leaves) == 4 and c.pods == 1 and c.gpus == 256 and len(c.nodes) == 32
    assert leaf_spread(f, c.nodes) == (4, 1)
    assert len({f.spines_of[leaf] for leaf in c.leaves}) == 1
    # drain a node in every full leaf of that pod: the pod now needs a fifth leaf, or another pod wins
    pod = f.spines_of[c.leaves[0]]
    drained = {nodes[0]: "drained" for leaf, nodes in f.leaves.items() if f.spines_of[leaf] == pod}
    again = place(f, Request(256), Avoid(nodes=drained)).candidates[0]
    assert not set(again.nodes) & set(drained) and len(again.leaves) == 4 and f.spines_of[again.leaves[0]] != pod


def test_the_slurm_topology_of_the_crux_fabric_holds_every_host_once_under_its_leaf(
        crux: tuple[InventoryIndex, Fabric]) -> None:
    inv, f = crux
    conf = slurm_topology(f)
    lines = conf.splitlines()
    assert lines[0].startswith("# topology.conf (topology/tree)")
    leaf_lines = [ln for ln in lines if " Nodes=" in ln]
    switch_lines = [ln for ln in lines if " Switches=" in ln]
    seen: list[str] = []
    for ln in leaf_lines:
        name, nodes = ln.removeprefix("SwitchName=").split(" Nodes=")
        hosts = hostlist.expand_hostlist(nodes)
        assert {f.leaf_of[h].replace("/", "_") for h in hosts} == {name}
        seen += hosts
    assert sorted(seen) == sorted(inv.node_leaves) and len(seen) == 847
    spines = {s for sps in f.spines_of.values() for s in sps}
    cores = {c for cs in f.cores_of.values() for c in cs}
    assert len(leaf_lines) == len(f.leaves) and len(switch_lines) == len(spines) + len(cores)
    under = {ln.split()[0].removeprefix("SwitchName="): set(hostlist.expand_hostlist(ln.split("Switches=")[1]))
             for ln in switch_lines}
    assert set().union(*(under[s] for s in spines)) == {leaf.replace("/", "_") for leaf in f.leaves}
    assert set().union(*(under[c] for c in cores)) == spines
