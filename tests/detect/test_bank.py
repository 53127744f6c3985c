"""DetectorBank: counter semantics, episodes with hysteresis, snapshot, memory per series."""

from __future__ import annotations

import numpy as np

from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig
from streams.series import RowIndex


def feed(bank: DetectorBank, sid: int, values: list[float], t0: float = 0.0,
         dt: float = 10.0) -> list[tuple[int, float]]:
    out = []
    for k, v in enumerate(values):
        tr = bank.update(np.array([sid]), np.array([t0 + dt * k]), np.array([v]))
        out += [(int(p), float(o)) for p, o in zip(tr.phase, tr.onset_ts, strict=True)]
    return out


def bank(**kw: object) -> DetectorBank:
    return DetectorBank(DetectorConfig(min_samples=10, **kw))  # type: ignore[arg-type]


def test_an_error_counter_on_a_clean_link_is_anomalous_from_its_first_increments() -> None:
    b = bank(confirm=1)
    b.register(0, Mode.ERRORS, Direction.UP)
    out = feed(b, 0, [0.0] * 30 + [0.05])
    assert out == [(1, 300.0)]
    assert b.last_scores.score[0] >= 0.5


def test_error_scores_scale_with_the_rate() -> None:
    b = bank(confirm=1)
    for sid in (0, 1):
        b.register(sid, Mode.ERRORS, Direction.UP)
    for k in range(30):
        b.update(np.array([0, 1]), np.array([10.0 * k] * 2), np.zeros(2))
    b.update(np.array([0, 1]), np.array([300.0, 300.0]), np.array([0.1, 5.0]))
    low, high = b.last_scores.score
    assert 0.5 <= low < high <= 1.0


def test_a_link_that_always_errs_is_judged_against_its_own_baseline() -> None:
    b = bank()
    b.register(0, Mode.ERRORS, Direction.UP)
    rng = np.random.default_rng(0)
    assert feed(b, 0, list(20 + rng.normal(0, 1, 100))) == []
    assert feed(b, 0, [60.0, 61.0, 62.0], t0=1000.0)[:1] == [(1, 1000.0)]


def test_a_congestion_counter_rate_needs_a_real_change_against_its_baseline() -> None:
    b = bank()
    b.register(0, Mode.RATE, Direction.UP)
    rng = np.random.default_rng(1)
    assert feed(b, 0, list(1000 + rng.normal(0, 30, 100))) == []
    assert feed(b, 0, [1050.0, 1080.0], t0=1000.0) == []  # within noise and under 20 %
    assert feed(b, 0, [3000.0, 3100.0], t0=1020.0) == [(1, 1020.0)]


def test_only_the_bad_direction_counts_and_context_never_scores() -> None:
    b = bank()
    b.register(0, Mode.LEVEL, Direction.DOWN)  # e.g. utilisation
    b.register(1, Mode.CONTEXT, Direction.DOWN)
    rng = np.random.default_rng(2)
    base = list(80 + rng.normal(0, 1, 60))
    assert feed(b, 0, [*base, 200.0, 200.0]) == []
    assert feed(b, 1, [*base, 0.0, 0.0]) == []
    assert feed(b, 0, [10.0, 10.0], t0=1000.0) == [(1, 1000.0)]


def test_episode_needs_confirm_samples_and_clears_after_clear_normal_ones() -> None:
    b = bank(confirm=2, confirm_window=2, clear=3)  # the strict rule (k of n: tests/detect/test_confirm.py)
    b.register(0, Mode.LEVEL, Direction.UP)
    rng = np.random.default_rng(3)
    base = list(10 + rng.normal(0, 0.2, 60))
    assert feed(b, 0, [*base, 30.0, 10.0]) == []  # one bad sample: no episode
    out = feed(b, 0, [30.0, 30.0, 30.0, 10.0, 10.0, 10.0], t0=1000.0)
    assert out == [(1, 1000.0), (0, 1030.0)]  # an end carries the time of its first normal sample


def test_events_fire_on_a_change_to_a_non_zero_value() -> None:
    b = bank(confirm=1)
    b.register(0, Mode.EVENT, Direction.UP)
    assert feed(b, 0, [0.0, 0.0, 79.0]) == [(1, 20.0)]


