"""The correlation rules, one table row each, with the timeline that drives it.

Each timeline is drawn one character per second from T: ``X`` while the series is anomalous,
``.`` while it is normal. A row is ``layer source metric meaning [labels] | timeline``. The job is
``j`` (nodes n1-n4 on leaf1 ports 11-14, pool ``lustre`` whose servers hang off ``stor1``).
"""

from __future__ import annotations

from typing import Any

import pytest

from models.inventory import inventory_adapter
from streams.correlate import Correlator, CorrelatorConfig
from streams.inventory import InventoryIndex
from streams.rules import load_rules

T = 1764502800.0
CFG = CorrelatorConfig(allowed_lateness_s=1.0, grace_s=3.0, lookback_s=30.0, resolve_after_s=5.0, min_firing_s=0.0,
                       symptom_hold_s=3.0)

SYMPTOMS = {"step_time"}


def inventory(pool_switches: tuple[str, ...] = ("stor1",)) -> InventoryIndex:
    inv = InventoryIndex()
    docs: list[dict[str, Any]] = [
        {"kind": "job", "ts": T - 100, "job_id": "j", "state": "RUNNING", "nodes": "n[1-4]", "gpus_per_node": 8,
         "storage": ["lustre"]},
        {"kind": "switch", "ts": T - 100, "switch": "leaf1", "tier": "leaf", "uplinks": ["spine1"]},
        {"kind": "pool", "ts": T - 100, "pool": "lustre", "switches": list(pool_switches)},
    ]
    docs += [{"kind": "link", "ts": T - 100, "node": f"n{i}", "device": "mlx5_0", "port": "1", "switch": "leaf1",
              "switch_port": str(10 + i)} for i in range(1, 5)]
    for d in docs:
        inv.apply(inventory_adapter.validate_python(d))
    return inv


def records(diagram: str) -> list[dict[str, Any]]:
    """Anomaly start/end records from a timeline diagram (see the module docstring)."""
    out = []
    for line in diagram.strip().splitlines():
        head, _, marks = line.partition("|")
        layer, source, metric, meaning, *rest = head.split()
        labels = dict(kv.split("=") for kv in rest)
        marks = marks.strip()
        start = None
        for t, ch in enumerate(marks + "."):
            if ch == "X" and start is None:
                start = t
                direction = "down" if meaning == "utilisation" else "up"
                out.append({"type": "anomaly", "phase": "start", "job_id": "j", "ts": T + t, "confirmed_ts": T + t + 1,
                            "layer": layer, "source": source, "labels": labels, "metric": metric, "meaning": meaning,
                            "role": "symptom" if meaning in SYMPTOMS else "cause", "direction": direction,
                            # x2 off the median in the bad direction: a significant change (the first mover's bar)
                            "value": 0.5 if direction == "down" else 2.0, "p50": 1.0, "p99": 1.2, "score": 0.9,
                            "relation": "node", "origin": "o",
                            "interval": 1.0})
            elif ch == "." and start is not None:
                out.append(dict(out[-1] if out[-1]["metric"] == metric else {}, phase="end", ts=T + t,
                                confirmed_ts=T + t + 1) | {k: v for k, v in out[-1].items() if k not in
                                                           ("phase", "ts", "confirmed_ts")})
                start = None
    return sorted(out, key=lambda r: (r["confirmed_ts"], r["phase"] == "start"))


