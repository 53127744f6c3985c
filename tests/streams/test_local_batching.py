"""The broker-free runner batches each event second's messages per input partition; nothing changes.

:meth:`lockstep.local.LocalRunner.run_messages` hands a pipeline all its messages of one second at once
(as the ingest agent hands it what queued up), instead of one message per call: the per-call cost was
most of a scenario test's time (43,200 calls for the seed incident). Alerts, timelines and stats are
the same, in the same order; anomalies are the same records, grouped by input partition within a
second instead of interleaved (the order they reach the ``anomalies`` topic from several partitions
is not defined either).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from lockstep.local import LocalResult, LocalRunner
from lockstep.simulate import SCENARIOS, Simulator


def one_by_one(name: str, seed: int) -> LocalResult:
    runner = LocalRunner(4)
    for msg in Simulator(SCENARIOS[name], seed=seed).run():
        if msg.topic == "inventory":
            runner.inventory_event(msg.value)
        else:
            runner.message(msg.topic, msg.key, orjson.dumps(msg.value), float(int(msg.ts)))
    return runner.finish()


def canonical(records: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY) for r in records]


@pytest.mark.parametrize(("name", "seed"), [("xid", 7), ("roce-retransmits", 11)])
def test_batched_seconds_give_what_one_message_at_a_time_gives(name: str, seed: int) -> None:
    single = one_by_one(name, seed)
    batched = LocalRunner(4).run_messages(Simulator(SCENARIOS[name], seed=seed).run())
    assert single.alerts, "the scenario raised no alert: nothing is compared"
    for field in ("alerts", "timelines", "stats"):
        assert canonical(getattr(batched, field)) == canonical(getattr(single, field)), field
    assert sorted(canonical(batched.anomalies)) == sorted(canonical(single.anomalies))
    assert (batched.samples, batched.dead_letters) == (single.samples, single.dead_letters)
