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

from streams.correlate import Correlator
from tests.streams.test_correlate_basics import CFG, T, anomaly, inv


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
