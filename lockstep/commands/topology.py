"""``lockstep topology FILE...``: what the fabric files teach Lockstep, and what is still missing.

Reads any inventory format (``ibnetdiscover -p``, ``iblinkinfo``, ``lldpctl -f json``/``json0``/
``keyvalue``, the Crux CSV, and ``squeue``/``sacct``/``scontrol show node|job`` output for the list of
nodes that should be cabled), through :func:`streams.formats.convert`, the code path the agents use, and prints:

- the switches by tier (leaf, spine, core), each leaf with its hosts and uplinks;
- the links learned (host NIC port -> leaf port);
- what is missing: nodes that jobs or node states name but no link cables, leaves with no known
  uplink (their spines are unknown, so a spine fault cannot reach their jobs), and rejections.

The format of each file is recognised from its content; ``--from FORMAT`` forces one for every
file. ``--source HOST`` names the host of ``lldpctl`` output (it does not name itself); use
``FILE@HOST`` to give one host per file. Exit code 0 when something was learned, 1 when nothing
was, 2 for usage errors.

``--slurm`` prints the fabric as a Slurm ``topology.conf`` (``topology/tree``: each leaf with its
nodes, each spine with its leaves, each core with its spines) and an advisory ``--exclude``
hostlist of the drained and down nodes; ``--place GPUS`` prints the best node sets for a request
(least leaf and pod spread, avoiding those nodes; ``--class``, ``--gpus-per-node``; docs/capacity.md).
``--k8s`` prints Kubernetes node labels for leaf, spine, core and fabric, as a ``v1`` ``List`` of
``Node`` objects for ``kubectl apply --server-side --field-manager=lockstep -f`` (``--topograph`` adds
NVIDIA Topograph's ``network.topology.nvidia.com/`` keys; docs/capacity.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from lockstep.safetext import safe_text

_INVENTORY_FORMATS = ("ibnetdiscover", "iblinkinfo", "lldpctl", "lldpctl-keyvalue", "crux-topology", "slurm-squeue",
                      "slurm-sacct", "slurm-nodes", "scontrol-nodes", "scontrol-jobs", "k8s-pods")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topology", help="print the fabric topology learned from files (ibnetdiscover, lldpctl, ...) "
                                        "and what is missing", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="fmt", metavar="FORMAT", choices=_INVENTORY_FORMATS,
                   help="force the format of every file (default: recognised from each file's content)")
    p.add_argument("--source", default=None, help="the host of lldpctl output (or FILE@HOST per file)")
    # placement (issue 22): the fabric as Slurm sees it, and where N GPUs should go
    p.add_argument("--slurm", action="store_true", help="print a Slurm topology.conf (topology/tree) of the fabric "
                   "instead, with an advisory --exclude hostlist of the drained and down nodes")
    p.add_argument("--place", type=int, metavar="GPUS", help="print the best node sets for GPUS GPUs instead "
                   "(least leaf and pod spread, away from drained and down nodes; docs/capacity.md)")
    p.add_argument("--k8s", action="store_true", help="print Kubernetes node labels (lockstep.io/leaf, spine, core, "
                   "fabric) as a YAML List of Node objects for kubectl apply --server-side instead")
    p.add_argument("--topograph", action="store_true", help="with --k8s, also write NVIDIA Topograph's "
                   "network.topology.nvidia.com/leaf, spine and core keys")
    p.add_argument("--class", dest="klass", default="tightly-coupled", choices=("tightly-coupled", "data-loader-heavy"),
                   help="the request's class for --place (default tightly-coupled)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs of a node no job record describes (default 8)")
    p.add_argument("files", nargs="+", metavar="FILE", help="input files")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return topology_files(args, sys.stdout, sys.stderr, now=time.time())


def detect_format(raw: bytes) -> str | None:
    """The inventory format of a file, from its first bytes.

    >>> detect_format(b"CA   134  1 0x7cfe 4x EDR - SW  1719 10 0x7c ( 'o1 HCA-1' - 'leaf' )")
    'ibnetdiscover'
    >>> detect_format(b'{"lldp": [{"interface": []}]}'), detect_format(b"ip,DSW,PSW,ASW\\n1,a,b,c")
    ('lldpctl', 'crux-topology')
    >>> detect_format(b"Switch: 0x0002c902004b2678 Infiniscale-IV Mellanox Technologies:\\n")
    'iblinkinfo'
    >>> detect_format(b"lldp.eth0.via=LLDP\\nlldp.eth0.chassis.name=leaf01\\n")
    'lldpctl-keyvalue'
    """
    head = raw.lstrip()[:4096]
    text = head.decode("utf-8", "replace")
    first = text.split("\n", 1)[0]
    if first.startswith(("CA: ", "Switch: 0x")) or "==(" in first:
        return "iblinkinfo"
    if first[:3] in ("CA ", "SW ", "RT ") or "\nSW " in text or "\nCA " in text:
        return "ibnetdiscover"
    if text.startswith("{") or text.startswith("["):
        if '"lldp"' in text:
            return "lldpctl"
        if '"nodes"' in text and '"jobs"' not in text:
            return "slurm-nodes"
        if '"jobs"' in text:
            return "slurm-sacct" if '"tres"' in text and '"allocated"' in text else "slurm-squeue"
        if '"kind"' in text and "Pod" in text:
            return "k8s-pods"
        return None
    if first.startswith("lldp.") and "=" in first:
        return "lldpctl-keyvalue"
    if "NodeName=" in first:
        return "scontrol-nodes"
    if "JobId=" in first:
        return "scontrol-jobs"
    if "ip" in first.split(",") and "ASW" in first:
        return "crux-topology"
    return None


def topology_files(args: argparse.Namespace, out: TextIO, err: TextIO, *, now: float) -> int:
    """The command body, streams and the time as inputs (tests call it directly)."""
    from models.inventory import inventory_adapter
    from streams.formats import convert
    from streams.inventory import InventoryIndex

    index = InventoryIndex()
    expected: set[str] = set()
    rejected = 0
    learned = 0
    for item in args.files:
        name, _, host = item.partition("@") if "@" in item and not Path(item).is_file() else (item, "", "")
        path = Path(name)
        if not path.is_file():
            print(f"lockstep topology: {safe_text(name)}: no such file", file=err)
            return 2
        raw = path.read_bytes()
        fmt = args.fmt or detect_format(raw)
        if fmt is None:
            print(f"lockstep topology: {safe_text(name)}: format not recognised (give --from)", file=err)
            return 2
        result = convert(fmt, raw, default_source=host or args.source, ts=now)
        for rejection in result.rejections:
            print(f"{safe_text(name)}: {safe_text(rejection)}", file=err)
        rejected += len(result.rejections)
        for doc in result.inventory:
            event = inventory_adapter.validate_python(doc)
            index.apply(event)
            learned += 1
            if doc["kind"] == "job":
                expected.update(doc["nodes"])
            elif doc["kind"] == "node":
                expected.add(doc["node"])
    if getattr(args, "k8s", False):
        return _k8s(args, index, out, err) if learned else 1
    if getattr(args, "slurm", False) or getattr(args, "place", None) is not None:
        return _placement(args, index, out, err) if learned else 1
    _report(index, expected, rejected, out)
    return 0 if learned else 1


def _placement(args: argparse.Namespace, index: object, out: TextIO, err: TextIO) -> int:
    """``--slurm`` and ``--place`` (streams.placement): the drained and down nodes are avoided."""
    from streams.inventory import InventoryIndex
    from streams.placement import Fabric, PlacementError, Request, avoid_from, exclude_hostlist, place, slurm_topology

    assert isinstance(index, InventoryIndex)
    fabric = Fabric.from_inventory(index, args.gpus_per_node)
    avoid = avoid_from(index)
    if args.slurm:
        print(slurm_topology(fabric, avoid), file=out)
        return 0
    try:
        request = Request(args.place, args.klass)
    except PlacementError as exc:
        print(f"lockstep topology: {exc}", file=err)
        return 2
    result = place(fabric, request, avoid)
    print(f"placement of {request.gpus} GPUs ({request.klass}) on {len(fabric.leaf_of)} nodes under "
          f"{len(fabric.leaves)} leaves: the least spread it allows is {result.min_leaves} "
          f"lea{'ves' if result.min_leaves != 1 else 'f'}; {result.free_gpus} GPUs free and healthy", file=out)
    if not result.candidates:
        print(f"  no candidate: {result.reason}", file=out)
        return 1
    for i, c in enumerate(result.candidates, start=1):
        print(f"  {i}. {safe_text(c.reason)}; leaves {safe_text(', '.join(c.leaves))}", file=out)
        print(f"     nodes {safe_text(c.to_json()['hostlist'])}", file=out)
    if avoid.nodes:
        print(f"  avoided: sbatch --exclude={safe_text(exclude_hostlist(avoid))}", file=out)
    return 0


def _k8s(args: argparse.Namespace, index: object, out: TextIO, err: TextIO) -> int:
    """``--k8s``: the labels on stdout; the nodes left out (names Kubernetes cannot take) and the label
    counts on stderr, so stdout stays a manifest."""
    from streams.inventory import InventoryIndex
    from streams.placement import Fabric, k8s_node_labels, k8s_nodes_yaml, node_fabrics

    assert isinstance(index, InventoryIndex)
    labels, left_out = k8s_node_labels(Fabric.from_inventory(index), node_fabrics(index),
                                       topograph=args.topograph)
    for node, why in left_out.items():
        print(f"lockstep topology: {safe_text(node)} left out: {why}", file=err)
    if not labels:
        print("lockstep topology: no node to label", file=err)
        return 1
    out.write(k8s_nodes_yaml(labels))
    counts: dict[str, int] = {}
    for mine in labels.values():
        for key in mine:
            counts[key] = counts.get(key, 0) + 1
    print(f"lockstep topology: {len(labels)} nodes labelled "
          f"({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})", file=err)
    return 0


def _rate(gbps: float | None, sep: str = " at ") -> str:
    """``sep`` and the line rate, or nothing when unknown.

    >>> _rate(200.0), _rate(None), _rate(53.125, ", ")
    (' at 200 Gb/s', '', ', 53.125 Gb/s')
    """
    return "" if gbps is None else f"{sep}{gbps:g} Gb/s"


def _report(index: object, expected: set[str], rejected: int, out: TextIO) -> None:
    from streams.inventory import InventoryIndex

    assert isinstance(index, InventoryIndex)
    by_tier: dict[str, list[str]] = {"leaf": [], "spine": [], "core": []}
    for switch, tier in sorted(index.tiers.items()):
        by_tier.setdefault(tier, []).append(switch)
    cabled = {link.node for link in index.links.values()}
    print(f"lockstep topology: {len(index.links)} links from {len(cabled)} nodes; {len(index.tiers)} switches "
          f"({len(by_tier['leaf'])} leaf, {len(by_tier['spine'])} spine, {len(by_tier['core'])} core)", file=out)
    for tier in ("leaf", "spine", "core"):
        for switch in by_tier[tier]:
            hosts = sorted(index.by_switch.get(switch, ()))
            ups = sorted(index.uplinks.get(switch, ()))
            line = f"  {tier:<5}  {switch}"
            if tier == "leaf":
                line += f"  {len(hosts)} node{'s' if len(hosts) != 1 else ''}"
                if hosts:
                    line += f" ({', '.join(hosts[:8])}{', ...' if len(hosts) > 8 else ''})"
            line += f"  uplinks: {', '.join(ups) if ups else 'none'}"
            print(line, file=out)
            ports = sorted(index.switch_ports.get(switch, {}).items(), key=lambda pd: (len(pd[0]), pd[0]))
            if ports:
                print("         ports: " + ", ".join(f"{p} -> {d.peer or '?'}{_rate(d.speed_gbps)}" for p, d in ports),
                      file=out)
    print("links:", file=out)
    for link in sorted(index.links.values(), key=lambda lk: (lk.node, lk.device, lk.port)):
        print(f"  {link.node} {link.device} port {link.port} -> {link.switch} port {link.switch_port} "
              f"({link.fabric}{_rate(link.speed_gbps, ', ')})", file=out)
    missing_nodes = sorted(expected - cabled)
    lonely_leaves = [s for s in by_tier["leaf"] if not index.uplinks.get(s)]
    unhealthy = sorted((st for st in index.node_states.values() if not st.healthy), key=lambda st: st.node)
    print("missing:", file=out)
    print(f"  nodes with no link: {', '.join(missing_nodes) if missing_nodes else 'none'}", file=out)
    print(f"  leaves with no known uplink: {', '.join(lonely_leaves) if lonely_leaves else 'none'}", file=out)
    unrated = sum(1 for link in index.links.values() if link.speed_gbps is None)
    print(f"  links with no line rate (the fabric report's bandwidth question needs it): {unrated or 'none'}",
          file=out)
    if unhealthy:
        print("node states:", file=out)
        for st in unhealthy:
            print(f"  {st.describe()}", file=out)
    print(f"rejected records: {rejected}", file=out)
