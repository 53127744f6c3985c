"""A job slowdown whose first mover is a switch port behind a node the scheduler drained names that node.

    switch leaf1:11  SymbolErrorCounter  ....X#####     <- first mover; n1 behind it is drained
    step   n1        step_time_seconds   ..........X#   <- onset
"""

from __future__ import annotations

from models.inventory import inventory_adapter
from streams.correlate import Correlator
from tests.streams.test_correlate_basics import CFG, STEP, SWITCH, T, feed, inv, wm


def test_a_drained_node_behind_the_first_mover_is_named_in_the_alert() -> None:
    index = inv()
    index.apply(inventory_adapter.validate_python({"kind": "node", "ts": T - 100, "node": "n1", "state": "drained",
                                                   "flags": ["IDLE", "DRAIN"], "reason": "ECC memory error",
                                                   "since": T - 200}))
    [alert] = feed(Correlator(CFG, index), [SWITCH, STEP, wm(o1=40, o2=40)])
    assert alert["root_cause"]["source"] == "leaf1"
    [state] = alert["details"]["node_states"]
    assert (state["node"], state["state"], state["reason"]) == ("n1", "drained", "ECC memory error")
    assert 'n1 is drained ("ECC memory error"' in alert["summary"]


def test_healthy_nodes_add_nothing() -> None:
    [alert] = feed(Correlator(CFG, inv()), [SWITCH, STEP, wm(o1=40, o2=40)])
    assert "node_states" not in alert["details"]