def test_transitions_carry_rolling_percentiles_and_snapshot_round_trips() -> None:
    cfg = DetectorConfig(min_samples=10)
    a = DetectorBank(cfg)
    a.register(0, Mode.LEVEL, Direction.UP)
    rng = np.random.default_rng(4)
    vals = list(10 + rng.normal(0, 0.2, 80)) + [40.0] * 5 + [10.0] * 10
    feed(a, 0, vals[:50])
    b = DetectorBank(cfg)
    b.restore(a.snapshot(1))
    ta = [a.update(np.array([0]), np.array([10.0 * k]), np.array([v])) for k, v in enumerate(vals[50:], 50)]
    tb = [b.update(np.array([0]), np.array([10.0 * k]), np.array([v])) for k, v in enumerate(vals[50:], 50)]
    starts = [t for t in ta if t.pos.size and t.phase[0] == 1]
    assert starts and 9 < float(starts[0].p50[0]) < 11
    for x, y in zip(ta, tb, strict=True):
        assert np.array_equal(x.phase, y.phase) and np.array_equal(x.score, y.score)


def test_state_is_at_most_2_kb_per_series_at_100k_series() -> None:
    b = DetectorBank(DetectorConfig())
    b.register(99_999, Mode.LEVEL, Direction.UP)
    parts = b.nbytes_per_series()
    assert sum(parts.values()) <= 2048, parts


