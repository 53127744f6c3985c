"""Integration fixtures: one real embedded Tansu broker per test session; unique topics per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lockstep.broker import EmbeddedBroker
from models.settings import LockstepSettings
from tests.broker_timing import SESSION_TIMEOUT_S


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:  # the real Tansu broker, stopped by PID at the end
        yield b


@pytest.fixture
def settings(broker: EmbeddedBroker) -> LockstepSettings:
    """Settings pointing at the session broker, with a topic prefix and app id of their own and the tests'
    consumer-group timing (tests/broker_timing.py)."""
    run = uuid.uuid4().hex[:8]
    return LockstepSettings(  # type: ignore[call-arg]
        _env_file=None, kafka_bootstrap_servers=broker.bootstrap, topic_prefix=f"t{run}.",
        app_id=f"lockstep-test-{run}", partitions=4, data_dir=f"/tmp/lockstep-test-{run}",
        kafka_session_timeout_s=SESSION_TIMEOUT_S,
    )
