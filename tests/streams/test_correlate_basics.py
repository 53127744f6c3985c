"""Correlator fundamentals: verdicts wait for the watermark, first mover, arrival-order invariance.

Timeline used below (seconds after T, one job ``j`` on nodes n1..n4 behind leaf1)::

    switch leaf1:11  SymbolErrorCounter  ....X######       <- first mover (T+10)
    nccl   n2        coll_exec_time_us   ......X####       (T+12)
    step   n1        step_time_seconds   ..........X##     <- onset O = T+18
                                         verdict once watermark >= O + grace
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from models.inventory import inventory_adapter
from streams.correlate import Correlator, CorrelatorConfig
from streams.inventory import InventoryIndex

T = 1764502800.0
#: The job-end margin no longer than the grace, so a verdict is due at onset + grace (the margin's wait: below).
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


def anomaly(offset: float, layer: str, source: str, metric: str, meaning: str, *, phase: str = "start",
            labels: dict[str, str] | None = None, role: str = "cause", origin: str = "o1",
            value: float = 10.0, p50: float = 1.0) -> dict[str, Any]:
    return {"type": "anomaly", "phase": phase, "job_id": "j", "ts": T + offset, "confirmed_ts": T + offset + 1,
            "layer": layer, "source": source, "labels": labels or {}, "metric": metric, "meaning": meaning,
            "role": role, "direction": "up", "value": value, "p50": p50, "p99": p50 * 1.2, "score": 0.9,
            "relation": "node", "origin": origin}


def wm(**origins: float) -> dict[str, Any]:
    return {"type": "watermark", "origins": {o: T + v for o, v in origins.items()}}


SWITCH = anomaly(10, "switch", "leaf1", "SymbolErrorCounter", "link_errors", labels={"port": "11"})
NCCL = anomaly(12, "nccl", "n2", "coll_exec_time_us", "latency", origin="o2")
STEP = anomaly(18, "step", "n1", "step_time_seconds", "step_time", role="symptom", value=2.0, p50=1.0,
               labels={"job_id": "j", "rank": "0"})


def feed(corr: Correlator, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = []
    for rec in records:
        alerts += corr.on_record(rec, 0.0).alerts
    return alerts


def test_no_verdict_before_the_watermark_passes_onset_plus_grace() -> None:
    corr = Correlator(CFG, inv())
    # watermark = min(origins) - lateness = T+24 - 2 = T+22 < O + grace = T+23
    assert feed(corr, [SWITCH, NCCL, STEP, wm(o1=24, o2=24)]) == []
    alerts = feed(corr, [wm(o1=25, o2=25)])
    assert len(alerts) == 1


def test_the_verdict_also_waits_the_job_end_margin_so_a_job_end_is_known() -> None:
    corr = Correlator(dataclasses.replace(CFG, job_end_margin_s=8.0), inv())
    # O = T+18: O + grace = T+23 has passed, O + margin = T+26 has not
    assert feed(corr, [SWITCH, NCCL, STEP, wm(o1=27, o2=27)]) == []
    [alert] = feed(corr, [wm(o1=28, o2=28)])
    assert alert["detected_at"][11:19] == alert["started_at"][11:17] + "23"  # still due at O + grace


def test_the_slowest_input_holds_the_watermark_back() -> None:
    corr = Correlator(CFG, inv())
    assert feed(corr, [SWITCH, STEP, wm(o1=100, o2=20)]) == []
    assert len(feed(corr, [wm(o2=30)])) == 1


def test_first_mover_is_the_earliest_cause_and_the_alert_names_it() -> None:
    corr = Correlator(CFG, inv())
    [alert] = feed(corr, [NCCL, SWITCH, STEP, wm(o1=40, o2=40)])
    rc = alert["root_cause"]
    assert (rc["domain"], rc["layer"], rc["source"], rc["labels"]) == ("network", "switch", "leaf1", {"port": "11"})
    assert [e["layer"] for e in alert["timeline"]] == ["switch", "nccl", "step"]
    assert alert["gpus"] == 32 and alert["nodes"] == ["n1", "n2", "n3", "n4"]
    assert alert["symptom"]["ratio"] == 2.0 and alert["severity"] == "critical"


def test_evidence_later_than_the_onset_is_not_a_first_mover() -> None:
    corr = Correlator(CFG, inv())
    late_switch = dict(SWITCH, ts=T + 20, confirmed_ts=T + 21)
    [alert] = feed(corr, [STEP, late_switch, wm(o1=40, o2=40)])
    assert alert["root_cause"]["domain"] == "unknown" and alert["root_cause"]["source"] is None


def test_a_slowdown_with_no_evidence_is_unknown_not_guessed() -> None:
    corr = Correlator(CFG, inv())
    [alert] = feed(corr, [STEP, wm(o1=40, o2=40)])
    assert alert["root_cause"]["domain"] == "unknown"
    assert "no component moved" in alert["root_cause"]["reason"]


def test_resolution_after_the_symptom_clears_for_resolve_after() -> None:
    corr = Correlator(CFG, inv())
    [firing] = feed(corr, [SWITCH, STEP, wm(o1=30, o2=30)])
    end = dict(STEP, phase="end", ts=T + 50, confirmed_ts=T + 55)
    assert feed(corr, [end, wm(o1=61, o2=61)]) == []  # 61 - 2 = 59 < 50 + 10
    [resolved] = feed(corr, [wm(o1=63, o2=63)])
    assert resolved["status"] == "resolved" and resolved["alert_id"] == firing["alert_id"]
    assert resolved["resolved_at"].startswith("2025-11-30T11:40:50")


def per_origin_streams() -> dict[str, list[dict[str, Any]]]:
    """Each origin's records in its own (Kafka partition) order: anomalies before the watermarks covering them."""
    o1 = [SWITCH, wm(o1=12), STEP, wm(o1=20), wm(o1=30), dict(STEP, phase="end", ts=T + 40, confirmed_ts=T + 45),
          wm(o1=70)]
    o2 = [wm(o2=5), NCCL, wm(o2=14), wm(o2=25), wm(o2=45), wm(o2=70)]
    return {"o1": o1, "o2": o2}


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_any_interleaving_of_the_inputs_gives_the_same_alerts(rnd: random.Random) -> None:
    """Kafka keeps each input partition in order; across partitions any interleaving may happen."""
    streams = per_origin_streams()
    queues = {k: list(v) for k, v in streams.items()}
    merged: list[dict[str, Any]] = []
    while any(queues.values()):
        origin = rnd.choice([k for k, q in queues.items() if q])
        merged.append(queues[origin].pop(0))
    expected = {"o1", "o2"}
    reference = feed(Correlator(CFG, inv(), expected), [r for o in ("o1", "o2") for r in streams[o]])
    got = feed(Correlator(CFG, inv(), expected), merged)
    assert [(a["status"], a["root_cause"]["source"], a["started_at"]) for a in got] == [
        (a["status"], a["root_cause"]["source"], a["started_at"]) for a in reference]
    assert [a["status"] for a in got] == ["firing", "resolved"]


def test_snapshot_round_trip_keeps_open_incidents() -> None:
    corr = Correlator(CFG, inv())
    feed(corr, [SWITCH, STEP, wm(o1=30, o2=30)])
    copy = Correlator(CFG, corr.inventory)
    copy.restore(corr.snapshot(), 0.0)
    end = dict(STEP, phase="end", ts=T + 50, confirmed_ts=T + 55)
    assert [a["status"] for a in feed(copy, [end, wm(o1=70, o2=70)])] == ["resolved"]


def test_evidence_behind_the_watermark_is_counted_as_late_and_still_judged() -> None:
    """An input that was idle (so skipped) comes back with old evidence: reported, never dropped."""
    corr = Correlator(CFG, inv())
    feed(corr, [wm(o2=70)])  # only o2 known: watermark 68
    out = corr.on_record(SWITCH, 0.0)
    assert len(out.late) == 1 and corr.late_count == 1
    alerts = feed(corr, [STEP])
    assert [a["root_cause"]["source"] for a in alerts] == ["leaf1"]
