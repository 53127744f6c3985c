"""The explicit state some formats need across messages, as one object you can snapshot and restore.

Why state at all: most formats are stateless (a scrape converts on its own). Four things are not:

- **derived ratios** (disk and NFS latency = delta time / delta ops, Lustre per-op latency, RoCE BER =
  delta errors / delta bits, CPU utilisation = delta busy / delta total seconds). The pipeline turns
  each counter into a rate *per series*; a ratio of two series' deltas cannot be made there, so the
  adapters keep the previous (ts, numerator, denominator) per group here and emit the ratio as a
  gauge. The raw counters are emitted too (the pipeline still rates them).
- **delta temporality** (Vector ``incremental`` and OTLP ``DELTA`` sums): running totals per series
  make them cumulative counters, which is what the pipeline rates.
- **NCCL Inspector v4.3** context: operation records follow a marker that carries ``header`` and
  ``metadata`` once, possibly in an earlier message of the same stream.
- **Kubernetes pods**: a job event needs all of a job's pods; pod events arrive one at a time.

Everything is keyed by strings, holds event time only, and entries idle for ``max_idle_s`` of event
time are evicted, so the state is bounded by what is alive. ``snapshot()`` returns plain JSON-able
data; ``AdapterState.restore(snapshot)`` rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Separator for composite keys (never appears in label text we accept: it is a control character).
SEP = "\x1f"


@dataclass(slots=True)
class AdapterState:
    """State carried between messages of one input stream (one partition, or one CLI run)."""

    max_idle_s: float = 3600.0
    #: Ratio rules: key -> [last_ts, numerator, denominator].
    ratios: dict[str, list[float]] = field(default_factory=dict)
    #: Delta accumulation: key -> [last_ts, running_total].
    totals: dict[str, list[float]] = field(default_factory=dict)
    #: NCCL Inspector v4.3 marker context per stream: header, metadata, records still expected, ts.
    nccl: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Kubernetes pods by uid: the fields a job event needs, plus the job key and last event time.
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Highest event time seen; drives eviction.
    watermark: float | None = None

    def advance(self, ts: float) -> None:
        """Move the watermark and evict entries idle for longer than ``max_idle_s``."""
        if self.watermark is not None and ts <= self.watermark:
            return
        self.watermark = ts
        horizon = ts - self.max_idle_s
        for table in (self.ratios, self.totals):
            stale = [k for k, v in table.items() if v[0] < horizon]
            for k in stale:
                del table[k]
        for k in [k for k, v in self.nccl.items() if v.get("ts", ts) < horizon]:
            del self.nccl[k]
        # Pods that were deleted or ended; a running pod stays however quiet it is (watches do not
        # repeat unchanged pods), so this table is bounded by the pods alive.
        for k in [k for k, v in self.pods.items()
                  if (v.get("gone") or v.get("phase") in ("Succeeded", "Failed")) and v.get("ts", ts) < horizon]:
            del self.pods[k]

    def snapshot(self) -> dict[str, Any]:
        """Plain data (JSON-able) holding everything above."""
        return {"max_idle_s": self.max_idle_s, "ratios": {k: list(v) for k, v in self.ratios.items()},
                "totals": {k: list(v) for k, v in self.totals.items()}, "nccl": dict(self.nccl),
                "pods": dict(self.pods), "watermark": self.watermark}

    @classmethod
    def restore(cls, data: dict[str, Any]) -> AdapterState:
        """The state a :meth:`snapshot` was taken of."""
        return cls(max_idle_s=float(data.get("max_idle_s", 3600.0)),
                   ratios={k: [float(x) for x in v] for k, v in data.get("ratios", {}).items()},
                   totals={k: [float(x) for x in v] for k, v in data.get("totals", {}).items()},
                   nccl=dict(data.get("nccl", {})), pods=dict(data.get("pods", {})),
                   watermark=data.get("watermark"))

    # -- delta accumulation -----------------------------------------------------------------------
    def accumulate(self, key: str, ts: float, delta: float) -> tuple[float, bool]:
        """Add a delta to the running total of ``key``: ``(total, ts is after the last one)``.

        The delta always counts (an increment is never lost); a total whose time did not advance
        is not a new point of the series, so the caller does not emit it.
        """
        entry = self.totals.get(key)
        if entry is None:
            self.totals[key] = [ts, delta]
            return delta, True
        entry[1] += delta
        if ts <= entry[0]:
            return entry[1], False
        entry[0] = ts
        return entry[1], True
