"""Placement advice: node sets for a request of N GPUs that keep the job under as few spine groups and
leaves as the fabric allows, away from what is degraded; and the fabric as a Slurm ``topology.conf``.

A synchronous job runs at the pace of its slowest path, so eight GPUs in one server beat eight
spread over distant nodes, and nodes under one leaf beat the same number across a spine. The
advice is a ranked list of candidates, each with its reason:

1. **one leaf** holding the whole request (no spine hop at all), best fit first (the leaf left with
   the fewest free GPUs, so whole leaves stay free for the next big job);
2. else **one pod** (the leaves sharing a set of spines: a Crux PSW, a fat-tree pod), fewest leaves;
3. else **across pods**, fewest pods, then fewest leaves.

What is avoided (:class:`Avoid`): nodes are left out when the scheduler drained them or they are
down, when they sit behind a degraded link (a switch port or NIC with an open incident), or are
busy; a degraded switch (a leaf or spine with an open incident of its own) and the switches on a
contended storage pool's path are not left out but rank a candidate lower. The ranking key per
request class:

- ``tightly-coupled`` (default): degraded switches crossed, pods, leaves, contended switches, waste;
- ``data-loader-heavy``: degraded switches, contended switches, pods, leaves, waste (storage
  traffic matters more than the spread).

Pure: the fabric, the request and what to avoid are arguments (:meth:`Fabric.from_inventory`,
:func:`avoid_from` build them from the inventory and the ledger's open incidents).

The same fabric is also written for schedulers: a Slurm ``topology.conf`` (:func:`slurm_topology`)
and Kubernetes node labels (:func:`k8s_node_labels`, :func:`k8s_nodes_yaml`).

>>> fabric = Fabric({"n1": "l1", "n2": "l1", "n3": "l2"}, {"l1": frozenset({"s1"}), "l2": frozenset({"s1"})},
...                 {}, {"n1": 8, "n2": 8, "n3": 8})
>>> [(c.nodes, c.reason) for c in place(fabric, Request(16)).candidates]
[(('n1', 'n2'), '16 GPUs on 2 nodes under 1 leaf (l1): no spine hop')]
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import hostlist
import yaml

from streams.inventory import InventoryIndex

CLASSES = ("tightly-coupled", "data-loader-heavy")
_SLURM_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


class PlacementError(ValueError):
    """A request that cannot be asked (no GPUs, an unknown class)."""


@dataclass(frozen=True, slots=True)
class Fabric:
    """Nodes under leaves under spines under cores, and the GPUs each node offers."""

    leaf_of: Mapping[str, str]
    spines_of: Mapping[str, frozenset[str]]
    cores_of: Mapping[str, frozenset[str]]
    gpus: Mapping[str, int]

    @classmethod
    def from_inventory(cls, inv: InventoryIndex, gpus_per_node: int = 8) -> Fabric:
        """The fabric the inventory discovered. A node cabled to several leaves (one per rail) is placed
        under the first by name (in a rail-optimised fabric each rail's leaf holds the same nodes). GPUs
        per node: what a job record said for the node, else ``gpus_per_node``."""
        leaf_of = {node: sorted(leaves)[0] for node, leaves in inv.node_leaves.items() if leaves}
        spines = {leaf: frozenset(inv.uplinks.get(leaf, ())) for leaf in set(leaf_of.values())}
        cores = {sp: frozenset(inv.uplinks.get(sp, ())) for sps in spines.values() for sp in sps}
        known: dict[str, int] = {}
        for infos in inv.jobs.values():
            for info in infos:
                if not info.gpus_unknown and info.gpus_per_node:
                    for node in info.nodes:
                        known[node] = info.gpus_per_node
        return cls(leaf_of, spines, cores, {n: known.get(n, gpus_per_node) for n in leaf_of})

    @property
    def leaves(self) -> dict[str, list[str]]:
        """leaf -> its nodes, by name."""
        out: dict[str, list[str]] = {}
        for node in sorted(self.leaf_of):
            out.setdefault(self.leaf_of[node], []).append(node)
        return out


@dataclass(frozen=True, slots=True)
class Request:
    """``gpus`` GPUs of one class (:data:`CLASSES`)."""

    gpus: int
    klass: str = "tightly-coupled"

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise PlacementError("a request needs at least one GPU")
        if self.klass not in CLASSES:
            raise PlacementError(f"class must be one of {', '.join(CLASSES)}, not {self.klass[:40]!r}")


@dataclass(frozen=True, slots=True)
class Avoid:
    """What placement keeps away from, each with its reason: ``nodes`` are left out; ``degraded`` switches
    and ``contended`` switches (on a contended pool's path) rank a candidate lower."""

    nodes: Mapping[str, str] = field(default_factory=dict)
    degraded: Mapping[str, str] = field(default_factory=dict)
    contended: Mapping[str, str] = field(default_factory=dict)


def avoid_from(inv: InventoryIndex, open_entities: Iterable[tuple[str, str]] = (),
               contended_pools: Iterable[str] = (), busy: Iterable[str] = ()) -> Avoid:
    """:class:`Avoid` from the inventory (drained, down, failed nodes), the entities of open incidents
    (``(kind, id)`` as :mod:`streams.ledger` names them: ``port`` ``leaf03:17``, ``nic`` ``gpu014:mlx5_0``,
    ``gpu``, ``node``, ``leaf``, ``spine``, ``core``, ``switch``), contended pools and busy nodes."""
    nodes: dict[str, str] = {}
    degraded: dict[str, str] = {}
    contended: dict[str, str] = {}
    for st in sorted(inv.node_states.values(), key=lambda s: s.node):
        if not st.healthy:
            nodes[st.node] = st.describe()
    for kind, ident in open_entities:
        if kind == "port":
            switch, _, port = ident.rpartition(":")
            for node in inv.nodes_behind_port(switch, port):
                nodes.setdefault(node, f"behind degraded port {ident}")
        elif kind in ("nic", "gpu"):
            nodes.setdefault(ident.partition(":")[0], f"degraded {kind} {ident}")
        elif kind == "node":
            nodes.setdefault(ident, f"degraded node {ident}")
        elif kind in ("leaf", "spine", "core", "switch"):
            degraded.setdefault(ident, f"{kind} {ident} has an open incident")
    for pool in contended_pools:
        for switch in sorted(inv.pool_switches.get(pool, ())):
            contended.setdefault(switch, f"on contended pool {pool}'s path")
    for node in busy:
        nodes.setdefault(node, "busy")
    return Avoid(nodes, degraded, contended)


@dataclass(frozen=True, slots=True)
class Candidate:
    nodes: tuple[str, ...]
    gpus: int
    leaves: tuple[str, ...]
    spines: tuple[str, ...]
    pods: int
    degraded: tuple[str, ...]
    contended: tuple[str, ...]
    waste: int  # free GPUs left on the leaves used
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "hostlist": str(hostlist.collect_hostlist(list(self.nodes))),
                "gpus": self.gpus, "leaves": list(self.leaves), "spines": list(self.spines), "pods": self.pods,
                "degraded": list(self.degraded), "contended": list(self.contended), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Placement:
    request: Request
    candidates: list[Candidate]
    #: the fewest leaves the request could ever take on this fabric (every node free and healthy)
    min_leaves: int
    free_gpus: int
    avoided: Mapping[str, str]
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"gpus": self.request.gpus, "class": self.request.klass, "min_leaves": self.min_leaves,
                "free_gpus": self.free_gpus, "avoided": dict(sorted(self.avoided.items())), "reason": self.reason,
                "candidates": [dict(c.to_json(), rank=i + 1) for i, c in enumerate(self.candidates)]}


@dataclass(slots=True)
class _Leaf:
    name: str
    nodes: list[str]
    gpus: list[int]
    spines: frozenset[str]
    degraded: tuple[str, ...]
    contended: tuple[str, ...]

    @property
    def free(self) -> int:
        return sum(self.gpus)

    @property
    def pod(self) -> frozenset[str]:
        """The spine set it shares with its pod; a leaf with no known uplink is a pod of its own (nothing
        says it shares a spine with anything)."""
        return self.spines or frozenset({f"?{self.name}"})

    def take(self, need: int) -> tuple[list[str], int]:
        """Nodes in order until ``need`` GPUs are covered (or all of them)."""
        taken, got = [], 0
        for node, g in zip(self.nodes, self.gpus, strict=True):
            if got >= need:
                break
            taken.append(node)
            got += g
        return taken, got


def place(fabric: Fabric, request: Request, avoid: Avoid | None = None, limit: int = 3) -> Placement:
    """Up to ``limit`` candidates for ``request``, best first (see the module docstring)."""
    avoid = avoid or Avoid()
    need = request.gpus
    by_leaf = fabric.leaves
    caps = sorted((sum(fabric.gpus.get(n, 0) for n in nodes) for nodes in by_leaf.values()), reverse=True)
    min_leaves, acc = 0, 0
    for cap in caps:
        if acc >= need:
            break
        acc, min_leaves = acc + cap, min_leaves + 1
    leaves: list[_Leaf] = []
    for name, nodes in by_leaf.items():
        ok = [n for n in nodes if n not in avoid.nodes and fabric.gpus.get(n, 0) > 0]
        if not ok:
            continue
        spines = fabric.spines_of.get(name, frozenset())
        path = (name, *sorted(spines))
        leaves.append(_Leaf(name, ok, [fabric.gpus[n] for n in ok], spines,
                            tuple(s for s in path if s in avoid.degraded),
                            tuple(s for s in path if s in avoid.contended)))
    avoided = {n: why for n, why in avoid.nodes.items() if n in fabric.leaf_of}
    free = sum(leaf.free for leaf in leaves)
    if free < need:
        return Placement(request, [], min_leaves, free, avoided,
                         f"only {free} GPUs are free and healthy; {need} asked")
    found: list[Candidate] = []
    # 1. one leaf
    for leaf in leaves:
        if leaf.free >= need:
            nodes, got = leaf.take(need)
            found.append(_candidate([leaf], nodes, got, need))
    # 2. one pod: the leaves sharing a spine set, fullest (and healthiest) first
    pods: dict[frozenset[str], list[_Leaf]] = {}
    for leaf in leaves:
        pods.setdefault(leaf.pod, []).append(leaf)
    # (every tier is asked: a leaf that fits may be degraded or contended, and the ranking decides)
    for members in pods.values():
        if sum(m.free for m in members) >= need:
            found.append(_fill(_order(members, request), need))
    # 3. across pods: the fullest pods first; then starting from each of the next ones, for choice
    ordered = sorted(pods.values(), key=lambda ms: (_pod_penalty(ms, request), -sum(m.free for m in ms),
                                                    min(m.name for m in ms)))
    for start in range(min(len(ordered), limit)):
        chosen: list[_Leaf] = []
        got = 0
        for members in ordered[start:] + ordered[:start]:
            if got >= need:
                break
            chosen += _order(members, request)
            got += sum(m.free for m in members)
        if got >= need:
            found.append(_fill(chosen, need))
    ranked = sorted({c.nodes: c for c in found}.values(), key=lambda c: _key(c, request))
    return Placement(request, ranked[:limit], min_leaves, free, avoided)


def _order(members: list[_Leaf], request: Request) -> list[_Leaf]:
    return sorted(members, key=lambda m: (*_penalty(m.degraded, m.contended, request), -m.free, m.name))


def _penalty(degraded: tuple[str, ...], contended: tuple[str, ...], request: Request) -> tuple[int, int]:
    return len(degraded), len(contended) if request.klass == "data-loader-heavy" else 0


def _pod_penalty(members: list[_Leaf], request: Request) -> tuple[int, int]:
    return min(_penalty(m.degraded, m.contended, request) for m in members)


def _fill(ordered: list[_Leaf], need: int) -> Candidate:
    """Whole leaves in order, the last one partly, until ``need`` GPUs."""
    chosen: list[_Leaf] = []
    nodes: list[str] = []
    got = 0
    for leaf in ordered:
        if got >= need:
            break
        taken, g = leaf.take(need - got)
        chosen.append(leaf)
        nodes += taken
        got += g
    return _candidate(chosen, nodes, got, need)


def _candidate(leaves: list[_Leaf], nodes: list[str], got: int, need: int) -> Candidate:
    pods = len({leaf.pod for leaf in leaves})
    spines = sorted({s for leaf in leaves for s in leaf.spines}) if len(leaves) > 1 else []
    degraded = sorted({s for leaf in leaves for s in leaf.degraded if s == leaf.name or len(leaves) > 1})
    contended = sorted({s for leaf in leaves for s in leaf.contended if s == leaf.name or len(leaves) > 1})
    names = [leaf.name for leaf in leaves]
    where = (f"under 1 leaf ({names[0]}): no spine hop" if len(leaves) == 1 else
             f"under {len(leaves)} leaves of 1 pod (spines {', '.join(spines) or 'unknown'})" if pods == 1 else
             f"under {len(leaves)} leaves in {pods} pods")
    reason = f"{need} GPUs on {len(nodes)} node{'s' if len(nodes) != 1 else ''} {where}"
    if degraded:
        reason += f"; crosses degraded {', '.join(degraded)}"
    if contended:
        reason += f"; shares {', '.join(contended)} with a contended pool"
    waste = sum(leaf.free for leaf in leaves) - got
    return Candidate(tuple(nodes), got, tuple(names), tuple(spines), 0 if len(leaves) == 1 else pods,
                     tuple(degraded), tuple(contended), waste, reason)


def _key(c: Candidate, request: Request) -> tuple[Any, ...]:
    if request.klass == "data-loader-heavy":
        return (len(c.degraded), len(c.contended), c.pods, len(c.leaves), c.waste, c.nodes)
    return (len(c.degraded), c.pods, len(c.leaves), len(c.contended), c.waste, c.nodes)


# -- Slurm ------------------------------------------------------------------------------------------
def slurm_name(name: str) -> str:
    """A switch name Slurm takes (letters, digits, ``_.-``): ``P10/S14`` -> ``P10_S14``."""
    return _SLURM_NAME.sub("_", name)


def slurm_topology(fabric: Fabric, avoid: Avoid | None = None) -> str:
    """``topology.conf`` for Slurm's ``topology/tree`` plugin: each leaf with its nodes, each spine with
    its leaves, each core with its spines (hostlist expressions), and, when ``avoid`` names nodes, an
    advisory ``--exclude`` hostlist as a comment.

    >>> print(slurm_topology(Fabric({"gpu1": "P1/S1", "gpu2": "P1/S1"}, {"P1/S1": frozenset({"P1"})}, {}, {})))
    # topology.conf (topology/tree) generated by lockstep from the discovered inventory
    SwitchName=P1_S1 Nodes=gpu[1-2]
    SwitchName=P1 Switches=P1_S1
    """
    lines = ["# topology.conf (topology/tree) generated by lockstep from the discovered inventory"]
    for leaf, nodes in sorted(fabric.leaves.items()):
        lines.append(f"SwitchName={slurm_name(leaf)} Nodes={hostlist.collect_hostlist(nodes)}")
    below: dict[str, set[str]] = {}
    for leaf in fabric.leaves:
        for spine in fabric.spines_of.get(leaf, ()):
            below.setdefault(spine, set()).add(slurm_name(leaf))
    for spine in sorted(below):
        lines.append(f"SwitchName={slurm_name(spine)} Switches={hostlist.collect_hostlist(sorted(below[spine]))}")
    above: dict[str, set[str]] = {}
    for spine in below:
        for core in fabric.cores_of.get(spine, ()):
            above.setdefault(core, set()).add(slurm_name(spine))
    for core in sorted(above):
        lines.append(f"SwitchName={slurm_name(core)} Switches={hostlist.collect_hostlist(sorted(above[core]))}")
    if avoid is not None and avoid.nodes:
        lines.append(f"# advisory: sbatch --exclude={exclude_hostlist(avoid)}")
    return "\n".join(lines)


def exclude_hostlist(avoid: Avoid) -> str:
    """The nodes to keep jobs off, as a Slurm hostlist (``sbatch --exclude=...``)."""
    return str(hostlist.collect_hostlist(sorted(avoid.nodes))) if avoid.nodes else ""


def leaf_spread(fabric: Fabric, nodes: Iterable[str]) -> tuple[int, int]:
    """``(leaves, pods)`` a set of nodes spans: what placement quality is measured by."""
    leaves = {fabric.leaf_of[n] for n in nodes if n in fabric.leaf_of}
    return len(leaves), len({fabric.spines_of.get(leaf) or frozenset({f"?{leaf}"}) for leaf in leaves})



# -- Kubernetes -------------------------------------------------------------------------------------
#: the label keys Lockstep writes (its own prefix: nothing else owns these keys)
K8S_KEYS = {"leaf": "lockstep.io/leaf", "spine": "lockstep.io/spine", "core": "lockstep.io/core",
            "fabric": "lockstep.io/fabric"}
#: NVIDIA Topograph's default tree keys (its Kubernetes engine; KAI Scheduler and Kueue read them)
TOPOGRAPH_KEYS = {"leaf": "network.topology.nvidia.com/leaf", "spine": "network.topology.nvidia.com/spine",
                  "core": "network.topology.nvidia.com/core"}
_K8S_BAD = re.compile(r"[^A-Za-z0-9_.\-]")
_K8S_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_K8S_NODE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_k8s_label_value(value: str) -> bool:
    """Whether Kubernetes takes ``value`` as a label value: at most 63 characters of ``[A-Za-z0-9_.-]``,
    alphanumeric at both ends (or empty)."""
    return len(value) <= 63 and _K8S_VALUE.fullmatch(value) is not None


def k8s_label_value(name: str) -> str:
    """A switch or pod name as a label value: characters Kubernetes does not take become ``_``, the
    ends are trimmed to alphanumerics, and a name still too long (or left empty) is cut to 52 characters
    and given 10 hex digits of its SHA-1, so distinct long names stay distinct.

    >>> k8s_label_value("P10/S14"), k8s_label_value("-leaf 03-")
    ('P10_S14', 'leaf_03')
    >>> long = k8s_label_value("x" * 70); len(long), long[-11:]
    (63, '-bbaad84b42')
    """
    value = _K8S_BAD.sub("_", name).strip("_.-")
    return value if value and len(value) <= 63 else _hashed(name)


def _label_values(names: Iterable[str]) -> dict[str, str]:
    """Each name's label value; two names that would share one (``a/b`` and ``a_b``) both get the
    hashed form, so a label never merges two switches."""
    out = {n: k8s_label_value(n) for n in sorted(set(names))}
    seen: dict[str, int] = {}
    for value in out.values():
        seen[value] = seen.get(value, 0) + 1
    for name, value in out.items():
        if seen[value] > 1:
            out[name] = _hashed(name)
    return out


def _hashed(name: str) -> str:
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    head = _K8S_BAD.sub("_", name).strip("_.-")[:52].rstrip("_.-")
    return f"{head}-{digest}" if head else f"h{digest}"


def _group(switches: frozenset[str]) -> str:
    """One name for a set of switches (a leaf's spines: its pod): the names by order, joined by ``.``."""
    return ".".join(sorted(switches))


def k8s_node_labels(fabric: Fabric, fabrics: Mapping[str, Iterable[str]] | None = None, *,
                    topograph: bool = False) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Node name -> its labels (:data:`K8S_KEYS`, and :data:`TOPOGRAPH_KEYS` too when ``topograph``), and
    the nodes left out with the reason.

    - ``leaf``: the node's leaf; ``spine``: the leaf's spine, or, when several serve it, their names
      joined by ``.`` (the pod: nodes sharing the value share every spine); ``core``: the same one tier
      up; ``fabric``: the fabrics of the node's links (``infiniband``, ``roce``; several joined by
      ``.``). A tier the inventory does not know is not written.
    - Values go through :func:`k8s_label_value` (``P10/S14`` -> ``P10_S14``).
    - Kubernetes names nodes by their lowercased hostname (the kubelet's default), so the inventory's
      names are lowercased; a name that is not then a DNS subdomain cannot be a node and is left out.

    >>> labels, _ = k8s_node_labels(Fabric({"GPU1": "P1/S1"}, {"P1/S1": frozenset({"P1"})}, {}, {}),
    ...                             {"GPU1": ["infiniband"]})
    >>> labels
    {'gpu1': {'lockstep.io/leaf': 'P1_S1', 'lockstep.io/spine': 'P1', 'lockstep.io/fabric': 'infiniband'}}
    """
    keys = [K8S_KEYS, TOPOGRAPH_KEYS] if topograph else [K8S_KEYS]
    spine_of = {leaf: _group(sps) for leaf, sps in fabric.spines_of.items() if sps}
    core_of: dict[str, str] = {}
    for leaf, sps in fabric.spines_of.items():
        cores = frozenset(c for sp in sps for c in fabric.cores_of.get(sp, ()))
        if cores:
            core_of[leaf] = _group(cores)
    values = _label_values([*fabric.leaf_of.values(), *spine_of.values(), *core_of.values()])
    labels: dict[str, dict[str, str]] = {}
    left_out: dict[str, str] = {}
    for node in sorted(fabric.leaf_of):
        name = node.lower()
        if len(name) > 253 or not _K8S_NODE.fullmatch(name):
            left_out[node] = "not a Kubernetes node name (a lowercase DNS subdomain)"
            continue
        if name in labels:
            left_out[node] = f"another inventory node is also {name} once lowercased"
            continue
        leaf = fabric.leaf_of[node]
        tiers = {"leaf": values[leaf]}
        if leaf in spine_of:
            tiers["spine"] = values[spine_of[leaf]]
        if leaf in core_of:
            tiers["core"] = values[core_of[leaf]]
        kinds = sorted(set((fabrics or {}).get(node, ())))
        if kinds:
            tiers["fabric"] = k8s_label_value(".".join(kinds))
        labels[name] = {table[tier]: value for table in keys for tier, value in tiers.items() if tier in table}
    return labels, left_out


def node_fabrics(inv: InventoryIndex) -> dict[str, set[str]]:
    """node -> the fabrics of its links (``infiniband``, ``roce``), from the inventory."""
    out: dict[str, set[str]] = {}
    for link in inv.links.values():
        out.setdefault(link.node, set()).add(link.fabric)
    return out


def k8s_nodes_yaml(labels: Mapping[str, Mapping[str, str]]) -> str:
    """The labels as a Kubernetes ``v1`` ``List`` of ``Node`` objects carrying only ``metadata.name`` and
    ``metadata.labels``: for ``kubectl apply --server-side --field-manager=lockstep -f FILE``, which
    sets these labels and owns nothing else of the nodes.

    >>> print(k8s_nodes_yaml({"gpu1": {"lockstep.io/leaf": "P1_S1"}}), end="")
    apiVersion: v1
    kind: List
    items:
    - apiVersion: v1
      kind: Node
      metadata:
        name: gpu1
        labels:
          lockstep.io/leaf: P1_S1
    """
    doc = {"apiVersion": "v1", "kind": "List",
           "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels[name])}}
                     for name in sorted(labels)]}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
