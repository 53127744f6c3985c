"""Shared fixtures. Broker fixtures start the real embedded Tansu broker (never a mock)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("LOCKSTEP_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow variant: set LOCKSTEP_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
