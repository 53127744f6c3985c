"""Job lifecycle in the evidence, the "unknown, both named" reason, and the straggler lead across a watermark
jump: rule tests on timelines drawn as in test_correlation_rules (one character per second from T)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_correlation_rules import CFG, T, inventory, records, run

from models.inventory import inventory_adapter
from streams.correlate import Correlator
from streams.inventory import InventoryIndex
from streams.jobs import JobPartition
from streams.rules import load_rules


def test_data_preparation_first_with_the_fabric_and_a_pool_moving_names_every_entity_that_moved() -> None:
    alerts = run("""
        host    n2     cpu_utilization    utilisation          | .....XXXXXXXXXXXXXXX.....
        switch  leaf1  SymbolErrorCounter link_errors port=12  | ........XXXXXXXXXXXX.....
        nic     n3     out_of_sequence    retransmits device=mlx5_0 port=1 | ........XXXXXXXXXXXX.....
        storage lustre read_latency_seconds latency            | ........XXXXXXXXXXXX.....
        step    n1     step_time_seconds  step_time            | .........XXXXXXXXXXX.....
    """)
    rc = alerts[0]["root_cause"]
    assert (rc["domain"], rc["source"]) == ("unknown", "n2")
    assert rc["reason"] == ("data preparation on n2 saturated first, but nic n3 device=mlx5_0 port=1, "
                            "switch leaf1 port 12, pool lustre moved too")


def test_data_preparation_first_with_only_a_pool_moving_names_the_pool() -> None:
    alerts = run("""
        host    n2     cpu_utilization      utilisation | .....XXXXXXXXXXXXXXX.....
        storage lustre read_latency_seconds latency     | ........XXXXXXXXXXXX.....
        step    n1     step_time_seconds    step_time   | .........XXXXXXXXXXX.....
    """)
    assert alerts[0]["root_cause"]["reason"] == "data preparation on n2 saturated first, but pool lustre moved too"


SLOW = """
    switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX
    step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX
"""


def run_open(diagram: str, inv: InventoryIndex, end: float = 120.0) -> list[dict[str, Any]]:
    """:func:`run` for series that never recover in the job's timeline: no episode of the diagram ends."""
    corr = Correlator(CFG, inv, {"o"})
    alerts: list[dict[str, Any]] = []
    for rec in (r for r in records(diagram) if r["phase"] == "start"):
        alerts += corr.on_record(rec, 0.0).alerts
        alerts += corr.on_record({"type": "watermark", "origins": {"o": rec["confirmed_ts"]}}, 0.0).alerts
    return alerts + corr.on_record({"type": "watermark", "origins": {"o": T + end}}, 0.0).alerts


def job_event(inv: InventoryIndex, at: float, state: str) -> InventoryIndex:
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T + at, "job_id": "j", "state": state,
                                                 "nodes": "n[1-4]", "gpus_per_node": 8, "storage": ["lustre"]}))
    return inv


@pytest.mark.parametrize(("state", "at"), [("COMPLETING", 15), ("COMPLETED", 12), ("CANCELLED", 18)])
def test_a_job_end_is_never_a_slowdown(state: str, at: int) -> None:
    """The last steps before the job ends are slow (a final save) and its series never recover (they leave
    the job): the scheduler's end within the margin of the onset (T+9) makes it the job ending."""
    assert [a for a in run(SLOW, job_event(inventory(), at, state)) if a["type"] == "job_slowdown"] == []


def test_a_slowdown_just_after_the_job_started_is_the_job_starting() -> None:
    inv = InventoryIndex()  # j starts at T+2 (no earlier record): its first steps at T+9 are still settling
    for d in [{"kind": "link", "ts": T - 100, "node": f"n{i}", "device": "mlx5_0", "port": "1", "switch": "leaf1",
               "switch_port": str(10 + i)} for i in range(1, 5)]:
        inv.apply(inventory_adapter.validate_python(d))
    assert [a for a in run(SLOW, job_event(inv, 2, "RUNNING")) if a["type"] == "job_slowdown"] == []
    settled = [a for a in run(SLOW.replace(".........X", "............X", 1), job_event(inv, -10, "RUNNING"))
               if a["type"] == "job_slowdown"]
    assert [a["status"] for a in settled][:1] == ["firing"]


