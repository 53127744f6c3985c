"""ClockTracker: its incremental medians equal the plain numpy definition, observation by observation;
which sources are judged does not depend on arrival order; late delivery is not a skew."""

from __future__ import annotations

import math
import random
from collections import deque
from itertools import permutations

import numpy as np
import pytest

from streams.clocks import (
    MIN_SOURCES_FOR_REFERENCE,
    PEER_SECONDS,
    RECOMPUTE_EVERY,
    STABLE_FRACTION,
    ClockConfig,
    ClockTracker,
)


class ReferenceClocks:
    """The definition in the module docstring, written with np.median and no incremental state."""

    def __init__(self, cfg: ClockConfig) -> None:
        self.cfg = cfg
        self.by_second: dict[int, dict[str, tuple[float, float]]] = {}
        self.delays: dict[str, deque[float]] = {}
        self.since: dict[str, int] = {}
        self.stats: dict[str, tuple[float, float]] = {}
        self.skewed: dict[str, bool] = {}
        self.newest = -(2**62)

    def observe(self, source: str, delay: float, ts: float) -> list[tuple[str, str]]:
        sec = math.floor(ts)
        previous = self.by_second.get(sec, {}).get(source)
        self.by_second.setdefault(sec, {})[source] = (delay, ts)
        if sec > self.newest:
            self.newest = sec
            if len(self.by_second) > 2 * PEER_SECONDS:
                for old in [k for k in self.by_second if k < sec - PEER_SECONDS]:
                    del self.by_second[old]
        peers = self.by_second[sec]
        if len(peers) < MIN_SOURCES_FOR_REFERENCE:
            return []
        reference = float(np.median([d for d, _ in peers.values()]))
        if len(peers) == MIN_SOURCES_FOR_REFERENCE and previous is None:
            return [t for member in sorted(peers) for t in self.judge(member, peers[member][0] - reference)]
        return self.judge(source, delay - reference)

    def judge(self, source: str, relative: float) -> list[tuple[str, str]]:
        d = self.delays.setdefault(source, deque(maxlen=self.cfg.window))
        d.append(relative)
        self.since[source] = self.since.get(source, 0) + 1
        if len(d) < self.cfg.min_samples or (self.since[source] < RECOMPUTE_EVERY and len(d) != self.cfg.min_samples):
            return []
        self.since[source] = 0
        med = float(np.median(np.asarray(d)))
        mad = float(np.median(np.abs(np.asarray(d) - med)))
        self.stats[source] = (-med, 1.4826 * mad)
        unc = 1.4826 * mad
        skewed = abs(med) > self.cfg.tolerance_s + unc and unc <= self.cfg.tolerance_s + STABLE_FRACTION * abs(med)
        if skewed == self.skewed.get(source, False):
            return []
        self.skewed[source] = skewed
        return [(source, "start" if skewed else "end")]


