"""The PFC-storm scenario (lockstep/scenarios/fabric.py) through ``lockstep replay``: the real broker and
agents name the storming NIC, not a lone pause frame 30 s earlier, on two seeds."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest

from lockstep.replay import replay
from lockstep.scenarios.fabric import write_replay
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("seed", [7, pytest.param(11, marks=pytest.mark.slow)])  # seed 11: on demand
def test_a_pfc_storm_through_the_broker(seed: int, settings: LockstepSettings, tmp_path: Path) -> None:
    path = tmp_path / "pfc-storm.jsonl"
    write_replay(path, "pfc-storm", seed)
    out = io.StringIO()
    asyncio.run(replay(settings, path, out))
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(a["type"], a["status"], a["job_id"], a["root_cause"]["domain"], a["root_cause"]["source"],
             a["root_cause"]["labels"]) for a in alerts] == [
        ("job_slowdown", "firing", "roce-c", "network", "gpu014", {"device": "mlx5_0", "port": "1"}),
        ("job_slowdown", "resolved", "roce-c", "network", "gpu014", {"device": "mlx5_0", "port": "1"})]
