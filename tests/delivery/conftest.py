"""Fixtures for delivery tests: sample alerts (ordinary and oversized) and a delivery context."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.delivery.base import DeliveryContext
from lockstep.delivery.sample import sample_alert

NOW = 1_764_503_000.0  # 2025-11-30T11:43:20Z


def straggler_alert() -> dict[str, Any]:
    """A ``straggler`` alert as the correlator builds it (no timeline, a ratio symptom)."""
    from models.inventory import inventory_adapter
    from streams.correlate import Correlator, CorrelatorConfig, CorrelatorOutput
    from streams.inventory import InventoryIndex
    from streams.lanes import PeerEvent
    from streams.peers import StragglerTransition

    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": NOW - 600, "job_id": "train-a",
                                                 "state": "RUNNING", "nodes": "gpu[001-008]", "gpus_per_node": 8}))
    out = CorrelatorOutput()
    Correlator(CorrelatorConfig(), inv).on_peer_events(
        [PeerEvent("step_time", 8, StragglerTransition("train-a", "gpu006/rank40", "start", NOW - 60, NOW - 35,
                                                       1.41, 1.0, "gross"))], out)
    return out.alerts[0]


@pytest.fixture
def alert() -> dict[str, Any]:
    return sample_alert(NOW)


@pytest.fixture
def straggler() -> dict[str, Any]:
    return straggler_alert()


@pytest.fixture
def huge_alert() -> dict[str, Any]:
    """Every text far past every limit: 5,000-char summary, 40 timeline rows, 2,000 nodes."""
    a = sample_alert(NOW, tag="huge-" + "x" * 400)
    a["summary"] = "slow " * 1000
    a["job_id"] = "j" * 300
    a["nodes"] = [f"node{i:05d}" for i in range(2000)]
    a["root_cause"]["source"] = "leaf" * 200
    a["root_cause"]["labels"] = {f"l{i}": "v" * 50 for i in range(40)}
    row = dict(a["timeline"][0], source="s" * 500, metric="m" * 300)
    a["timeline"] = [row] * 40
    return a


@pytest.fixture
def ctx() -> DeliveryContext:
    return DeliveryContext(now=NOW, public_url="https://lockstep.example", hostname="deliver-1", version="0.1.0")
