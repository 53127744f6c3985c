"""Episode confirmation is k of n, the onset is the first bad sample of the run, and one good sample
does not end an episode (hysteresis)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from streams.catalogue import Direction, Mode
from streams.detect import DetectorBank, DetectorConfig


def run(pattern: str, cfg: DetectorConfig | None = None, warm: int = 200) -> list[tuple[int, float]]:
    """Feed ``warm`` noisy samples, then ``pattern``: ``x`` a spike, ``.`` a normal sample."""
    bank = DetectorBank(cfg or DetectorConfig())
    bank.register(0, Mode.LEVEL, Direction.UP)
    rng = np.random.default_rng(0)
    xs = list(100.0 + rng.normal(0, 1, warm)) + [100.0 + (40.0 if c == "x" else rng.normal(0, 1)) for c in pattern]
    out = []
    for t, v in enumerate(xs):
        tr = bank.update(np.array([0]), np.array([float(t)]), np.array([v]))
        out += [(int(tr.phase[k]), float(tr.onset_ts[k]) - warm) for k in range(tr.pos.size)]
    return out


def test_two_of_three_bad_samples_start_an_episode_at_the_first_bad_one() -> None:
    assert run("x.x" + "." * 10)[:1] == [(1, 0.0)]
    assert run("xx" + "." * 10)[:1] == [(1, 0.0)]


def test_bad_samples_further_apart_than_the_window_are_no_episode() -> None:
    assert run("x..x..x..x" + "." * 10) == []


def test_strict_consecutive_confirmation_is_the_case_n_equals_k() -> None:
    strict = replace(DetectorConfig(), confirm=2, confirm_window=2)
    assert run("x.x.x" + "." * 10, strict) == []
    assert run("xx" + "." * 10, strict)[:1] == [(1, 0.0)]


def test_one_good_sample_does_not_end_an_episode() -> None:
    eps = run("xxxx.xxxx.xxxx" + "." * 12)
    assert [p for p, _ in eps] == [1, 0]
    assert eps[1][1] == 14.0  # ended by the first of the ``clear`` good samples after the last bad one


def test_a_window_beyond_the_history_is_refused() -> None:
    with pytest.raises(ValueError, match="confirm_window"):
        DetectorBank(replace(DetectorConfig(), confirm_window=31))


def test_a_level_shift_becomes_the_new_normal_after_about_a_window() -> None:
    """A lasting shift is one episode, not an alert forever: once the episode outlived ``window``
    samples the baseline learns the new level and the episode ends."""
    cfg = DetectorConfig()
    for shift in (100.0, -50.0, 40.0):
        bank = DetectorBank(cfg)
        bank.register(0, Mode.LEVEL, Direction.BOTH)
        rng = np.random.default_rng(1)
        out = []
        for t in range(2000):
            x = 100.0 + rng.normal(0, 1) + (shift if t >= 300 else 0.0)
            tr = bank.update(np.array([0]), np.array([10.0 * t]), np.array([x]))
            out += [(int(tr.phase[k]), t) for k in range(tr.pos.size)]
        assert [p for p, _ in out] == [1, 0], (shift, out)
        assert out[0][1] <= 301 and out[1][1] <= 300 + cfg.window + cfg.clear + 20, (shift, out)
