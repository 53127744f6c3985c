"""Job lanes: per-second aggregates emitted only once the watermark has passed the second."""

from __future__ import annotations

import math

from streams.lanes import JobSignals, SignalsConfig, lane_of
from streams.stats import StatsConfig

T = 1764502800.0


def points(job: str, lane: str, *pts: tuple[float, float]) -> dict[str, object]:
    return {"type": "points", "job_id": job, "lanes": {lane: [[T + t, v] for t, v in pts]}, "origin": "o"}


def test_a_second_is_emitted_once_complete_with_its_spread_across_entities() -> None:
    s = JobSignals()
    s.add(points("j", "gpu_util", (0.0, 90.0), (0.2, 96.0), (0.9, 30.0)))
    s.add(points("j", "gpu_util", (1.0, 95.0)))
    assert s.advance(T + 0.5) == ([], [])  # second 0 is not over yet
    timelines, _ = s.advance(T + 1.5)
    [rec] = timelines
    assert rec["ts"] == T and rec["job_id"] == "j"
    lane = rec["lanes"]["gpu_util"]
    assert (lane["n"], lane["p50"], lane["min"], lane["max"]) == (3, 90.0, 30.0, 96.0)


def test_points_for_an_emitted_second_are_counted_late_not_merged() -> None:
    s = JobSignals()
    s.add(points("j", "step_time", (0.0, 1.0)))
    s.advance(T + 2)
    s.add(points("j", "step_time", (0.5, 9.0)))
    assert s.late_points == 1
    assert s.advance(T + 3)[0] == []


def test_step_history_keeps_the_slowest_rank_per_second_and_stats_follow_the_cadence() -> None:
    s = JobSignals(SignalsConfig(stats=StatsConfig(cadence_s=10.0, windows=(10.0,))))
    for k in range(25):
        s.add(points("j", "step_time", (k, 1.0), (k + 0.1, 1.0 + (0.5 if k >= 12 else 0.0))))
    timelines, stats = s.advance(T + 21)
    assert len(timelines) == 21  # seconds 0..20: [20, 21) is complete at watermark 21
    assert list(s.step_times("j", T + 10, T + 14)) == [1.0, 1.0, 1.5, 1.5]
    assert [r["ts"] - T for r in stats] == [20.0]
    assert stats[0]["metrics"]["step_time"]["10"]["count"] > 0


def test_end_of_input_flushes_everything() -> None:
    s = JobSignals()
    s.add(points("j", "collective_time", (3.0, 12.0)))
    timelines, _ = s.advance(math.inf)
    assert [r["ts"] for r in timelines] == [T + 3]


def test_lane_table() -> None:
    assert lane_of("nic", "retransmits") == "fabric_errors"
    assert lane_of("step", "step_time") == "step_time"
    assert lane_of("gpu", "temperature") is None
