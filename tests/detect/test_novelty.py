"""The novelty output of the robust scorer: what it calls new on series that do nothing new."""

from __future__ import annotations

import numpy as np

from streams.scorers.robust import RobustConfig, RobustScorer


def _novelty(cfg: RobustConfig, x: np.ndarray) -> np.ndarray:
    s = RobustScorer(cfg)
    s.register(0)
    ids = np.array([0])
    return np.array([s.update_detail(ids, np.array([300.0 * t]), x[t:t + 1]).novelty[0] for t in range(x.size)])


def test_no_burst_of_novelty_when_a_long_warm_up_ends() -> None:
    """The largest surprise is remembered from once the scale has settled, not from the end of warm-up.

    Remembered only from the end of a long warm-up (300 samples here), it is the maximum of a handful
    of samples, and the next ordinary sample beats it: 5.75 % of the 20 samples after warm-up scored
    novelty >= 0.5 on plain Gaussian noise (16x the rate later on). Now they score at most a few times
    the later rate (records of a range seen for 300 samples are more frequent than of one seen longer).
    """
    cfg = RobustConfig.for_window(100, min_samples=300, bins=0)
    early = later = 0
    seeds = 40
    for seed in range(seeds):
        x = 10.0 + np.random.default_rng(seed).normal(size=900)
        nov = _novelty(cfg, x)
        assert not (nov[:300] > 0).any()  # nothing scores during warm-up
        early += int((nov[300:320] >= 0.5).sum())
        later += int((nov[320:] >= 0.5).sum())
    early_rate, later_rate = early / (seeds * 20), later / (seeds * 580)
    assert early_rate <= 0.025
    assert early_rate <= 5 * later_rate


def test_a_surprise_beyond_what_was_seen_still_scores_after_warm_up() -> None:
    """The surprise memory learning before warm-up ends does not blind novelty to a real spike."""
    cfg = RobustConfig.for_window(100, min_samples=300, bins=0)
    x = 10.0 + np.random.default_rng(7).normal(size=600)
    x[450] += 12.0  # 12 standard deviations: beyond every value and surprise seen
    nov = _novelty(cfg, x)
    assert nov[450] >= 0.5


def test_an_event_scores_once_and_again_only_where_it_outgrows_itself() -> None:
    """Rows each a hair beyond the last are one event; a row far beyond it is a new one."""
    cfg = RobustConfig.for_window(100, min_samples=150, bins=0)
    rng = np.random.default_rng(3)
    x = 10.0 + rng.normal(size=800)
    span = float(x[:600].max() - x[:600].min())
    top = float(x[:600].max())
    x[600:603] = top + span * np.array([0.3, 0.32, 0.34])  # past the range, then creeping on: one event
    x[603:620] = 10.0
    x[620] = top + span * 1.2  # far beyond the event: new again
    nov = _novelty(cfg, x)
    assert nov[600] >= 0.5
    assert (nov[601:603] < 0.5).all()
    assert nov[620] >= 0.5


def test_the_novelty_value_weight_scales_only_the_values_exceedance() -> None:
    """A lone sample beyond its range (the means still inside theirs) scores less with a lower weight;
    1.0 is the unweighted novelty bit for bit, and the weight is the bank's setting."""
    from dataclasses import replace

    from streams.detect import DetectorConfig

    x = 10.0 + np.random.default_rng(9).normal(size=3000)
    x[2500] = x[:2500].max() + 0.4 * np.ptp(x[:2500])  # one sample 40 % of the span beyond the high
    cfg = RobustConfig.for_window(100, min_samples=150)
    plain = _novelty(cfg, x)
    assert np.array_equal(_novelty(replace(cfg, novelty_value_weight=1.0), x), plain)
    weak = _novelty(replace(cfg, novelty_value_weight=0.35), x)
    assert plain[2500] > weak[2500] > 0.0
    assert DetectorConfig(novelty_value_weight=0.35).robust().novelty_value_weight == 0.35
