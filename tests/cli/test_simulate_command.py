"""``lockstep simulate`` lists and writes every scenario, the storage and fabric ones included."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from lockstep.cli import main
from lockstep.scenarios.fabric import FABRIC_SCENARIOS, PAUSE_COUNTERS
from lockstep.scenarios.storage import STORAGE_SCENARIOS
from lockstep.simulate import SCENARIOS


def test_the_list_names_every_scenario_with_what_it_should_yield(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line and not line[0].isspace()}
    assert listed == {*SCENARIOS, *FABRIC_SCENARIOS, *STORAGE_SCENARIOS}


def test_a_fabric_scenario_is_written_with_its_pause_counters(tmp_path: Path) -> None:
    out = tmp_path / "pfc.jsonl"
    assert main(["simulate", "pfc-storm", "--seed", "11", "-o", str(out)]) == 0
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    pauses = [r for r in lines if r.get("metric") in PAUSE_COUNTERS and r.get("source") == "gpu014"]
    assert pauses and max(r["value"] for r in pauses) > 100_000  # 25,000 pause frames a second, counted up
    calm = [r["value"] for r in lines if r.get("metric") in PAUSE_COUNTERS and r.get("source") == "gpu013"]
    assert calm and max(calm) < 1_000  # a port that pauses now and then
    assert any(r.get("kind") == "job" for r in lines)  # the inventory comes with it


def test_a_file_only_scenario_is_refused_live_with_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "storage-via-network", "--kafka"]) == 2
    assert "--output" in capsys.readouterr().err
