"""The lifecycle scenarios through the pure pipeline (lockstep.local.LocalRunner): the same classes run
through the broker in tests/integration/test_scenarios_broker.py."""

from __future__ import annotations

from typing import Any

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
