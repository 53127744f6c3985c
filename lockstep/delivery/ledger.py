"""The delivery ledger: what each receiver last accepted per ``dedup_key``, surviving restarts.

A compacted topic keyed ``receiver \\x1f dedup_key``; each value is a
:class:`streams.dispatch.Delivered` row plus, while firing, the alert itself (so groups can be
rebuilt after a restart without re-notifying). The delivery service reads it to the end before it
consumes any alert; a record is written (and acknowledged by the broker) after a receiver
accepted a notification and before the alert's offset is committed, so a replay after a crash is
recognised by :func:`streams.dispatch.lifecycle` and never pages twice.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

import orjson

from agents.kafka import drain
from streams.dispatch import Delivered

log = logging.getLogger("lockstep.delivery.ledger")
#: A ledger that cannot be read to its end in this long stops the delivery service's start (TimeoutError).
LOAD_TIMEOUT_S = 120.0
SEP = "\x1f"


class Ledger:
    """In-memory view of the ledger topic plus a producer to extend it."""

    def __init__(self, topic: str, producer: Any = None) -> None:
        self.topic = topic
        self.producer = producer
        self.rows: dict[tuple[str, str], Delivered] = {}
        self.firing: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, receiver: str, dedup_key: str) -> Delivered | None:
        return self.rows.get((receiver, dedup_key))

    def apply(self, value: bytes) -> None:
        """Apply one ledger record (used while loading and after each write)."""
        rec = orjson.loads(value)
        row = Delivered(rec["receiver"], rec["dedup_key"], rec["alert_id"], rec["status"], rec["started_at"],
                        float(rec["ts"]))
        key = (row.receiver, row.dedup_key)
        self.rows[key] = row
        if rec.get("alert") is not None and row.status == "firing":
            self.firing[key] = rec["alert"]
        else:
            self.firing.pop(key, None)

    async def load(self, consumer_factory: Any) -> int:
        """Read the ledger topic from the beginning to its current end; return records applied."""
        from aiokafka import TopicPartition

        consumer = consumer_factory()
        await consumer.start()
        n = 0
        try:
            parts = consumer.partitions_for_topic(self.topic) or {0}
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)

            def apply(batch: dict[Any, list[Any]]) -> None:
                nonlocal n
                for tp, msgs in batch.items():
                    for msg in msgs:
                        if msg.value is not None:
                            try:
                                self.apply(msg.value)
                                n += 1
                            except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
                                log.warning("unusable ledger record at %s:%d; skipped", tp.partition, msg.offset)

            # To the end as fetch answers give it (ListOffsets can be misreported: agents.kafka.drain).
            await drain(consumer, tps, LOAD_TIMEOUT_S, apply)
        finally:
            await consumer.stop()
        return n

    async def record(self, receiver: str, alert: dict[str, Any], now: float) -> None:
        """Durably note that ``receiver`` accepted ``alert`` in its current status."""
        row = Delivered(receiver, alert["dedup_key"], alert["alert_id"], alert["status"], alert["started_at"], now)
        value = orjson.dumps({**asdict(row), "alert": alert if alert["status"] == "firing" else None})
        await self.producer.send_and_wait(self.topic, key=f"{receiver}{SEP}{alert['dedup_key']}".encode(),
                                          value=value)
        self.apply(value)
