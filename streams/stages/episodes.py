"""``episodes``: each episode transition to one ``anomaly`` record per job it affects.

The jobs are the inventory's answer for the series at the episode's onset (a switch port: the jobs
on the nodes behind it; a node's series: the jobs on the node; a job's own series: that job). A
transition that affects no job is counted (``out.unmapped_anomalies``), not sent; context series
(:attr:`streams.catalogue.Mode.CONTEXT`) never give anomalies. Only a source flagged as skewed is
re-timed (``clock_offset``); within tolerance, clocks are trusted as they are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streams.catalogue import Mode
from streams.stages.base import Batch

#: Roles: a job's own signals are symptoms; everything else is a possible cause.
SYMPTOM_MEANINGS = frozenset({"step_time"})


class Episodes:
    name = "episodes"

    def run(self, batch: Batch) -> None:
        part, out = batch.part, batch.out
        meta_of = part.registry.meta
        inventory, clocks, origin = part.inventory, part.clocks, part.origin
        anomalies = out.anomalies
        for rnd in batch.rounds:
            tr = rnd.transitions
            assert tr is not None
            ids, ts, ingest, prev_ts = rnd.ids, rnd.ts, rnd.ingest, rnd.prev_ts
            for k in range(tr.pos.size):
                i = int(tr.pos[k])
                meta = meta_of[int(ids[i])]
                if meta.info.mode is Mode.CONTEXT:
                    continue
                phase = "start" if tr.phase[k] == 1 else "end"
                onset = float(tr.onset_ts[k])
                labels = meta.labels
                affected = inventory.affected_jobs(meta.layer, meta.source, labels, onset)
                if not affected:
                    out.unmapped_anomalies += 1
                    continue
                direction = meta.info.bad.value
                if direction == "both":
                    direction = "up" if (tr.value[k] >= tr.p50[k] or np.isnan(tr.p50[k])) else "down"
                ing = float(ingest[i])
                offset, uncertainty = clocks.offset(meta.source)
                if not clocks.skewed(meta.source):
                    offset = 0.0
                gap = float(ts[i] - prev_ts[i])
                interval = gap if math.isfinite(gap) and gap > 0 else 0.0
                for a in affected:
                    anomalies.append({
                        "type": "anomaly", "phase": phase, "job_id": a.job_id, "ts": onset,
                        "confirmed_ts": float(ts[i]), "ingest_ts": None if math.isnan(ing) else ing,
                        "layer": meta.layer, "source": meta.source, "labels": labels, "metric": meta.metric,
                        "meaning": meta.info.meaning.value, "mode": meta.info.mode.value,
                        "role": "symptom" if meta.info.meaning.value in SYMPTOM_MEANINGS else "cause",
                        "direction": direction, "value": _f(tr.value[k]), "p50": _opt(tr.p50[k]),
                        "p99": _opt(tr.p99[k]), "score": _f(tr.score[k]), "relation": a.relation,
                        "origin": origin, "clock_offset": offset, "clock_uncertainty": uncertainty,
                        "interval": interval,
                    })


def _f(v: Any) -> float:
    f = float(v)
    return f if np.isfinite(f) else 0.0


def _opt(v: Any) -> float | None:
    f = float(v)
    return f if np.isfinite(f) else None
