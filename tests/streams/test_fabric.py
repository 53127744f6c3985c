"""The fabric report (streams/fabric.py) on small topologies whose answers can be checked by hand.

The cluster below: InfiniBand leaves ``leafA`` (n1, n2) and ``leafB`` (n3, n4), both under
``spine1``, every link 100 Gb/s; a RoCE leaf ``leafR`` (r1, 200 Gb/s) under ``spine2``. Jobs: ``j1``
on n1 and n3 (two leaves where one would do), ``j2`` on n2, ``jr`` on r1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from models.inventory import inventory_adapter
from streams.fabric import FabricConfig, FabricRollup, fabric_report, least_groups, trending_worse
from streams.formats.registry import convert
from streams.inventory import InventoryIndex
from streams.readstore import ReadStore

T0 = 1_764_500_000.0
DAY = 86_400.0
#: PortXmitData counts 4-byte words: words per second for ``share`` of a 100 Gb/s link.
WORDS_100G = 100e9 / 8 / 4


def inventory() -> InventoryIndex:
    inv = InventoryIndex()
    events: list[dict[str, Any]] = []
    for node, leaf, port, fabric, speed in (("n1", "leafA", "1", "infiniband", 100), ("n2", "leafA", "2", "infiniband",
                                            100), ("n3", "leafB", "1", "infiniband", 100),
                                            ("n4", "leafB", "2", "infiniband", 100), ("r1", "leafR", "1", "roce", 200)):
        events.append({"kind": "link", "ts": T0 - 60, "node": node, "device": "mlx5_0", "port": "1", "switch": leaf,
                       "switch_port": port, "fabric": fabric, "speed_gbps": speed})
    events += [{"kind": "switch", "ts": T0 - 60, "switch": leaf, "tier": "leaf", "uplinks": [spine]}
               for leaf, spine in (("leafA", "spine1"), ("leafB", "spine1"), ("leafR", "spine2"))]
    events += [{"kind": "job", "ts": T0 - 60, "job_id": job, "state": "RUNNING", "nodes": nodes, "gpus_per_node": 8}
               for job, nodes in (("j1", ["n1", "n3"]), ("j2", ["n2"]), ("jr", ["r1"]))]
    for e in events:
        inv.apply(inventory_adapter.validate_python(e))
    return inv


def counters(roll: FabricRollup, layer: str, source: str, labels: dict[str, str], per_s: dict[str, float],
             seconds: int, start: float = T0) -> None:
    """Counters rising by ``per_s`` every second for ``seconds + 1`` samples (so ``seconds`` rates)."""
    for i in range(seconds + 1):
        for metric, rate in per_s.items():
            roll.fold(layer, source, metric, labels, start + i, rate * i, "counter")


def group(report: dict[str, Any], question: str, fabric: str, tier: str) -> dict[str, Any]:
    found = [g for g in report["questions"][question]["groups"] if (g["fabric"], g["tier"]) == (fabric, tier)]
    assert len(found) == 1, report["questions"][question]["groups"]
    return found[0]


NIC = {"device": "mlx5_0", "port": "1"}


@pytest.fixture
def cluster() -> tuple[FabricRollup, InventoryIndex, ReadStore]:
    roll, inv, store = FabricRollup(), inventory(), ReadStore()
    # NICs n1-n3 send at half their line rate; n4 never reports; r1 (RoCE, 200 Gb/s) at a quarter.
    for node in ("n1", "n2", "n3"):
        counters(roll, "nic", node, NIC, {"PortXmitData": 0.5 * WORDS_100G, "PortXmitWait": 10.0}, 10)
    counters(roll, "nic", "r1", NIC, {"PortXmitData": 0.5 * WORDS_100G, "np_cnp_sent": 4.0}, 10)
    # leafA port 1 (n1's downlink) at 95 % of line rate; port 2 congested 100x the others.
    counters(roll, "switch", "leafA", {"port": "1"}, {"PortXmitData": 0.95 * WORDS_100G, "PortXmitWait": 10.0}, 10)
    counters(roll, "switch", "leafA", {"port": "2"}, {"PortXmitData": 0.2 * WORDS_100G, "PortXmitWait": 1000.0}, 10)
    counters(roll, "switch", "leafB", {"port": "1"}, {"PortXmitData": 0.2 * WORDS_100G, "PortXmitWait": 10.0}, 10)
    counters(roll, "switch", "leafB", {"port": "2"}, {"PortXmitData": 0.2 * WORDS_100G, "PortXmitWait": 10.0,
                                                      "SymbolErrorCounter": 2.0}, 10)
    # j1's collectives ran during the first five seconds of saturation.
    for s in range(1, 6):
        store.apply("timelines", {"type": "timeline", "job_id": "j1", "ts": T0 + s, "lanes": {
            "collective_time": {"n": 2, "p50": 12000.0, "p99": 12500.0, "min": 11000.0, "max": 13000.0}}})
    return roll, inv, store


def test_utilisation_is_measured_against_each_links_line_rate(cluster: Any) -> None:
    roll, inv, store = cluster
    r = fabric_report(roll, inv, store, T0 + 10)
    host = group(r, "bandwidth", "infiniband", "host")
    assert (host["p50"], host["p99"], host["links_measured"]) == (0.5, 0.5, 3)
    assert host["throughput_gbps_p50"] == 50.0
    roce = group(r, "bandwidth", "roce", "host")
    assert roce["value"] == 0.25  # 50 Gb/s on a 200 Gb/s link
    leaf = group(r, "bandwidth", "infiniband", "leaf")
    assert leaf["value"] == pytest.approx(0.95, abs=1e-3)
    assert leaf["links_saturating_in_collectives"] == 1
    first = leaf["evidence"][0]
    assert (first["link"], first["seconds_saturated"], first["during_collectives"]) == ("leafA port 1", 10, {"j1": 5})
    # The saturating link is listed once (its plain row is not repeated below it), the others by p99.
    assert [e["link"] for e in leaf["evidence"]] == ["leafA port 1", "leafA port 2", "leafB port 1", "leafB port 2"]


def test_a_link_without_a_line_rate_gives_throughput_but_no_utilisation() -> None:
    roll, inv = FabricRollup(), InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "link", "ts": T0, "node": "n1", "device": "mlx5_0",
                                                 "port": "1", "switch": "leafA", "switch_port": "1"}))
    counters(roll, "nic", "n1", NIC, {"PortXmitData": 0.5 * WORDS_100G}, 5)
    g = group(fabric_report(roll, inv, ReadStore(), T0 + 5), "bandwidth", "infiniband", "host")
    assert (g["value"], g["throughput_gbps_p99"], g["links_without_line_rate"]) == (None, 50.0, 1)
    assert g["evidence"] == [{"link": "n1 mlx5_0 port 1", "speed_gbps": None, "p50": None, "p99": None,
                              "gbps_p99": 50.0}]  # which links the line rate is missing for


def test_a_switch_to_switch_port_is_measured_against_the_switch_events_port_speed(cluster: Any) -> None:
    """leafA's port 49 (an uplink, no host behind it) and spine1's port 1: rated by their switch events'
    ``ports``; leafB's uplink port 49 has none and is counted without a line rate."""
    roll, inv, store = cluster
    for e in ({"kind": "switch", "ts": T0, "switch": "leafA", "tier": "leaf", "uplinks": ["spine1"],
               "ports": {"49": {"peer": "spine1", "speed_gbps": 400}}},
              {"kind": "switch", "ts": T0, "switch": "spine1", "tier": "spine",
               "ports": {"1": {"peer": "leafA", "speed_gbps": 400}}}):
        inv.apply(inventory_adapter.validate_python(e))
    for switch in ("leafA", "leafB", "spine1"):
        port = "1" if switch == "spine1" else "49"
        counters(roll, "switch", switch, {"port": port}, {"PortXmitData": WORDS_100G}, 10)  # 100 Gb/s
    r = fabric_report(roll, inv, store, T0 + 10)
    spine = group(r, "bandwidth", "infiniband", "spine")
    assert (spine["value"], spine["links_without_line_rate"]) == (0.25, 0)
    leaf = group(r, "bandwidth", "infiniband", "leaf")
    assert leaf["links_measured"] == 6 and leaf["links_without_line_rate"] == 1
    rows = {e["link"]: e for e in leaf["evidence"]}
    assert (rows["leafA port 49"]["speed_gbps"], rows["leafA port 49"]["p50"]) == (400.0, 0.25)
    assert (rows["leafB port 49"]["speed_gbps"], rows["leafB port 49"]["gbps_p99"]) == (None, 100.0)
    assert leaf["evidence"][-1]["link"] == "leafB port 49"  # the unrated after the rated


