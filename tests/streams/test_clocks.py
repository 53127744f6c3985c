"""ClockTracker: its incremental medians equal the plain numpy definition, observation by observation."""

from __future__ import annotations

import math
import random
from collections import deque

import numpy as np
import pytest

from streams.clocks import MIN_SOURCES_FOR_REFERENCE, PEER_SECONDS, RECOMPUTE_EVERY, ClockConfig, ClockTracker


class ReferenceClocks:
    """The definition in the module docstring, written with np.median and no incremental state."""

    def __init__(self, cfg: ClockConfig) -> None:
        self.cfg = cfg
        self.by_second: dict[int, dict[str, float]] = {}
        self.delays: dict[str, deque[float]] = {}
        self.since: dict[str, int] = {}
        self.stats: dict[str, tuple[float, float]] = {}
        self.skewed: dict[str, bool] = {}
        self.newest = -(2**62)

    def observe(self, source: str, delay: float, ts: float) -> list[tuple[str, str]]:
        sec = math.floor(ts)
        self.by_second.setdefault(sec, {})[source] = delay
        if sec > self.newest:
            self.newest = sec
            if len(self.by_second) > 2 * PEER_SECONDS:
                for old in [k for k in self.by_second if k < sec - PEER_SECONDS]:
                    del self.by_second[old]
        peers = self.by_second[sec]
        if len(peers) < MIN_SOURCES_FOR_REFERENCE:
            return []
        d = self.delays.setdefault(source, deque(maxlen=self.cfg.window))
        d.append(delay - float(np.median(list(peers.values()))))
        self.since[source] = self.since.get(source, 0) + 1
        if len(d) < self.cfg.min_samples or (self.since[source] < RECOMPUTE_EVERY and len(d) != self.cfg.min_samples):
            return []
        self.since[source] = 0
        med = float(np.median(np.asarray(d)))
        mad = float(np.median(np.abs(np.asarray(d) - med)))
        self.stats[source] = (-med, 1.4826 * mad)
        skewed = abs(med) > self.cfg.tolerance_s + 1.4826 * mad
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
    for step in range(400):
        sec = 1_764_500_000 + step // 3 + (rng.random() < 0.05) * rng.randint(-150, 0)  # some late seconds
        src = rng.choice(sources)
        # the same source twice in one second replaces its delay; some flap between skewed and not
        flap = skew[src] if (step // 60) % 2 == 0 else 0.0
        delay = 0.05 + rng.random() * 0.02 - flap
        got = [(t.source, t.phase) for t in fast.observe_delay("gpu", src, delay, sec + 0.5)]
        assert got == ref.observe(src, delay, sec + 0.5), step
    for s in sources:
        if s in ref.stats:
            off, unc = fast.offset(s)
            assert off == pytest.approx(ref.stats[s][0], abs=1e-12)
            assert unc == pytest.approx(ref.stats[s][1], abs=1e-12)
    assert any(fast.skewed(s) for s in sources) or not any(skew.values())


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
