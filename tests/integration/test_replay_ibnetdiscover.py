"""Done-when of issue 20: a cluster described only by ``ibnetdiscover -p`` output and ``squeue --json``
produces the right job alerts end to end, through the real broker.

The seed incident (a symbol-error burst on leaf03 port 17 slowing ``llm-70b``) is replayed with its
whole inventory as real-format envelopes: the fabric (48 host ports, 6 leaves, 2 spines) rendered as
one ``ibnetdiscover -p`` ports report, each job as a ``squeue --json`` dump; no native link, switch or
pool event is in the file. Telemetry stays native. The alert must be the one the native inventory
gives: root cause leaf03 port 17, 256 GPUs on 32 nodes, causal order switch -> nccl -> gpu -> step.
"""

from __future__ import annotations

import asyncio
import io
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from lockstep.replay import replay
from lockstep.simulate import SCENARIOS, Simulator
from models.settings import LockstepSettings
from streams.formats import convert


def _guid(name: str) -> str:
    return f"0x{0xe41d2d0300000000 + zlib.crc32(name.encode()):016x}"


def ports_report(links: list[dict[str, Any]], switches: list[dict[str, Any]]) -> bytes:
    """``ibnetdiscover -p`` lines for the cabling the inventory events describe (each cable from both ends)."""
    lids: dict[str, int] = {}

    def lid(name: str) -> int:
        return lids.setdefault(name, len(lids) + 1)

    lines = []
    for lk in links:
        host, sw = f"{lk['node']} {lk['device']}", lk["switch"]
        ca, swg = _guid(host), _guid(sw)
        lines.append(f"CA {lid(host):>5} {lk['port']:>2} {ca} 4x NDR - SW {lid(sw):>5} {lk['switch_port']:>2} {swg} "
                     f"( '{host}' - '{sw}' )")
        lines.append(f"SW {lid(sw):>5} {lk['switch_port']:>2} {swg} 4x NDR - CA {lid(host):>5} {lk['port']:>2} {ca} "
                     f"( '{sw}' - '{host}' )")
    spine_port: dict[str, int] = {}
    for sw in switches:
        for i, up in enumerate(sw["uplinks"]):
            down = spine_port[up] = spine_port.get(up, 0) + 1
            lines.append(f"SW {lid(sw['switch']):>5} {33 + i:>2} {_guid(sw['switch'])} 4x NDR - SW {lid(up):>5} "
                         f"{down:>2} {_guid(up)} ( '{sw['switch']}' - '{up}' )")
    return ("\n".join(lines) + "\n").encode()


def squeue(event: dict[str, Any]) -> bytes:
    """``squeue --json`` (data_parser v0.0.44 shape) of one running job, its GPUs in gres_detail and
    tres_per_node only (as Slurm 25.11 reports ``--gpus-per-node``; ``tres_alloc_str`` names none)."""
    from models.inventory import expand_nodes

    nodes = expand_nodes(event["nodes"])
    per_node = event["gpus_per_node"]
    return orjson.dumps({"jobs": [{
        "job_id": event["job_id"], "name": event["name"], "user_name": "alice", "job_state": [event["state"]],
        "nodes": event["nodes"], "tres_alloc_str": f"cpu={len(nodes) * 64},node={len(nodes)},billing=64",
        "tres_per_node": f"gres/gpu:{per_node}",
        "gres_detail": [f"gpu:h100:{per_node}(IDX:0-{per_node - 1})"] * len(nodes),
        "start_time": {"set": True, "infinite": False, "number": event["ts"]}}],
        "meta": {"plugin": {"data_parser": "data_parser/v0.0.44"}}})


def write_replay(path: Path) -> dict[str, int]:
    sim = Simulator(SCENARIOS["seed-incident"], seed=7)
    messages = list(sim.run())
    inventory = [m for m in messages if m.topic == "inventory"]
    links = [m.value for m in inventory if m.value["kind"] == "link"]
    switches = [m.value for m in inventory if m.value["kind"] == "switch"]
    t_inventory = min(m.ts for m in inventory)
    counts = {"ibnetdiscover": 0, "slurm-squeue": 0, "native": 0}
    with open(path, "wb") as fh:
        report = ports_report(links, switches)
        fh.write(orjson.dumps({"carrier": "ibnetdiscover", "ts": t_inventory, "payload": report.decode()}) + b"\n")
        counts["ibnetdiscover"] += 1
        for m in inventory:
            if m.value["kind"] == "job":
                fh.write(orjson.dumps({"carrier": "slurm-squeue", "ts": m.ts,
                                       "payload": squeue(m.value).decode()}) + b"\n")
                counts["slurm-squeue"] += 1
        for m in messages:
            if m.topic == "inventory":
                continue  # links, switches, pools: only what the two real formats say
            for sample in m.value:
                fh.write(orjson.dumps(sample) + b"\n")
                counts["native"] += 1
    return counts


def test_the_rendered_report_converts_to_the_simulated_cabling_and_tiers() -> None:
    sim = Simulator(SCENARIOS["seed-incident"], seed=7)
    inventory = [m.value for m in sim.run() if m.topic == "inventory"]
    links = [e for e in inventory if e["kind"] == "link"]
    switches = [e for e in inventory if e["kind"] == "switch"]
    out = convert("ibnetdiscover", ports_report(links, switches), ts=1764502800.0)
    assert out.rejections == []
    got = {(e["node"], e["switch"], e["switch_port"]) for e in out.inventory if e["kind"] == "link"}
    assert got == {(e["node"], e["switch"], e["switch_port"]) for e in links}
    tiers = {e["switch"]: (e["tier"], e["uplinks"]) for e in out.inventory if e["kind"] == "switch"}
    assert {k: v for k, v in tiers.items() if v[0] == "leaf"} == {
        e["switch"]: ("leaf", sorted(e["uplinks"])) for e in switches if e["tier"] == "leaf"}
    assert {k for k, v in tiers.items() if v[0] == "spine"} == {u for e in switches for u in e["uplinks"]}


@pytest.mark.broker
def test_ibnetdiscover_and_squeue_alone_give_the_seed_incident_alert(tmp_path: Path,
                                                                     settings: LockstepSettings) -> None:
    path = tmp_path / "ibnetdiscover-seed.jsonl"
    counts = write_replay(path)
    assert counts["ibnetdiscover"] == 1 and counts["slurm-squeue"] == 3 and counts["native"] > 0
    out, err = io.StringIO(), io.StringIO()
    summary = asyncio.run(replay(settings, path, out, stderr=err, timeout_s=300))
    assert summary["bad_lines"] == 0, err.getvalue()[:2000]
    assert summary["envelopes"] == 4
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    key = "job_slowdown/llm-70b/network/switch/leaf03/port=17"
    assert [(a["status"], a["job_id"], a["dedup_key"]) for a in alerts] == [
        ("firing", "llm-70b", key), ("resolved", "llm-70b", key)]
    firing = alerts[0]
    assert firing["gpus"] == 256 and len(firing["nodes"]) == 32
    cause = firing["root_cause"]
    assert (cause["domain"], cause["source"], cause["labels"]) == ("network", "leaf03", {"port": "17"})
    assert list(dict.fromkeys(e["layer"] for e in firing["timeline"])) == ["switch", "nccl", "gpu", "step"]
