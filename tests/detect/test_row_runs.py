"""Rows of a round taken as a slice (one ascending run of consecutive rows) or as an index array: the
same outputs and state to the bit (:func:`streams.series.run_index`).

A slice reads a view of the bank's arrays where an index array reads a copy: a read used after the
same rows are written would see the new values on one path only. These tests run the same rounds
through the slice path and, with it switched off, through the array path, and compare everything."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import streams.detect
import streams.sketch
from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig, Transitions
from streams.series import RowIndex, run_index

MODES = [Mode.LEVEL, Mode.RATE, Mode.ERRORS, Mode.EVENT, Mode.CONTEXT]
N = 48


def test_run_index_is_a_slice_only_for_one_ascending_run_of_consecutive_rows() -> None:
    assert run_index(np.array([7])) == slice(7, 8)
    assert run_index(np.arange(3, 9)) == slice(3, 9)
    for ids in ([], [4, 3], [3, 5], [3, 5, 4, 6], [2, 4, 3, 5], [5, 6, 8]):
        arr = np.array(ids, dtype=np.int64)
        got = run_index(arr)
        assert isinstance(got, np.ndarray) and got is arr, ids


def rounds(seed: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Rounds of contiguous ascending rows (most), of the same rows shuffled, and of scattered rows, with
    episodes starting and ending (the full episode path) between quiet stretches, late samples (the
    sketch's panes), clean fault counters and events."""
    rng = np.random.default_rng(seed)
    for k in range(260):
        lo = int(rng.integers(0, N // 2))
        hi = int(rng.integers(lo + 1, N + 1)) if k % 4 else N
        kind = k % 7
        ids = np.arange(lo, hi)
        if kind == 5:
            ids = rng.permutation(ids)
        elif kind == 6:
            ids = np.sort(rng.permutation(N)[: rng.integers(1, N)])
        x = rng.normal(50.0, 2.0, ids.shape[0])
        x[ids % 5 == 2] = 0.0  # clean fault counters
        x[ids % 5 == 3] = np.where(rng.random(np.count_nonzero(ids % 5 == 3)) < 0.05, 3.0, 0.0)  # XIDs now and then
        if 120 <= k < 126 or 200 <= k < 203:
            x[ids % 4 == 0] += 500.0  # episodes
        if k in (150, 151):
            x[ids % 5 == 2] = 7.0  # errors on clean links
        ts = 20.0 * k + rng.uniform(-25.0, 0.0, ids.shape[0])  # some samples late, some a pane late
        ts[rng.random(ids.shape[0]) < 0.02] -= 150.0  # and a few too late to count (dropped)
        yield ids, ts, x


def new_bank() -> DetectorBank:
    b = DetectorBank(DetectorConfig(min_samples=10, window=30))
    for sid in range(N):
        b.register(sid, MODES[sid % len(MODES)], (Direction.UP, Direction.DOWN, Direction.BOTH)[sid % 3])
    return b


def run(seed: int) -> tuple[list[tuple[Transitions, np.ndarray, np.ndarray, dict[str, np.ndarray]]], int]:
    bank = new_bank()
    out = []
    for ids, ts, x in rounds(seed):
        tr = bank.update(ids, ts, x)
        out.append((tr, bank.last_scores.score.copy(), bank.last_scores.novelty.copy(), bank.snapshot(N)))
    return out, bank.sketch.dropped


@pytest.mark.parametrize("seed", [3, 17])
def test_rounds_of_consecutive_rows_give_what_the_index_array_path_gives_to_the_bit(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The slice path, with its use counted: runs on the quiet path and on the episode path.
    taken = {"quiet": 0, "episodes": 0}
    quiet, episodes = DetectorBank._quiet, DetectorBank._episodes

    def count_quiet(self: DetectorBank, ids: np.ndarray, sel: RowIndex, *a: object) -> Transitions:
        taken["quiet"] += isinstance(sel, slice)
        return quiet(self, ids, sel, *a)  # type: ignore[arg-type]

    def count_episodes(self: DetectorBank, ids: np.ndarray, sel: RowIndex, *a: object) -> Transitions:
        taken["episodes"] += isinstance(sel, slice)
        return episodes(self, ids, sel, *a)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(DetectorBank, "_quiet", count_quiet)
        m.setattr(DetectorBank, "_episodes", count_episodes)
        sliced, sliced_dropped = run(seed)
    assert taken["quiet"] > 50 and taken["episodes"] > 10, taken
    # The reference: every round through index arrays.
    with monkeypatch.context() as m:
        m.setattr(streams.detect, "run_index", lambda ids: ids)
        m.setattr(streams.sketch, "run_index", lambda ids: ids)
        arrays, arrays_dropped = run(seed)
    assert sliced_dropped == arrays_dropped > 0
    starts = ends = 0
    for k, ((ta, sa, na, snap_a), (tb, sb, nb, snap_b)) in enumerate(zip(sliced, arrays, strict=True)):
        for f in ("pos", "phase", "onset_ts", "value", "score", "p50", "p99"):
            va, vb = getattr(ta, f), getattr(tb, f)
            assert va.dtype == vb.dtype and va.tobytes() == vb.tobytes(), (k, f)
        assert sa.tobytes() == sb.tobytes() and na.tobytes() == nb.tobytes(), k
        assert snap_a.keys() == snap_b.keys()
        for key in snap_a:
            assert snap_a[key].dtype == snap_b[key].dtype and snap_a[key].tobytes() == snap_b[key].tobytes(), (k, key)
        starts += int(np.count_nonzero(ta.phase == 1))
        ends += int(np.count_nonzero(ta.phase == 0))
    assert starts > 0 and ends > 0  # episodes started and ended