def test_a_round_larger_than_the_chunk_runs_in_chunks_with_the_same_result_to_the_bit() -> None:
    """Chunking a large round is a cache optimisation only: transitions (positions in the round's arrays),
    per-row scores and every state array equal those of one pass over the whole round."""
    modes = [Mode.LEVEL, Mode.RATE, Mode.ERRORS, Mode.EVENT, Mode.CONTEXT]
    n = 37
    whole, chunked = bank(), bank()
    chunked.chunk = 5  # 8 chunks, the last of 2 rows
    assert whole.chunk >= n
    for b in (whole, chunked):
        for sid in range(n):
            b.register(sid, modes[sid % len(modes)], (Direction.UP, Direction.DOWN, Direction.BOTH)[sid % 3])
    rng = np.random.default_rng(7)
    starts = ends = 0
    for k in range(120):
        ids = rng.permutation(n)[: rng.integers(n // 2, n + 1)]  # unique, unordered, a varying count
        x = rng.normal(50.0, 2.0, ids.shape[0])
        if 40 <= k < 50:
            x[ids % 4 == 0] += 400.0  # episodes start (and end after) in several chunks at once
        ts = np.full(ids.shape[0], 10.0 * k)
        a, b = whole.update(ids, ts, x), chunked.update(ids, ts, x)
        for f in ("pos", "phase", "onset_ts", "value", "score", "p50", "p99"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        np.testing.assert_array_equal(whole.last_scores.score, chunked.last_scores.score)
        np.testing.assert_array_equal(whole.last_scores.novelty, chunked.last_scores.novelty)
        starts += int(a.phase.sum())
        ends += int((a.phase == 0).sum())
    assert starts > 0 and ends > 0  # the comparison covered transitions, not only quiet rounds
    sa, sb = whole.snapshot(n), chunked.snapshot(n)
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


def test_a_quiet_round_leaves_what_the_full_episode_path_leaves_to_the_bit() -> None:
    """The shortcut for a round with no bad row and no series in an episode (most rounds) is a cost
    optimisation only: outputs and every state array equal, byte for byte, those of the full path."""
    modes = [Mode.LEVEL, Mode.RATE, Mode.ERRORS, Mode.EVENT, Mode.CONTEXT]
    n = 40
    short, full = bank(), bank()
    quiet = [0]

    def full_path(ids: np.ndarray, sel: RowIndex, ts: np.ndarray, x: np.ndarray, ev: object,
                  run: np.ndarray) -> object:
        quiet[0] += 1
        return full._episodes(ids, sel, ts, x, ev, full.last_scores.score, full.mode[ids],
                              np.zeros(ids.shape[0], dtype=bool), full.state[ids], run)

    full._quiet = full_path  # type: ignore[method-assign,assignment]
    for b in (short, full):
        for sid in range(n):
            b.register(sid, modes[sid % len(modes)], (Direction.UP, Direction.DOWN, Direction.BOTH)[sid % 3])
    rng = np.random.default_rng(11)
    for k in range(150):
        ids = rng.permutation(n)[: rng.integers(1, n + 1)]
        x = rng.normal(50.0, 2.0, ids.shape[0])
        x[ids % 5 == 2] = 0.0  # clean fault counters
        x[ids % 5 == 3] = 0.0  # quiet events
        if 60 <= k < 64:
            x[ids % 7 == 0] += 400.0  # episodes: their rounds and the ones until they clear take the full path
        ts = np.full(ids.shape[0], 15.0 * k) + rng.uniform(-20.0, 0.0, ids.shape[0])  # some samples late
        a, b = short.update(ids, ts, x), full.update(ids, ts, x)
        for f in ("pos", "phase", "onset_ts", "value", "score", "p50", "p99"):
            assert getattr(a, f).dtype == getattr(b, f).dtype and getattr(a, f).tobytes() == getattr(b, f).tobytes(), f
        assert short.last_scores.score.tobytes() == full.last_scores.score.tobytes()
        assert short.last_scores.novelty.tobytes() == full.last_scores.novelty.tobytes()
    assert 50 < quiet[0] < 150  # both paths were taken
    sa, sb = short.snapshot(n), full.snapshot(n)
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and sa[key].tobytes() == sb[key].tobytes(), key


def test_a_round_of_every_mode_scores_each_series_as_a_round_of_its_mode_alone() -> None:
    """A round mixing levels, clean and erring fault counters, events and context scores every series as a
    round of its mode alone (the series are independent), and the scorer never sees an event or a context
    row: an event's score is its change, a context series never scores (only its percentiles are kept)."""
    # (the clean counter after the rows the scorer does not judge: its row among those judged is not its row)
    modes = [Mode.LEVEL, Mode.EVENT, Mode.CONTEXT, Mode.ERRORS, Mode.ERRORS, Mode.LEVEL]
    rng = np.random.default_rng(3)
    steps = 60
    values = np.column_stack([
        50 + rng.normal(0, 1, steps),  # a level that jumps at the end
        np.r_[np.zeros(steps - 8), np.full(8, 43.0)],  # an XID
        100 + rng.normal(0, 1, steps),  # context that jumps too: never scores
        np.r_[np.zeros(steps - 5), np.full(5, 0.2)],  # a clean link that starts to err
        5 + rng.normal(0, 0.5, steps),  # a link that always errs
        np.r_[20 + rng.normal(0, 1, steps - 6), np.full(6, 80.0)],
    ])
    values[-6:, 0] += 40.0
    values[-6:, 2] += 900.0

    def run(groups: list[list[int]]) -> tuple[dict[int, list[float]], dict[int, list[tuple[int, float]]], DetectorBank]:
        scores: dict[int, list[float]] = {sid: [] for sid in range(len(modes))}
        episodes: dict[int, list[tuple[int, float]]] = {sid: [] for sid in range(len(modes))}
        banks = []
        for group in groups:
            b = bank()
            banks.append(b)
            for sid in group:
                b.register(sid, modes[sid], Direction.UP)
            ids = np.array(group)
            for k in range(steps):
                tr = b.update(ids, np.full(ids.size, 10.0 * k), values[k, group])
                for sid, s in zip(group, b.last_scores.score.tolist(), strict=True):
                    scores[sid].append(s)
                for pos, phase, onset in zip(tr.pos.tolist(), tr.phase.tolist(), tr.onset_ts.tolist(), strict=True):
                    episodes[group[pos]].append((phase, onset))
        return scores, episodes, banks[0]

    mixed_scores, mixed_episodes, mixed = run([list(range(len(modes)))])
    alone_scores, alone_episodes, _ = run([[sid] for sid in range(len(modes))])
    assert mixed_scores == alone_scores and mixed_episodes == alone_episodes
    assert mixed_episodes[0] and mixed_episodes[1] and mixed_episodes[3] and mixed_episodes[5]
    assert not mixed_episodes[2] and not any(mixed_scores[2])  # context
    counts = mixed.scorer.snapshot(len(modes))["robust.count"]
    assert counts[[0, 3, 4, 5]].tolist() == [steps] * 4 and counts[[1, 2]].tolist() == [0, 0]
    assert np.isfinite(mixed.percentiles(np.array([1, 2]), (50.0,))[0]).all()  # their percentiles are kept
