"""``clocks``: each source's arrival delays to the partition's clock tracker.

Arrival is a sample's ``ingest_ts``, else its message's Kafka record time. One median delay and one
latest event time per (message, source), all groups at once; a source whose clock crosses the
tolerance (or comes back within it) gives a ``clock`` record in ``out.clocks``.
"""

from __future__ import annotations

import math

import numpy as np

from streams.series import LAYER_NAMES, lexsorted, run_starts
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
        if ok.all():  # (every message has its Kafka time: no selection)
            sids, t_ok, m, delay = ids, ts, msg, arrival - ts
        elif ok.any():
            sids, t_ok, m = ids[ok], ts[ok], msg[ok]
            delay = arrival[ok] - t_ok
        else:
            return
        src = part._src_code[sids]
        pair = m * (len(part._src_names) + 1) + src
        first, medians, latest = median_delays(pair, delay, t_ok)
        layer_code = part.registry.layer_code
        names = part._src_names
        clocks = part.clocks
        for s, lc, med, last in zip(src[first].tolist(), layer_code[sids[first]].tolist(), medians.tolist(),
                                    latest.tolist(), strict=True):
            for t in clocks.observe_delay(LAYER_NAMES[lc], names[s], med, last):
                out.clocks.append({"type": "clock", "phase": t.phase, "source": t.source, "layer": t.layer,
                                   "ts": t.ts, "offset": t.offset, "uncertainty": t.uncertainty,
                                   "origin": part.origin})


def median_delays(pair: np.ndarray, delay: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group of equal ``pair`` (a message and a source), in ascending ``pair``: a position of one of its
    rows, its median ``delay`` and its latest time ``t``.

    >>> first, med, last = median_delays(np.array([7, 3, 7, 3]), np.array([1.0, 4.0, 3.0, 2.0]),
    ...                                  np.array([10.0, 11.0, 12.0, 13.0]))
    >>> med.tolist(), last.tolist()
    ([3.0, 2.0], [13.0, 12.0])
    """
    order = None
    if not lexsorted(pair, delay):
        # (the common case needs no sort: a message is one source's scrape, its samples share their time)
        order = np.lexsort((delay, pair))
        pair, delay, t = pair[order], delay[order], t[order]
    starts = np.flatnonzero(run_starts(pair))
    n = np.diff(starts, append=pair.size)
    medians = 0.5 * (delay[starts + (n - 1) // 2] + delay[starts + n // 2])
    return (starts if order is None else order[starts]), medians, np.maximum.reduceat(t, starts)
