"""A snapshot written by the Correlator before the rules were modules restores, and the run goes on the same.

tests/fixtures/correlator/snapshot_v1.json was written by main at f343ef7 (see make_snapshot.py next
to it): the snapshot, the input after it, the alerts that input produced, and the snapshot at the end.
A cluster that upgrades restores such snapshots from the ``correlator_state`` table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from models.inventory import inventory_adapter
from streams.correlate import Correlator
from streams.correlation.keys import ContentionKey
from streams.inventory import InventoryIndex
from streams.rules import load_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "correlator"
#: Partition keys added since the fixture was written (an old snapshot restores without them).
NEW_KEYS = ("straggler_ended", "step_tracks", "clock_offsets")
sys.path.insert(0, str(FIXTURES))
from make_snapshot import CFG, feed  # noqa: E402


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads((FIXTURES / "snapshot_v1.json").read_bytes())
    return doc


def restored(doc: dict[str, Any]) -> Correlator:
    inv = InventoryIndex()
    for d in doc["config"]["inventory"]:
        inv.apply(inventory_adapter.validate_python(d))
    corr = Correlator(CFG, inv, set(doc["config"]["expected_origins"]), load_rules(doc["config"]["rules"]))
    corr.restore(doc["snapshot"], 0.0)
    return corr


def test_the_old_snapshot_holds_every_rules_state(fixture: dict[str, Any]) -> None:
    """The fixture is worth testing with: each rule had state when it was taken."""
    snap = fixture["snapshot"]
    job = snap["jobs"]["j"]
    assert snap["clock_open"] and snap["open_alerts"] and job["last_resolved"] and job["fired"]
    assert job["incident"] and job["gpu"]["inhibited_by"] and list(job["contentions"]) == ["lustre@1764502834.000"]
    assert snap["jobs"]["k"]["incident"]["alert"]["root_cause"]["source"] is None  # a straggler will explain it


def test_an_old_snapshot_restores_to_the_same_alerts_and_the_same_final_state(fixture: dict[str, Any]) -> None:
    corr = restored(fixture)
    assert [ContentionKey.parse(k) for k in fixture["snapshot"]["jobs"]["j"]["contentions"]] == [
        ContentionKey("lustre", 1764502834.0)]
    got = feed(corr, fixture["input_after"])
    assert orjson.dumps(got, option=orjson.OPT_SORT_KEYS) == orjson.dumps(fixture["output_after"],
                                                                          option=orjson.OPT_SORT_KEYS)
    assert [(a["type"], a["status"]) for a in got["alerts"]][:2] == [("straggler", "firing"),
                                                                      ("job_slowdown", "firing")]
    at_end = orjson.loads(orjson.dumps(corr.snapshot()))
    assert list(at_end["straggler_ended"]) == ["straggler/k/step_time/n5/rank3"]  # the straggler that ended
    assert {k: v for k, v in at_end.items() if k not in NEW_KEYS} == fixture["snapshot_at_end"]


def test_a_snapshot_restores_to_itself(fixture: dict[str, Any]) -> None:
    corr = restored(fixture)
    snap = orjson.loads(orjson.dumps(corr.snapshot()))
    assert {k: v for k, v in snap.items() if k not in NEW_KEYS} == fixture["snapshot"]
