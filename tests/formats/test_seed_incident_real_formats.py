"""The seed incident with its switch, GPU and NCCL telemetry and its jobs in real formats.

The simulator's messages for those layers are rendered as a Prometheus scrape of switch port
counters, dcgm-exporter scrapes, NCCL Inspector JSON and ``squeue --json``, converted back with
:func:`streams.formats.convert` (the agents' path) and run through the pure pipeline next to the
native host/step/storage samples and links. The alert must be the one the native replay gives
(tests/streams/test_scenarios_local.py asserts the same facts for the native run).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from lockstep.local import LocalRunner
from lockstep.simulate import SCENARIOS, Simulator
from streams.formats import AdapterState, convert


def _switch_scrape(samples: list[dict[str, Any]]) -> bytes:
    lines = []
    typed: set[str] = set()
    for s in samples:
        if s["metric"] not in typed:
            typed.add(s["metric"])
            lines.append(f"# TYPE {s['metric']} counter")
        lines.append(f'{s["metric"]}{{port="{s["labels"]["port"]}"}} {int(s["value"])} {round(s["ts"] * 1000)}')
    return ("\n".join(lines) + "\n").encode()


def _dcgm_scrape(node: str, samples: list[dict[str, Any]]) -> bytes:
    lines = []
    for s in samples:
        labels = {"gpu": s["labels"]["gpu"], "UUID": s["labels"]["UUID"], "Hostname": node,
                  "hpc_job": s["labels"].get("hpc_job", "")}
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{s['metric']}{{{text}}} {s['value']} {round(s['ts'] * 1000)}")
    return ("\n".join(lines) + "\n").encode()


def _inspector_json(node: str, samples: list[dict[str, Any]]) -> bytes:
    out = []
    for s in samples:
        out.append(orjson.dumps({
            "header": {"id": "0x7f8c496ae9f661", "rank": 0, "n_ranks": 256, "nnodes": 32},
            "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": round(s["ts"] * 1e6),
                         "hostname": node, "pid": 4242},
            "coll_perf": {"coll": s["labels"]["coll"], "coll_sn": 1, "coll_msg_size_bytes": 1 << 30,
                          "coll_exec_time_us": s["value"]}}))
    return b"\n".join(out) + b"\n"


def _squeue(event: dict[str, Any], gpus: int) -> bytes:
    from models.inventory import expand_nodes

    n = len(expand_nodes(event["nodes"]))
    return orjson.dumps({"jobs": [{
        "job_id": event["job_id"], "name": event["name"], "user_name": "alice", "job_state": [event["state"]],
        "nodes": event["nodes"], "tres_alloc_str": f"cpu={n * 64},node={n},gres/gpu={gpus * n}",
        "licenses": ",".join(f"{p}:1" for p in event["storage"]),
        "start_time": {"set": True, "infinite": False, "number": event["ts"]}}]})


@pytest.fixture(scope="module")
def mixed_result():
    sim = Simulator(SCENARIOS["seed-incident"], seed=7)
    runner = LocalRunner(4)
    state: dict[str, AdapterState] = {}
    converted = {"switch": 0, "gpu": 0, "nccl": 0, "job": 0}

    def feed(layer: str, key: str, fmt: str, raw: bytes, headers: dict[str, str], second: float,
             ingest: float | None) -> None:
        out = convert(fmt, raw, headers=headers, state=state.setdefault(f"{fmt}/{key}", AdapterState()),
                      ingest_ts=ingest)
        assert out.rejections == [], out.rejections[:3]
        converted[layer] += len(out.samples)
        runner.message(layer, key, orjson.dumps(out.samples), second)

    for msg in sim.run():
        second = float(int(msg.ts))
        if msg.topic == "inventory":
            if msg.value["kind"] == "job":
                out = convert("slurm-squeue", _squeue(msg.value, msg.value["gpus_per_node"]))
                assert out.rejections == [] and len(out.inventory) == 1
                converted["job"] += 1
                runner.inventory_event(out.inventory[0])
            else:
                runner.inventory_event(msg.value)
            continue
        samples = msg.value
        ingest = samples[0].get("ingest_ts") if samples else None
        if msg.topic == "switch":
            feed("switch", msg.key, "prometheus", _switch_scrape(samples), {"source": msg.key, "layer": "switch"},
                 second, ingest)
        elif msg.topic == "gpu":
            feed("gpu", msg.key, "dcgm-exporter", _dcgm_scrape(msg.key, samples), {}, second, ingest)
        elif msg.topic == "nccl":
            feed("nccl", msg.key, "nccl-inspector", _inspector_json(msg.key, samples),
                 {"job_id": samples[0]["labels"]["job_id"]}, second, ingest)
        else:
            runner.message(msg.topic, msg.key, orjson.dumps(samples), second)
    result = runner.finish()
    return result, converted


def test_every_layer_went_through_a_real_format(mixed_result):
    _, converted = mixed_result
    assert all(n > 0 for n in converted.values()), converted


def test_the_mixed_replay_gives_the_native_alert(mixed_result):
    result, _ = mixed_result
    firing = [a for a in result.alerts if a["status"] == "firing"]
    assert len(firing) == 1
    alert = firing[0]
    assert alert["job_id"] == "llm-70b" and alert["gpus"] == 256
    assert alert["root_cause"]["domain"] == "network"
    assert alert["root_cause"]["source"] == "leaf03" and alert["root_cause"]["labels"] == {"port": "17"}
    assert alert["root_cause"]["first_seen"].startswith("2025-11-30T11:42:10")
    layers = list(dict.fromkeys(e["layer"] for e in alert["timeline"]))
    assert layers == ["switch", "nccl", "gpu", "step"]
    onsets = {e["layer"]: e["ts"][11:19] for e in reversed(alert["timeline"])}
    assert onsets == {"switch": "11:42:10", "nccl": "11:42:12", "gpu": "11:42:15", "step": "11:42:18"}
    assert len([a for a in result.alerts if a["status"] == "resolved"]) == 1
