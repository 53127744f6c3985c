"""Everything one ``anomalies`` partition knows about its jobs: correlation plus the jobs' signals.

:class:`JobPartition` is what the ``correlate`` agent holds per partition. It routes each record
(anomaly episode, watermark, job points) to the :class:`~streams.correlate.Correlator` or to
:class:`~streams.lanes.JobSignals`, advances both on the same watermark, and snapshots them together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streams.correlate import Correlator, CorrelatorConfig, CorrelatorOutput
from streams.inventory import InventoryIndex
from streams.lanes import JobSignals, SignalsConfig, StepProgress
from streams.rules import Rules
from streams.snapshot import pack, unpack


@dataclass(slots=True)
class PartitionResult:
    alerts: list[dict[str, Any]] = field(default_factory=list)
    timelines: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    inhibited: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    changed: bool = False


class JobPartition:
    def __init__(self, config: CorrelatorConfig, inventory: InventoryIndex,
                 expected_origins: set[str] | None = None, signals: SignalsConfig | None = None,
                 rules: Rules | None = None, inputs: set[str] | None = None) -> None:
        self.correlator = Correlator(config, inventory, expected_origins, rules, inputs=inputs)
        self.signals = JobSignals(signals or SignalsConfig(allowed_lateness_s=config.allowed_lateness_s))
        # The signals advance on each new watermark *before* the jobs are judged at it, so a straggler
        # confirmed by then is known to the verdict however far the watermark jumped.
        self.correlator.on_watermark = self._on_watermark
        self._timelines: list[dict[str, Any]] = []
        self._stats: list[dict[str, Any]] = []
        self.last_offset: int | None = None
        self.last_record_ts: float | None = None

    @property
    def watermark(self) -> float:
        return self.correlator.watermark

    def on_record(self, rec: dict[str, Any], now_wall: float, offset: int | None = None,
                  record_ts: float | None = None) -> PartitionResult:
        """Fold one record in. Raises KeyError/TypeError/ValueError on a malformed record."""
        if offset is not None:
            self.last_offset = offset
            self.last_record_ts = record_ts
        res = PartitionResult()
        kind = rec.get("type")
        if kind == "points":
            self.signals.add(rec)
        elif kind == "annotation":
            self.signals.annotate(rec)
            res.changed = True
            # After the end of input the watermark no longer moves: judge it against the one reached.
            res.stats += self.signals.annotation_effects(self.correlator.horizon)
        elif kind in ("anomaly", "watermark", "clock"):
            out = self.correlator.on_record(rec, now_wall)
            self._collect(out, res)
        else:
            raise ValueError(f"unknown record type {str(kind)[:40]!r}")
        return res

    def tick(self, now_wall: float) -> PartitionResult:
        res = PartitionResult()
        self._collect(self.correlator.tick(now_wall), res)
        return res

    def _on_watermark(self, wm: float, out: CorrelatorOutput) -> None:
        timelines, stats = self.signals.advance(wm)
        self._timelines += timelines
        self._stats += stats
        # Step progress for rules/job_stalled.py; at the end of input the data ends with the last second emitted.
        at = wm if math.isfinite(wm) else self.signals.emitted_until + 1.0
        if math.isfinite(at):
            self.correlator.on_events("steps", [StepProgress.of(at, timelines)], out)
        if self.signals.peer_events:
            events, self.signals.peer_events = self.signals.peer_events, []
            self.correlator.on_peer_events(events, out)

    def _collect(self, out: CorrelatorOutput, res: PartitionResult) -> None:
        if out.finished and not self._timelines and self.signals.pending:
            self._on_watermark(self.correlator.horizon, out)  # end of input: flush what is left
        res.alerts, res.late, res.finished, res.inhibited = out.alerts, out.late, out.finished, out.inhibited
        res.timelines, self._timelines = self._timelines, []
        res.stats, self._stats = [*res.stats, *self._stats], []
        # Snapshot when an alert or stats went out (a restart must not repeat them); other records are
        # replayed from the snapshot's offset after a restart (see agents.app correlator_resume).
        res.changed = res.changed or bool(res.alerts) or bool(res.stats)

    def snapshot(self) -> bytes:
        arrays, stats_meta = self.signals.stats.snapshot()
        meta = {"correlator": self.correlator.snapshot(), "signals": self.signals.snapshot(), "stats": stats_meta,
                "offset": self.last_offset, "record_ts": self.last_record_ts}
        return pack(arrays, meta)

    def restore(self, blob: bytes, now_wall: float) -> None:
        arrays, meta = unpack(blob)
        self.correlator.restore(meta["correlator"], now_wall)
        self.signals.restore(meta["signals"])
        self.signals.stats.restore(arrays, meta["stats"])
        self.last_offset = meta["offset"]
        self.last_record_ts = meta.get("record_ts")
