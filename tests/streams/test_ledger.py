"""The GPU-time lost ledger (streams/ledger.py) on small hand-checked incidents.

Timelines are drawn one character per 10 s from T0: ``X`` the incident fires, ``>`` it still fires
at the end of the drawing (no resolved record yet); the figures beside them are worked by hand.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from models.alerts import Alert, AlertStatus, Domain, RootCause, Severity, Symptom
from models.timeutil import format_ts
from streams.ledger import Entity, Ledger, LedgerEntry, LedgerError, entities_of, entry_of, parse_window

T0 = 1_764_504_000.0  # 2025-11-30T12:00:00Z, on the hour
STEP = 10.0
TIERS = {"leaf03": "leaf", "leaf04": "leaf", "spine1": "spine"}
PORT = {"layer": "switch", "source": "leaf03", "labels": {"port": "17"}, "domain": "network"}


def alert(alert_id: str, job: str, gpus: int, ratio: float, start: float, end: float | None,
          root: dict[str, Any] = PORT, kind: str = "job_slowdown") -> dict[str, Any]:
    """A real alert record (validated by the contract), as the correlator emits it."""
    a = Alert(alert_id=alert_id, dedup_key=f"d/{alert_id}", type=kind,  # type: ignore[arg-type]
              status=AlertStatus.RESOLVED if end is not None else AlertStatus.FIRING, severity=Severity.ERROR,
              job_id=job, gpus=gpus, nodes=[], started_at=format_ts(start), detected_at=format_ts(start + 30),
              resolved_at=format_ts(end) if end is not None else None,
              symptom=Symptom(layer="step", metric="step_time_seconds", baseline=1.0, value=ratio, ratio=ratio,
                              onset=format_ts(start)),
              root_cause=RootCause(domain=Domain(root["domain"]), layer=root["layer"], source=root["source"],
                                   labels=root["labels"], metric="m", first_seen=format_ts(start)),
              timeline=[], summary="s")
    return a.model_dump(mode="json")


def drawn(line: str) -> tuple[float, float | None]:
    """``'..XXXX..'`` -> (start, end) event times; ``'..XXX>'`` -> (start, None)."""
    first = line.index("X")
    if line.endswith(">"):
        return T0 + first * STEP, None
    return T0 + first * STEP, T0 + (line.rindex("X") + 1) * STEP


def ledger_of(*alerts: dict[str, Any]) -> Ledger:
    led = Ledger()
    for a in alerts:
        entry = entry_of(a, TIERS)
        assert entry is not None
        led.add(entry)
    return led


def rows(led: Ledger, by: str, now: float, window_s: float | None = None) -> dict[str, float]:
    return {r["id"]: r["gpu_seconds"] for r in led.rollup(by, now, window_s)["rows"]}


def test_one_resolved_incident_costs_gpus_times_the_fraction_lost_times_its_duration() -> None:
    #            0         1
    line = "..XXXXXX...."  # 60 s at step time x2: half of 256 GPUs' time waits
    led = ledger_of(alert("a", "llm", 256, 2.0, *drawn(line)))
    now = T0 + len(line) * STEP
    assert rows(led, "entity", now) == {"leaf03:17": 7680.0, "leaf03": 7680.0}
    assert rows(led, "port", now) == {"leaf03:17": 7680.0}
    assert rows(led, "leaf", now) == {"leaf03": 7680.0}
    assert rows(led, "job", now) == {"llm": 7680.0} and rows(led, "domain", now) == {"network": 7680.0}
    top = led.rollup("leaf", now)
    assert top["gpu_hours"] == round(7680 / 3600, 4) and top["incidents"] == 1
    assert top["rows"][0]["fixed"] and top["rows"][0]["jobs"] == ["llm"]


def test_a_firing_incident_costs_up_to_now_and_a_window_cuts_it() -> None:
    led = ledger_of(alert("a", "llm", 8, 1.25, T0, None))  # 8 GPUs x 0.2 = 1.6 GPU-s per second, still firing
    assert rows(led, "job", T0 + 100) == {"llm": 160.0}
    assert rows(led, "job", T0 + 7200, window_s=3600) == {"llm": 5760.0}  # only the last hour
    top = led.rollup("entity", T0 + 100)["rows"][0]
    assert top["open"] == 1 and not top["fixed"]


def test_a_job_loses_a_second_once_the_worst_overlapping_incident_is_charged() -> None:
    slow = "XXXXXXXXXX....."  # 0..100 s, x2 -> 0.5
    strag = ".....XXXXXXXXXX"  # 50..150 s, x1.25 -> 0.2, on a node
    node = {"layer": "step", "source": "gpu006", "labels": {"rank": "40"}, "domain": "compute"}
    led = ledger_of(alert("s", "j", 8, 2.0, *drawn(slow)),
                    alert("t", "j", 8, 1.25, *drawn(strag), root=node, kind="straggler"))
    now = T0 + 200
    # 8 x 0.5 x 100 + 8 x 0.2 x (150 - 100): the straggler is charged only after the slowdown ended
    assert rows(led, "job", now) == {"j": 480.0}
    assert rows(led, "entity", now) == {"leaf03:17": 400.0, "leaf03": 400.0, "gpu006": 80.0}
    assert rows(led, "domain", now) == {"network": 400.0, "compute": 80.0}
    assert led.rollup("node", now)["rows"][0]["incidents"] == 1


def test_two_jobs_behind_one_leaf_add_up_on_the_leaf() -> None:
    other_port = {"layer": "switch", "source": "leaf03", "labels": {"port": "5"}, "domain": "network"}
    led = ledger_of(alert("a", "j1", 16, 2.0, T0, T0 + 10),  # 16 x 0.5 x 10 = 80
                    alert("b", "j2", 4, 4.0, T0, T0 + 20, root=other_port))  # 4 x 0.75 x 20 = 60
    now = T0 + 60
    assert rows(led, "leaf", now) == {"leaf03": 140.0}
    assert rows(led, "port", now) == {"leaf03:17": 80.0, "leaf03:5": 60.0}
    assert [r["id"] for r in led.rollup("port", now)["rows"]] == ["leaf03:17", "leaf03:5"]  # largest first


def test_a_resolved_record_replaces_the_firing_one_and_a_late_firing_one_does_not() -> None:
    firing, resolved = alert("a", "j", 8, 2.0, T0, None), alert("a", "j", 8, 2.0, T0, T0 + 10)
    led = ledger_of(firing, resolved)
    assert len(led.entries) == 1 and rows(led, "job", T0 + 1000) == {"j": 40.0}
    entry = entry_of(firing, TIERS)
    assert entry is not None and not led.add(entry)  # redelivered late: the resolved version stays
    revised = dict(resolved, root_cause=dict(resolved["root_cause"], source="leaf04"))
    entry = entry_of(revised, TIERS)
    assert entry is not None and led.add(entry)  # a revision in stream order replaces
    assert rows(led, "leaf", T0 + 1000) == {"leaf04": 40.0}


def test_a_reopened_incident_is_a_second_entry_of_the_same_alert() -> None:
    led = ledger_of(alert("a", "j", 8, 2.0, T0, T0 + 10), alert("a", "j", 8, 2.0, T0 + 100, T0 + 130))
    assert len(led.entries) == 2
    assert rows(led, "job", T0 + 200) == {"j": 40.0 + 120.0}


def test_merging_per_partition_ledgers_in_any_order_gives_the_single_ledger_exactly() -> None:
    rnd = random.Random(7)
    roots = [PORT, {"layer": "nic", "source": "gpu014", "labels": {"device": "mlx5_0"}, "domain": "network"},
             {"layer": "storage", "source": "lustre-a", "labels": {}, "domain": "storage"},
             {"layer": "switch", "source": "spine1", "labels": {"port": "3"}, "domain": "network"}]
    alerts = []
    for i in range(40):
        start = T0 + rnd.randrange(0, 20_000)
        end = None if i % 7 == 0 else start + rnd.randrange(10, 4000)
        alerts.append(alert(f"a{i}", f"job{i % 6}", rnd.choice([8, 64, 256]), rnd.choice([1.1, 1.5, 2.0, 3.0]),
                            start, end, root=roots[i % len(roots)]))
    whole = ledger_of(*alerts)
    now = T0 + 30_000
    expect = {(by, w): whole.rollup(by, now, w) for by in ("entity", "job", "domain", "leaf") for w in (None, 3600.0)}
    parts = [[a for a in alerts if int(a["job_id"][3:]) % 3 == p] for p in range(3)]  # by job, as partitions are
    for order in itertools.permutations(range(3)):
        merged = Ledger()
        for p in order:
            merged.merge(ledger_of(*parts[p]))
        merged.merge(ledger_of(*parts[order[0]]))  # a partition read twice changes nothing
        assert {k: merged.rollup(k[0], now, k[1]) for k in expect} == expect
    assert whole.rollup("entity", now)["gpu_seconds"] > 0


def test_merge_of_two_versions_is_the_same_whichever_comes_first() -> None:
    a, b = entry_of(alert("a", "j", 8, 2.0, T0, None), TIERS), entry_of(alert("a", "j", 8, 2.0, T0, T0 + 10), TIERS)
    assert a is not None and b is not None
    one, two = Ledger([a, b]), Ledger([b, a])
    assert one.entries == two.entries and one.entries[b.key].end == T0 + 10


def test_the_capacity_record_round_trips_and_bad_ones_are_refused() -> None:
    entry = entry_of(alert("a", "j", 8, 2.0, T0, T0 + 10), TIERS)
    assert entry is not None
    rec = entry.to_record()
    assert rec["gpu_seconds"] == 40.0 and rec["duration_s"] == 10.0 and rec["fraction_lost"] == 0.5
    assert rec["entities"] == [{"kind": "port", "id": "leaf03:17"}, {"kind": "leaf", "id": "leaf03"}]
    assert LedgerEntry.from_record(rec) == entry
    firing = entry_of(alert("a", "j", 8, 2.0, T0, None), TIERS)
    assert firing is not None and firing.to_record()["gpu_seconds"] is None  # it depends on when you ask
    for bad in ({**rec, "type": "alert"}, {k: v for k, v in rec.items() if k != "onset"},
                {**rec, "end": rec["onset"] - 1}, {**rec, "onset": math.inf}, {**rec, "entities": []}):
        with pytest.raises(LedgerError):
            LedgerEntry.from_record(bad)


def test_alerts_that_are_not_about_step_time_cost_nothing() -> None:
    base = alert("a", "j", 8, 2.0, T0, T0 + 10)
    for kind in ("clock_skew", "gpu_utilisation", "checkpoint_contention"):
        assert entry_of(dict(base, type=kind), TIERS) is None
    assert entry_of(dict(base, job_id=None), TIERS) is None
    faster = entry_of(alert("a", "j", 8, 0.8, T0, T0 + 10), TIERS)
    assert faster is not None and faster.gpu_seconds(T0) == 0.0


def test_entities_name_the_root_cause_and_its_container() -> None:
    assert entities_of({"layer": "gpu", "source": "gpu005", "labels": {"gpu": "3"}}, {}) == (
        Entity("gpu", "gpu005:3"), Entity("node", "gpu005"))
    assert entities_of({"layer": "host", "source": "gpu003", "labels": {}}, {}) == (Entity("node", "gpu003"),)
    assert entities_of({"layer": "switch", "source": "sw9", "labels": {"port": "1"}}, {}) == (
        Entity("port", "sw9:1"), Entity("switch", "sw9"))  # a switch the inventory has no tier for


def test_hourly_buckets_split_an_incident_at_the_hour() -> None:
    led = ledger_of(alert("a", "j", 10, 2.0, T0 + 3000, T0 + 4200))  # 5 GPU-s per second, 600 s each side
    assert led.buckets("leaf", T0 + 7200, 3600.0, T0) == {("leaf", "leaf03"): [3000.0, 3000.0]}


def test_eviction_drops_incidents_that_ended_before_the_horizon() -> None:
    led = ledger_of(alert("a", "j", 8, 2.0, T0, T0 + 10), alert("b", "j", 8, 2.0, T0 + 100, None),
                    alert("c", "k", 8, 2.0, T0 + 50, T0 + 60))
    assert led.evict(T0 + 55) == 1 and sorted(e.alert_id for e in led.entries.values()) == ["b", "c"]
    assert led.evict(-math.inf, max_entries=1) == 1 and [e.alert_id for e in led.entries.values()] == ["b"]


def test_windows_and_groupings_are_validated() -> None:
    assert parse_window("24h") == parse_window("day") == 86_400.0
    for bad in ("7", "0d", "7x", "-1d", "1.5h"):
        with pytest.raises(LedgerError):
            parse_window(bad)
    with pytest.raises(LedgerError):
        Ledger().rollup("rack", T0)
    assert Ledger().rollup("entity", T0, 3600.0)["rows"] == []


def test_the_charged_total_equals_a_second_by_second_count() -> None:
    """Whole-second incidents, overlapping at random: the sweep's total is the sum over every second and
    job of the GPUs times the largest fraction lost among the job's incidents active in that second."""
    rnd = random.Random(3)
    alerts, spans = [], []
    for i in range(60):
        start = T0 + rnd.randrange(0, 400)
        end = start + rnd.randrange(1, 120)
        job, gpus, ratio = f"j{i % 4}", 8 * (i % 4 + 1), rnd.choice([1.25, 2.0, 4.0, 5.0])
        alerts.append(alert(f"a{i}", job, gpus, ratio, start, end))
        spans.append((job, gpus, (ratio - 1) / ratio, start, end))
    led = ledger_of(*alerts)
    now, window = T0 + 600, 300.0
    expect = 0.0
    for sec in range(int(now - window), int(now)):
        for job in {s[0] for s in spans}:
            live = [(g, f) for j, g, f, a, b in spans if j == job and a <= sec < b]
            if live:
                expect += max(live, key=lambda x: x[1])[0] * max(f for _, f in live)
    assert led.rollup("job", now, window)["gpu_seconds"] == pytest.approx(expect, rel=1e-9)
