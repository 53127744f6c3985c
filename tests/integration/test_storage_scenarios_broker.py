"""The storage scenarios (lockstep/scenarios/storage.py) through ``lockstep replay``: the real broker,
the real agents, the per-job Lustre counters as carrier envelopes converted by the worker."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from lockstep.replay import replay
from lockstep.scenarios.storage import write_replay
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker


def replay_storage(name: str, settings: LockstepSettings, tmp_path: Path, seed: int = 7) -> list[dict[str, Any]]:
    path = tmp_path / f"{name}.jsonl"
    write_replay(path, name, seed)
    out = io.StringIO()
    asyncio.run(replay(settings, path, out))
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("seed", [7, pytest.param(11, marks=pytest.mark.slow)])  # seed 11: on demand
def test_storage_via_network_through_the_broker(seed: int, settings: LockstepSettings, tmp_path: Path) -> None:
    alerts = replay_storage("storage-via-network", settings, tmp_path, seed)
    assert [(a["type"], a["status"], a["job_id"], a["root_cause"]["domain"], a["root_cause"]["source"],
             a["root_cause"]["labels"]) for a in alerts] == [
        ("job_slowdown", "firing", "train-a", "network", "stor-leaf01", {"port": "1"}),
        ("job_slowdown", "resolved", "train-a", "network", "stor-leaf01", {"port": "1"})]
    assert alerts[0]["root_cause"]["reason"].startswith("storage via network: stor-leaf01 port 1")


@pytest.mark.parametrize("seed", [7, pytest.param(11, marks=pytest.mark.slow)])  # seed 11: on demand
def test_lustre_exporter_contention_through_the_broker(seed: int, settings: LockstepSettings,
                                                       tmp_path: Path) -> None:
    alerts = replay_storage("checkpoint-contention-lustre-exporter", settings, tmp_path, seed)
    assert [(a["type"], a["status"]) for a in alerts] == [("checkpoint_contention", "firing"),
                                                        ("checkpoint_contention", "resolved")]
    assert alerts[-1]["details"]["jobs"] == ["train-a", "train-b"]
    assert alerts[-1]["details"]["advice"]["move"] == "train-b"
