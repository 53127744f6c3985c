"""The fabric scenarios (lockstep/scenarios/fabric.py) through the pure pipeline (LocalRunner): a PFC
storm is named over a lone pause frame 30 s earlier, and sparse pause counters raise nothing.

Before the sparse baseline and the first mover by significance (at df276d8): seed 7 named gpu015's
lone pause as the root cause, and every RoCE port's sparse ticks opened 8 or more anomaly episodes
in the first 70 s."""

from __future__ import annotations

import pytest

from lockstep.local import LocalRunner
from lockstep.scenarios.fabric import messages


@pytest.mark.parametrize("seed", [7, 11])
def test_a_pfc_storm_is_the_first_mover_not_a_lone_pause_before_it(seed: int) -> None:
    res = LocalRunner(4).run_messages(messages("pfc-storm", seed))
    got = [(a["type"], a["status"], a["job_id"], a["root_cause"]["domain"], a["root_cause"]["source"],
            a["root_cause"]["metric"]) for a in res.alerts]
    assert got == [("job_slowdown", "firing", "roce-c", "network", "gpu014", "tx_pause_ctrl_phy"),
                   ("job_slowdown", "resolved", "roce-c", "network", "gpu014", "tx_pause_ctrl_phy")]
    # The sparse ticks of the healthy ports are their normal: no episode on gpu013, gpu015 or gpu016.
    assert {a["source"] for a in res.anomalies if a["layer"] == "nic" and a["phase"] == "start"} <= {"gpu014"}


def test_sparse_pause_counters_alone_raise_nothing() -> None:
    res = LocalRunner(4).run_messages(messages("sparse-pauses", 7))
    assert res.alerts == []
    assert sum(1 for a in res.anomalies if a["layer"] == "nic" and a["phase"] == "start") <= 1
