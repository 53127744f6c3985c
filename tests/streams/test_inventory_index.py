"""The inventory index answers "who is behind this?" as of an event time."""

from __future__ import annotations

from models.inventory import inventory_adapter
from streams.inventory import InventoryIndex

T = 1764500000.0


def build() -> InventoryIndex:
    inv = InventoryIndex()
    events = [
        {"kind": "job", "ts": T, "job_id": "a", "state": "RUNNING", "nodes": "n[1-4]", "gpus_per_node": 8,
         "storage": ["lustre"]},
        {"kind": "job", "ts": T, "job_id": "b", "state": "RUNNING", "nodes": "n[5-6]", "gpus_per_node": 4,
         "storage": ["nfs"]},
        {"kind": "switch", "ts": T, "switch": "leaf1", "tier": "leaf", "uplinks": ["spine1"]},
        {"kind": "switch", "ts": T, "switch": "leaf2", "tier": "leaf", "uplinks": ["spine1"]},
    ]
    for i in range(1, 7):
        leaf = "leaf1" if i <= 3 else "leaf2"
        events.append({"kind": "link", "ts": T, "node": f"n{i}", "device": "mlx5_0", "port": "1", "switch": leaf,
                       "switch_port": str(10 + i)})
    events.append({"kind": "job", "ts": T + 100, "job_id": "b", "state": "COMPLETED", "nodes": "n[5-6]",
                   "gpus_per_node": 4})
    for e in events:
        inv.apply(inventory_adapter.validate_python(e))
    return inv


def jobs(affected: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(a.job_id, a.relation) for a in affected]


def test_a_switch_port_maps_to_the_job_on_the_node_behind_it() -> None:
    inv = build()
    assert jobs(inv.affected_jobs("switch", "leaf1", {"port": "12"}, T + 10)) == [("a", "port")]


def test_a_leaf_without_port_maps_to_every_job_behind_it() -> None:
    assert jobs(build().affected_jobs("switch", "leaf2", {}, T + 10)) == [("a", "switch"), ("b", "switch")]


def test_a_spine_maps_only_to_jobs_that_cross_it() -> None:
    # Job a spans leaf1 and leaf2 (n1-3 and n4); job b sits on leaf2 only.
    assert jobs(build().affected_jobs("switch", "spine1", {}, T + 10)) == [("a", "spine")]


def test_a_pool_maps_to_the_jobs_using_it_and_a_node_to_its_job() -> None:
    inv = build()
    assert jobs(inv.affected_jobs("storage", "lustre", {}, T + 10)) == [("a", "pool")]
    assert jobs(inv.affected_jobs("gpu", "n5", {"gpu": "0"}, T + 10)) == [("b", "node")]


def test_answers_are_as_of_the_event_time() -> None:
    inv = build()
    assert jobs(inv.affected_jobs("gpu", "n5", {}, T + 150)) == []  # b ended at T+100
    assert jobs(inv.affected_jobs("gpu", "n5", {}, T + 50)) == [("b", "node")]  # late evidence still maps
    assert jobs(inv.affected_jobs("gpu", "n1", {}, T - 10)) == []  # before a started


def test_neighbours_and_paths() -> None:
    inv = build()
    assert inv.neighbours("a", "switch", "leaf2", {"port": "14"}, T + 10) == [("b", 8, "same_switch")]
    paths = inv.paths("a")
    assert [(p["node"], p["switch"], p["switch_port"], p["spines"]) for p in paths][:2] == [
        ("n1", "leaf1", "11", ["spine1"]), ("n2", "leaf1", "12", ["spine1"])]
    assert inv.job("a").gpus == 32  # type: ignore[union-attr]


