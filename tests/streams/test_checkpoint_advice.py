"""Checkpoint-stagger advice (streams/checkpoint_advice.py) from the alerts the contention rule raises when
the lab's train-a and train-b checkpoint to lustre-a together, once and on a period, through the pure
pipeline (LocalRunner): nothing is drawn by hand, the alerts are the rule's."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.local import LocalRunner, run_scenario
from lockstep.simulate import LAB, F, Fault, Scenario, Simulator
from models.timeutil import parse_ts
from streams.checkpoint_advice import checkpoint_advice

PERIOD = 120.0
WEEK = 7 * 86400.0


def latest(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest version of each alert, as the read model holds them."""
    return list({a["alert_id"]: a for a in alerts}.values())


@pytest.fixture(scope="module")
def periodic() -> list[dict[str, Any]]:
    """train-a writes for 30 s every 120 s, train-b 5 s after it, three rounds."""
    faults: list[Fault] = []
    for r in range(3):
        t = F + r * PERIOD
        faults += [Fault("write_burst", t, t + 30, factor=40.0, job="train-a", pool="lustre-a"),
                   Fault("write_burst", t + 5, t + 35, factor=40.0, job="train-b", pool="lustre-a")]
    scenario = Scenario("periodic-contention", "three checkpoint rounds, 120 s apart",
                        duration=F + 2 * PERIOD + 85, cluster=LAB, faults=tuple(faults))
    return LocalRunner(4).run_messages(Simulator(scenario, seed=7).run()).alerts


def test_one_contention_names_both_jobs_and_moves_the_later_writer_by_the_rules_advice() -> None:
    alerts = latest(run_scenario("checkpoint-contention").alerts)
    (alert,) = alerts
    now = parse_ts(alert["resolved_at"])
    (pool,) = checkpoint_advice(alerts, now, WEEK)
    assert pool["pool"] == "lustre-a" and pool["state"] == "clear" and pool["contentions"] == 1
    assert pool["latest"]["alert_id"] == alert["alert_id"]
    assert pool["latest"]["advice"] == alert["details"]["advice"]["text"]
    a, b = pool["jobs"]
    assert (a["job_id"], b["job_id"]) == ("train-a", "train-b") and (a["gpus"], b["gpus"]) == (64, 32)
    # train-b started writing 5 s after train-a; one observation each: no period yet
    assert parse_ts(b["last_write_at"]) - parse_ts(a["last_write_at"]) == pytest.approx(5.0, abs=1.0)
    assert a["writes"] == b["writes"] == 1 and a["period_s"] is None and a["next_write_at"] is None
    assert (a["move"], a["offset_s"]) == (False, 0.0)
    assert b["move"] and b["offset_s"] == alert["details"]["advice"]["by_seconds"] > 25.0
    assert checkpoint_advice(alerts, now, WEEK, pool="nfs-home") == []
    assert checkpoint_advice(alerts, now + WEEK + 3600, WEEK) == []  # out of the window


def test_periodic_checkpoints_give_each_jobs_period_phase_and_next_suggested_start(
        periodic: list[dict[str, Any]]) -> None:
    alerts = latest(periodic)
    assert [a["type"] for a in alerts] == ["checkpoint_contention"] * 3
    now = max(parse_ts(a["resolved_at"]) for a in alerts)
    (pool,) = checkpoint_advice(alerts, now, WEEK)
    assert pool["contentions"] == 3 and pool["state"] == "clear"
    a, b = pool["jobs"]
    for job in (a, b):
        assert job["writes"] == 3 and job["period_s"] == pytest.approx(PERIOD, abs=1.0)
        assert job["phase_s"] == pytest.approx(parse_ts(job["last_write_at"]) % job["period_s"], abs=0.1)
        assert parse_ts(job["next_write_at"]) == pytest.approx(parse_ts(job["last_write_at"]) + PERIOD, abs=1.0)
    assert not a["move"] and a["suggested_start_at"] == a["next_write_at"]
    # train-b's next checkpoint, moved by the advice, starts after train-a's next one has finished (30 s)
    assert b["move"] and parse_ts(b["suggested_start_at"]) - parse_ts(b["next_write_at"]) == b["offset_s"]
    assert parse_ts(b["suggested_start_at"]) >= parse_ts(a["next_write_at"]) + 30.0
    # while the latest round still fires, the pool is contended
    firing = [a for a in periodic if a["status"] == "firing"][-1]
    (live,) = checkpoint_advice([*alerts[:2], firing], parse_ts(firing["detected_at"]), WEEK)
    assert live["state"] == "contended" and live["latest"]["status"] == "firing"
