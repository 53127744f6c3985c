"""Placement advice for 256 GPUs on a 1,000-node 3-tier fabric (target: under 100 ms), and on the real
Crux fabric (847 hosts).

    python benchmarks/bench_placement.py [--nodes 1000] [--gpus 256] [--runs 200]

The synthetic fabric: 16 nodes of 8 GPUs per leaf, 8 leaves per pod under 4 spines of their own, every
spine under 2 cores; built as inventory events through :class:`streams.inventory.InventoryIndex` and
:meth:`streams.placement.Fabric.from_inventory`, as a worker would. Cases:

- ``empty``: every node free;
- ``fragmented``: 60% of the nodes busy (random, seeded), 20 drained, 10 degraded ports, 2 degraded
  spines, one contended pool on 4 leaves (so no leaf, and few pods, can take the request);
- the same two on the Crux topology (``/work/shared/data/topology/crux-topo.csv``) when it is there.

Each case prints the median, p99 and max of ``place()`` over ``--runs`` calls, and once the cost of
building the fabric and the avoid set from the inventory. Wall clock on this machine, one thread.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from models.inventory import LinkEvent, NodeEvent, PoolEvent, SwitchEvent, inventory_adapter
from streams.inventory import InventoryIndex
from streams.placement import Avoid, Fabric, Request, avoid_from, place

T0 = 1_764_502_800.0
CRUX = Path("/work/shared/data/topology/crux-topo.csv")


def synthetic(nodes: int, per_leaf: int = 16, leaves_per_pod: int = 8, spines_per_pod: int = 4) -> InventoryIndex:
    inv = InventoryIndex()
    for i in range(nodes):
        leaf = i // per_leaf
        inv.apply(LinkEvent(ts=T0, node=f"n{i:04d}", device="mlx5_0", port="1", switch=f"leaf{leaf:03d}",
                            switch_port=str(i % per_leaf + 1)))
    n_leaves = -(-nodes // per_leaf)
    for leaf in range(n_leaves):
        pod = leaf // leaves_per_pod
        inv.apply(SwitchEvent(ts=T0, switch=f"leaf{leaf:03d}", tier="leaf",
                              uplinks=[f"spine{pod:02d}-{s}" for s in range(spines_per_pod)]))
    for pod in range(-(-n_leaves // leaves_per_pod)):
        for s in range(spines_per_pod):
            inv.apply(SwitchEvent(ts=T0, switch=f"spine{pod:02d}-{s}", tier="spine", uplinks=["core0", "core1"]))
    return inv


def crux() -> InventoryIndex | None:
    if not CRUX.is_file():
        return None
    from streams.formats import convert

    inv = InventoryIndex()
    for doc in convert("crux-topology", CRUX.read_bytes(), ts=T0).inventory:
        inv.apply(inventory_adapter.validate_python(doc))
    return inv


def fragment(inv: InventoryIndex, seed: int = 7) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Drain 20 nodes, pick 10 degraded ports and 2 degraded spines, a contended pool on 4 leaves, and 60%
    of the nodes busy: (open entities, contended pools, busy nodes)."""
    rnd = random.Random(seed)
    nodes = sorted(inv.node_leaves)
    for node in rnd.sample(nodes, 20):
        inv.apply(NodeEvent(ts=T0, node=node, state="drained", reason="bench"))
    links = sorted(inv.links.values(), key=lambda lk: (lk.node, lk.device, lk.port))
    entities = [("port", f"{lk.switch}:{lk.switch_port}") for lk in rnd.sample(links, 10)]
    spines = sorted({s for leaf in {lk.switch for lk in links} for s in inv.uplinks.get(leaf, ())})
    entities += [("spine", s) for s in rnd.sample(spines, min(2, len(spines)))]
    leaves = sorted({lk.switch for lk in links})
    inv.apply(PoolEvent(ts=T0, pool="lustre-a", switches=rnd.sample(leaves, 4)))
    return entities, ["lustre-a"], rnd.sample(nodes, int(len(nodes) * 0.6))


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    fn()  # warm
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))], ms[-1]


def case(name: str, inv: InventoryIndex, gpus: int, runs: int, fragmented: bool) -> None:
    t = time.perf_counter()
    if fragmented:
        entities, pools, busy = fragment(inv)
        avoid = avoid_from(inv, entities, pools, busy)
    else:
        avoid = Avoid()
    fabric = Fabric.from_inventory(inv)
    build_ms = (time.perf_counter() - t) * 1000
    request = Request(gpus)
    result = place(fabric, request, avoid)
    med, p99, worst = timed(lambda: place(fabric, request, avoid), runs)
    best = result.candidates[0].reason if result.candidates else result.reason
    print(f"{name:<28} {len(fabric.leaf_of):>5} nodes {len(fabric.leaves):>4} leaves  place({gpus}): median "
          f"{med:6.2f} ms  p99 {p99:6.2f} ms  max {worst:6.2f} ms  (fabric+avoid {build_ms:6.1f} ms once)")
    print(f"{'':<28} best: {best}; min leaves {result.min_leaves}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    case(f"synthetic {args.nodes}, empty", synthetic(args.nodes), args.gpus, args.runs, False)
    case(f"synthetic {args.nodes}, fragmented", synthetic(args.nodes), args.gpus, args.runs, True)
    real = crux()
    if real is not None:
        case("crux 847, empty", real, args.gpus, args.runs, False)
        real = crux()
        assert real is not None
        case("crux 847, fragmented", real, args.gpus, args.runs, True)


if __name__ == "__main__":
    main()