@pytest.mark.parametrize("seed", range(5))
def test_incremental_medians_equal_the_definition(seed: int) -> None:
    rng = random.Random(seed)
    cfg = ClockConfig(min_samples=5, window=12)
    fast, ref = ClockTracker(cfg), ReferenceClocks(cfg)
    sources = [f"n{i}" for i in range(9)]
    skew = {s: (rng.choice([0.0, 0.0, -3.0, 1.5]) if rng.random() < 0.4 else 0.0) for s in sources}
    started: set[str] = set()
    for step in range(400):
        sec = 1_764_500_000 + step // 3 + (rng.random() < 0.05) * rng.randint(-150, 0)  # some late seconds
        src = rng.choice(sources)
        # the same source twice in one second replaces its delay; some flap between skewed and not
        flap = skew[src] if (step // 150) % 2 == 0 else 0.0
        delay = 0.05 + rng.random() * 0.02 - flap
        got = [(t.source, t.phase) for t in fast.observe_delay("gpu", src, delay, sec + 0.5)]
        assert got == ref.observe(src, delay, sec + 0.5), step
        started |= {s for s, phase in got if phase == "start"}
    for s in sources:
        if s in ref.stats:
            off, unc = fast.offset(s)
            assert off == pytest.approx(ref.stats[s][0], abs=1e-12)
            assert unc == pytest.approx(ref.stats[s][1], abs=1e-12)
    assert started or not any(skew.values())  # the run exercised skews


def test_snapshot_restore_keeps_offsets() -> None:
    c = ClockTracker(ClockConfig(min_samples=3))
    for t in range(20):
        for s, d in (("a", 0.05), ("b", 0.06), ("c", 6.05)):
            c.observe_delay("gpu", s, d, 1000.0 + t)
    again = ClockTracker(ClockConfig(min_samples=3))
    again.restore(c.snapshot())
    assert again.offset("c") == pytest.approx(c.offset("c"))
    assert again.skewed("c") and not again.skewed("a")
    # observations after a restore start new peer seconds (no state from before is needed)
    assert again.observe_delay("gpu", "a", 0.05, 2000.0) == []


@pytest.mark.parametrize("order", list(permutations("abc")))
def test_every_source_of_a_complete_second_is_judged_whatever_arrives_first(order: tuple[str, ...]) -> None:
    """Three sources, gpu c 6 s behind: whichever order they arrive in, c is found skewed and a, b are not
    (before, only the third arrival of each second was ever compared, so c was found only when it came last)."""
    c = ClockTracker(ClockConfig(min_samples=5))
    delays = {"a": 0.05, "b": 0.06, "c": 6.05}
    for t in range(12):
        for s in order:
            c.observe_delay("gpu", s, delays[s], 1000.0 + t)
    assert c.skewed("c") and not c.skewed("a") and not c.skewed("b")
    assert c.offset("c")[0] == pytest.approx(-6.0, abs=0.02)
    assert all(len(c.sources[s].delays) == 12 for s in "abc")


def test_late_delivery_is_not_a_clock_skew() -> None:
    """A source whose messages arrive 20-40 s late (varying from message to message) is late, not skewed;
    the same source with a steady 6 s offset is skewed."""
    rng = random.Random(3)
    late, steady = ClockTracker(ClockConfig()), ClockTracker(ClockConfig())
    for t in range(60):
        for s in ("a", "b", "d"):
            late.observe_delay("nic", s, 0.05 + rng.random() * 0.01, 1000.0 + t)
            steady.observe_delay("nic", s, 0.05 + rng.random() * 0.01, 1000.0 + t)
        late.observe_delay("nic", "c", 20.0 + rng.random() * 20.0, 1000.0 + t)
        steady.observe_delay("nic", "c", 6.05 + rng.random() * 0.01, 1000.0 + t)
    assert not late.skewed("c") and "c" in late.late_sources()
    assert 20.0 < late.late_sources()["c"] < 40.0
    assert steady.skewed("c") and steady.late_sources() == {}
    again = ClockTracker(ClockConfig())
    again.restore(late.snapshot())
    assert "c" in again.late_sources() and not again.skewed("c")


@pytest.mark.parametrize("seed", range(30))
def test_median_delays_per_message_and_source_whatever_the_order(seed: int) -> None:
    """The clocks stage's groups: one per (message, source), in ascending order, with the median delay and
    the latest time, for rows already grouped with delays in order (no sort taken) and for any order."""
    from streams.stages.clocks import median_delays

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    pair = np.sort(rng.integers(0, 8, n)) if seed % 3 == 0 else rng.integers(0, 8, n)
    delay = rng.choice([0.5, 1.0, 1.5, 2.0], n) if seed % 2 else rng.normal(1.0, 1.0, n)
    if seed % 3 == 0:  # grouped, each group's delays in order: the path without a sort
        delay = np.concatenate([np.sort(delay[pair == p]) for p in np.unique(pair)])
    t = rng.uniform(0, 100, n)
    first, medians, latest = median_delays(pair, delay, t)
    keys = np.unique(pair)
    assert pair[first].tolist() == keys.tolist()
    assert medians.tolist() == [float(np.median(delay[pair == p])) for p in keys]
    assert latest.tolist() == [float(t[pair == p].max()) for p in keys]
