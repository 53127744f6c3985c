"""The correlation watermark after a lull: finite always, moving again when input resumes.

Live, each input partition's worker reports its progress at least once a second and says when the
partition is idle (nothing fetched for ``idle_s``). Timeline (seconds after T, two inputs)::

    o1 progress   10 .. 40 | idle (paused) .......... | 100 ..
    o2 progress   10 .. 40 | idle (paused) .......... | 100 ..
    watermark      8 .. 38 | 38 (held at the data)    | 98 ..     never +inf, never behind once data resumes

The runaway this guards against: with every input idle the watermark became ``+inf``, froze
timelines and stats, fired symptoms without their grace, and a snapshot carried ``inf`` into the restart.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from streams.correlate import Correlator
from streams.jobs import JobPartition
from tests.streams.test_correlate_basics import CFG, NCCL, STEP, SWITCH, T, inv


def heartbeat(now_wall: float, idle: bool = False, **origins: float) -> tuple[dict[str, Any], float]:
    names = sorted(origins)
    return ({"type": "watermark", "origins": {o: T + v for o, v in origins.items()},
             "idle": names if idle else []}, now_wall)


def play(corr: Correlator, records: list[tuple[dict[str, Any], float]]) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = []
    for rec, now in records:
        alerts += corr.on_record(rec, now).alerts
    return alerts


def test_idle_inputs_hold_the_watermark_at_the_data_not_at_infinity() -> None:
    corr = Correlator(CFG, inv())
    play(corr, [heartbeat(0.0, o1=40, o2=40)])
    assert corr.watermark == T + 38
    # Both inputs paused: their workers say so (idle) for a minute of wall time, then stop mentioning them.
    play(corr, [heartbeat(float(t), idle=True, o1=40, o2=40) for t in range(11, 70)])
    assert corr.watermark == T + 38 and math.isfinite(corr.watermark)
    corr.tick(500.0)  # orphaned (not mentioned for longer than orphan_hold_s): still the data's progress
    assert corr.watermark == T + 38


def test_an_idle_input_releases_the_hold_of_the_ones_still_sending() -> None:
    corr = Correlator(CFG, inv())
    play(corr, [heartbeat(0.0, o1=40, o2=40), heartbeat(1.0, o1=60), heartbeat(1.0, idle=True, o2=40)])
    assert corr.watermark == T + 58


def test_after_a_lull_correlation_resumes_with_its_grace_and_no_early_verdict() -> None:
    corr = Correlator(CFG, inv())
    play(corr, [heartbeat(0.0, o1=5, o2=5)])
    play(corr, [heartbeat(float(t), idle=True, o1=5, o2=5) for t in range(11, 80)])
    # Input resumes: evidence at T+10..T+18, the verdict only once the watermark passes O + grace (T+23).
    out = play(corr, [(SWITCH, 81.0), (NCCL, 81.0), (STEP, 81.0), heartbeat(81.0, o1=24, o2=24)])
    assert out == [] and corr.watermark == T + 22
    out = play(corr, [heartbeat(82.0, o1=26, o2=26)])
    assert [(a["type"], a["status"], a["root_cause"]["source"]) for a in out] == [("job_slowdown", "firing", "leaf1")]


def test_a_lull_and_a_restart_keep_the_watermark_finite_and_moving() -> None:
    part = JobPartition(CFG, inv())
    part.on_record(heartbeat(0.0, o1=40, o2=40)[0], 0.0)
    for t in range(11, 80):
        part.on_record(heartbeat(float(t), idle=True, o1=40, o2=40)[0], float(t))
    copy = JobPartition(CFG, part.correlator.inventory)
    copy.restore(part.snapshot(), 100.0)
    assert copy.watermark == T + 38
    res = copy.on_record(heartbeat(101.0, o1=50, o2=50)[0], 101.0)
    assert copy.watermark == T + 48
    assert [r["ts"] for r in res.timelines] == []  # no points were sent; the lanes simply follow


def test_an_infinite_watermark_from_an_older_snapshot_is_repaired() -> None:
    corr = Correlator(CFG, inv())
    play(corr, [heartbeat(0.0, o1=40, o2=40)])
    snap = corr.snapshot()
    snap["watermark"] = "inf"  # what versions with the runaway watermark wrote
    copy = Correlator(CFG, corr.inventory)
    copy.restore(snap, 0.0)
    assert copy.watermark == T + 38 and copy.repaired_watermark
    play(copy, [heartbeat(1.0, o1=60, o2=60)])
    assert copy.watermark == T + 58


@pytest.mark.parametrize("progress", [1e300, -1.0, 0.0])
def test_progress_that_is_no_event_time_is_rejected(progress: float) -> None:
    corr = Correlator(CFG, inv())
    with pytest.raises(ValueError, match="not a valid event time"):
        corr.on_record({"type": "watermark", "origins": {"o1": progress}}, 0.0)
    assert corr.watermark == -math.inf


def test_replay_end_of_input_flushes_everything_and_snapshots_finite() -> None:
    corr = Correlator(CFG, inv(), expected_origins={"o1", "o2"})
    play(corr, [(SWITCH, 0.0), (STEP, 0.0), heartbeat(0.0, o1=19, o2=19)])
    out = corr.on_record({"type": "watermark", "origins": {}, "eos": ["o1", "o2"]}, 0.0)
    assert out.finished and [a["status"] for a in out.alerts] == ["firing"]
    assert corr.horizon == math.inf and corr.watermark == T + 19
    assert corr.snapshot()["watermark"] == T + 19


def test_an_input_no_worker_has_mentioned_since_a_restore_holds_until_its_owner_speaks() -> None:
    """A rebalance: the correlation state is restored from a snapshot taken when only o1 had spoken, while
    o2 (the partition with the job's step times) is between owners. o1 racing ahead must not move the
    watermark (a job_stalled would page for the job whose step times are on o2) until o2's new owner
    reports it, or for at most orphan_hold_s."""
    early = JobPartition(CFG, inv())  # its snapshot knows o1 only, at T+10 (watermark T+8)
    early.on_record(heartbeat(0.0, o1=10)[0], 0.0)
    copy = JobPartition(CFG, early.correlator.inventory, inputs={"o1", "o2"})
    copy.restore(early.snapshot(), 100.0)
    for t in range(101, 110):
        copy.on_record(heartbeat(float(t), o1=10 + 10 * (t - 100))[0], float(t))
    held = copy.watermark
    copy.on_record(heartbeat(110.0, o2=30)[0], 110.0)  # the new owner speaks: the least progress leads
    assert (held, copy.watermark) == (T + 8, T + 28)
    # Without the inputs known (what the worker did before): the watermark followed o1 alone.
    blind = JobPartition(CFG, early.correlator.inventory)
    blind.restore(early.snapshot(), 100.0)
    blind.on_record(heartbeat(101.0, o1=100)[0], 101.0)
    assert blind.watermark == T + 98


def test_an_input_between_owners_holds_for_at_most_the_orphan_hold() -> None:
    corr = Correlator(CFG, inv(), inputs={"o1", "o2"})
    play(corr, [heartbeat(0.0, o1=10), heartbeat(30.0, o1=40)])
    assert corr.watermark == -math.inf  # o2 never mentioned: nothing runs ahead of it
    play(corr, [heartbeat(CFG.orphan_hold_s + 1.0, o1=50)])
    assert corr.watermark == T + 48  # no owner came in time: correlation goes on without it


def test_an_owned_input_without_data_is_mentioned_idle_and_holds_nothing() -> None:
    corr = Correlator(CFG, inv(), inputs={"o1", "o2"})
    play(corr, [({"type": "watermark", "origins": {"o1": T + 40}, "idle": ["o2"]}, 0.0)])
    assert corr.watermark == T + 38
