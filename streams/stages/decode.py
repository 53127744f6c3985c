"""``decode``: each message's bytes to its list of records.

A message that is not JSON, is empty (a tombstone) or too big is refused here (``DecodeFailed``,
stage ``decode``); one that decodes but is not a batch of samples (an object without ``layer``, an
unknown control) is refused as ``validate``, as it always was. A control message (``eos``) sets
``out.control`` and carries no records.

Decoding is lazy: :meth:`Decode.run` hands the validate stage an iterator, and each message is
decoded as validate reaches it, so a message's records are freed once they are read. Holding a
whole batch's decoded records at once made Python's cyclic garbage collector scan them again and
again (a quarter of the pipeline's CPU time in benchmarks/bench_pipeline.py). With a timer, the time
spent decoding is still the decode stage's (``batch.deferred``), not validate's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from models.errors import DecodeFailed
from streams.ingest import Rejection, decode_records
from streams.stages.base import Batch, DeadLetterOut


class Decode:
    name = "decode"

    def run(self, batch: Batch) -> None:
        batch.decoded = self._decoded(batch) if batch.timer is None else self._timed(batch)

    def _decoded(self, batch: Batch) -> Iterator[list[Any] | DeadLetterOut | None]:
        """Per message: its records, its dead letter, or None (a control message)."""
        out = batch.out
        for raw, origin in batch.messages:
            records, rejection, control = decode_records(raw)
            if control is not None:
                out.control = control
                yield None
            elif rejection is not None or records is None:
                rej = rejection or Rejection(None, "empty message")
                stage = self.name if rej.error == DecodeFailed.__name__ else "validate"
                yield DeadLetterOut(stage, rej.reason, rej.error, None, raw, origin)
            else:
                yield records

    def _timed(self, batch: Batch) -> Iterator[list[Any] | DeadLetterOut | None]:
        timer = batch.timer
        assert timer is not None
        items = self._decoded(batch)
        while True:
            t0 = timer()
            item = next(items, _END)
            batch.defer(self.name, timer() - t0)
            if item is _END:
                return
            yield item


_END: Any = object()