def test_series_that_leave_a_job_end_their_episodes_with_it_so_its_slowdown_resolves() -> None:
    """A real slowdown (the switch first, 31 s before the job ends at T+40): its series never recover in
    this job's timeline (they leave it); the episodes end at the job's end and the alert resolves."""
    running = [(a["type"], a["status"]) for a in run_open(SLOW, inventory())]
    assert running == [("job_slowdown", "firing")]  # the job still runs: the incident is open
    alerts = [a for a in run_open(SLOW, job_event(inventory(), 40, "COMPLETED")) if a["type"] == "job_slowdown"]
    assert [(a["status"], a["root_cause"]["source"]) for a in alerts] == [("firing", "leaf1"), ("resolved", "leaf1")]
    assert alerts[1]["resolved_at"][11:19] == alerts[0]["started_at"][11:17] + "40"  # T+9 -> T+40


#: A stall is known before the GPU symptom is emitted when job_stall_s <= grace_s + symptom_hold_s (the
#: defaults: 15 = 5 + 10), so the stall inhibits it.
STALL_CFG = dataclasses.replace(CFG, job_stall_s=CFG.grace_s + CFG.symptom_hold_s)


def partition_run(steps: str, inv: InventoryIndex, gpus_idle_from: int | None = None,
                  rules: Any = None) -> list[dict[str, Any]]:
    """Drive a JobPartition (correlation and the jobs' signals) one second at a time from T: ``steps`` has
    one character per second, ``S`` when the job sent step times, ``.`` when it did not; its 16 GPUs on n1-n2
    fall idle from ``gpus_idle_from`` on (episodes that do not end)."""
    part = JobPartition(STALL_CFG, inv, {"o"}, rules=rules)
    gpus = [] if gpus_idle_from is None else records("\n".join(
        f"gpu n{n} DCGM_FI_DEV_GPU_UTIL utilisation gpu={g} | {'.' * gpus_idle_from}{'X' * 200}"
        for n in (1, 2) for g in range(8)))
    alerts: list[dict[str, Any]] = []
    for t, ch in enumerate(steps):
        if ch == "S":
            alerts += part.on_record({"type": "points", "job_id": "j",
                                      "lanes": {"step_time": [[T + t + 0.2, [1.0, 1.01]]]}}, 0.0).alerts
        for rec in [g for g in gpus if g["phase"] == "start" and g["confirmed_ts"] == T + t]:
            alerts += part.on_record(rec, 0.0).alerts
        alerts += part.on_record({"type": "watermark", "origins": {"o": T + t + CFG.allowed_lateness_s}}, 0.0).alerts
    return alerts


STALL = "S" * 20 + "." * 40 + "S" * 20


def test_a_running_job_that_stops_sending_step_times_is_a_job_stalled_alert_not_a_utilisation_page() -> None:
    alerts = partition_run(STALL, inventory(), gpus_idle_from=20)
    assert [(a["type"], a["status"]) for a in alerts] == [("job_stalled", "firing"), ("job_stalled", "resolved")]
    fired, done = alerts
    assert fired["started_at"][17:19] == "19" and fired["detected_at"][17:19] == "25"  # last step T+19, +6 s
    assert fired["root_cause"]["meaning"] == "no_data" and fired["details"]["reason"] == "no_data"
    assert fired["labels"] == {"alertname": "job_stalled", "job_id": "j"} and fired["gpus"] == 32
    assert (done["alert_id"], done["details"]["end_reason"], done["resolved_at"][17:19]) == (
        fired["alert_id"], "resumed", "00")  # T+60
    without = partition_run(STALL, inventory(), gpus_idle_from=20, rules=load_rules("inhibit_rules: []"))
    assert {a["type"] for a in without} == {"job_stalled", "gpu_utilisation"}  # the stall is what inhibits it
    no_steps = partition_run("." * 80, inventory(), gpus_idle_from=20)  # a job without step telemetry
    assert [(a["type"], a["status"]) for a in no_steps] == [("gpu_utilisation", "firing")]


@pytest.mark.parametrize(("state", "at"), [("COMPLETING", 25), ("COMPLETED", 22), ("CANCELLED", 40)])
def test_a_job_whose_step_times_stop_because_it_ends_is_no_stall(state: str, at: int) -> None:
    alerts = partition_run(STALL, job_event(inventory(), at, state), gpus_idle_from=20)
    if at <= 19 + STALL_CFG.job_stall_s + STALL_CFG.job_end_margin_s:  # ended by the stall's due + margin
        assert alerts == []
    else:  # stalled for 21 s past its last step, then cancelled: the stall fired, and ends with the job
        assert [(a["type"], a["status"], a["details"].get("end_reason")) for a in alerts] == [
            ("job_stalled", "firing", None), ("job_stalled", "resolved", "job_ended")]
