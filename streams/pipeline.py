"""The per-partition telemetry pipeline, as one readable list of named stages.

    decode -> validate -> normalise -> rate -> detect -> map

One :class:`PartitionPipeline` owns the state of one input partition (series ids, counter state,
detector baselines), so its state can be snapshotted and moved with the partition. It never
imports Faust and never reads the clock: the Faust agent hands it raw bytes and their coordinates
and ships what it returns.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.catalogue import Mode
from streams.detect import DetectorBank, DetectorConfig
from streams.ingest import Sample, decode_batch
from streams.inventory import Affected, InventoryIndex
from streams.lanes import lane_of
from streams.rates import CounterRates
from streams.series import SeriesRegistry, occurrence_rounds
from streams.snapshot import pack, unpack

#: Stage names, used in logs, metrics and dead-letter records.
STAGES = ("decode", "validate", "normalise", "rate", "detect", "map")

#: Roles: a job's own signals are symptoms; everything else is a possible cause.
SYMPTOM_MEANINGS = frozenset({"step_time"})


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message came from."""

    topic: str
    partition: int
    offset: int | None = None
    timestamp: float | None = None  # Kafka record time (seconds)
    key: bytes | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(slots=True)
class DeadLetterOut:
    stage: str
    reason: str
    error: str
    record: str | None
    original: bytes

    def to_record(self, origin: Origin, rejected_ts: float) -> dict[str, Any]:
        """The ``dlq`` record (see :class:`models.records.DeadLetter`)."""
        return {
            "stage": self.stage, "reason": self.reason, "error": self.error,
            "topic": origin.topic, "partition": origin.partition, "offset": origin.offset,
            "record": self.record, "original": base64.b64encode(self.original).decode("ascii"),
            "original_size": len(self.original),
            "key": origin.key.decode("utf-8", "replace") if origin.key is not None else None,
            "ts": rejected_ts, "retryable": False,
        }


@dataclass(slots=True)
class PipelineOutput:
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[DeadLetterOut] = field(default_factory=list)
    samples: int = 0
    rejected: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    resets: int = 0
    unknown_metrics: int = 0
    unmapped_anomalies: int = 0
    max_ts: float | None = None
    control: str | None = None
    by_layer: dict[str, int] = field(default_factory=dict)
    #: job -> lane -> [[ts, value], ...]: the job's own signals, forwarded to its correlation partition.
    points: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)

    def points_records(self, origin: str) -> list[dict[str, Any]]:
        """One ``points`` record per job (see :mod:`streams.lanes`)."""
        return [{"type": "points", "job_id": job, "lanes": lanes, "origin": origin}
                for job, lanes in sorted(self.points.items())]


