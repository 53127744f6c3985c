"""``clocks``: each source's arrival delays to the partition's clock tracker.

Arrival is a sample's ``ingest_ts``, else its message's Kafka record time. One median delay and one
latest event time per (message, source), all groups at once; a source whose clock crosses the
tolerance (or comes back within it) gives a ``clock`` record in ``out.clocks``.
"""

from __future__ import annotations

import math

import numpy as np

from streams.series import LAYER_NAMES
from streams.stages.base import Batch


class Clocks:
    name = "clocks"

    def run(self, batch: Batch) -> None:
        if batch.ids is None:
            return
        assert batch.ts is not None and batch.ingest is not None and batch.msg is not None
        part, out = batch.part, batch.out
        ids, ts, ingest, msg = batch.ids, batch.ts, batch.ingest, batch.msg
        kafka_ts = np.array([o.timestamp if o.timestamp is not None else math.nan for _, o in batch.messages])
        arrival = np.where(np.isnan(ingest), kafka_ts[msg], ingest)
        ok = ~np.isnan(arrival)
        if not ok.any():
            return
        src = part._src_code[ids[ok]]
        pair = msg[ok].astype(np.int64) * (len(part._src_names) + 1) + src
        delay = arrival[ok] - ts[ok]
        t_ok = ts[ok]
        sids = ids[ok]
        order = np.lexsort((delay, pair))
        pair, src, sids, delay = pair[order], src[order], sids[order], delay[order]
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        ends = np.r_[starts[1:], pair.size]
        n = ends - starts
        medians = 0.5 * (delay[starts + (n - 1) // 2] + delay[starts + n // 2])
        latest = np.maximum.reduceat(t_ok[order], starts)
        layer_code = part.registry.layer_code
        names = part._src_names
        clocks = part.clocks
        for f, med, last in zip(starts.tolist(), medians.tolist(), latest.tolist(), strict=True):
            source = names[int(src[f])]
            layer = LAYER_NAMES[int(layer_code[sids[f]])]
            for t in clocks.observe_delay(layer, source, med, last):
                out.clocks.append({"type": "clock", "phase": t.phase, "source": t.source, "layer": t.layer,
                                   "ts": t.ts, "offset": t.offset, "uncertainty": t.uncertainty,
                                   "origin": part.origin})
