"""Source clock offsets, estimated from when samples arrive.

Every sample has an event time ``ts`` (the source's clock) and an arrival time (``ingest_ts`` when the
collector stamped it, else the Kafka record timestamp: the collector's or broker's clock). Their
difference, the *delay*, is transport latency plus the source's clock error. Samples of the same event
second from different sources of one input partition share the transport, so each delay is compared
with its peers' delays *for the same event second* (so a feed played faster or slower than real time,
where every delay drifts, cancels out)::

    relative delay = delay - median(delays of all sources for that event second)
    offset(source) = -median(relative delays of the source)

A negative offset means the source's clock is behind (its samples claim to be older than they are);
``ts - offset`` is the corrected event time. ``uncertainty`` is the spread (MAD) of the relative
delays, so a first mover is never named on a difference smaller than it.

Which sources are compared does not depend on arrival order: a second's delays are judged once
:data:`MIN_SOURCES_FOR_REFERENCE` sources have reported it, *all of them* then (the ones that arrived
first included), and every later arrival for that second at once.

**Skew or lateness.** Late delivery (a collector or exporter that ships its samples 20-40 s after it
took them) also makes a source's delays exceed its peers'. A wrong clock shifts every sample by the
same amount; delivery lateness varies from message to message. So a source is *skewed* only while
its offset is beyond the tolerance **and** stable::

    |offset| > tolerance_s + uncertainty   and   uncertainty <= tolerance_s + STABLE_FRACTION * |offset|

A source beyond the tolerance whose delays are unstable is *late*, not skewed: it is counted
(:meth:`ClockTracker.late_sources`) and never re-times evidence nor raises ``clock_skew``. A
delivery delay that is constant for a whole window cannot be told from a clock behind by arrival
times alone (docs/correlation.md says so). Time is an input; nothing reads a clock.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from streams.quantiles import median_sorted

#: A delay is compared with its peers' only when at least this many sources (itself included) reported
#: the same event second (the median of the group is the reference).
MIN_SOURCES_FOR_REFERENCE = 3
#: Event seconds of peer delays kept.
PEER_SECONDS = 120
#: A skew is a stable offset: its uncertainty at most the tolerance plus this fraction of it.
STABLE_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class ClockConfig:
    tolerance_s: float = 0.25
    window: int = 32
    min_samples: int = 10


@dataclass(frozen=True, slots=True)
class ClockTransition:
    """A source's clock became skewed (``phase`` "start") or came back within tolerance ("end")."""

    source: str
    layer: str
    phase: str
    ts: float
    offset: float
    uncertainty: float


@dataclass
class _SourceClock:
    layer: str
    delays: deque[float] = field(default_factory=deque)
    median: float = 0.0
    mad: float = 0.0
    skewed: bool = False
    #: beyond the tolerance but unstable: delivered late, not a wrong clock
    late: bool = False
    since: int = 0  # observations since the statistics were recomputed

#: Statistics are recomputed every this many observations of a source (they move slowly).
RECOMPUTE_EVERY = 4


