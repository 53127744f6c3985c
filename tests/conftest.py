"""Shared fixtures. Broker fixtures start the real embedded Tansu broker (never a mock)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("LOCKSTEP_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow variant: set LOCKSTEP_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A new event loop, set as current (Faust's agent test context: tests/agent_context.py)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
