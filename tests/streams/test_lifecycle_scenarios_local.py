"""The lifecycle scenarios through the pure pipeline (lockstep.local.LocalRunner): the same classes run
through the broker in tests/integration/test_scenarios_broker.py."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.local import LocalRunner
from lockstep.simulate import SCENARIOS, Simulator


class HeldWatermarkRunner(LocalRunner):
    """A replay whose watermark holds until the end of input (one input partition never reports
    progress before its end-of-input marker), so every verdict is taken in the final flush."""

    def _advance(self) -> None:
        return None


def slowdowns(alerts: list[dict[str, Any]]) -> list[tuple[str, str, str | None, str | None]]:
    return [(a["status"], a["root_cause"]["domain"], a["root_cause"]["source"], a["details"].get("straggler_alert"))
            for a in alerts if a["type"] == "job_slowdown"]


def test_the_straggler_revises_the_slowdown_when_everything_is_judged_at_the_end_of_input() -> None:
    held = HeldWatermarkRunner().run_messages(Simulator(SCENARIOS["straggler"]).run()).alerts
    moving = LocalRunner().run_messages(Simulator(SCENARIOS["straggler"]).run()).alerts
    straggler = next(a for a in held if a["type"] == "straggler")
    expected = [("firing", "unknown", None, None), ("firing", "compute", "gpu006", straggler["alert_id"]),
                ("resolved", "compute", "gpu006", straggler["alert_id"])]
    assert slowdowns(held) == expected
    assert slowdowns(moving) == expected
    first, revised = [a for a in held if a["type"] == "job_slowdown"][:2]
    assert revised["root_cause"]["labels"] == {"rank": "40"}
    assert revised["alert_id"] == first["alert_id"] and revised["detected_at"] == first["detected_at"]
    assert "(revised: the straggler was confirmed after the verdict)" in revised["root_cause"]["reason"]


def test_a_busy_cluster_with_job_churn_raises_nothing() -> None:
    """Six jobs end as real ones do (a slow final save, ranks exiting before COMPLETING, COMPLETING held),
    train-a checkpoints every 2 minutes: before the job lifecycle was in the evidence, every ending job with
    a final save gave a job_slowdown that never resolved (5 of them)."""
    result = LocalRunner().run_messages(Simulator(SCENARIOS["busy-churn"]).run())
    assert result.alerts == []
    assert result.samples > 250_000


@pytest.mark.parametrize("seed", [7, 11])
def test_a_stalled_job_is_one_job_stalled_alert_and_no_utilisation_page(seed: int) -> None:
    alerts = LocalRunner().run_messages(Simulator(SCENARIOS["job-stalled"], seed=seed).run()).alerts
    assert [(a["type"], a["status"], a["job_id"]) for a in alerts] == [("job_stalled", "firing", "train-b"),
                                                                      ("job_stalled", "resolved", "train-b")]
    fired, done = alerts
    assert (fired["started_at"][11:19], fired["detected_at"][11:19]) == ("11:41:44", "11:41:59")
    assert (done["resolved_at"][11:19], done["details"]["end_reason"]) == ("11:45:45", "resumed")
    assert fired["root_cause"]["meaning"] == "no_data" and fired["gpus"] == 32
