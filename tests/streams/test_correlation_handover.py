"""A correlation partition handed over without a snapshot: why its new owner reads the committed records again.

The leaving-worker fault test (tests/faults/test_worker_faults.py), as its ``anomalies`` partition held
it in a failing run: the leaving worker folded in the switch port's and one node's NCCL ``start`` (and
their ``end``s) while the watermark was still held (the step-time partitions were between owners), so
nothing was due and it never wrote a snapshot; the group committed past those records. The staying
worker then found no snapshot and began at the commit: the earliest evidence was gone, the step-time
onset arrived, and the verdict named the NCCL latency of another node (domain unknown), which no
longer inhibited the GPU-utilisation symptom: two pages for one incident. The agent now reads the
committed offsets again for state (agents.recovery.NOTHING_HELD, agents.correlating.Correlate.resume);
here, with the pure correlator, that the state rebuilt that way gives the single owner's verdict.
"""

from __future__ import annotations

from typing import Any

from models.inventory import inventory_adapter
from streams.correlate import Correlator, CorrelatorConfig
from streams.inventory import InventoryIndex

T = 1764502800.0
CFG = CorrelatorConfig(allowed_lateness_s=2.0, grace_s=5.0, lookback_s=60.0, resolve_after_s=10.0,
                       job_end_margin_s=5.0)


def inv() -> InventoryIndex:
    index = InventoryIndex()
    index.apply(inventory_adapter.validate_python({"kind": "job", "ts": T - 500, "job_id": "j", "state": "RUNNING",
                                                   "nodes": "n[1-4]", "gpus_per_node": 8}))
    for i in range(1, 5):
        index.apply(inventory_adapter.validate_python({"kind": "link", "ts": T - 500, "node": f"n{i}",
                                                       "device": "mlx5_0", "port": "1", "switch": "leaf1",
                                                       "switch_port": str(10 + i)}))
    return index


def anomaly(at: float, layer: str, source: str, metric: str, meaning: str, *, phase: str = "start",
            labels: dict[str, str] | None = None, role: str = "cause", value: float = 10.0,
            p50: float = 1.0) -> dict[str, Any]:
    return {"type": "anomaly", "phase": phase, "job_id": "j", "ts": T + at, "confirmed_ts": T + at + 1,
            "layer": layer, "source": source, "labels": labels or {}, "metric": metric, "meaning": meaning,
            "role": role, "direction": "up", "value": value, "p50": p50, "p99": p50 * 1.2, "score": 0.9,
            "relation": "node", "origin": "o1"}


def nccl(node: str, at: float, phase: str = "start") -> dict[str, Any]:
    return anomaly(at, "nccl", node, "coll_exec_time_us", "latency", phase=phase, labels={"coll": "AllReduce"},
                   value=30.0, p50=10.0)


def switch(at: float, phase: str = "start") -> dict[str, Any]:
    return anomaly(at, "switch", "leaf1", "SymbolErrorCounter", "link_errors", phase=phase, labels={"port": "11"},
                   value=40.0, p50=0.0)


def step(at: float, phase: str = "start") -> dict[str, Any]:
    return anomaly(at, "step", "n1", "step_time_seconds", "step_time", phase=phase, role="symptom", value=2.0,
                   p50=1.0, labels={"rank": "0"})


def wm(at: float) -> dict[str, Any]:
    return {"type": "watermark", "origins": {"o1": T + at, "o2": T + at}}


#: The partition's records in offset order. The previous owner processed (and the group committed)
#: offsets before COMMITTED, with no watermark among them: nothing was due, no snapshot was written.
RECORDS = [switch(40), nccl("n3", 42), switch(70, "end"), nccl("n3", 72, "end"),
           nccl("n1", 42), nccl("n1", 72, "end"), step(48), step(78, "end"), wm(124)]
COMMITTED = 4


def firing(records: list[dict[str, Any]], corr: Correlator | None = None) -> list[str]:
    corr = corr or Correlator(CFG, inv())
    return [a["dedup_key"] for rec in records for a in corr.on_record(rec, 0.0).alerts if a["status"] == "firing"]


def test_a_single_owner_names_the_switch_port() -> None:
    assert firing(RECORDS) == ["job_slowdown/j/network/switch/leaf1/port=11"]


def test_a_new_owner_starting_at_the_commit_loses_the_first_mover() -> None:
    # What the staying worker did: no snapshot, so it began empty at the committed offset.
    [key] = firing(RECORDS[COMMITTED:])
    assert key.startswith("job_slowdown/j/") and "/nccl/n1/" in key


def test_the_committed_records_read_again_for_state_give_the_single_owners_verdict() -> None:
    corr = Correlator(CFG, inv())
    assert firing(RECORDS[:COMMITTED], corr) == []  # state only: their outputs (none) went out before
    assert firing(RECORDS[COMMITTED:], corr) == firing(RECORDS)