class PartitionPipeline:
    """State and processing for one input partition."""

    def __init__(self, origin: str, config: DetectorConfig, inventory: InventoryIndex) -> None:
        self.origin = origin
        self.config = config
        self.inventory = inventory
        self.registry = SeriesRegistry()
        self.rates = CounterRates()
        self.detector = DetectorBank(config)
        self.watermark: float | None = None
        self.last_offset: int | None = None
        self._lanes: list[str | None] = []
        self._jobs_cache: dict[int, tuple[int, list[Affected]]] = {}

    def _lane(self, sid: int) -> str | None:
        while len(self._lanes) <= sid:
            meta = self.registry.meta[len(self._lanes)]
            self._lanes.append(lane_of(meta.layer, meta.info.meaning.value))
        return self._lanes[sid]

    def _candidate_jobs(self, sid: int) -> list[Affected]:
        """Jobs this series can affect at any time, cached until the inventory changes."""
        cached = self._jobs_cache.get(sid)
        if cached is not None and cached[0] == self.inventory.version:
            return cached[1]
        meta = self.registry.meta[sid]
        jobs = self.inventory.affected_jobs(meta.layer, meta.source, meta.labels, None)
        self._jobs_cache[sid] = (self.inventory.version, jobs)
        return jobs

    def process(self, raw: bytes, origin: Origin) -> PipelineOutput:
        """Run one message through every stage. Never raises on bad input."""
        out = PipelineOutput()
        # decode + validate
        batch = decode_batch(raw)
        if batch.control is not None:
            out.control = batch.control
            return out
        for rej in batch.rejections:
            stage = "decode" if rej.error == "DecodeFailed" else "validate"
            record = None if rej.index is None else f"samples[{rej.index}]"
            out.dead_letters.append(DeadLetterOut(stage, rej.reason, rej.error, record, raw))
        out.rejected = sum(1 for r in batch.rejections if r.index is not None)
        samples = batch.samples
        if not samples:
            return out
        # normalise: series ids, catalogue kinds, counter sanity
        n = len(samples)
        ids = np.empty(n, dtype=np.int64)
        ts = np.empty(n)
        values = np.empty(n)
        keep = np.ones(n, dtype=bool)
        reg = self.registry
        known = len(reg)
        for i, s in enumerate(samples):
            sid = reg.id_for(s.layer, s.source, s.metric, s.labels, s.kind)
            ids[i] = sid
            ts[i] = s.ts
            values[i] = s.value
        if len(reg) > known:
            for sid in range(known, len(reg)):
                info = reg.meta[sid].info
                self.detector.register(sid, info.mode, info.bad)
                if info.meaning.value == "unknown":
                    out.unknown_metrics += 1
        counter = np.fromiter((reg.meta[i].info.counter for i in ids), dtype=bool, count=n)
        negative = counter & (values < 0)
        if negative.any():
            for bad in np.flatnonzero(negative):
                out.dead_letters.append(DeadLetterOut("normalise", "counter value is negative", "ValidationFailed",
                                                      _record_name(batch, samples[int(bad)]), raw))
            keep &= ~negative
            out.rejected += int(negative.sum())
        # rate + detect, a round of unique series at a time (a scrape is one round)
        kept = np.flatnonzero(keep)
        for i in kept:
            layer = samples[int(i)].layer
            out.by_layer[layer] = out.by_layer.get(layer, 0) + 1
        ids_k, ts_k, val_k = ids[kept], ts[kept], values[kept]
        order = np.argsort(ts_k, kind="stable")
        ids_k, ts_k, val_k, kept = ids_k[order], ts_k[order], val_k[order], kept[order]
        for rnd in occurrence_rounds(ids_k):
            self._round(ids_k[rnd], ts_k[rnd], val_k[rnd], [samples[int(i)] for i in kept[rnd]], out, batch, raw)
        out.samples = int(kept.size) - out.out_of_order - out.duplicates
        if kept.size:
            mx = float(ts_k.max())
            out.max_ts = mx
            self.watermark = mx if self.watermark is None else max(self.watermark, mx)
        self.last_offset = origin.offset
        return out

    def _round(self, ids: np.ndarray, ts: np.ndarray, raw_values: np.ndarray, samples: list[Sample],
               out: PipelineOutput, batch: Any, raw: bytes) -> None:
        reg = self.registry
        infos = [reg.meta[int(i)].info for i in ids]
        counter = np.fromiter((info.counter for info in infos), dtype=bool, count=ids.size)
        # Every series goes through the rate stage: counters get a rate; for all, a sample at or
        # before the series' last time is a duplicate (dropped, counted) or out of order (dead letter).
        res = self.rates.update(ids, ts, raw_values)
        scale = np.fromiter((info.scale for info in infos), dtype=float, count=ids.size)
        x = np.where(counter, res.rate * scale, raw_values)
        stale = res.out_of_order | res.duplicate
        usable = np.where(counter, ~np.isnan(res.rate), ~stale)
        out.resets += int((res.reset & counter).sum())
        out.duplicates += int(res.duplicate.sum())
        for late in np.flatnonzero(res.out_of_order):
            out.out_of_order += 1
            out.dead_letters.append(DeadLetterOut(
                "rate", f"out of order: ts {ts[late]:.3f} is not after the series' last sample",
                "LateData", _record_name(batch, samples[int(late)]), raw))
        use = np.flatnonzero(usable)
        if use.size == 0:
            return
        self._forward_points(ids[use], ts[use], x[use], out)
        tr = self.detector.update(ids[use], ts[use], x[use])
        for k in range(tr.pos.size):
            i = int(use[tr.pos[k]])
            meta = reg.meta[int(ids[i])]
            if meta.info.mode is Mode.CONTEXT:
                continue
            phase = "start" if tr.phase[k] == 1 else "end"
            onset = float(tr.onset_ts[k])
            affected = self.inventory.affected_jobs(meta.layer, meta.source, meta.labels, onset)
            if not affected:
                out.unmapped_anomalies += 1
                continue
            direction = meta.info.bad.value
            if direction == "both":
                direction = "up" if (tr.value[k] >= tr.p50[k] or np.isnan(tr.p50[k])) else "down"
            for a in affected:
                out.anomalies.append({
                    "type": "anomaly", "phase": phase, "job_id": a.job_id, "ts": onset,
                    "confirmed_ts": float(ts[i]), "ingest_ts": samples[i].ingest_ts,
                    "layer": meta.layer, "source": meta.source, "labels": meta.labels, "metric": meta.metric,
                    "meaning": meta.info.meaning.value,
                    "role": "symptom" if meta.info.meaning.value in SYMPTOM_MEANINGS else "cause",
                    "direction": direction, "value": _f(tr.value[k]), "p50": _opt(tr.p50[k]),
                    "p99": _opt(tr.p99[k]), "score": _f(tr.score[k]), "relation": a.relation,
                    "origin": self.origin,
                })

    def _forward_points(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray, out: PipelineOutput) -> None:
        inventory = self.inventory
        for k in range(ids.size):
            sid = int(ids[k])
            lane = self._lane(sid)
            if lane is None:
                continue
            t = float(ts[k])
            for a in self._candidate_jobs(sid):
                if inventory.job(a.job_id, t) is None:
                    continue
                out.points.setdefault(a.job_id, {}).setdefault(lane, []).append([t, float(x[k])])

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        n = len(self.registry)
        arrays = {**self.rates.snapshot(n), **self.detector.snapshot(n)}
        meta = {"origin": self.origin, "series": self.registry.snapshot(), "watermark": self.watermark,
                "offset": self.last_offset, "window": self.config.window}
        return pack(arrays, meta)

    def restore(self, blob: bytes) -> None:
        arrays, meta = unpack(blob)
        self.registry = SeriesRegistry.restore(meta["series"])
        self.rates = CounterRates()
        self.rates.restore(arrays)
        self.detector = DetectorBank(self.config)
        self.detector.restore(arrays)
        self.watermark = meta["watermark"]
        self.last_offset = meta["offset"]


def _f(v: Any) -> float:
    f = float(v)
    return f if np.isfinite(f) else 0.0


def _opt(v: Any) -> float | None:
    f = float(v)
    return f if np.isfinite(f) else None


def _record_name(batch: Any, sample: Sample) -> str:
    return f"{sample.layer}/{sample.source}/{sample.metric}@{sample.ts}"
