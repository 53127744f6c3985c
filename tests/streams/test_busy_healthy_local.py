"""The long busy-healthy replay (``busy-healthy-40m``) through the pure pipeline (lockstep.local.LocalRunner):
40 simulated minutes of job churn, staggered checkpoints and slow drift on a healthy cluster raise nothing.
Slow (about 100 s a seed): only with LOCKSTEP_SLOW_TESTS=1. Through the broker:
tests/integration/test_busy_healthy_broker.py."""

from __future__ import annotations

import pytest

from lockstep.local import LocalRunner
from lockstep.simulate import SCENARIOS, Simulator

SCENARIO = SCENARIOS["busy-healthy-40m"]


def test_the_scenario_is_busy_for_forty_minutes() -> None:
    """What the slow test below relies on, checked quickly: 40 minutes, jobs ending every few minutes in
    each of the three ways, two long jobs whose checkpoints into the shared pool never overlap."""
    jobs = SCENARIO.cluster.jobs
    assert SCENARIO.duration >= 2400.0
    ends = [j for j in jobs if j.end_offset is not None and j.end_offset < SCENARIO.duration]
    assert len(ends) >= 15
    kinds = {("CANCELLED" if j.end_state == "CANCELLED" else "COMPLETING" if j.completing_s else "COMPLETED")
             for j in ends}
    assert kinds == {"CANCELLED", "COMPLETING", "COMPLETED"}
    long_jobs = [j for j in jobs if j.end_offset is None and j.checkpoint_every_s > 0]
    assert [j.storage[0] for j in long_jobs] == ["lustre-a", "lustre-a"]
    windows = [{int(j.start_offset + j.checkpoint_phase_s + k * j.checkpoint_every_s + s)
                for k in range(1, 9) for s in range(int(j.checkpoint_s))} for j in long_jobs]
    assert windows[0] and windows[1] and not windows[0] & windows[1]
    assert any(j.drift_per_h for j in jobs) and SCENARIO.cluster.gpu_temp_drift_per_h > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [7, 11])
def test_a_busy_healthy_cluster_raises_nothing_in_forty_minutes(seed: int) -> None:
    """Through the pipeline of 020ffc4 (before a job's lifecycle was in the evidence) this gave 26 firing
    alerts for either seed, none resolved: a job_slowdown and a gpu_utilisation per ending job."""
    result = LocalRunner().run_messages(Simulator(SCENARIO, seed=seed).run())
    assert [(a["type"], a["status"], a["job_id"]) for a in result.alerts] == []
    assert result.samples > 1_500_000
