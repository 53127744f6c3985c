"""Fabric health and the placement answer (streams/fabric_health.py) on a drawn two-leaf fabric.

    l1 (leaf, uplink s1): a b c d on ports 1-4        l2 (leaf, uplink s1): e f g h on ports 1-4

Incidents are alerts as the correlate agent writes them; times in seconds from T0.
"""

from __future__ import annotations

from typing import Any

import pytest

from models.inventory import JobEvent, LinkEvent, NodeEvent, SwitchEvent
from models.timeutil import format_ts
from streams.fabric_health import FLAP_INCIDENTS, health, health_records, open_entities, placement
from streams.inventory import InventoryIndex
from streams.ledger import Ledger, entry_of
from streams.placement import PlacementError

T0 = 1_764_502_800.0
TIERS = {"l1": "leaf", "l2": "leaf", "s1": "spine"}


def fabric() -> InventoryIndex:
    inv = InventoryIndex()
    for leaf, nodes in (("l1", "abcd"), ("l2", "efgh")):
        for i, node in enumerate(nodes):
            inv.apply(LinkEvent(ts=T0, node=node, device="mlx5_0", port="1", switch=leaf, switch_port=str(i + 1)))
        inv.apply(SwitchEvent(ts=T0, switch=leaf, tier="leaf", uplinks=["s1"]))
    return inv


def alert(aid: str, job: str, start: float, end: float | None, *, layer: str = "switch", source: str = "l1",
          labels: dict[str, str] | None = None, gpus: int = 16, ratio: float = 2.0) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "alert_id": aid, "type": "job_slowdown", "status": "resolved" if end is not None else "firing",
        "job_id": job, "gpus": gpus, "started_at": format_ts(T0 + start), "detected_at": format_ts(T0 + start),
        "symptom": {"baseline": 1.0, "value": ratio, "ratio": ratio, "onset": format_ts(T0 + start)},
        "root_cause": {"domain": "network", "layer": layer, "source": source,
                       "labels": {"port": "2"} if labels is None else labels},
        "timeline": [{"ts": format_ts(T0 + start - 5), "layer": layer, "source": source, "labels": labels or {},
                      "metric": "SymbolErrorCounter", "value": 40.0, "meaning": "link_errors"}],
        "summary": f"{job} slowed",
    }
    if end is not None:
        rec["resolved_at"] = format_ts(T0 + end)
    return rec


def ledger_of(*alerts: dict[str, Any]) -> Ledger:
    return Ledger([e for a in alerts if (e := entry_of(a, TIERS)) is not None])


def test_an_open_port_incident_is_degraded_costs_and_suggests_draining_the_node_behind_it() -> None:
    inv = fabric()
    a = alert("a1", "j1", 100, None)  # l1 port 2 (node b), 16 GPUs at half speed, still firing
    h = health(ledger_of(a), {"a1": a}, inv, now=T0 + 700, window_s=3600)
    port, leaf = h["entities"]
    assert (port["kind"], port["id"], port["state"], port["nodes"]) == ("port", "l1:2", "degraded", ["b"])
    assert (leaf["kind"], leaf["id"], leaf["nodes"]) == ("leaf", "l1", ["a", "b", "c", "d"])
    assert port["gpu_seconds"] == 16 * 0.5 * 600 and port["at_stake_gpus"] == 8.0 and port["open"] == 1
    ev = port["evidence"][0]
    assert ev["alert_id"] == "a1" and ev["status"] == "firing" and ev["first_mover"]["metric"] == "SymbolErrorCounter"
    assert ev["root_cause"]["labels"] == {"port": "2"} and ev["gpu_seconds"] == 4800.0
    drain = {(d["kind"], d["id"]): d for d in h["drain"]}
    assert drain[("port", "l1:2")]["hostlist"] == "b" and drain[("port", "l1:2")]["action"] == "drain"
    assert drain[("port", "l1:2")]["command"] == 'scontrol update NodeName=b State=DRAIN Reason="lockstep: port l1:2"'
    assert "8 GPU-hours lost per hour" in drain[("port", "l1:2")]["reason"]
    assert h["exclude"] == "a,b,c,d" and h["degraded"] == 2


def test_a_resolved_incident_is_recovered_with_no_drain_until_the_entity_flaps() -> None:
    inv = fabric()
    once = alert("a1", "j1", 100, 160)
    h = health(ledger_of(once), {"a1": once}, inv, now=T0 + 700, window_s=3600)
    assert [(e["id"], e["state"], e["gpu_seconds"], e["at_stake_gpus"]) for e in h["entities"]] == [
        ("l1:2", "recovered", 480.0, 0.0), ("l1", "recovered", 480.0, 0.0)]
    assert h["drain"] == [] and h["exclude"] == "" and h["degraded"] == 0
    twice = [once, alert("a2", "j2", 300, 330)]
    assert FLAP_INCIDENTS == 2
    h = health(ledger_of(*twice), {a["alert_id"]: a for a in twice}, inv, now=T0 + 700, window_s=3600)
    assert [(d["id"], d["action"]) for d in h["drain"]] == [("l1:2", "drain"), ("l1", "drain")]
    assert h["drain"][0]["reason"] == "port l1:2 flaps: 2 incidents in the window, recovered each time"
    # out of the window, nothing is listed
    assert health(ledger_of(*twice), {}, inv, now=T0 + 9000, window_s=3600)["entities"] == []


