"""Everything one ``anomalies`` partition knows about its jobs: correlation plus the jobs' signals.

:class:`JobPartition` is what the ``correlate`` agent holds per partition. It routes each record
(anomaly episode, watermark, job points) to the :class:`~streams.correlate.Correlator` or to
:class:`~streams.lanes.JobSignals`, advances both on the same watermark, and snapshots them together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streams.correlate import Correlator, CorrelatorConfig
from streams.inventory import InventoryIndex
from streams.lanes import JobSignals, SignalsConfig
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
                 rules: Rules | None = None) -> None:
        self.correlator = Correlator(config, inventory, expected_origins, rules)
        self.signals = JobSignals(signals or SignalsConfig(allowed_lateness_s=config.allowed_lateness_s))
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
        before = self.correlator.watermark
        if kind == "points":
            self.signals.add(rec)
        elif kind == "annotation":
            self.signals.annotate(rec)
            res.changed = True
            # After the end of input the watermark no longer moves: judge it against the one reached.
            res.stats += self.signals.annotation_effects(self.correlator.watermark)
        elif kind in ("anomaly", "watermark", "clock"):
            out = self.correlator.on_record(rec, now_wall)
            res.alerts, res.late, res.finished = out.alerts, out.late, out.finished
            res.inhibited = out.inhibited
            # Snapshot when an alert went out (restart must not repeat it); other records are replayed
            # from the snapshot's offset after a restart (see agents.app correlator_resume).
            res.changed = bool(out.alerts)
        else:
            raise ValueError(f"unknown record type {str(kind)[:40]!r}")
        self._advance(before, res)
        return res

    def tick(self, now_wall: float) -> PartitionResult:
        res = PartitionResult()
        before = self.correlator.watermark
        out = self.correlator.tick(now_wall)
        res.alerts = out.alerts
        self._advance(before, res)
        return res

    def _advance(self, before: float, res: PartitionResult) -> None:
        wm = self.correlator.watermark
        if wm > before or (res.finished and math.isinf(wm)):
            res.timelines, res.stats = self.signals.advance(wm)
            res.changed = res.changed or bool(res.stats)

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
