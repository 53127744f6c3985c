"""Per-job correlation on event time: :class:`Correlator` and the names the rest of Lockstep imports.

The code lives in :mod:`streams.correlation` (one module per rule, the watermark, the timeline, the
domain table); this module keeps the import path ``streams.correlate`` that agents, the local runner,
views and tests use.
"""

from __future__ import annotations

from streams.correlation.config import CorrelatorConfig
from streams.correlation.correlator import Correlator
from streams.correlation.evidence import (
    CAUSAL_RANK,
    MEANING_RANK,
    NETWORK_MEANINGS,
    PHYSICAL_FIRST,
    causal_rank,
    evidence_order,
    first_mover,
    timing_uncertainty,
)
from streams.correlation.keys import alert_id_for, dedup_key
from streams.correlation.rule import CorrelatorOutput
from streams.correlation.rules.slowdown import Incident
from streams.correlation.timeline import Episode, EpisodeKey, JobTimeline, episode_key
from streams.correlation.watermark import ALIVE_S

__all__ = [
    "ALIVE_S", "CAUSAL_RANK", "MEANING_RANK", "NETWORK_MEANINGS", "PHYSICAL_FIRST", "Correlator", "CorrelatorConfig",
    "CorrelatorOutput", "Episode", "EpisodeKey", "Incident", "JobTimeline", "alert_id_for", "causal_rank",
    "dedup_key", "episode_key", "evidence_order", "first_mover", "timing_uncertainty",
]
