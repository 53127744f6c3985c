"""The contract every scorer keeps (streams/scorers/base.py): range, determinism, snapshot, skill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from streams.scorers.base import Scorer
from streams.scorers.hst import HalfSpaceTreesScorer, HSTConfig
from streams.scorers.robust import RobustConfig, RobustScorer


@dataclass
class Stream:
    """A labelled synthetic stream: ``x[t, s]`` for ``n_series`` series, ``label[t, s]`` anomalous rows."""

    ts: np.ndarray
    x: np.ndarray
    label: np.ndarray


def labelled_stream(seed: int, n_series: int = 6, steps: int = 1500, dim: int = 1) -> Stream:
    """Noise around a daily shape (5-minute steps), with spikes and level shifts at known places."""
    rng = np.random.default_rng(seed)
    ts = 1_700_000_000.0 + 300.0 * np.arange(steps)
    day = np.sin(2 * np.pi * (ts % 86400) / 86400)[:, None, None]
    x = 10.0 + 3.0 * day + rng.normal(0, 0.3, (steps, n_series, dim))
    label = np.zeros((steps, n_series), dtype=bool)
    for s in range(n_series):
        for _ in range(4):
            t = int(rng.integers(steps // 4, steps - 20))
            if dim == 1:
                x[t, s] += rng.choice([-1, 1]) * rng.uniform(4, 8)
            else:  # each feature normal on its own, the combination is not
                x[t, s, 0] += 4.0
                x[t, s, 1] -= 4.0
            label[t, s] = True
        if dim == 1:
            t = int(rng.integers(steps // 2, steps - steps // 10))
            x[t:, s] += 5.0
            label[t, s] = True
    return Stream(ts, x if dim > 1 else x[:, :, 0], label)


def auc(scores: np.ndarray, label: np.ndarray) -> float:
    """Probability that an anomalous row outscores a normal one (ties count half)."""
    pos, neg = scores[label], scores[~label]
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[int], Scorer]
    dim: int


def _robust(seed: int, slot_scale: bool = False) -> Scorer:
    s = RobustScorer(RobustConfig(slot_scale=slot_scale))
    for sid in range(6):
        s.register(sid)
    return s


def _robust_slots(seed: int) -> Scorer:
    return _robust(seed, slot_scale=True)


def _hst(seed: int) -> Scorer:
    s = HalfSpaceTreesScorer(HSTConfig(min_samples=150, seed=seed), dim=2)
    for sid in range(6):
        s.register(sid)
    return s


CASES = [Case("robust", _robust, 1), Case("robust+slots", _robust_slots, 1), Case("hst", _hst, 2)]


def run(scorer: Scorer, stream: Stream, start: int = 0, stop: int | None = None) -> np.ndarray:
    stop = stream.ts.shape[0] if stop is None else stop
    ids = np.arange(stream.x.shape[1])
    out = [scorer.update(ids, np.full(ids.size, stream.ts[t]), stream.x[t]) for t in range(start, stop)]
    return np.array(out)


@pytest.fixture(params=CASES, ids=lambda c: c.name)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def test_every_scorer_keeps_the_protocol(case: Case) -> None:
    assert isinstance(case.make(1), Scorer)
    assert 0.0 < case.make(1).threshold < 1.0


def test_scores_are_finite_and_in_the_unit_interval(case: Case) -> None:
    stream = labelled_stream(1, steps=700, dim=case.dim)
    stream.x[350, 0] = 1e12  # absurd but finite input must not break the range
    scores = run(case.make(1), stream)
    assert np.isfinite(scores).all()
    assert (scores >= 0).all() and (scores <= 1).all()


def test_same_seed_same_scores(case: Case) -> None:
    stream = labelled_stream(2, steps=600, dim=case.dim)
    assert np.array_equal(run(case.make(7), stream), run(case.make(7), stream))


def test_snapshot_round_trip_gives_identical_scores(case: Case) -> None:
    stream = labelled_stream(3, steps=800, dim=case.dim)
    a = case.make(5)
    run(a, stream, 0, 400)
    b = case.make(5)
    b.restore(a.snapshot())
    assert np.array_equal(run(a, stream, 400), run(b, stream, 400))


def test_better_than_chance_on_a_labelled_stream(case: Case) -> None:
    stream = labelled_stream(4, dim=case.dim)
    scores = run(case.make(11), stream)
    warm = slice(300, None)
    assert auc(scores[warm], stream.label[warm]) > 0.8


# -- the same contract through the bank production runs (streams.detect.DetectorBank) ------------------
from streams.catalogue import Direction, Mode  # noqa: E402
from streams.detect import SCORERS, DetectorBank, DetectorConfig  # noqa: E402
from streams.scorers.base import SeriesScorer  # noqa: E402

#: The robust scorer with its opt-in per-slot scale, as a scorer of its own for the bank's contract.
SLOTS = "robust+slots"


def config_for(name: str) -> DetectorConfig:
    return DetectorConfig(scorer="robust" if name == SLOTS else name, min_samples=100, slot_scale=name == SLOTS)


def bank_for(name: str, n: int = 6) -> DetectorBank:
    bank = DetectorBank(config_for(name))
    for sid in range(n):
        bank.register(sid, Mode.LEVEL, Direction.BOTH)
    return bank


def run_bank(bank: DetectorBank, stream: Stream, start: int = 0, stop: int | None = None
             ) -> tuple[np.ndarray, list[tuple[int, int, float]]]:
    """Per-step scores and the episode transitions (step, series, phase) the bank reported."""
    stop = stream.ts.shape[0] if stop is None else stop
    ids = np.arange(stream.x.shape[1])
    scores, transitions = [], []
    for t in range(start, stop):
        tr = bank.update(ids, np.full(ids.size, stream.ts[t]), stream.x[t])
        scores.append(bank.last_scores.score.copy())
        transitions += [(t, int(ids[p]), int(ph)) for p, ph in zip(tr.pos.tolist(), tr.phase.tolist(), strict=True)]
    return np.array(scores), transitions


@pytest.fixture(params=[*sorted(SCORERS), SLOTS])
def scorer_name(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def test_every_registered_scorer_keeps_the_series_contract(scorer_name: str) -> None:
    bank = bank_for(scorer_name)
    assert isinstance(bank.scorer, SeriesScorer)
    assert 0.0 < bank.scorer.threshold < 1.0


def test_through_the_bank_scores_stay_in_range(scorer_name: str) -> None:
    stream = labelled_stream(4, steps=900)
    stream.x[450, 1] = 1e12  # absurd but finite
    scores, transitions = run_bank(bank_for(scorer_name), stream)
    assert np.isfinite(scores).all() and (scores >= 0).all() and (scores <= 1).all()
    assert all(phase in (0, 1) for _, _, phase in transitions)


def test_the_default_scorer_finds_the_spikes_through_the_bank() -> None:
    """Skill is not part of the contract: measured through the bank on this stream, the robust scorer's AUC is
    0.89-0.91, river's HalfSpaceTrees per series 0.40-0.61 (no better than chance univariate: docs/detection.md),
    so it stays selectable for evaluation and is not the default."""
    stream = labelled_stream(4, steps=900)
    scores, transitions = run_bank(bank_for("robust"), stream)
    assert auc(scores[300:], stream.label[300:]) > 0.8
    assert any(phase == 1 for _, _, phase in transitions)


def test_through_the_bank_a_snapshot_round_trip_gives_identical_transitions(scorer_name: str) -> None:
    stream = labelled_stream(5, steps=700)
    a = bank_for(scorer_name)
    run_bank(a, stream, 0, 350)
    b = DetectorBank(config_for(scorer_name))
    b.restore(a.snapshot(6))
    sa, ta = run_bank(a, stream, 350)
    sb, tb = run_bank(b, stream, 350)
    assert np.array_equal(sa, sb) and ta == tb


def test_the_round_trips_cover_the_robust_scorers_per_slot_scale() -> None:
    """The snapshot round trips above are taken where the robust scorer's slot scales are in use (the
    stream is 5-minute samples with a daily shape: at step 350, 29 hours in, every slot was seen on a
    second day), so they cover that state; and a cleared series has none."""
    stream = labelled_stream(5, steps=700)
    a = bank_for(SLOTS)
    run_bank(a, stream, 0, 350)
    assert "detect.robust.slot_mad" not in bank_for("robust").snapshot(6)  # off by default: no such state
    slots = a.snapshot(6)["detect.robust.slot_mad"]
    assert (slots > 0).any(axis=1).all()  # in use in every series
    a.clear(np.array([2]))
    assert (a.snapshot(6)["detect.robust.slot_mad"][2] == 0).all()


def test_through_the_bank_a_cleared_series_starts_afresh(scorer_name: str) -> None:
    stream = labelled_stream(6, steps=500)
    used = bank_for(scorer_name)
    run_bank(used, stream, 0, 400)
    used.clear(np.array([2]))
    fresh = bank_for(scorer_name)
    one = Stream(stream.ts[400:], stream.x[400:, 2:3], stream.label[400:, 2:3])
    reused = DetectorBank(config_for(scorer_name))
    reused.restore(used.snapshot(6))
    got = [reused.update(np.array([2]), np.array([t]), x).phase.tolist() or reused.last_scores.score.tolist()
           for t, x in zip(one.ts.tolist(), one.x, strict=True)]
    want = [fresh.update(np.array([2]), np.array([t]), x).phase.tolist() or fresh.last_scores.score.tolist()
            for t, x in zip(one.ts.tolist(), one.x, strict=True)]
    assert got == want


def test_an_unknown_scorer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        DetectorBank(DetectorConfig(scorer="nope"))
