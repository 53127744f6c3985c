"""A partition snapshot written by main at faaa674 restores, and the run goes on the same.

tests/fixtures/pipeline/snapshot_faaa674.json (written by make_pipeline_snapshot.py next to it: not
make_snapshot.py, the correlator fixture's generator has that name) holds the snapshot (series
registry with free ids and sorted labels, rates, detector and sketch arrays with their stored
panes), the input after it, what a partition restored from it produced and its state at the end.
The registry, the sketch and the growth of the arrays have changed since (one key a series, labels
shared, panes derived, not stored): the restored partition must give the same records and, at the
end, the same snapshot.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.detect import DetectorConfig
from streams.pipeline import PartitionPipeline
from streams.snapshot import unpack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline"
sys.path.insert(0, str(FIXTURES))
from make_pipeline_snapshot import CONFIG, SNAPSHOT_AT, feed, inventory, state  # noqa: E402


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads((FIXTURES / "snapshot_faaa674.json").read_bytes())
    return doc


def restored(doc: dict[str, Any], config: DetectorConfig = CONFIG) -> PartitionPipeline:
    pipe = PartitionPipeline("t:0", config, inventory())
    pipe.restore(base64.b64decode(doc["snapshot"]))
    return pipe


def test_the_old_snapshot_is_worth_testing_with(fixture: dict[str, Any]) -> None:
    """Free ids in it; after it, labels out of order, reused ids, episodes and a dead letter."""
    pipe = restored(fixture)
    reg = pipe.registry
    assert reg.free
    feed(pipe, fixture["input_after"], SNAPSHOT_AT)
    assert not reg.free
    # The snapshot's rows are sorted; the GPU series' labels come in as DCGM sends them: each is then
    # held under that order alone (one key a series, as before the restore).
    assert {k[3][0][0] for k in reg.keys if k is not None and k[0] == "gpu"} == {"gpu"}
    assert len(reg._ids) == len(reg) and all(a is None for a in reg._aliases)
    anomalies = [a for o in fixture["output_after"] for a in o["anomalies"]]
    assert [a["phase"] for a in anomalies] == ["start", "start", "end"]
    assert sum(len(o["dead_letters"]) for o in fixture["output_after"]) == 1


#: Arrays whose rule changed since the fixture was written (learning them differently is the change):
#: their shape and type must still match; their values may not.
CHANGED_SINCE_FIXTURE = {
    "detect.robust.novel": "052131d: the largest-surprise memory learns once the scale has settled",
}


#: Arrays added since the fixture was written, opt-in (the fixture's snapshot has none: they restore as a
#: new series has them), with the dtype and shape they must have at the end of the run with them on.
ADDED_SINCE_FIXTURE = {
    "detect.robust.slot_mad": ["float32", [11, 48]],  # issue 19: a robust scale per time-of-day slot
}


@pytest.mark.parametrize("slot_scale", [False, True], ids=["default", "slot_scale"])
def test_an_old_snapshot_restores_to_the_same_records_and_the_same_final_state(fixture: dict[str, Any],
                                                                               slot_scale: bool) -> None:
    pipe = restored(fixture, replace(CONFIG, slot_scale=slot_scale))
    got = feed(pipe, fixture["input_after"], SNAPSHOT_AT)
    assert orjson.dumps(got, option=orjson.OPT_SORT_KEYS) == orjson.dumps(fixture["output_after"],
                                                                          option=orjson.OPT_SORT_KEYS)
    blob = pipe.snapshot()
    now, then = state(blob), fixture["state_at_end"]
    for name in CHANGED_SINCE_FIXTURE:
        assert now["arrays"][name][:2] == then["arrays"][name][:2]
        now["arrays"][name] = then["arrays"][name]
    for name, (dtype, shape) in ADDED_SINCE_FIXTURE.items():
        assert name not in then["arrays"]
        if slot_scale:
            assert now["arrays"].pop(name)[:2] == [dtype, shape]
        else:
            assert name not in now["arrays"]  # off by default: no such state
    assert now == then  # sketch.pane included, as old workers read it
    if slot_scale:
        # 30 s after the restore no slot's scale is in use yet (that takes a later day in the same slot).
        assert (unpack(blob)[0]["detect.robust.slot_mad"] <= 0).all()
