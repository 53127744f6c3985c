"""Jobs starting, ending and stalling, replayed through the real broker and agents: nothing fires on a
healthy cluster with churn; a stalled job is its own alert (issue 18). A module of its own so the
suite's workers share the broker scenarios (pytest-xdist --dist loadscope runs a module on one worker).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models.settings import LockstepSettings
from tests.integration.test_scenarios_broker import replay_scenario

pytestmark = pytest.mark.broker


def test_a_healthy_cluster_with_jobs_starting_and_ending_raises_nothing(settings: LockstepSettings,
                                                                          tmp_path: Path) -> None:
    assert replay_scenario("healthy-churn", settings, tmp_path) == []


def test_a_busy_cluster_with_job_churn_raises_nothing_through_the_broker(settings: LockstepSettings,
                                                                           tmp_path: Path) -> None:
    assert replay_scenario("busy-churn", settings, tmp_path) == []


def test_a_stalled_job_through_the_broker(settings: LockstepSettings, tmp_path: Path) -> None:
    alerts = replay_scenario("job-stalled", settings, tmp_path)
    assert [(a["type"], a["status"], a["job_id"], a["started_at"][11:19]) for a in alerts] == [
        ("job_stalled", "firing", "train-b", "11:41:44"), ("job_stalled", "resolved", "train-b", "11:41:44")]
    assert alerts[1]["details"]["end_reason"] == "resumed"
