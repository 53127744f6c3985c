"""``fabric``: the batch's NIC and switch-port samples into the partition's fabric rollup.

Runs after ``normalise`` (the samples validated, in arrival order) when the partition keeps a fabric
rollup (:class:`streams.fabric_publish.PartitionFabric`, ``part.fabric``; None when the fabric report
is off). Only the samples of series the rollup classified as NIC or switch samples are looked at (one
array look-up per sample for the rest); the first such sample names the lineage of a rollup that
starts afresh (its message's offset and Kafka time). Publishing the summaries is the agent's, once per
batch (a catch-up folds state only, and its summaries go out with the next batch).
"""

from __future__ import annotations

import numpy as np

from streams.stages.base import Batch


class Fabric:
    name = "fabric"

    def run(self, batch: Batch) -> None:
        fab = batch.part.fabric
        if fab is None or batch.ids is None or not fab.codes.shape[0]:
            return
        ids = batch.ids
        codes = fab.codes
        if int(ids.max()) >= codes.shape[0]:  # series the rollup never registered (none is fabric)
            mask = ids < codes.shape[0]
            ids = np.where(mask, ids, 0)
            own = np.where(mask, codes[ids], -1)
        else:
            own = codes[ids]
        sel = np.flatnonzero(own >= 0)
        if not sel.size:
            return
        if fab.lineage is None:
            origin = batch.messages[int(batch.msg[sel[0]])][1]  # type: ignore[index]
            fab.lineage = f"{origin.offset}/{origin.timestamp}"
        assert batch.ts is not None and batch.values is not None
        fab.fold(own[sel].tolist(), batch.ts[sel].tolist(), batch.values[sel].tolist())
