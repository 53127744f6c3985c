"""Before and after a resolved incident (streams/before_after.py) on drawn per-second lanes.

    step_time (slowest rank)   1.0 ........ 2.0 ........ 1.0 .....
    fabric_errors (worst)      0 .......... 40 ......... 0 .......
                               T0          T0+100       T0+160     T0+220
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.timeutil import format_ts
from streams.before_after import MIN_SECONDS, compare_series, effect, effects
from streams.ledger import Ledger, entry_of
from streams.readstore import ReadStore

T0 = 1_764_502_800.0


def lanes(step: float, errors: float) -> dict[str, dict[str, float]]:
    return {"step_time": {"n": 8, "p50": step * 0.95, "p99": step, "min": step * 0.9, "max": step},
            "fabric_errors": {"n": 8, "p50": 0.0, "p99": errors, "min": 0.0, "max": errors}}


def store_with(until: float = 220, noise: float = 0.02) -> ReadStore:
    rng = np.random.default_rng(7)
    store = ReadStore()
    for t in range(0, int(until)):
        bad = 100 <= t < 160
        step = (2.0 if bad else 1.0) + rng.normal(0, noise)
        store.apply("timelines", {"job_id": "j1", "ts": T0 + t, "lanes": lanes(step, 40.0 if bad else 0.0)})
    return store


def resolved(start: float = 100, end: float = 160) -> Ledger:
    alert: dict[str, Any] = {
        "alert_id": "a1", "type": "job_slowdown", "status": "resolved", "job_id": "j1", "gpus": 16,
        "started_at": format_ts(T0 + start), "detected_at": format_ts(T0 + start), "resolved_at": format_ts(T0 + end),
        "symptom": {"baseline": 1.0, "value": 2.0, "ratio": 2.0, "onset": format_ts(T0 + start)},
        "root_cause": {"domain": "network", "layer": "switch", "source": "l1", "labels": {"port": "2"}}}
    entry = entry_of(alert, {"l1": "leaf"})
    assert entry is not None
    return Ledger([entry])


def test_step_time_halves_after_the_fix_and_the_port_stops_erroring_with_a_tight_interval() -> None:
    store, led = store_with(), resolved()
    (entry,) = led.entries.values()
    out = effect(store.lanes["j1"], entry, window_s=60)
    assert out["held"] and out["cause_lane"] == "fabric_errors"
    st = out["step_time"]
    assert (st["baseline"]["n"], st["during"]["n"], st["after"]["n"]) == (60, 60, 60)
    assert abs(st["during"]["mean"] - 2.0) < 0.01 and abs(st["after"]["mean"] - 1.0) < 0.01
    assert abs(st["change"] + 1.0) < 0.01 and st["significant"] and abs(st["relative"] + 0.5) < 0.01
    low, high = st["ci95"]
    assert low < st["change"] < high < 0 and high - low < 0.03  # 60 s of noise 0.02 each side
    vs = st["vs_baseline"]
    assert abs(vs["change"]) < 0.01 and not vs["significant"]  # back to where it was
    cause = out["cause"]
    assert (cause["during"]["mean"], cause["after"]["mean"], cause["change"]) == (40.0, 0.0, -40.0)


def test_a_short_after_window_is_cut_at_the_latest_second_and_too_little_gives_nulls() -> None:
    (entry,) = resolved().entries.values()
    out = effect(store_with(until=180).lanes["j1"], entry, window_s=300)
    assert out["step_time"]["after"]["n"] == 20 and out["step_time"]["baseline"]["n"] == 100
    few = effect(store_with(until=162).lanes["j1"], entry, window_s=300)["step_time"]
    assert few["after"] == {"n": 2, "mean": None, "p50": None, "std": None} and few["change"] is None
    assert MIN_SECONDS == 3
    assert effect(None, entry)["held"] is False and effect(None, entry)["step_time"] is None


def test_effects_lists_resolved_incidents_latest_first_and_compare_series_is_welch() -> None:
    store, led = store_with(), resolved()
    out = effects(store, led, now=T0 + 220, window_s=3600, limit=5, compare_s=60)
    assert [i["alert_id"] for i in out["incidents"]] == ["a1"]
    assert effects(store, led, now=T0 + 9000, window_s=3600, limit=5)["incidents"] == []
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])
    c = compare_series(a, b)
    half = 1.96 * (1 / 3 + 1 / 3) ** 0.5  # each variance 1, each n 3
    assert c["change"] == 1.0 and c["ci95"] == [round(1 - half, 6), round(1 + half, 6)]
    assert c["significant"] is False and c["vs_baseline"] is None
