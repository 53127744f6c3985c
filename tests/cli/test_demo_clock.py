"""The demo's clock: no event time is ever ahead of the wall clock, and the scenario still plays fast."""

from __future__ import annotations

import itertools
import math

import pytest

from lockstep.run import DEMO_MARGIN_S, demo_start, fault_banner, send_at
from lockstep.simulate import SCENARIOS, Simulator
from models.timeutil import format_ts, parse_ts

NOW = parse_ts("2026-12-01T11:42:10.37Z")


def newest_stamp(sim: Simulator, rel: int) -> float:
    """The latest time stamped on anything the simulator emits for second ``rel`` (ts and ingest_ts)."""
    newest = -math.inf
    for msg in sim.tick(float(rel)):
        records = msg.value if isinstance(msg.value, list) else [msg.value]
        for rec in records:
            newest = max(newest, rec["ts"], rec.get("ingest_ts") or -math.inf)
    return newest


@pytest.mark.parametrize("scenario", ["seed-incident", "clock-skew", "healthy-churn"])
@pytest.mark.parametrize("speed", [10.0, 20.0, 1.0, 0.5])
def test_no_event_time_is_sent_ahead_of_the_wall_clock(scenario: str, speed: float) -> None:
    sc = SCENARIOS[scenario]
    start = demo_start(NOW, sc.duration, speed)
    sim = Simulator(sc, start_ts=start, seed=7)
    assert max(m.value["ts"] for m in sim.inventory()) < NOW
    wall0 = NOW + 3.2  # the worker takes a while to start after the anchor is chosen
    for rel in range(int(sc.duration) + 30):
        assert newest_stamp(sim, rel) <= send_at(rel, start_ts=start, wall0=wall0, speed=speed), rel


@pytest.mark.parametrize("speed", [10.0, 20.0, 2.0])
def test_the_whole_scenario_plays_at_speed_then_real_time(speed: float) -> None:
    sc = SCENARIOS["seed-incident"]
    start = demo_start(NOW, sc.duration, speed)
    wall0 = NOW
    sent = [send_at(rel, start_ts=start, wall0=wall0, speed=speed) for rel in range(int(sc.duration) + 60)]
    end = int(sc.duration)
    assert sent[end] - wall0 == pytest.approx(sc.duration / speed, abs=1.0)
    steps = [b - a for a, b in itertools.pairwise(sent)]
    assert steps[:end - 10] == pytest.approx([1 / speed] * (end - 10), abs=1e-3)  # fast through the scenario
    caught_up = end + math.ceil((DEMO_MARGIN_S - 1.0) / (1 - 1 / speed)) + 1  # the margin played fast too
    assert steps[caught_up:] == pytest.approx([1.0] * len(steps[caught_up:]), abs=1e-3)  # then real time
    # At the scenario's end its event time trails the wall clock by the margin; once caught up, by the
    # second being over.
    assert sent[end] - (start + end) == pytest.approx(DEMO_MARGIN_S, abs=1.0)
    assert sent[-1] - (start + len(sent) - 1) == pytest.approx(1.0, abs=0.01)


def test_a_non_positive_speed_is_refused() -> None:
    with pytest.raises(ValueError, match="speed must be positive"):
        demo_start(NOW, 180.0, 0.0)


def test_the_banner_names_the_fault_time_of_this_run() -> None:
    sc = SCENARIOS["seed-incident"]
    start = demo_start(NOW, sc.duration, 10.0)
    banner = fault_banner(sc, start, NOW, 10.0)
    assert banner == f"first fault at {format_ts(start + 70.0)[11:19]} UTC event time, in about 7 s"
    assert "11:42:10" not in banner  # the replay file's time, not this run's
    assert fault_banner(SCENARIOS["healthy"], start, NOW, 10.0) == "no fault"