def storage_fabric() -> InventoryIndex:
    """build() plus pool ``lustre`` whose servers oss1/oss2 hang off the storage leaf ``stor1``."""
    inv = build()
    events = [
        {"kind": "pool", "ts": T, "pool": "lustre", "switches": ["stor1", "spine1"]},
        {"kind": "switch", "ts": T, "switch": "stor1", "tier": "leaf", "uplinks": ["spine1"]},
        {"kind": "link", "ts": T, "node": "oss1", "device": "mlx5_0", "port": "1", "switch": "stor1",
         "switch_port": "1"},
        {"kind": "link", "ts": T, "node": "oss2", "device": "mlx5_0", "port": "1", "switch": "stor1",
         "switch_port": "2"},
    ]
    for e in events:
        inv.apply(inventory_adapter.validate_python(e))
    return inv


def test_a_storage_leaf_port_maps_to_every_job_on_the_pool() -> None:
    inv = storage_fabric()
    # oss1 runs no job: before, its port mapped to nobody; job a uses the pool whose servers hang off stor1.
    assert jobs(inv.affected_jobs("switch", "stor1", {"port": "1"}, T + 10)) == [("a", "pool_path")]
    assert jobs(inv.affected_jobs("switch", "stor1", {"port": "40"}, T + 10)) == [("a", "pool_path")]  # an uplink
    assert jobs(inv.affected_jobs("switch", "stor1", {}, T + 10)) == [("a", "pool_path")]
    # As of the time asked: before a started, nobody.
    assert jobs(inv.affected_jobs("switch", "stor1", {"port": "1"}, T - 10)) == []
    # The cached form (t=None) covers every job record still in the index.
    assert jobs(inv.affected_jobs("switch", "stor1", {"port": "1"}, None)) == [("a", "pool_path")]
    assert inv.neighbours("b", "switch", "stor1", {"port": "1"}, T + 10) == [("a", 32, "same_pool_path")]


def test_a_spine_in_the_pools_switches_keeps_the_spine_rule() -> None:
    # spine1 is listed as on lustre's path, but it carries every job's traffic: only jobs that cross it.
    assert jobs(storage_fabric().affected_jobs("switch", "spine1", {}, T + 10)) == [("a", "spine")]


def test_a_compute_nodes_port_on_a_pool_leaf_stays_that_nodes() -> None:
    inv = storage_fabric()
    inv.apply(inventory_adapter.validate_python({"kind": "pool", "ts": T, "pool": "nfs", "switches": ["leaf2"]}))
    # leaf2 port 14 leads to n4 (job a): the node's own downlink, not the nfs pool's path.
    assert jobs(inv.affected_jobs("switch", "leaf2", {"port": "14"}, T + 10)) == [("a", "port")]
    # The whole leaf is also the pool's: job b (on leaf2, using nfs) is reached either way, once.
    assert jobs(inv.affected_jobs("switch", "leaf2", {}, T + 10)) == [("a", "switch"), ("b", "switch")]


def _fabric() -> InventoryIndex:
    """leaf1 (n1-n3), leaf2 (n4-n6), leaf3 (n7-n8), each with uplink port 49 to spine1 and 50 to spine2;
    spine1 and spine2 face leafN on port N, and spine1's port 9 goes up to core1. Jobs: a on n1, n2, n4
    (two leaves), c on n3 (leaf1 only), e on n5-n6 (leaf2 only), d on n7-n8 (leaf3 only)."""
    inv = InventoryIndex()
    events: list[dict[str, object]] = []
    for i in range(1, 9):
        leaf = f"leaf{1 if i <= 3 else 2 if i <= 6 else 3}"
        events.append({"kind": "link", "ts": T, "node": f"n{i}", "device": "mlx5_0", "port": "1", "switch": leaf,
                       "switch_port": str(10 + i)})
    for n in (1, 2, 3):
        events.append({"kind": "switch", "ts": T, "switch": f"leaf{n}", "tier": "leaf", "uplinks": ["spine1", "spine2"],
                       "ports": {"49": {"peer": "spine1"}, "50": {"peer": "spine2", "speed_gbps": 400}}})
    for s in (1, 2):
        ports: dict[str, object] = {str(n): {"peer": f"leaf{n}"} for n in (1, 2, 3)}
        if s == 1:
            ports["9"] = {"peer": "core1"}
        events.append({"kind": "switch", "ts": T, "switch": f"spine{s}", "tier": "spine",
                       "uplinks": ["core1"] if s == 1 else [], "ports": ports})
    for job, nodes in (("a", "n[1-2,4]"), ("c", "n3"), ("e", "n[5-6]"), ("d", "n[7-8]")):
        events.append({"kind": "job", "ts": T, "job_id": job, "state": "RUNNING", "nodes": nodes, "gpus_per_node": 8})
    for e in events:
        inv.apply(inventory_adapter.validate_python(e))
    return inv