def run(diagram: str, inv: InventoryIndex | None = None, end: float = 120.0, rules: Any = None,
        extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    corr = Correlator(CFG, inv or inventory(), {"o"}, rules)
    alerts: list[dict[str, Any]] = []
    recs = records(diagram) + (extra or [])
    recs.sort(key=lambda r: r.get("confirmed_ts", r.get("ts", 0)))
    for rec in recs:
        alerts += corr.on_record(rec, 0.0).alerts
        alerts += corr.on_record({"type": "watermark", "origins": {"o": rec.get("confirmed_ts", T)}}, 0.0).alerts
    alerts += corr.on_record({"type": "watermark", "origins": {"o": T + end}}, 0.0).alerts
    return alerts


RULES = [
    pytest.param(
        """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        nccl   n1    coll_exec_time_us  latency             | .......XXXXXXXXXXXXX.....
        gpu    n1    DCGM_FI_DEV_GPU_UTIL utilisation gpu=0  | ..........XXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .............XXXXXXX.....
        """, "network", "leaf1", {"port": "12"}, "moved first", id="network: the switch port moved first"),
    pytest.param(
        """
        nic  n3 out_of_sequence   retransmits device=mlx5_0 port=1 | .....XXXXXXXXXXXXXXX.....
        nccl n3 coll_exec_time_us latency                         | .......XXXXXXXXXXXXX.....
        step n1 step_time_seconds step_time                       | ..........XXXXXXXXXX.....
        """, "network", "n3", {"device": "mlx5_0"}, "retransmits", id="network: a NIC retransmitting"),
    pytest.param(
        """
        storage lustre read_latency_seconds    latency   | .....XXXXXXXXXXXXXXX.....
        step    n1     dataloader_wait_seconds loader_wait | .......XXXXXXXXXXXXX.....
        step    n1     step_time_seconds       step_time   | ........XXXXXXXXXXXX.....
        """, "storage", "lustre", {}, "latency", id="storage: the pool's latency moved first"),
    pytest.param(
        """
        storage lustre read_latency_seconds latency          | .....XXXXXXXXXXXXXXX.....
        switch  stor1  PortXmitDiscards     drops    port=3  | .......XXXXXXXXXXXXX.....
        step    n1     step_time_seconds    step_time        | ........XXXXXXXXXXXX.....
        """, "network", "lustre", {}, "storage via network", id="storage via network: the pool's path errs"),
    pytest.param(
        """
        storage lustre read_latency_seconds latency          | .....XXXXXXXXXXXXXXX.....
        switch  stor1  PortXmitDiscards     drops    port=3  | ......XXXXXXXXXXXXXX.....
        step    n1     step_time_seconds    step_time        | ........XXXXXXXXXXXX.....
        """, "network", "stor1", {"port": "3"}, "storage via network",
        id="storage via network: within the uncertainty the switch on the pool's path leads"),
    pytest.param(
        """
        host n2 cpu_utilization         utilisation  | .....XXXXXXXXXXXXXXX.....
        step n2 dataloader_wait_seconds loader_wait  | .....XXXXXXXXXXXXXXX.....
        step n1 step_time_seconds       step_time    | ......XXXXXXXXXXXXXX.....
        """, "dataloader", "n2", {}, "data preparation", id="dataloader: one node's CPUs saturated first"),
    pytest.param(
        """
        gpu  n4 DCGM_FI_DEV_XID_ERRORS gpu_fault gpu=3 | .....X....................
        nccl n1 coll_exec_time_us      latency         | .......XXXXXXXXXXXX.......
        step n1 step_time_seconds      step_time       | ........XXXXXXXXXXX.......
        """, "compute", "n4", {"gpu": "3"}, "gpu_fault", id="compute: an XID on one GPU"),
    pytest.param(
        """
        nccl n1 coll_exec_time_us latency   | .....XXXXXXXXXXXXXXX.....
        step n1 step_time_seconds step_time | .......XXXXXXXXXXXXX.....
        """, "unknown", "n1", {}, "no fabric, storage or GPU fault", id="unknown: only the collective slowed"),
    pytest.param(
        """
        step n1 step_time_seconds step_time | .......XXXXXXXXXXXXX.....
        """, "unknown", None, {}, "no component moved", id="unknown: no evidence at all"),
    pytest.param(
        """
        switch leaf1 PortXmitDiscards drops port=11     | .XX......................
        storage lustre read_latency_seconds latency     | .........XXXXXXXXXXX.....
        step n1 step_time_seconds step_time             | ..........XXXXXXXXXX.....
        """, "storage", "lustre", {}, "latency", id="a cause that ended before the slowdown is history"),
    pytest.param(
        """
        nccl   n1    coll_exec_time_us  latency             | .....XXXXXXXXXXXXXXX.....
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
        """, "network", "leaf1", {"port": "12"}, "moved first", id="a tie is broken by causal order"),
]


@pytest.mark.parametrize(("diagram", "domain", "source", "labels", "reason"), RULES)
def test_rule(diagram: str, domain: str, source: str | None, labels: dict[str, str], reason: str) -> None:
    alerts = [a for a in run(diagram) if a["type"] == "job_slowdown"]
    assert [a["status"] for a in alerts] == ["firing", "resolved"]
    rc = alerts[0]["root_cause"]
    assert rc["domain"] == domain
    assert rc["source"] == source
    assert {k: rc["labels"].get(k) for k in labels} == labels
    assert reason in rc["reason"]
    if source is not None:
        assert alerts[0]["timeline"][0]["source"] == source  # the timeline starts with the root cause


def test_timing_uncertainty_is_respected_but_a_clear_lead_is_not_overruled() -> None:
    """nccl at t=5 and the switch at t=7 with 1 s sampling: 2 s apart is a real lead for nccl, so the
    causal order must not overrule it (the first mover is decided on time when time can tell)."""
    alerts = run("""
        nccl   n1    coll_exec_time_us  latency             | .....XXXXXXXXXXXXXXX.....
        switch leaf1 SymbolErrorCounter link_errors port=12 | .......XXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """)
    assert alerts[0]["root_cause"]["layer"] == "nccl"


def test_a_clock_correction_reorders_evidence() -> None:
    """n2's clock is 6 s behind: its nccl anomaly *claims* t=1 but happened at t=7, after the switch."""
    diagram = """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        nccl   n2    coll_exec_time_us  latency             | .XXXXXXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """
    naive = run(diagram)
    assert naive[0]["root_cause"]["layer"] == "nccl"
    recs = records(diagram)
    for r in recs:
        if r["source"] == "n2":
            r["clock_offset"] = -6.0
    corr = Correlator(CFG, inventory(), {"o"})
    alerts = []
    for r in sorted(recs, key=lambda r: r["confirmed_ts"]):
        alerts += corr.on_record(r, 0.0).alerts
    alerts += corr.on_record({"type": "watermark", "origins": {"o": T + 120}}, 0.0).alerts
    assert alerts[0]["root_cause"]["layer"] == "switch"


def clock(source: str, offset: float, at: float, phase: str = "start", **extra: Any) -> dict[str, Any]:
    return {"type": "clock", "phase": phase, "source": source, "layer": "nccl", "ts": at, "offset": offset,
            "uncertainty": 0.05, "origin": "o", **extra}


def test_a_skew_learned_after_the_verdict_revises_it_and_one_learned_before_retimes_new_evidence() -> None:
    """The same n2 as above, but its anomalies carry no offset: the skew is learned from a ``clock`` record.
    Learned after the verdict (nccl first), the evidence is re-timed and the verdict revised to the switch;
    learned before, it re-times the anomalies as they arrive. The re-timed episode still closes at its end."""
    diagram = """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        nccl   n2    coll_exec_time_us  latency             | .XXXXXXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """
    recs = sorted(records(diagram), key=lambda r: r["confirmed_ts"])
    corr = Correlator(CFG, inventory(), {"o"})
    alerts = []
    for r in [r for r in recs if r["phase"] == "start"]:
        alerts += corr.on_record(r, 0.0).alerts
    alerts += corr.on_record({"type": "watermark", "origins": {"o": T + 22}}, 0.0).alerts
    assert alerts[0]["root_cause"]["layer"] == "nccl"
    out = corr.on_record(clock("n2", -6.0, T + 23, retime_only=True), 0.0)
    assert [a["type"] for a in out.alerts] == ["job_slowdown"]  # a re-time only copy raises no clock_skew
    revised = out.alerts[0]
    assert revised["alert_id"] == alerts[0]["alert_id"] and revised["root_cause"]["source"] == "leaf1"
    assert revised["details"]["revised_from"]["layer"] == "nccl"
    for r in [r for r in recs if r["phase"] == "end"]:
        corr.on_record(r, 0.0)
    nccl = [e for e in corr.jobs["j"].all_episodes() if e.start["source"] == "n2"]
    assert [(e.ts, e.end_ts) for e in nccl] == [(T + 7.0, T + 26.0)]

    before = Correlator(CFG, inventory(), {"o"})
    got = before.on_record(clock("n2", -6.0, T), 0.0).alerts
    assert [a["type"] for a in got] == ["clock_skew"]
    for r in recs:
        got += before.on_record(r, 0.0).alerts
    got += before.on_record({"type": "watermark", "origins": {"o": T + 120}}, 0.0).alerts
    assert next(a["root_cause"]["source"] for a in got if a["type"] == "job_slowdown") == "leaf1"


def test_late_evidence_revises_a_firing_alert_instead_of_being_dropped() -> None:
    corr = Correlator(CFG, inventory(), {"o"})
    step = [r for r in records("step n1 step_time_seconds step_time | .........XXXXXXXXXXX.....")]
    first = corr.on_record(step[0], 0.0).alerts + corr.on_record(
        {"type": "watermark", "origins": {"o": T + 20}}, 0.0).alerts
    assert first[0]["root_cause"]["domain"] == "unknown"
    late = records("switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....")[0]
    out = corr.on_record(dict(late, confirmed_ts=T + 30), 0.0)
    assert out.late and [a["status"] for a in out.alerts] == ["firing"]
    revised = out.alerts[0]
    assert revised["alert_id"] == first[0]["alert_id"] and revised["dedup_key"] == first[0]["dedup_key"]
    assert revised["root_cause"]["source"] == "leaf1" and revised["details"]["revised_from"]["domain"] == "unknown"


def test_a_silence_mutes_and_its_end_renotifies_a_still_firing_alert() -> None:
    rules = load_rules(f"""
silences:
  - id: leaf1-maint
    kind: maintenance
    matchers: ['switch="leaf1"']
    starts_at: {T}
    ends_at: {T + 40}
    created_by: netops
    comment: leaf1 optics swap
""")
    alerts = run("""
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX.....
    """, rules=rules)
    slow = [a for a in alerts if a["type"] == "job_slowdown"]
    assert [(a["status"], a["silenced_by"]) for a in slow] == [
        ("firing", ["leaf1-maint"]), ("firing", []), ("resolved", [])]
    assert slow[1]["details"]["unsilenced_after"] == ["leaf1-maint"]


def test_the_cause_alert_inhibits_the_gpu_symptom_alert_and_without_it_the_symptom_fires() -> None:
    gpus = "\n".join(f"gpu n{n} DCGM_FI_DEV_GPU_UTIL utilisation gpu={g} | ........XXXXXXXXXXXX....."
                     for n in (1, 2) for g in range(8))
    with_cause = run(gpus + """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """)
    assert {a["type"] for a in with_cause} == {"job_slowdown"}
    alone = run(gpus)
    assert [(a["type"], a["status"]) for a in alone] == [("gpu_utilisation", "firing"), ("gpu_utilisation", "resolved")]
    assert "16 of 32 GPUs" in alone[0]["summary"]
    no_inhibition = run(gpus + """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """, rules=load_rules("inhibit_rules: []"))
    assert {a["type"] for a in no_inhibition} == {"job_slowdown", "gpu_utilisation"}


def test_the_same_cause_back_soon_after_reopens_the_same_incident() -> None:
    alerts = [a for a in run("""
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXX..........XXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .......XXXXXXX.............XXXXXXX.....
    """) if a["type"] == "job_slowdown"]
    assert [a["status"] for a in alerts] == ["firing", "resolved", "firing", "resolved"]
    assert alerts[0]["alert_id"] == alerts[2]["alert_id"]
    assert alerts[2]["details"]["reopened"] == 1


JOB_END_GPUS = "\n".join(f"gpu n{n} DCGM_FI_DEV_GPU_UTIL utilisation gpu={g} | ........XXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"
                         for n in (1, 2) for g in range(8))


@pytest.mark.parametrize(("state", "at"), [("COMPLETING", 12), ("COMPLETED", 12), ("COMPLETED", 20),
                                            ("CANCELLED", 30)])
def test_a_job_end_is_never_a_gpu_utilisation_page(state: str, at: int) -> None:
    """The scheduler ends the job a few seconds after its GPUs fall idle (and their episodes never end:
    the series leave the job): no alert, whether it passes through COMPLETING or ends at once."""
    inv = inventory()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T + at, "job_id": "j", "state": state,
                                                 "nodes": "n[1-4]", "gpus_per_node": 8}))
    assert run(JOB_END_GPUS, inv) == []


def test_gpus_idle_in_a_job_that_keeps_running_still_page() -> None:
    alerts = run(JOB_END_GPUS)
    assert [(a["type"], a["status"]) for a in alerts] == [("gpu_utilisation", "firing"),
                                                          ("gpu_utilisation", "resolved")]
