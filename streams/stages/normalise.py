"""``normalise``: the batch's valid samples as arrays, in arrival order.

A counter's value must not be negative (a dead letter here; a counter that goes down is a reset,
which the rate stage sees). Arrival order is the messages in offset order and each message's samples
in event-time order: the order the rate and detect state must see them in. Counts samples by layer
and sets ``out.max_ts``, the batch's latest event time.
"""

from __future__ import annotations

import numpy as np

from models.errors import ValidationFailed
from streams.series import LAYER_NAMES, lexsorted
from streams.stages.base import Batch


class Normalise:
    name = "normalise"

    def run(self, batch: Batch) -> None:
        if not batch.ids_l:
            return
        out = batch.out
        reg = batch.part.registry
        n = len(batch.ids_l)
        ids = np.fromiter(batch.ids_l, np.int64, n)
        ts_a = np.fromiter(batch.ts_l, np.float64, n)
        values = np.fromiter(batch.val_l, np.float64, n)
        msg = np.repeat(np.array(batch.run_msg, dtype=np.int64), batch.run_len)
        ingest_a = np.full(n, np.nan)
        for at, arrivals in batch.ing_at:
            ingest_a[at:at + len(arrivals)] = arrivals
        # The lists' float objects (~100 bytes a sample) go now: a worker holds every partition's batch
        # until the score stage they share (streams.pipeline.run_together).
        batch.ids_l, batch.ts_l, batch.val_l, batch.ing_at = [], [], [], []
        negative = reg.counter[ids] & (values < 0)
        if negative.any():
            for bad in np.flatnonzero(negative).tolist():
                batch.dead_letter(self.name, "counter value is negative", ValidationFailed.__name__,
                                  int(ids[bad]), float(ts_a[bad]), int(msg[bad]))
            keep = np.flatnonzero(~negative)
            out.rejected += int(negative.sum())
            ids, ts_a, values, ingest_a, msg = ids[keep], ts_a[keep], values[keep], ingest_a[keep], msg[keep]
        if ids.size == 0:
            return
        counts = np.bincount(reg.layer_code[ids], minlength=len(LAYER_NAMES))
        out.by_layer = {LAYER_NAMES[c]: int(counts[c]) for c in np.flatnonzero(counts).tolist()}
        if lexsorted(msg, ts_a):  # the common case (a scrape's samples share their time): no sort, no copies
            batch.ids, batch.ts, batch.values, batch.ingest, batch.msg = ids, ts_a, values, ingest_a, msg
        else:
            order = np.lexsort((ts_a, msg))
            batch.ids, batch.ts, batch.values = ids[order], ts_a[order], values[order]
            batch.ingest, batch.msg = ingest_a[order], msg[order]
        out.max_ts = float(batch.ts.max())
