"""Where the agents' records go: Kafka through Faust's producer, or a callback (Faust's agent test context).

One interface, so no agent asks which one it has: :class:`Sink` sends, flushes, and says whether a
record sent is on the broker only after a flush (a snapshot must then wait for that flush, see
agents.snapshots).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

#: ``emit(topic_name, key, value, partition)``: the test context's send.
Emit = Callable[[str, bytes | None, bytes, int | None], Awaitable[None]]


class Sink(Protocol):
    #: records sent reach the broker only once :meth:`flush` returns
    buffered: bool

    async def send(self, topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        """Send one record to a Faust topic (``partition`` None: by key)."""

    async def flush(self) -> None:
        """Return once everything sent before is on the broker."""


class FaustSink:
    """Records through the Faust app's producer (buffered: acknowledged by the broker at its flush)."""

    buffered = True

    def __init__(self, app: Any) -> None:
        self.app = app

    async def send(self, topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        await topic.send(key=key, value=value, partition=partition)

    async def flush(self) -> None:
        await self.app.producer.flush()


class CallbackSink:
    """Records handed to ``emit`` as they are sent (nothing to flush)."""

    buffered = False

    def __init__(self, emit: Emit) -> None:
        self.emit = emit

    async def send(self, topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        await self.emit(topic.get_topic_name(), key, value, partition)

    async def flush(self) -> None:
        return None