#: (switch, port or None) -> the jobs an anomaly there reaches, with the relation.
LINK_TABLE = [
    (("leaf1", "11"), [("a", "port")]),                   # a host's port: its node's job
    (("leaf1", "49"), [("a", "uplink")]),                 # leaf1's uplink: a leaves leaf1, c never does
    (("leaf2", "50"), [("a", "uplink")]),                 # e sits on leaf2 alone
    (("spine1", "1"), [("a", "uplink")]),                 # the same cable from the spine's end
    (("spine2", "2"), [("a", "uplink")]),
    (("spine1", "3"), []),                                # leaf3's jobs stay on leaf3: nothing crosses
    (("leaf3", "49"), []),
    (("spine1", "9"), [("a", "spine")]),                  # spine-core: no leaf below, the spine's rule
    (("spine1", None), [("a", "spine")]),                 # the whole spine
    (("spine2", "42"), [("a", "spine")]),                 # a port the inventory does not describe
    (("leaf1", None), [("a", "switch"), ("c", "switch")]),
    (("leaf1", "77"), [("a", "switch"), ("c", "switch")]),  # undescribed leaf port: the whole leaf, as before
]


def test_a_leaf_spine_link_reaches_the_jobs_that_leave_the_leaf_below_it() -> None:
    inv = _fabric()
    got = [((sw, port), jobs(inv.affected_jobs("switch", sw, {} if port is None else {"port": port}, T + 10)))
           for (sw, port), _ in LINK_TABLE]
    assert got == LINK_TABLE


def test_the_nodes_behind_a_link_are_those_below_its_leaf() -> None:
    inv = _fabric()
    assert inv.leaf_below("spine2", "3") == inv.leaf_below("leaf3", "50") == "leaf3"
    assert inv.leaf_below("spine1", "9") is None and inv.leaf_below("leaf1", "77") is None
    assert inv.nodes_behind_link("spine2", "3") == ["n7", "n8"]
    assert inv.nodes_behind_link("leaf1", "12") == ["n2"]
    assert inv.nodes_behind_link("spine1", "9") == [f"n{i}" for i in range(1, 9)]
    # a later switch event is the whole description: without ports, spine1's port 1 is the whole spine again
    inv.apply(inventory_adapter.validate_python({"kind": "switch", "ts": T, "switch": "spine1", "tier": "spine"}))
    assert inv.leaf_below("spine1", "1") is None
    assert jobs(inv.affected_jobs("switch", "spine1", {"port": "1"}, T + 10)) == [("a", "spine")]


def test_the_jobs_also_at_risk_from_a_link_are_those_crossing_it_then_the_switch() -> None:
    """An alert's ``other_jobs``: for leaf1's uplink, a's neighbours are nobody on the link (c stays on
    leaf1) but c behind the same leaf; for spine1's port to leaf1, nobody: no other job crosses spine1."""
    inv = _fabric()
    assert inv.neighbours("a", "switch", "leaf1", {"port": "49"}, T + 10) == [("c", 8, "same_switch")]
    assert inv.neighbours("a", "switch", "spine1", {"port": "1"}, T + 10) == []
    assert inv.neighbours("c", "switch", "leaf1", {"port": "49"}, T + 10) == [("a", 24, "same_link")]
    assert inv.neighbours("c", "switch", "leaf1", {"port": "13"}, T + 10) == [("a", 24, "same_switch")]
