"""Job lifecycle in the evidence, the "unknown, both named" reason, and the straggler lead across a watermark
jump: rule tests on timelines drawn as in test_correlation_rules (one character per second from T)."""

from __future__ import annotations

from test_correlation_rules import run


def test_data_preparation_first_with_the_fabric_and_a_pool_moving_names_every_entity_that_moved() -> None:
    alerts = run("""
        host    n2     cpu_utilization    utilisation          | .....XXXXXXXXXXXXXXX.....
        switch  leaf1  SymbolErrorCounter link_errors port=12  | ........XXXXXXXXXXXX.....
        nic     n3     out_of_sequence    retransmits device=mlx5_0 port=1 | ........XXXXXXXXXXXX.....
        storage lustre read_latency_seconds latency            | ........XXXXXXXXXXXX.....
        step    n1     step_time_seconds  step_time            | .........XXXXXXXXXXX.....
    """)
    rc = alerts[0]["root_cause"]
    assert (rc["domain"], rc["source"]) == ("unknown", "n2")
    assert rc["reason"] == ("data preparation on n2 saturated first, but nic n3 device=mlx5_0 port=1, "
                            "switch leaf1 port 12, pool lustre moved too")


def test_data_preparation_first_with_only_a_pool_moving_names_the_pool() -> None:
    alerts = run("""
        host    n2     cpu_utilization      utilisation | .....XXXXXXXXXXXXXXX.....
        storage lustre read_latency_seconds latency     | ........XXXXXXXXXXXX.....
        step    n1     step_time_seconds    step_time   | .........XXXXXXXXXXX.....
    """)
    assert alerts[0]["root_cause"]["reason"] == "data preparation on n2 saturated first, but pool lustre moved too"