def test_congestion_rates_by_kind_and_the_hotspot(cluster: Any) -> None:
    roll, inv, store = cluster
    r = fabric_report(roll, inv, store, T0 + 10)
    leaf = group(r, "congestion", "infiniband", "leaf")
    # (10 + 1000 + 10 + 10) XmitWait ticks per second over four ports of 10 s each
    assert leaf["by_kind"] == {"xmit_wait": pytest.approx(1030 / 4)}
    assert leaf["median_per_port"] == 10.0 and leaf["hotspots"] == 1
    assert [(h["link"], h["x_median"]) for h in leaf["evidence"]] == [("leafA port 2", 100.0)]
    assert group(r, "congestion", "roce", "host")["by_kind"] == {"cnp": 4.0}


def test_error_rates_and_a_link_trending_worse_over_days(cluster: Any) -> None:
    roll, inv, store = cluster
    # n2's NIC: 2 symbol errors on day 1, 5 on day 2, 9 on day 3 (never falling, last >= 2x first).
    for day, errors in ((1, 2.0), (2, 5.0), (3, 9.0)):
        roll.fold("nic", "n2", "SymbolErrorCounter", NIC, T0 + day * DAY, 0.0, "counter")
        roll.fold("nic", "n2", "SymbolErrorCounter", NIC, T0 + day * DAY + 1, errors, "counter")
    r = fabric_report(roll, inv, store, T0 + 3 * DAY + 1)
    leaf = group(r, "loss", "infiniband", "leaf")
    assert leaf["by_meaning"]["link_errors"] == pytest.approx(20 / 40)  # 2/s on one port, four ports of 10 s
    assert leaf["ports_with_errors"] == 1 and leaf["evidence"][0]["link"] == "leafB port 2"
    host = group(r, "loss", "infiniband", "host")
    assert host["trending_worse"] == 1
    trend = [e for e in host["evidence"] if e.get("trend") == "worse"]
    assert [d["errors"] for d in trend[0]["daily"]] == [2.0, 5.0, 9.0]
    assert trending_worse({1: 9.0, 2: 5.0}) is None


