"""snapshot_due: one snapshot per interval per input, spread over the interval across inputs."""

from __future__ import annotations

import numpy as np

from streams.snapshot import snapshot_due


def taken(name: str, times: np.ndarray, interval: float) -> list[float]:
    last: float | None = None
    out = []
    for t in times.tolist():
        if snapshot_due(name, t, last, interval):
            last = t
            out.append(t)
    return out


def test_one_snapshot_per_interval_each() -> None:
    times = np.arange(1000.0, 1100.0, 0.25)
    for name in ("gpu:0", "nic:7", "lockstep.telemetry.step:3"):
        snaps = taken(name, times, 10.0)
        assert snaps[0] == 1000.0  # the first batch is snapshotted at once
        gaps = np.diff(snaps[1:])
        assert np.allclose(gaps, 10.0)
        assert 0 < snaps[1] - snaps[0] <= 10.0


def test_inputs_that_advance_together_spread_their_snapshots() -> None:
    names = [f"lockstep.telemetry.{layer}:{p}" for layer in ("gpu", "nic", "host", "nccl", "step", "switch", "storage")
             for p in range(8)]
    times = np.arange(1000.0, 1060.0, 1.0)  # one scrape a second, all inputs in step
    per_second: dict[float, int] = {}
    for name in names:
        for t in taken(name, times, 10.0)[1:]:
            per_second[t] = per_second.get(t, 0) + 1
    # 56 inputs, 10 s interval: about 5.6 a second instead of 56 every tenth second
    assert max(per_second.values()) <= 15
    assert len([t for t in per_second if 1010 <= t < 1020]) >= 8


def test_a_catch_up_spreads_the_snapshots_the_wall_floor_lets_through() -> None:
    """A catch-up: event time runs 20x wall time and every input's first snapshot fell in the worker's first
    batch. The wall floor (10 s) lets each input one snapshot a cell, the cells shifted per input: the inputs
    do not all come due again in the same batch a floor later, and none snapshots twice within a cell."""
    names = [f"lockstep.telemetry.{layer}:{p}" for layer in ("gpu", "nic", "host", "nccl", "step", "switch", "storage")
             for p in range(8)]
    walls = np.arange(0.0, 60.0, 0.25)  # a batch every 0.25 s of wall time
    per_batch: dict[float, int] = {}
    for name in names:
        last: float | None = None
        last_wall: float | None = None
        taken_at = []
        for now in walls.tolist():
            if snapshot_due(name, 1000.0 + 20 * now, last, 10.0, now=now, last_wall=last_wall, wall_floor_s=10.0):
                last, last_wall = 1000.0 + 20 * now, now
                taken_at.append(now)
        assert taken_at[0] == 0.0  # the first batch at once
        gaps = np.diff(taken_at)
        assert len(taken_at) == 7 and gaps.min() > 0 and np.allclose(gaps[1:], 10.0)  # one a cell after the first
        for now in taken_at[1:]:
            per_batch[now] = per_batch.get(now, 0) + 1
    # 56 inputs, one snapshot each per 10 s: spread over the cell (40 batches) instead of 56 in one batch
    assert max(per_batch.values()) <= 8
    assert len([t for t in per_batch if 10 <= t < 20]) >= 20
