"""Faust's agent test context for the carrier tests: an app whose outputs are captured, and a put that
names the topic a message was read from (the test context names none). One copy for every test file;
the ``loop`` fixture they run in is in tests/conftest.py."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from faust.types import TP

from agents.app import build_app
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex

#: (topic, key, decoded value, partition) of every record the agents sent.
Sent = list[tuple[str, bytes | None, Any, int | None]]


def captured_app(loop: asyncio.AbstractEventLoop, partitions: int = 2) -> tuple[Any, LockstepSettings, Sent]:
    """The app built with ``emit`` capturing its outputs, finalized; its settings; what it sent."""
    sent: Sent = []

    async def emit(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        sent.append((topic, key, orjson.loads(value), partition))

    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9",  # type: ignore[call-arg]
                                partitions=partitions)
    app, _ = build_app(settings, "127.0.0.1:9", InventoryIndex(), emit=emit, loop=loop)
    app.finalize()
    return app, settings, sent


async def put_on(agent: Any, topic: str, value: bytes, *, key: bytes | None = None, partition: int = 0,
                 headers: dict[str, bytes] | None = None, timestamp: float | None = None) -> None:
    """``agent.put`` as if the message had been read from ``topic``."""
    make_message = agent.to_message

    def to_message(*args: Any, **kwargs: Any) -> Any:
        message = make_message(*args, **kwargs)
        message.topic, message.tp = topic, TP(topic, message.partition)
        return message

    agent.to_message = to_message
    try:
        await agent.put(value, key=key, partition=partition, headers=headers, timestamp=timestamp)
    finally:
        agent.to_message = make_message
