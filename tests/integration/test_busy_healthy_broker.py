"""The long busy-healthy replay (``busy-healthy-40m``, 40 simulated minutes) through the real broker and
agents with ``lockstep replay``: nothing fires. On demand (LOCKSTEP_SLOW_TESTS=1): it takes minutes
(114-206 s measured on a loaded 2-core machine)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest

from lockstep.replay import replay, write_simulation
from models.settings import LockstepSettings

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_a_busy_healthy_cluster_raises_nothing_in_forty_minutes_through_the_broker(
        settings: LockstepSettings, tmp_path: Path) -> None:
    path = tmp_path / "busy-healthy-40m.jsonl"
    assert write_simulation(path, "busy-healthy-40m") > 1_500_000
    out = io.StringIO()
    summary = asyncio.run(replay(settings, path, out, timeout_s=1800.0))
    assert summary["samples"] > 1_600_000 and summary["bad_lines"] == 0
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(a["type"], a["status"], a["job_id"]) for a in alerts] == []
