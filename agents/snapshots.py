"""Snapshots of the agents' plain-object state in changelogged tables, written after the outputs they cover.

A snapshot is taken at once (a copy of the state) and written by one background writer after a
producer flush that covers every output sent before it: a snapshot that reached the changelog never
covers outputs that did not (docs/performance.md, "Restart"), and the agent that took it does not wait
for the flush. Large snapshots are split over several table keys (records are limited to 8 MiB).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from agents.metrics import WorkerMetrics
from agents.sink import Sink

log = logging.getLogger("lockstep.agents")

#: Snapshots larger than this are split over several table keys (records are limited to 8 MiB).
SNAPSHOT_CHUNK_BYTES = 4 * 1024 * 1024
_CHUNKED = b"LOCKSTEP-CHUNKED:"


class SnapshotWriter:
    """Writes taken snapshots in the order they were taken, each after the flush that must precede it."""

    def __init__(self, sink: Sink, metrics: WorkerMetrics) -> None:
        self.sink = sink
        self.metrics = metrics
        #: (still owned?, write): snapshots taken, waiting for the producer flush that must precede them
        self.queue: list[tuple[Callable[[], bool], Callable[[], None]]] = []
        self.writer: asyncio.Future[None] | None = None

    def put(self, table: Any, name: str, key: str, blob: bytes, partition: int,
            owned: Callable[[], bool]) -> None:
        """Write ``blob`` under ``key`` into ``table`` (changelog partition ``partition``) once everything
        sent before is on the broker; dropped if ``owned()`` is false by then (the partition was revoked:
        the next owner restores the last one written and writes its own). At once when the sink is not
        buffered (nothing to wait for)."""
        def write() -> None:
            for chunk_key, value in snapshot_records(key.encode(), blob):
                table_put(table, chunk_key, value, partition)
            self.metrics.snapshots.labels(name).inc()

        if not self.sink.buffered:
            write()
            return
        self.queue.append((owned, write))
        if self.writer is None or self.writer.done():
            self.writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self.queue:
            queued, self.queue = self.queue, []
            try:
                await self.sink.flush()
            except Exception:
                log.exception("producer flush before %d snapshots failed; they are not written", len(queued))
                continue
            for owned, write in queued:
                if owned():
                    write()


def snapshot_records(key: bytes, blob: bytes, chunk: int = SNAPSHOT_CHUNK_BYTES) -> list[tuple[bytes, bytes]]:
    """Table records for one snapshot: the blob itself, or its chunks (``key#i``) then a manifest at ``key``.

    >>> [(k, len(v)) for k, v in snapshot_records(b"t:0", b"x" * 5, chunk=2)]
    [(b't:0#0', 2), (b't:0#1', 2), (b't:0#2', 1), (b't:0', 18)]
    >>> read_snapshot(dict(snapshot_records(b"t:0", b"abcde", chunk=2)), b"t:0")
    b'abcde'
    """
    if len(blob) <= chunk:
        return [(key, blob)]
    parts = [blob[i: i + chunk] for i in range(0, len(blob), chunk)]
    out = [(key + b"#%d" % i, part) for i, part in enumerate(parts)]
    out.append((key, _CHUNKED + orjson.dumps(len(parts))))
    return out


def read_snapshot(table: Any, key: bytes) -> bytes | None:
    """The snapshot at ``key`` (joining its chunks); None when there is none or a chunk is missing."""
    value = table.get(key)
    if not value or not value.startswith(_CHUNKED):
        return value  # type: ignore[no-any-return]
    n = int(orjson.loads(value[len(_CHUNKED):]))
    parts = [table.get(key + b"#%d" % i) for i in range(n)]
    if any(p is None for p in parts):
        log.error("snapshot %r misses chunks; starting from an empty baseline", key)
        return None
    return b"".join(parts)


def table_put(table: Any, key: bytes, value: bytes, partition: int) -> None:
    """``table[key] = value`` with its changelog record on ``partition`` (the input partition it
    describes), from anywhere: a batch of events has no single current event to take it from."""
    table.data[key] = value
    table.send_changelog(partition, key, value)
