"""The read model's store and the pure views, without a broker: a small synthetic incident, table-driven."""

from __future__ import annotations

import doctest
import importlib
import math
from typing import Any

import pytest

from models.inventory import inventory_adapter
from models.operator import SilenceRequest
from streams import views
from streams.inventory import InventoryIndex
from streams.lanes import LANE_ORDER
from streams.readstore import LANE_INDEX, P50, LaneRing, ReadStore, ReadStoreConfig

T0 = 1764502800.0  # 2025-11-30T11:40:00Z
FIRST = T0 + 290
ONSET = T0 + 300
CLEARED = T0 + 360


@pytest.mark.parametrize("module", ["streams.views", "streams.readstore", "lockstep.commands.diagnose"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def inventory() -> InventoryIndex:
    inv = InventoryIndex()
    events: list[dict[str, Any]] = [
        {"kind": "switch", "ts": T0 - 60, "switch": "leaf01", "tier": "leaf", "uplinks": ["spine01"]},
        {"kind": "pool", "ts": T0 - 60, "pool": "lustre-a", "switches": ["spine01"]},
        {"kind": "job", "ts": T0 - 60, "job_id": "j1", "state": "RUNNING", "nodes": "n[1-2]", "gpus_per_node": 4,
         "storage": ["lustre-a"], "name": "train"},
        {"kind": "job", "ts": T0 - 60, "job_id": "j2", "state": "RUNNING", "nodes": "n3", "gpus_per_node": 4,
         "storage": ["lustre-a"]},
    ]
    events += [{"kind": "link", "ts": T0 - 60, "node": f"n{i}", "device": "mlx5_0", "port": "1", "switch": "leaf01",
                "switch_port": str(i)} for i in (1, 2, 3)]
    for e in events:
        inv.apply(inventory_adapter.validate_python(e))
    return inv


def lanes_at(t: float) -> dict[str, dict[str, float]]:
    slow = ONSET <= t < CLEARED
    step = 2.0 if slow else 1.0
    errors = 40.0 if FIRST <= t < CLEARED else 0.0
    return {
        "step_time": {"n": 2, "p50": step, "p99": step * 1.02, "min": step * 0.99, "max": step * 1.03},
        "fabric_errors": {"n": 3, "p50": 0.0, "p99": errors * 0.9, "min": 0.0, "max": errors},
        "gpu_util": {"n": 8, "p50": 45.0 if slow else 95.0, "p99": 97.0, "min": 40.0, "max": 98.0},
    }


def anomaly(phase: str, ts: float, layer: str, source: str, metric: str, meaning: str, role: str,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"type": "anomaly", "phase": phase, "job_id": "j1", "ts": ts, "confirmed_ts": ts + 1, "layer": layer,
            "source": source, "labels": labels or {}, "metric": metric, "meaning": meaning, "role": role,
            "direction": "up", "value": 40.0, "p50": 0.0, "p99": 1.0, "score": 0.9, "relation": "port", "origin": "o"}


ALERT = {
    "alert_id": "a1", "dedup_key": "job_slowdown/j1/network/switch/leaf01/port=1", "type": "job_slowdown",
    "status": "firing", "severity": "critical", "job_id": "j1", "gpus": 8, "nodes": ["n1", "n2"],
    "started_at": "2025-11-30T11:45:00.000Z", "detected_at": "2025-11-30T11:45:05.000Z", "resolved_at": None,
    "symptom": {"layer": "step", "metric": "step_time_seconds", "baseline": 1.0, "value": 2.0, "ratio": 2.0,
                "onset": "2025-11-30T11:45:00.000Z"},
    "root_cause": {"domain": "network", "layer": "switch", "source": "leaf01", "labels": {"port": "1"},
                   "metric": "SymbolErrorCounter", "first_seen": "2025-11-30T11:44:50.000Z", "meaning": "link_errors",
                   "reason": "switch leaf01 port 1 link_errors moved first"},
    "timeline": [
        {"ts": "2025-11-30T11:44:50.000Z", "layer": "switch", "source": "leaf01", "labels": {"port": "1"},
         "metric": "SymbolErrorCounter", "value": 40.0, "p50": 0.0, "p99": 1.0, "score": 1.0,
         "meaning": "link_errors", "entities": 1},
        {"ts": "2025-11-30T11:45:00.000Z", "layer": "step", "source": "n1", "labels": {"job_id": "j1"},
         "metric": "step_time_seconds", "value": 2.0, "p50": 1.0, "p99": 1.1, "score": 0.9, "meaning": "step_time",
         "entities": 2}],
    "other_jobs": [{"job_id": "j2", "gpus": 4, "relation": "same_switch"}], "summary": "j1 slowed",
    "labels": {"job_id": "j1", "domain": "network", "alertname": "job_slowdown"}, "details": {},
}
RESOLVED = {**ALERT, "status": "resolved", "resolved_at": "2025-11-30T11:46:00.000Z"}


def incident_store() -> ReadStore:
    store = ReadStore()
    for k in range(600):
        assert store.apply("timelines", {"type": "timeline", "job_id": "j1", "ts": T0 + k, "lanes": lanes_at(T0 + k)})
    for k in range(600):
        store.apply("timelines", {"type": "timeline", "job_id": "j2", "ts": T0 + k,
                                  "lanes": {"step_time": {"n": 1, "p50": 0.5, "p99": 0.5, "min": 0.5, "max": 0.5}}})
    sw = {"labels": {"port": "1"}}
    store.apply("anomalies", anomaly("start", FIRST, "switch", "leaf01", "SymbolErrorCounter", "link_errors", "cause",
                                     **sw))
    store.apply("anomalies", anomaly("start", FIRST, "switch", "leaf01", "PortRcvErrors", "link_errors", "cause", **sw))
    for node in ("n1", "n2"):
        store.apply("anomalies", anomaly("start", ONSET, "step", node, "step_time_seconds", "step_time", "symptom",
                                         {"job_id": "j1"}))
        store.apply("anomalies", anomaly("end", CLEARED, "step", node, "step_time_seconds", "step_time", "symptom",
                                         {"job_id": "j1"}))
    store.apply("anomalies", {"type": "points", "job_id": "j1", "lanes": {}})
    store.apply("alerts", ALERT)
    store.apply("alerts", RESOLVED)
    return store


# -- the store -----------------------------------------------------------------------------------
def test_lane_ring_keeps_the_last_capacity_seconds_in_place() -> None:
    ring = LaneRing(10)
    for sec in (100, 101, 103):
        assert ring.put(sec, {"step_time": {"n": 1, "p50": float(sec), "p99": 0, "min": 0, "max": 0}})
    assert ring.put(102, {"step_time": {"n": 1, "p50": 102.0, "p99": 0, "min": 0, "max": 0}})  # late, still held
    data, present = ring.window(99, 105)
    assert present.tolist() == [False, True, True, True, True, False]
    assert data[1:5, LANE_INDEX["step_time"], P50].tolist() == [100, 101, 102, 103]
    assert math.isnan(data[0, 0, P50])
    assert ring.put(112, {})  # 112 takes 102's slot ...
    assert not ring.put(102, {"step_time": {"n": 1, "p50": 1, "p99": 1, "min": 1, "max": 1}})  # ... which is gone
    assert (ring.earliest, ring.latest) == (103, 112)


def test_store_folds_lifecycles_pairs_episodes_and_counts_bad_records() -> None:
    store = incident_store()
    entry = store.alerts["a1"]
    assert [e["status"] for e in entry.events] == ["firing", "resolved"]
    assert entry.latest["status"] == "resolved" and entry.firing is not None and entry.firing["status"] == "firing"
    assert not store.apply("alerts", ALERT)  # a duplicate firing record changes nothing ...
    assert store.alerts["a1"].latest["status"] == "resolved"  # ... and never reopens a resolved alert
    eps = list(store.episodes["j1"])
    assert [e.end_ts for e in eps if e.start["layer"] == "step"] == [CLEARED, CLEARED]
    assert not store.apply("anomalies", anomaly("end", T0, "gpu", "n9", "m", "utilisation", "cause"))  # no start
    assert store.applied["anomalies"] == 6 and store.rejected["anomalies"] == 0
    for kind, bad in [("timelines", {"job_id": "j1"}), ("alerts", {"status": "firing"}), ("timelines", [1]),
                      ("anomalies", {"type": "anomaly", "phase": "start", "job_id": "j"}),
                      ("silences", {"silence_id": "s"}), ("annotations", {"job_id": "j"}),
                      ("capacity", {"type": "incident_cost", "alert_id": "a1"})]:
        assert not store.apply(kind, bad)
    assert store.rejected == {"timelines": 2, "alerts": 1, "stats": 0, "anomalies": 1, "annotations": 1,
                              "silences": 1, "capacity": 1}
    assert store.event_time == T0 + 599


def test_store_bounds_jobs_alerts_and_episodes() -> None:
    store = ReadStore(ReadStoreConfig(history_s=60, max_jobs=2, max_alerts=2, max_episodes_per_job=3))
    for job in ("a", "b", "c"):
        store.apply("timelines", {"type": "timeline", "job_id": job, "ts": T0, "lanes": {}})
    assert list(store.lanes) == ["b", "c"]
    for i in range(3):
        store.apply("alerts", {**ALERT, "alert_id": f"x{i}"})
    assert list(store.alerts) == ["x1", "x2"]
    for i in range(5):
        store.apply("anomalies", {**anomaly("start", T0 + i, "gpu", f"n{i}", "m", "utilisation", "cause"),
                                  "job_id": "c"})
    assert [e.ts for e in store.episodes["c"]] == [T0 + 2, T0 + 3, T0 + 4]
    store.apply("anomalies", {**anomaly("end", T0 + 5, "gpu", "n2", "m", "utilisation", "cause"), "job_id": "c"})
    store.apply("timelines", {"type": "timeline", "job_id": "c", "ts": T0 + 200, "lanes": {}})
    assert [e.ts for e in store.episodes["c"]] == [T0 + 3, T0 + 4]  # ended and older than the history: gone


def test_silences_fold_by_id_and_a_tombstone_deletes() -> None:
    store = ReadStore()
    rec = views.new_silence(SilenceRequest(matchers={"job_id": "j1"}, duration_s=60, created_by="me",
                                           comment="c"), "s1", T0).model_dump()
    assert store.apply("silences", rec, "s1")
    expired = views.expire_silence(rec, T0 + 10).model_dump()
    assert store.apply("silences", expired, "s1") and store.silences["s1"]["ends_at"] == T0 + 10
    assert [s["state"] for s in views.silence_list(store, T0 + 20)] == ["expired"]
    assert store.apply("silences", None, "s1") and store.silences == {}


# -- the views -----------------------------------------------------------------------------------
def test_job_list_and_detail() -> None:
    store, inv = incident_store(), inventory()
    rows = views.job_list(store, inv)
    assert [(r["job_id"], r["status"]) for r in rows] == [("j1", "recovered"), ("j2", "ok")]
    d = views.job_detail(store, inv, "j1")
    assert d is not None
    assert (d["gpus"], d["nodes"], d["hostlist"], d["pools"], d["spines"]) == (8, 2, "n[1-2]", ["lustre-a"],
                                                                                ["spine01"])
    assert d["gpu_list"] == [f"n{n}:{g}" for n in (1, 2) for g in range(4)]
    assert [(p["node"], p["switch"], p["switch_port"]) for p in d["paths"]] == [("n1", "leaf01", "1"),
                                                                                ("n2", "leaf01", "2")]
    assert d["storage"][0]["shared_with"] == [{"job_id": "j2", "gpus": 4}]
    assert views.job_detail(store, inv, "nope") is None


def test_timeline_aligns_lanes_and_marks_the_incident() -> None:
    store, inv = incident_store(), inventory()
    tl = views.timeline(store, inv, "j1", T0 + 280, T0 + 320)
    assert tl is not None and tl["ts"] == [T0 + 280 + k for k in range(40)]
    step = next(lane for lane in tl["lanes"] if lane["lane"] == "step_time")
    assert step["p50"][:20] == [1.0] * 20 and step["p50"][20:] == [2.0] * 20
    assert step["baseline"]["p50"] == 1.0  # before the incident, not across it
    cpu = next(lane for lane in tl["lanes"] if lane["lane"] == "cpu_util")
    assert not cpu["has_data"] and cpu["p50"] == [None] * 40
    assert [lane["lane"] for lane in tl["lanes"]] == list(LANE_ORDER)
    assert tl["first_mover"]["where"] == "leaf01 port 1" and tl["first_mover"]["lane"] == "fabric_errors"
    assert (tl["incident"]["start"], tl["incident"]["onset"], tl["incident"]["end"]) == (FIRST, ONSET, T0 + 360)
    first = tl["anomalies"][0]
    assert (first["metric"], first["ts"], first["lane"]) == ("SymbolErrorCounter", FIRST, "fabric_errors")
    steps = [m for m in tl["anomalies"] if m["lane"] == "step_time"]
    assert len(steps) == 1 and steps[0]["entities"] == 2 and steps[0]["end_ts"] == CLEARED
    coarse = views.timeline(store, inv, "j1", T0, T0 + 600, step=60)
    assert coarse is not None and len(coarse["ts"]) == 10
    step = next(lane for lane in coarse["lanes"] if lane["lane"] == "step_time")
    assert step["p50"][5] == 2.0 and step["max"][5] == pytest.approx(2.06)
    default = views.timeline(store, inv, "j1")
    assert default is not None and (default["from"], default["to"]) == (T0, T0 + 600)
    around = views.timeline(store, inv, "j1", alert_id="a1")
    assert around is not None and (around["from"], around["to"]) == (FIRST - 60, CLEARED + 60)


@pytest.mark.parametrize(("start", "end", "step", "alert", "message"), [
    (T0 + 10, T0, None, None, "from must be before to"),
    ("11:00", None, None, None, "not RFC 3339"),
    (T0, T0 + 7 * 3600, None, None, "at most"),
    (T0, T0 + 60, 0, None, "step must be"),
    (T0, T0 + 3600 * 5, 1, None, "larger step"),
    (None, None, None, "zz", "not an alert of job"),
])
def test_timeline_refuses_bad_windows(start: Any, end: Any, step: int | None, alert: str | None,
                                      message: str) -> None:
    with pytest.raises(views.QueryError, match=message):
        views.timeline(incident_store(), inventory(), "j1", start, end, step=step, alert_id=alert)


def test_diagnosis_answers_the_seven_questions() -> None:
    store, inv = incident_store(), inventory()
    d = views.diagnosis(store, inv, "j1")
    assert d is not None and [a["key"] for a in d["answers"]] == [k for k, _ in views.QUESTIONS]
    a = {x["key"]: x["answer"] for x in d["answers"]}
    assert a["gpus"].startswith("8 GPUs: 4 on each of 2 nodes (n[1-2])")
    assert a["paths"].endswith("the first mover leaf01 port 1 carries the links of n1")
    assert a["storage"].startswith("lustre-a") and "shared with j2" in a["storage"]
    assert "first leaf01 port 1 SymbolErrorCounter at 11:44:50" in a["change"]
    assert a["domain"].startswith("network: switch leaf01 port 1") and "also exposed: j2" in a["domain"]
    assert a["after_fix"].startswith("resolved at 11:46:00") and "back to 1.00 s" in a["after_fix"]
    store.apply("annotations", {"type": "annotation", "annotation_id": "n1", "job_id": "j1", "ts": T0 + 340,
                                "kind": "fix", "text": "new cable", "created_at": T0})
    fixed = views.diagnosis(store, inv, "j1")
    assert fixed is not None
    after = fixed["answers"][6]
    assert after["answer"] == ("fix at 11:45:40 (new cable); step time back to 1.00 s (x1.00 of 1.00 s before, "
                               "2.00 s during)")
    assert after["evidence"]["recovered"] is True and after["evidence"]["fix"]["annotation_id"] == "n1"
    # The correlation stage's own before/after record for the annotation joins the evidence.
    effect = {"type": "annotation_effect", "annotation_id": "n1", "job_id": "j1", "ts": T0 + 340, "kind": "fix",
              "text": "new cable", "window_s": 120.0, "metric": "step_time", "before": {"n": 120, "p50": 1.9},
              "after": {"n": 120, "p50": 1.0}, "p50_ratio": 0.5263}
    assert store.apply("stats", effect) and store.stats == {}  # not taken for the job's latest stats
    with_effect = views.diagnosis(store, inv, "j1")
    assert with_effect is not None
    assert with_effect["answers"][6]["evidence"]["effect"] == effect
    assert with_effect["answers"][6]["answer"].endswith("slowest rank x0.53 in the 120 s after vs before it")
    quiet = views.diagnosis(store, inv, "j2")
    assert quiet is not None and quiet["domain"] is None and quiet["answers"][6]["answer"] == "no incident to fix"


def test_fabric_port_counts_gpus_behind_it() -> None:
    f = views.fabric_port(incident_store(), inventory(), "leaf01", "1")
    assert f is not None
    assert f["jobs"] == [{"job_id": "j1", "name": "train", "gpus_total": 8, "gpus_behind_port": 4,
                          "nodes_behind_port": ["n1"]}]
    assert {j["job_id"]: j["behind_this_port"] for j in f["switch_jobs"]} == {"j1": True, "j2": False}
    assert [a["metric"] for a in f["anomalies"]] == ["PortRcvErrors", "SymbolErrorCounter"]
    assert views.fabric_port(incident_store(), inventory(), "leaf01", "9") is None


def test_silence_requests_are_strict_and_match_alert_labels() -> None:
    from pydantic import ValidationError

    for bad in [{"matchers": {}, "duration_s": 60, "created_by": "a", "comment": "c"},
                {"matchers": {"job_id": "j"}, "duration_s": "60", "created_by": "a", "comment": "c"},
                {"matchers": {"job_id": "j"}, "created_by": "a", "comment": "c"},
                {"matchers": {"job_id": "j"}, "duration_s": 60, "ends_at": T0, "created_by": "a", "comment": "c"},
                {"matchers": {"bad-name": "j"}, "duration_s": 60, "created_by": "a", "comment": "c"},
                {"matchers": {"job_id": "j"}, "duration_s": 60, "created_by": "a", "comment": "c", "extra": 1}]:
        with pytest.raises(ValidationError):
            SilenceRequest.model_validate(bad)
    req = SilenceRequest(matchers={"job_id": "j1", "switch": "leaf01"}, starts_at=T0 - 100, ends_at=T0 - 1,
                         created_by="a", comment="c")
    with pytest.raises(views.QueryError, match="already be over"):
        views.new_silence(req, "s", T0)
    rec = views.new_silence(req.model_copy(update={"starts_at": None, "ends_at": T0 + 60}), "s", T0).model_dump()
    assert views.silence_matches(rec, RESOLVED)  # switch comes from the root cause, as correlation matches it
    assert not views.silence_matches({**rec, "matchers": {"job_id": "j2"}}, RESOLVED)
    store = incident_store()
    store.apply("silences", rec, "s")
    assert views.alert_detail(store, "a1", T0 + 1)["matching_silences"] == ["s"]  # type: ignore[index]
    assert views.alert_detail(store, "a1", T0 + 61)["matching_silences"] == []  # type: ignore[index]


def test_the_seven_answers_examine_the_slowdown_even_when_another_alert_came_later() -> None:
    store, inv = incident_store(), inventory()
    skew = {**ALERT, "alert_id": "k1", "type": "clock_skew", "dedup_key": "clock_skew/j1", "symptom": None,
            "started_at": "2025-11-30T11:49:00.000Z", "detected_at": "2025-11-30T11:49:01.000Z",
            "root_cause": {"domain": "unknown", "layer": "host", "source": "n2", "labels": {}, "metric": "offset",
                           "first_seen": "2025-11-30T11:49:00.000Z", "reason": "clock of n2 is 2 s off"},
            "timeline": []}
    store.apply("alerts", skew)
    d = views.diagnosis(store, inv, "j1")
    assert d is not None and d["alert_id"] == "a1" and d["domain"] == "network"
    assert views.job_status(store, inv, "j1")["status"] == "degraded"  # the clock-skew alert fires
    assert views.diagnosis(store, inv, "j1", "k1")["alert_id"] == "k1"  # type: ignore[index]
