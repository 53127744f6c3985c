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


def test_end_of_input_emits_the_stats_of_the_cadence_boundaries_the_data_passed() -> None:
    # A fast replay: the watermark can jump from before the first boundary straight to the end.
    s = JobSignals(SignalsConfig(stats=StatsConfig(cadence_s=10.0, windows=(10.0,))))
    for k in range(25):
        s.add(points("j", "step_time", (k, 1.0)))
    assert [r["ts"] - T for r in s.advance(T + 5)[1]] == [0.0]
    _, stats = s.advance(math.inf)
    # The data ends at second 24: boundary 20 is passed. (10 is passed too, but its windows were rolled
    # past by the later seconds folded in the same call: the rolling sketch reports the latest boundary.)
    assert [r["ts"] - T for r in stats] == [20.0]
    assert stats[0]["metrics"]["step_time"]["10"]["count"] > 0
    assert JobSignals().advance(math.inf) == ([], [])  # no data at all: nothing, no error


def test_lane_table() -> None:
    assert lane_of("nic", "retransmits") == "fabric_errors"
    assert lane_of("step", "step_time") == "step_time"
    assert lane_of("gpu", "temperature") is None


def workers(job: str, *pts: tuple[float, float, str]) -> dict[str, object]:
    return {"type": "points", "job_id": job, "lanes": {"step_time": [[T + t, v] for t, v, _ in pts]},
            "workers": {"step_time": [[T + t, v, w] for t, v, w in pts]}, "origin": "o"}


def feed_job(s: JobSignals, start: int, end: int, slow: dict[str, float], job: str = "j") -> list[object]:
    """Five workers report a step each second in ``[start, end)``; ``slow`` multiplies some of them."""
    events: list[object] = []
    for sec in range(start, end):
        s.add(workers(job, *[(sec + 0.1 * k, (1.0 + 0.01 * (k % 2)) * slow.get(f"w{k}", 1.0), f"w{k}")
                             for k in range(5)]))
        s.advance(T + sec + 1.5)
        events += s.peer_events
        s.peer_events = []
    return events


def test_a_worker_that_lags_its_peers_becomes_a_straggler_from_its_first_slow_bucket_then_recovers() -> None:
    s = JobSignals(SignalsConfig(peer_bucket_s=5.0))
    assert feed_job(s, 0, 100, {}) == []  # steadily similar workers: nothing
    start = feed_job(s, 100, 160, {"w3": 1.5})
    assert [(e.lane, e.transition.worker, e.transition.phase, e.transition.onset_step) for e in start] == [
        ("step_time", "w3", "start", T + 100)]
    assert start[0].workers == 5 and start[0].transition.reason == "gross"
    end = feed_job(s, 160, 220, {})
    assert [(e.transition.worker, e.transition.phase) for e in end] == [("w3", "end")]


def test_a_worker_steadily_a_little_slower_is_its_own_normal() -> None:
    s = JobSignals(SignalsConfig(peer_bucket_s=5.0))
    assert feed_job(s, 0, 300, {"w2": 1.12}) == []


def test_peer_state_survives_a_snapshot_mid_episode() -> None:
    import orjson

    a = JobSignals(SignalsConfig(peer_bucket_s=5.0))
    feed_job(a, 0, 100, {})
    feed_job(a, 100, 112, {"w3": 1.5})
    b = JobSignals(SignalsConfig(peer_bucket_s=5.0))
    b.restore(orjson.loads(orjson.dumps(a.snapshot())))
    rest_a = feed_job(a, 112, 160, {"w3": 1.5})
    rest_b = feed_job(b, 112, 160, {"w3": 1.5})
    assert [e.transition for e in rest_a] == [e.transition for e in rest_b]
    assert [e.transition.onset_step for e in rest_b] == [T + 100]


def test_a_job_that_stops_reporting_ends_its_stragglers_and_is_forgotten() -> None:
    s = JobSignals(SignalsConfig(peer_bucket_s=5.0, peer_idle_s=60.0))
    feed_job(s, 0, 60, {"w1": 1.6})
    assert s.peers["step_time"].stragglers("j") == ["w1"]
    s.add(points("other", "gpu_util", (200.0, 50.0)))
    s.advance(T + 202)
    assert [(e.transition.worker, e.transition.phase, e.transition.reason) for e in s.peer_events] == [
        ("w1", "end", "no_data")]
    assert "j" not in s.peers["step_time"].jobs and "j" not in s.peer_last


def grouped(rec: dict[str, object]) -> dict[str, object]:
    """The same points record in the grouped shape the pipeline writes ([[ts, [values]], ...])."""
    def by_ts(rows: list[list[object]], width: int) -> list[list[object]]:
        out: dict[float, list[list[object]]] = {}
        for row in rows:
            out.setdefault(float(row[0]), [[] for _ in range(width - 1)])
            for k in range(1, width):
                out[float(row[0])][k - 1].append(row[k])
        return [[ts, *cols] for ts, cols in sorted(out.items())]
    new = dict(rec)
    new["lanes"] = {lane: by_ts(rows, 2) for lane, rows in rec["lanes"].items()}  # type: ignore[attr-defined]
    if "workers" in rec:
        new["workers"] = {lane: by_ts(rows, 3) for lane, rows in rec["workers"].items()}  # type: ignore[attr-defined]
    return new


def test_grouped_and_legacy_points_give_the_same_lanes_stats_and_stragglers() -> None:
    """Points written before the grouped shape (still on the topic after an upgrade) fold the same."""
    legacy, new = JobSignals(), JobSignals()
    out_legacy, out_new = [], []
    events = 0
    for t in range(0, 120):
        recs = [workers("j", *[(t + 0.5, 1.0 + (0.8 if w == "n3/rank24" and t > 40 else 0.0) + 0.01 * (t % 3), w)
                               for w in ("n1/rank0", "n2/rank8", "n3/rank24", "n4/rank32")]),
                points("j", "gpu_util", (t + 0.1, 90.0), (t + 0.1, 91.0 + t % 5), (t + 0.7, 10.0))]
        for rec in recs:
            legacy.add(rec)
            new.add(grouped(rec))
        out_legacy.append(legacy.advance(T + t - 3))
        out_new.append(new.advance(T + t - 3))
        assert legacy.peer_events == new.peer_events
        events += len(new.peer_events)
        legacy.peer_events, new.peer_events = [], []
    assert out_legacy == out_new
    assert events  # n3/rank24 became a straggler in both
    assert any(tl for tl, _ in out_new) and any(st for _, st in out_new)
