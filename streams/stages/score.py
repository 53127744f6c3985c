"""``score``: each round's values through the partition's detector bank (:class:`streams.detect.DetectorBank`).

The bank scores every value against its series' baseline and moves the series' episode state
machine; what comes out is the round's episode transitions (starts and ends), for the episodes stage.

Partitions whose pipelines share one bank (a worker's input partitions) are scored together by
:func:`score_together`: the k-th rounds of all their batches as one bank update. Each bank update
costs a fixed ~180 us (some 200 array operations) plus ~0.3 us a row, so the few rows a small layer's
partition brings to a round (a host's dozen gauges) cost mostly the fixed part, once per partition;
together it is paid once. The result is the same as scoring each round alone: the rows are distinct
series, and each partition's rounds still run in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from streams.detect import Transitions
from streams.stages.base import Batch


class Score:
    name = "score"

    def run(self, batch: Batch) -> None:
        part = batch.part
        detector = part.detector
        for rnd in batch.rounds:
            rnd.transitions = detector.update(part.rows_of(rnd.ids), rnd.ts, rnd.x)


def score_together(batches: Sequence[Batch], timer: Callable[[], float] | None = None) -> None:
    """The ``score`` stage of ``batches`` (of distinct input partitions whose pipelines share one bank,
    each batch through the stages before ``score``): round ``k`` of every batch that has one goes
    through the bank in one update, ``k = 0, 1, ...``; each round gets its own transitions, as
    :class:`Score` gives them. With ``timer``, each batch's ``stage_seconds["score"]`` gets its share of
    the time by rows."""
    if not batches:
        return
    bank = batches[0].part.detector
    if any(b.part.detector is not bank for b in batches):
        raise ValueError("score_together: the pipelines do not share one detector bank")
    t0 = timer() if timer is not None else 0.0
    depth = max(len(b.rounds) for b in batches)
    for k in range(depth):
        members = [b.rounds[k] for b in batches if k < len(b.rounds)]
        parts = [b.part for b in batches if k < len(b.rounds)]
        if len(members) == 1:
            rnd = members[0]
            rnd.transitions = bank.update(parts[0].rows_of(rnd.ids), rnd.ts, rnd.x)
            continue
        tr = bank.update(np.concatenate([p.rows_of(r.ids) for p, r in zip(parts, members, strict=True)]),
                         np.concatenate([r.ts for r in members]), np.concatenate([r.x for r in members]))
        if tr.pos.size == 0:
            for rnd in members:
                rnd.transitions = tr  # none (read only)
            continue
        # ``pos`` is ascending: each round's transitions are one slice of it
        ends = np.cumsum([r.ids.shape[0] for r in members])
        cuts = np.searchsorted(tr.pos, ends).tolist()
        lo, a = 0, 0
        for rnd, hi, b in zip(members, ends.tolist(), cuts, strict=True):
            rnd.transitions = Transitions(pos=tr.pos[a:b] - lo, phase=tr.phase[a:b], onset_ts=tr.onset_ts[a:b],
                                          value=tr.value[a:b], score=tr.score[a:b], p50=tr.p50[a:b],
                                          p99=tr.p99[a:b])
            lo, a = hi, b
    if timer is not None:
        spent = timer() - t0
        rows = [sum(r.ids.shape[0] for r in b.rounds) for b in batches]
        total = sum(rows) or 1
        for b, n in zip(batches, rows, strict=True):
            seconds = b.out.stage_seconds
            seconds["score"] = seconds.get("score", 0.0) + spent * n / total
