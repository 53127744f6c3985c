"""``rate``: counters to rates, and every series' samples in time order, a round at a time.

A round holds each series at most once (a scrape is one round), so the rate state sees a series'
samples one after the other. For every series a sample at or before its last one is a duplicate
(same time and value: dropped, counted) or out of order (``LateData`` dead letter); a counter's first
sample and the one after a reset give no rate. A rate beyond float range (a huge jump over a tiny
interval) is bad input (``ValidationFailed``), not a value. What is left goes on as
:class:`~streams.stages.base.Round` s; ``out.samples`` counts it.
"""

from __future__ import annotations

import numpy as np

from models.errors import LateData, ValidationFailed
from streams.series import occurrence_rounds
from streams.stages.base import Batch, Round


class Rate:
    name = "rate"

    def run(self, batch: Batch) -> None:
        if batch.ids is None:
            return
        assert batch.ts is not None and batch.values is not None and batch.ingest is not None
        assert batch.msg is not None
        ids, ts, values, ingest, msg = batch.ids, batch.ts, batch.values, batch.ingest, batch.msg
        for rnd in occurrence_rounds(ids):
            self._round(batch, ids[rnd], ts[rnd], values[rnd], ingest[rnd], msg[rnd])
        out = batch.out
        out.samples = int(ids.size) - out.out_of_order - out.duplicates

    def _round(self, batch: Batch, ids: np.ndarray, ts: np.ndarray, raw_values: np.ndarray, ingest: np.ndarray,
               msg: np.ndarray) -> None:
        part, out = batch.part, batch.out
        reg = part.registry
        counter = reg.counter[ids]
        res = part.rates.update(ids, ts, raw_values)
        prev_ts = res.prev_ts
        if res.in_order and not counter.any():
            # the steady state of gauges (a host's, a job's step times): every sample is its value
            batch.rounds.append(Round(ids, ts, raw_values, ingest, prev_ts))
            return
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.where(counter, res.rate * reg.scale[ids], raw_values)
        usable = np.where(counter, ~np.isnan(res.rate), ~(res.out_of_order | res.duplicate))
        overflow = usable & ~np.isfinite(x)
        if overflow.any():
            for bad in np.flatnonzero(overflow).tolist():
                out.rejected += 1
                why = f"rate overflows: {raw_values[bad]:.6g} over {ts[bad] - prev_ts[bad]:.3g} s"
                batch.dead_letter(self.name, why, ValidationFailed.__name__, int(ids[bad]), float(ts[bad]),
                                  int(msg[bad]))
            usable &= ~overflow
        if res.reset.any():
            out.resets += int((res.reset & counter).sum())
        if not res.in_order:  # (in order: no duplicate, none out of order)
            if res.duplicate.any():
                out.duplicates += int(res.duplicate.sum())
            for late in np.flatnonzero(res.out_of_order).tolist():
                out.out_of_order += 1
                batch.dead_letter(self.name, f"out of order: ts {ts[late]:.3f} is not after the series' last sample",
                                  LateData.__name__, int(ids[late]), float(ts[late]), int(msg[late]))
        use = np.flatnonzero(usable)
        if use.size == 0:
            return
        if use.size < ids.size:
            ids, ts, x, ingest, prev_ts = ids[use], ts[use], x[use], ingest[use], prev_ts[use]
        batch.rounds.append(Round(ids, ts, x, ingest, prev_ts))
