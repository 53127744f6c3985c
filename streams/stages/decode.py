"""``decode``: each message's bytes to its samples.

A message that is a plain array of well-typed sample objects is decoded by the fast path
(:func:`streams.ingest.decode_rows`: typed rows, no dict per record); any other message by the general
path (:func:`decode_message`), which refuses what is not JSON, is empty (a tombstone) or too big
(``DecodeFailed``, stage ``decode``), and what decodes but is not a batch of samples (an object without
``layer``, an unknown control) as ``validate``, as it always was. A control message (``eos``) sets
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
from streams.ingest import Rejection, Row, decode_records, decode_rows
from streams.stages.base import Batch, DeadLetterOut, Origin, PipelineOutput

#: What the validate stage gets per message: typed rows (the fast path), records (the general path),
#: the message's dead letter, or None (a control message).
Decoded = list[Row] | list[Any] | DeadLetterOut | None


def decode_message(raw: bytes, origin: Origin, out: PipelineOutput) -> list[Any] | DeadLetterOut | None:
    """The general path for one message: its records (orjson), its dead letter, or None (a control
    message, recorded in ``out.control``)."""
    records, rejection, control = decode_records(raw)
    if control is not None:
        out.control = control
        return None
    if rejection is not None or records is None:
        rej = rejection or Rejection(None, "empty message")
        stage = Decode.name if rej.error == DecodeFailed.__name__ else "validate"
        return DeadLetterOut(stage, rej.reason, rej.error, None, raw, origin)
    return records


class Decode:
    name = "decode"

    def run(self, batch: Batch) -> None:
        batch.decoded = self._decoded(batch) if batch.timer is None else self._timed(batch)

    def _decoded(self, batch: Batch) -> Iterator[Decoded]:
        """Per message: its rows or records, its dead letter, or None (a control message)."""
        out = batch.out
        for raw, origin in batch.messages:
            rows = decode_rows(raw)
            yield rows if rows is not None else decode_message(raw, origin, out)

    def _timed(self, batch: Batch) -> Iterator[Decoded]:
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