class ClockTracker:
    """Per-source clock statistics for one input partition.

    >>> c = ClockTracker(ClockConfig(min_samples=3))
    >>> out = []
    >>> for t in range(16):
    ...     out += c.observe("gpu", {"a": [(100.0 + t, 100.05 + t)], "b": [(100.0 + t, 100.05 + t)],
    ...                              "c": [(94.0 + t, 100.05 + t)]})
    >>> round(c.offset("c")[0], 2), round(c.offset("a")[0], 2)
    (-6.0, 0.0)
    >>> [(t.source, t.phase) for t in out]
    [('c', 'start')]
    """

    def __init__(self, config: ClockConfig | None = None) -> None:
        self.config = config or ClockConfig()
        self.sources: dict[str, _SourceClock] = {}
        #: event second -> {source: (delay, ts, layer)}: the peers a delay is compared with ...
        self.by_second: dict[int, dict[str, tuple[float, float, str]]] = {}
        #: ... and the same delays sorted (the median is read, not recomputed, per observation)
        self._sorted: dict[int, list[float]] = {}
        self.newest_second = -(2**62)

    def observe(self, layer: str, pairs: dict[str, list[tuple[float, float]]]) -> list[ClockTransition]:
        """Fold ``{source: [(ts, arrival), ...]}`` of one message; return skew transitions."""
        out = []
        for source, items in pairs.items():
            delay = float(np.median([arrival - ts for ts, arrival in items]))
            out += self.observe_delay(layer, source, delay, max(t for t, _ in items))
        return out

    def observe_delay(self, layer: str, source: str, delay: float, ts: float) -> list[ClockTransition]:
        """One message's delay for ``source`` at event time ``ts`` (a scrape shares its transport delay).

        Returns the skew transitions this observation decides: for the first one that completes a second's
        reference group, those of every source in the group (in source order); else its own."""
        sec = math.floor(ts)
        peers = self.by_second.get(sec)
        if peers is None:
            peers = self.by_second[sec] = {}
            self._sorted[sec] = []
        ordered = self._sorted[sec]
        previous = peers.get(source)
        if previous is not None:
            del ordered[bisect_left(ordered, previous[0])]
        peers[source] = (delay, ts, layer)
        insort(ordered, delay)
        if sec > self.newest_second:
            self.newest_second = sec
            if len(self.by_second) > 2 * PEER_SECONDS:
                for old in [k for k in self.by_second if k < sec - PEER_SECONDS]:
                    del self.by_second[old]
                    del self._sorted[old]
        n = len(peers)
        if n < MIN_SOURCES_FOR_REFERENCE:
            return []
        reference = median_sorted(ordered)
        if n == MIN_SOURCES_FOR_REFERENCE and previous is None:  # the group is complete: judge everyone in it
            out: list[ClockTransition] = []
            for member in sorted(peers):
                d, t, lay = peers[member]
                out += self._judge(lay, member, d - reference, t)
            return out
        return self._judge(layer, source, delay - reference, ts)

    def _judge(self, layer: str, source: str, relative: float, ts: float) -> list[ClockTransition]:
        """Fold one relative delay into ``source``'s statistics; its transition if its state changes."""
        cfg = self.config
        state = self.sources.get(source)
        if state is None:
            state = self.sources[source] = _SourceClock(layer, deque(maxlen=cfg.window))
        state.delays.append(relative)
        state.since += 1
        n = len(state.delays)
        if n < cfg.min_samples or (state.since < RECOMPUTE_EVERY and n != cfg.min_samples):
            return []
        state.since = 0
        ordered = sorted(state.delays)
        median = state.median = median_sorted(ordered)
        # (the deviations of sorted delays fall then rise: two runs, which the sort merges in one pass)
        state.mad = median_sorted(sorted([abs(d - median) for d in ordered]))
        offset, unc = self.offset(source)
        beyond = abs(offset) > cfg.tolerance_s + unc
        stable = unc <= cfg.tolerance_s + STABLE_FRACTION * abs(offset)
        skewed = beyond and stable
        state.late = beyond and not stable
        if skewed == state.skewed:
            return []
        state.skewed = skewed
        return [ClockTransition(source, state.layer, "start" if skewed else "end", ts, offset, unc)]

    def late_sources(self) -> dict[str, float]:
        """Sources whose samples arrive late (beyond the tolerance, unstable: not a clock), with their
        median delay over their peers' in seconds."""
        return {s: st.median for s, st in self.sources.items() if st.late}

    def offset(self, source: str) -> tuple[float, float]:
        """``(offset, uncertainty)`` of ``source``'s clock in seconds (0, 0 when unknown)."""
        state = self.sources.get(source)
        if state is None or len(state.delays) < self.config.min_samples:
            return 0.0, 0.0
        return 0.0 - state.median, 1.4826 * state.mad  # 0.0 - m: never -0.0

    def skewed(self, source: str) -> bool:
        state = self.sources.get(source)
        return bool(state and state.skewed)

    def snapshot(self) -> dict[str, object]:
        return {"sources": {s: [st.layer, list(st.delays), st.skewed] for s, st in self.sources.items()}}

    def restore(self, data: dict[str, object]) -> None:
        self.sources = {}
        self.by_second = {}
        self._sorted = {}
        for source, (layer, delays, skewed) in data["sources"].items():  # type: ignore[attr-defined]
            arr = np.asarray(delays, dtype=float)
            med = float(np.median(arr)) if arr.size else 0.0
            state = _SourceClock(layer, deque(delays, maxlen=self.config.window), med,
                                 float(np.median(np.abs(arr - med))) if arr.size else 0.0, bool(skewed))
            self.sources[source] = state
            offset, unc = self.offset(source)
            cfg = self.config
            state.late = abs(offset) > cfg.tolerance_s + unc and unc > cfg.tolerance_s + STABLE_FRACTION * abs(offset)