def test_a_degraded_spine_is_inspected_not_drained_and_non_fabric_causes_are_left_out() -> None:
    inv = fabric()
    spine = alert("s", "j1", 100, None, source="s1", labels={})
    pool = alert("p", "j2", 100, None, layer="storage", source="lustre-a", labels={})
    h = health(ledger_of(spine, pool), {}, inv, now=T0 + 200, window_s=3600)
    assert [(e["kind"], e["id"]) for e in h["entities"]] == [("spine", "s1")]
    assert [(d["action"], d["nodes"], d["command"]) for d in h["drain"]] == [("inspect", [], None)]


def test_health_records_are_one_per_fabric_entity_keyed_by_it() -> None:
    inv = fabric()
    led = ledger_of(alert("a1", "j1", 100, None))
    (entry,) = led.entries.values()
    recs = health_records(entry, inv)
    assert [k for k, _ in recs] == ["port:l1:2", "leaf:l1"]
    assert recs[0][1]["state"] == "degraded" and recs[0][1]["nodes"] == ["b"] and recs[0][1]["at_stake_gpus"] == 8.0
    (done,) = ledger_of(alert("a1", "j1", 100, 160)).entries.values()
    assert [(r["state"], r["gpu_seconds"], r["at_stake_gpus"]) for _, r in health_records(done, inv)] == [
        ("recovered", 480.0, 0.0)] * 2
    (nic,) = ledger_of(alert("n", "j1", 1, None, layer="nic", source="c", labels={"device": "mlx5_0"})).entries.values()
    assert [(k, r["nodes"]) for k, r in health_records(nic, inv)] == [("nic:c:mlx5_0", ["c"])]


def test_placement_leaves_out_busy_drained_and_degraded_nodes_and_gives_the_exclude_hostlist() -> None:
    inv = fabric()
    inv.apply(NodeEvent(ts=T0, node="e", state="drained", reason="ECC"))
    inv.apply(JobEvent(ts=T0, job_id="j9", state="RUNNING", nodes=["a"], gpus_per_node=8))
    led = ledger_of(alert("a1", "j1", 100, None))  # l1 port 2: node b behind it, and l1 itself degraded
    assert open_entities(led) == [("leaf", "l1"), ("port", "l1:2")]
    out = placement(inv, led, 24, "tightly-coupled", T0 + 200)
    first = out["candidates"][0]
    # l2 has f, g, h free (e drained); l1 has c, d (a busy, b behind the port) and is degraded
    assert first["nodes"] == ["f", "g", "h"] and first["leaves"] == ["l2"] and first["degraded"] == []
    assert out["exclude"] == "b,e" and out["busy"] == 1 and out["degraded_switches"] == {
        "l1": "leaf l1 has an open incident"}
    assert out["avoided"] == {"a": "busy", "b": "behind degraded port l1:2", "e": 'e is drained ("ECC")'}
    # 40 GPUs: only 5 nodes are free; the one candidate crosses the degraded leaf and says so
    wide = placement(inv, led, 40, "tightly-coupled", T0 + 200)["candidates"][0]
    assert sorted(wide["nodes"]) == ["c", "d", "f", "g", "h"] and "crosses degraded l1" in wide["reason"]
    short = placement(inv, led, 48, "tightly-coupled", T0 + 200)
    assert short["candidates"] == [] and short["reason"] == "only 40 GPUs are free and healthy; 48 asked"
    with pytest.raises(PlacementError, match="class must be one of"):
        placement(inv, led, 8, "bursty", T0)


def test_the_costs_are_the_rollups_figures() -> None:
    alerts = [alert("a1", "j1", 100, 400), alert("a2", "j1", 200, 300, ratio=4.0),
              alert("a3", "j2", 50, None, source="l2", labels={"port": "1"})]
    led = ledger_of(*alerts)
    costs = led.costs("entity", T0 + 500, 3600)
    rows = led.rollup("entity", T0 + 500, 3600)["rows"]
    assert {(r["kind"], r["id"]): r["gpu_seconds"] for r in rows} == {k: round(v, 3) for k, v in costs.items()}
    assert costs[("port", "l1:2")] == 16 * 0.5 * 200 + 16 * 0.75 * 100  # a2 is charged while it loses more
