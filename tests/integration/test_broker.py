"""The embedded broker and the topic catalogue against the real Tansu binary."""

from __future__ import annotations

import asyncio
import os

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker, wait_for_kafka
from models.errors import BrokerStartFailed, ConfigError
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker


def test_embedded_broker_answers_metadata_and_stops_by_pid() -> None:
    broker = EmbeddedBroker()
    broker.start()
    pid = broker.pid
    assert pid is not None
    os.kill(pid, 0)  # alive
    asyncio.run(wait_for_kafka(broker.bootstrap, 5))
    broker.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    broker.stop()  # idempotent


def test_waiting_for_a_broker_that_is_not_there_fails_clearly() -> None:
    from lockstep.broker import free_port

    with pytest.raises(BrokerStartFailed, match="did not answer"):
        asyncio.run(wait_for_kafka(f"127.0.0.1:{free_port()}", 1.0))


def test_topics_create_is_idempotent_and_matches_the_catalogue(settings: LockstepSettings) -> None:
    async def go() -> tuple[list[str], list[str], dict[str, int]]:
        assert settings.kafka_bootstrap_servers
        first = await create_topics(settings, settings.kafka_bootstrap_servers)
        second = await create_topics(settings, settings.kafka_bootstrap_servers)
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            names = [s.name for s in TopicCatalogue(settings).specs()]
            described = await admin.describe_topics(names)
        finally:
            await admin.close()
        return first, second, {d["topic"]: len(d["partitions"]) for d in described}

    first, second, counts = asyncio.run(go())
    specs = TopicCatalogue(settings).specs()
    assert sorted(first) == sorted(s.name for s in specs)
    assert second == []
    assert counts == {s.name: s.partitions for s in specs}


def test_an_existing_topic_with_other_partitions_is_a_clear_error(settings: LockstepSettings) -> None:
    assert settings.kafka_bootstrap_servers
    asyncio.run(create_topics(settings, settings.kafka_bootstrap_servers))
    more = settings.model_copy(update={"partitions": settings.partitions * 2})
    with pytest.raises(ConfigError, match="partitions, the catalogue says"):
        asyncio.run(create_topics(more, settings.kafka_bootstrap_servers))
