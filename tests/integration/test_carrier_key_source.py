"""The carrier path takes the record key as the source when neither the record nor the headers name one."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from faust.types import TP

from agents.app import build_app
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex

T0 = 1764502930.0
Sent = list[tuple[str, bytes | None, Any, int | None]]


@pytest.fixture
def loop() -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()


def make(loop: Any) -> tuple[Any, LockstepSettings, Sent]:
    """The app with its output captured (as tests/integration/test_carriers.py builds it)."""
    sent: Sent = []

    async def emit(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        sent.append((topic, key, orjson.loads(value), partition))

    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9", partitions=2)  # type: ignore[call-arg]
    app, _ = build_app(settings, "127.0.0.1:9", InventoryIndex(), emit=emit, loop=loop)
    app.finalize()
    return app, settings, sent


async def put_on(agent: Any, topic: str, value: bytes, *, key: bytes | None = None,
                 headers: dict[str, bytes] | None = None) -> None:
    """``agent.put`` as if the message had been read from ``topic``."""
    make_message = agent.to_message

    def to_message(*args: Any, **kwargs: Any) -> Any:
        message = make_message(*args, **kwargs)
        message.topic, message.tp = topic, TP(topic, message.partition)
        return message

    agent.to_message = to_message
    try:
        await agent.put(value, key=key, partition=0, headers=headers)
    finally:
        agent.to_message = make_message

#: A node_exporter-shaped scrape line without host/instance labels, as a keyed producer sends it.
UNLABELLED = b'node_infiniband_symbol_error_total{device="mlx5_0",port="1"} 3 1764502930000\n'


def test_a_keyed_scrape_without_a_source_header_takes_the_key_as_its_source(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.prometheus")

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, UNLABELLED, key=b"gpu007")
            await put_on(agent, topic, UNLABELLED, key=b"gpu007", headers={"source": b"gpu008"})
            await put_on(agent, topic, UNLABELLED)  # no key, no header: still a dead letter

    loop.run_until_complete(go())
    samples = [(t, k, [s["source"] for s in batch]) for t, k, batch, _ in sent if t != "lockstep.dlq"]
    assert samples == [("lockstep.telemetry.nic", b"gpu007", ["gpu007"]), ("lockstep.telemetry.nic", b"gpu008",
                                                                          ["gpu008"])]
    (dead,) = [batch for t, _, batch, _ in sent if t == "lockstep.dlq"]
    assert "no source" in dead["reason"] and all(s["ts"] == T0 for _, _, b, _ in sent[:2] for s in b)
