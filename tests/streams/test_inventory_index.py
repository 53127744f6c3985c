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