def test_coverage_counts_the_inventory_ports_heard_from_and_lists_the_silent(cluster: Any) -> None:
    roll, inv, store = cluster
    r = fabric_report(roll, inv, store, T0 + 10)
    host = group(r, "telemetry", "infiniband", "host")
    assert (host["value"], host["expected"], host["reporting"], host["silent"]) == (0.75, 4, 3, ["n4"])
    assert host["evidence"][0] == {"silent_exporter": "n4", "last_seen_age_s": None}
    # leafR's port (r1's downlink) never reported and spine1/spine2 sent nothing
    assert group(r, "telemetry", "roce", "leaf")["value"] == 0.0
    # spines are counted per switch: spine1 (above the InfiniBand leaves) sent nothing, then one port
    spine = group(r, "telemetry", "infiniband", "spine")
    assert (spine["value"], spine["expected"], spine["silent"]) == (0.0, 1, ["spine1"])
    roll.fold("switch", "spine1", "PortXmitWait", {"port": "7"}, T0 + 10, 1.0, "counter")
    spine = group(fabric_report(roll, inv, store, T0 + 10), "telemetry", "infiniband", "spine")
    assert (spine["value"], spine["reporting"], spine["silent"]) == (1.0, 1, [])
    # 200 s later every port is older than stale_s (120 s): nothing reports
    late = group(fabric_report(roll, inv, store, T0 + 210), "telemetry", "infiniband", "host")
    assert (late["value"], late["last_seen_age_s_max"], late["silent"]) == (0.0, 200.0, ["n1", "n2", "n3", "n4"])


def test_placement_against_the_fewest_leaves_a_job_size_allows(cluster: Any) -> None:
    roll, inv, store = cluster
    r = fabric_report(roll, inv, store, T0 + 10)
    leaf = group(r, "placement", "infiniband", "leaf")
    assert (leaf["value"], leaf["jobs"], leaf["mean_excess"]) == (0.5, 2, 0.5)
    j1 = next(j for j in leaf["evidence"] if j["job_id"] == "j1")
    assert (j1["leaves"], j1["least_leaves"], j1["spine_groups"], j1["least_spine_groups"]) == (2, 1, 1, 1)
    assert group(r, "placement", "infiniband", "spine")["value"] == 1.0
    assert least_groups([8, 8, 8, 4], 20) == 3


