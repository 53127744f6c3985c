"""``score``: each round's values through the partition's detector bank (:class:`streams.detect.DetectorBank`).

The bank scores every value against its series' baseline and moves the series' episode state
machine; what comes out is the round's episode transitions (starts and ends), for the episodes stage.
"""

from __future__ import annotations

from streams.stages.base import Batch


class Score:
    name = "score"

    def run(self, batch: Batch) -> None:
        detector = batch.part.detector
        for rnd in batch.rounds:
            rnd.transitions = detector.update(rnd.ids, rnd.ts, rnd.x)
