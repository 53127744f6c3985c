"""``lockstep topology --k8s``: Kubernetes node labels for leaf, spine, core and fabric from the discovered
inventory, on the real Crux 3-tier fabric and a real ibnetdiscover capture; the manifest parses and every
label value is one Kubernetes takes."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from lockstep.cli import build_parser
from lockstep.commands.topology import topology_files
from streams.placement import (
    K8S_KEYS,
    TOPOGRAPH_KEYS,
    Fabric,
    is_k8s_label_value,
    k8s_label_value,
    k8s_node_labels,
)

from .helpers import FIXTURES, T0

CRUX = Path("/work/shared/data/topology/crux-topo.csv")


def _run(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["topology", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = topology_files(args, out, err, now=T0)
    return code, out.getvalue(), err.getvalue()


def _nodes(manifest: str) -> dict[str, dict[str, str]]:
    doc: Any = yaml.safe_load(manifest)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    out: dict[str, dict[str, str]] = {}
    for item in doc["items"]:
        assert item["apiVersion"] == "v1" and item["kind"] == "Node" and set(item) == {"apiVersion", "kind", "metadata"}
        assert set(item["metadata"]) == {"name", "labels"}
        out[item["metadata"]["name"]] = item["metadata"]["labels"]
    return out


def test_the_crux_fabric_labels_every_host_with_its_leaf_pod_and_core() -> None:
    code, out, err = _run("--k8s", str(CRUX))
    assert code == 0
    nodes = _nodes(out)
    assert len(nodes) == 847
    values: dict[str, Counter[str]] = {key: Counter() for key in K8S_KEYS.values()}
    for labels in nodes.values():
        assert set(labels) == set(K8S_KEYS.values())
        for key, value in labels.items():
            assert isinstance(value, str) and is_k8s_label_value(value), (key, value)
            values[key][value] += 1
    # 119 leaves (the Crux ASW under its PSW: P10/S14 -> P10_S14) in 3 pods under 1 core, one fabric
    assert len(values["lockstep.io/leaf"]) == 119 and max(values["lockstep.io/leaf"].values()) <= 8
    assert set(values["lockstep.io/spine"]) == {"P8", "P10", "P12"}
    assert values["lockstep.io/core"] == Counter({"G6": 847})
    assert values["lockstep.io/fabric"] == Counter({"infiniband": 847})
    # every leaf value is its spine's: a label never places a node under another pod's leaf
    assert all(labels["lockstep.io/leaf"].startswith(labels["lockstep.io/spine"] + "_") for labels in nodes.values())
    # the CSV's own rows agree with the labels
    rows = [line.split(",") for line in CRUX.read_text().splitlines()[1:]]
    for ip, dsw, psw, asw in rows[:50]:
        assert nodes[ip.lower()] == {"lockstep.io/leaf": f"{psw}_{asw}", "lockstep.io/spine": psw,
                                     "lockstep.io/core": dsw, "lockstep.io/fabric": "infiniband"}
    assert err.strip() == ("lockstep topology: 847 nodes labelled (lockstep.io/core 847, lockstep.io/fabric 847, "
                           "lockstep.io/leaf 847, lockstep.io/spine 847)")


def test_an_ibnetdiscover_capture_labels_its_cabled_hosts_and_topograph_keys_on_request() -> None:
    code, out, err = _run("--k8s", str(FIXTURES / "ibnetdiscover/ports.txt"))
    assert code == 0 and err.startswith("lockstep topology: 3 nodes labelled")
    under_l1 = {"lockstep.io/leaf": "ib-i1l1s01", "lockstep.io/spine": "ib-i1l2s01", "lockstep.io/fabric": "infiniband"}
    # ib-i4l1s01 has no cabled uplink in the capture: no spine is known, so none is written
    assert _nodes(out) == {"o0001": under_l1, "o0002": under_l1,
                           "p0001": {"lockstep.io/leaf": "ib-i4l1s01", "lockstep.io/fabric": "infiniband"}}
    code, out, _ = _run("--k8s", "--topograph", str(FIXTURES / "ibnetdiscover/ports.txt"))
    o1 = _nodes(out)["o0001"]
    assert code == 0 and o1[TOPOGRAPH_KEYS["leaf"]] == "ib-i1l1s01" and o1[TOPOGRAPH_KEYS["spine"]] == "ib-i1l2s01"
    assert TOPOGRAPH_KEYS["core"] not in o1 and "network.topology.nvidia.com/fabric" not in o1


def test_label_values_are_sanitised_and_two_switches_never_share_one() -> None:
    for name in ("P10/S14", "leaf 03", "-x-", "a" * 64, "///", "ü-leaf", "b" * 200):
        value = k8s_label_value(name)
        assert is_k8s_label_value(value) and value, (name, value)
    assert k8s_label_value("P10/S14") == "P10_S14" and k8s_label_value("a" * 63) == "a" * 63
    assert k8s_label_value("a" * 64) != k8s_label_value("a" * 65)
    assert not is_k8s_label_value("P10/S14") and not is_k8s_label_value("a" * 64) and not is_k8s_label_value("-a")
    # a/b and a_b would both be a_b: both get their hashed form, which differ
    fabric = Fabric({"n1": "a/b", "n2": "a_b", "N3": "c", "bad_name": "c"},
                    {"a/b": frozenset({"s1", "s2"}), "a_b": frozenset({"s1"}), "c": frozenset()}, {}, {})
    labels, left_out = k8s_node_labels(fabric)
    assert labels["n1"]["lockstep.io/leaf"] != labels["n2"]["lockstep.io/leaf"]
    assert {labels["n1"]["lockstep.io/leaf"][:3], labels["n2"]["lockstep.io/leaf"][:3]} == {"a_b"}
    assert labels["n1"]["lockstep.io/spine"] == "s1.s2" and labels["n2"]["lockstep.io/spine"] == "s1"
    assert labels["n3"] == {"lockstep.io/leaf": "c"}  # lowercased, as the kubelet names it; no spine known
    assert left_out == {"bad_name": "not a Kubernetes node name (a lowercase DNS subdomain)"}
