"""Every worker reads the whole ``inventory`` topic into its own :class:`InventoryIndex`.

At start-up the topic is read up to its end offsets *before* the worker consumes telemetry, so
anomalies are never mapped against a half-loaded inventory; afterwards a background task follows
new events. Inventory is global state: no consumer group, every partition, from the beginning.
Events that fail validation go to the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from agents.kafka import client_kwargs, drain
from models.deadletter import dead_letter_record
from models.errors import ValidationFailed
from models.inventory import inventory_adapter
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex

log = logging.getLogger("lockstep.inventory")

DeadLetterSink = Callable[[dict[str, Any]], Awaitable[None]]


def parse_inventory(raw: bytes) -> tuple[Any | None, str | None]:
    """Decode one inventory message: ``(event, None)`` or ``(None, reason)``."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    try:
        return inventory_adapter.validate_python(doc), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return None, f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


Parser = Callable[[bytes], tuple[Any | None, str | None]]


class GlobalTopicReader:
    """Reads a whole topic (every partition, from the beginning, no group) into local state.

    ``parse(raw) -> (item, None) | (None, reason)``; ``apply(item)`` folds a parsed item in. Items
    that do not parse go to ``dead_letter`` with the reason and the original bytes.
    """

    stage = "global"

    def __init__(self, settings: LockstepSettings, bootstrap: str, topic: str, parse: Parser,
                 apply: Callable[[Any], None], dead_letter: DeadLetterSink | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topic = topic
        self.parse = parse
        self.apply = apply
        self.dead_letter = dead_letter
        self.consumer: AIOKafkaConsumer | None = None
        self.applied = 0
        self.rejected = 0
        self._task: asyncio.Task[None] | None = None

    async def load(self, timeout_s: float = 60.0) -> int:
        """Read the topic up to its current end; return how many events were applied."""
        consumer = AIOKafkaConsumer(**client_kwargs(self.settings, self.bootstrap), enable_auto_commit=False,
                                    group_id=None, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=self.settings.kafka_fetch_max_wait_ms)
        await consumer.start()
        self.consumer = consumer
        partitions = consumer.partitions_for_topic(self.topic) or set()
        if not partitions:
            await consumer.force_metadata_update()
            partitions = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await drain(consumer, tps, timeout_s, self._apply_batches, max_records=5000)
        log.info("%s loaded: %d records (%d rejected)", self.topic, self.applied, self.rejected)
        return self.applied

    async def _poll(self, timeout_ms: int) -> None:
        assert self.consumer is not None
        await self._apply_batches(await self.consumer.getmany(timeout_ms=timeout_ms, max_records=5000))

    async def _apply_batches(self, batches: dict[Any, list[Any]]) -> None:
        for tp, messages in batches.items():
            for msg in messages:
                if msg.value is None:  # a tombstone: compaction deletes the key
                    continue
                event, reason = self.parse(msg.value)
                if event is None:
                    self.rejected += 1
                    if self.dead_letter is not None:
                        await self.dead_letter(dead_letter_record(
                            stage=self.stage, error=ValidationFailed, reason=reason or "not an inventory event",
                            original=msg.value, topic=tp.topic, partition=tp.partition, offset=msg.offset, key=msg.key,
                            ts=msg.timestamp / 1000.0))
                    continue
                self.apply(event)
                self.applied += 1

    def follow(self) -> None:
        """Keep applying new inventory events in the background."""

        async def loop() -> None:
            while True:
                try:
                    await self._poll(1000)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("%s follower failed; retrying in 1 s", self.topic)
                    await asyncio.sleep(1.0)

        self._task = asyncio.get_running_loop().create_task(loop(), name=f"follow-{self.topic}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.consumer is not None:
            await self.consumer.stop()


class InventoryReader(GlobalTopicReader):
    """The ``inventory`` topic into an :class:`InventoryIndex`."""

    stage = "inventory"

    def __init__(self, settings: LockstepSettings, bootstrap: str, topic: str, index: InventoryIndex,
                 dead_letter: DeadLetterSink | None = None) -> None:
        super().__init__(settings, bootstrap, topic, parse_inventory, index.apply, dead_letter)
        self.index = index


def parse_silence(raw: bytes) -> tuple[Any | None, str | None]:
    """Decode one ``silences`` record (see models.operator.SilenceRecord)."""
    from models.operator import SilenceRecord

    try:
        return SilenceRecord.model_validate_json(raw).model_dump(), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return None, f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


class SilenceReader(GlobalTopicReader):
    """The ``silences`` topic into the worker's :class:`streams.rules.Rules` (every worker holds all)."""

    stage = "silences"

    def __init__(self, settings: LockstepSettings, bootstrap: str, topic: str, rules: Any,
                 dead_letter: DeadLetterSink | None = None) -> None:
        super().__init__(settings, bootstrap, topic, parse_silence, rules.apply_record, dead_letter)