def test_diagnosability_from_the_alerts(cluster: Any) -> None:
    roll, inv, store = cluster
    for i, (delay, cause) in enumerate(((8.0, {"domain": "network", "layer": "switch", "source": "leafA",
                                                "labels": {"port": "2"}, "first_seen": "2025-11-30T11:00:00Z"}),
                                        (12.0, {"domain": "unknown", "layer": None, "source": None}))):
        store.apply("alerts", {"alert_id": f"a{i}", "status": "firing", "type": "job_slowdown", "job_id": "j1",
                               "nodes": ["n1", "n3"], "started_at": "2025-11-30T11:00:02Z",
                               "detected_at": f"2025-11-30T11:00:{2 + delay:04.1f}Z".replace(".0Z", "Z"),
                               "root_cause": cause})
    r = fabric_report(roll, inv, store, T0 + 10)
    every = group(r, "diagnosability", "infiniband", "all")
    assert (every["value"], every["incidents"], every["share_named"]) == (10.0, 2, 0.5)
    first = every["evidence"][0]
    assert (first["first_mover"], first["first_mover_lead_s"]) == ("switch leafA port 2", 2.0)
    assert group(r, "diagnosability", "infiniband", "leaf")["value"] == 8.0


def test_the_rollup_skips_resets_duplicates_and_late_samples_and_stays_bounded() -> None:
    roll = FabricRollup(FabricConfig(recent=4, max_entities=2))
    for ts, v in ((1.0, 0.0), (2.0, 100.0), (2.0, 100.0), (1.5, 50.0), (3.0, 10.0), (4.0, 30.0)):
        roll.fold("switch", "s", "PortXmitWait", {"port": "1"}, ts, v, "counter")
    e = roll.entities[("switch", "s", "", "1")]
    assert e.congestion == {"xmit_wait": 120.0}  # 100, then the reset to 10, then +20
    counters(roll, "nic", "n1", NIC, {"PortXmitData": 1.0}, 9)
    ts, _ = roll.entities[("nic", "n1", "mlx5_0", "1")].tx_rates()
    assert ts.tolist() == [T0 + 6, T0 + 7, T0 + 8, T0 + 9]  # the ring keeps the last four, oldest first
    assert not roll.fold("nic", "n2", "PortXmitData", NIC, T0, 1.0, "counter") and roll.refused == 1
    assert not roll.fold("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", {}, T0, 1.0, None)


def test_fold_message_reads_a_telemetry_batch_as_the_topic_carries_it() -> None:
    roll = FabricRollup()
    batch = [{"ts": T0 + i, "layer": "nic", "source": "n1", "metric": "PortXmitData", "value": i * 10.0,
              "labels": NIC, "kind": "counter"} for i in range(3)]
    batch.append({"ts": T0, "layer": "gpu", "source": "n1", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 1.0})
    assert roll.fold_message(orjson.dumps(batch)) == 3
    assert roll.fold_message(b"not json") == 0


CRUX = Path("/work/shared/data/topology/crux-topo.csv")


@pytest.mark.skipif(not CRUX.exists(), reason="the shared Crux topology is not on this machine")
def test_placement_on_the_real_three_tier_crux_topology() -> None:
    out = convert("crux-topology", CRUX.read_bytes(), ts=T0)
    inv = InventoryIndex()
    for e in out.inventory:
        inv.apply(inventory_adapter.validate_python(e))
    per_leaf: dict[str, list[str]] = {}
    for link in inv.links.values():
        per_leaf.setdefault(link.switch, []).append(link.node)
    biggest = max(per_leaf, key=lambda leaf: (len(per_leaf[leaf]), leaf))
    packed = sorted(per_leaf[biggest])[:8]
    spread = [sorted(nodes)[0] for _, nodes in sorted(per_leaf.items())[:8]]
    for job, nodes in (("packed", packed), ("spread", spread)):
        inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0, "job_id": job, "state": "RUNNING",
                                                     "nodes": nodes, "gpus_per_node": 8}))
    r = fabric_report(FabricRollup(), inv, ReadStore(), T0 + 1)
    rows = {j["job_id"]: j for g in r["questions"]["placement"]["groups"] if g["tier"] == "leaf"
            for j in g["evidence"]}
    assert len(per_leaf[biggest]) >= 8  # one leaf holds eight hosts: that is the least
    assert (rows["packed"]["leaves"], rows["packed"]["least_leaves"]) == (1, 1)
    assert (rows["spread"]["leaves"], rows["spread"]["extra_leaves"]) == (8, 7)
