"""The seed incident and a healthy cluster through the pure pipeline (no broker).

These guard the whole detection -> correlation chain quickly; the same scenarios run through the
real broker in tests/integration.
"""

from __future__ import annotations

import pytest

from lockstep.local import run_scenario


@pytest.fixture(scope="module")
def seed_result():
    return run_scenario("seed-incident")


def test_seed_incident_gives_one_network_alert_naming_the_switch_port(seed_result):
    firing = [a for a in seed_result.alerts if a["status"] == "firing"]
    assert len(firing) == 1
    alert = firing[0]
    assert alert["job_id"] == "llm-70b"
    assert alert["gpus"] == 256
    assert alert["root_cause"]["domain"] == "network"
    assert alert["root_cause"]["source"] == "leaf03"
    assert alert["root_cause"]["labels"] == {"port": "17"}
    assert alert["root_cause"]["first_seen"].startswith("2025-11-30T11:42:10")
    assert alert["severity"] == "critical"


def test_seed_incident_timeline_runs_switch_nccl_gpu_step(seed_result):
    alert = next(a for a in seed_result.alerts if a["status"] == "firing")
    layers = list(dict.fromkeys(e["layer"] for e in alert["timeline"]))
    assert layers == ["switch", "nccl", "gpu", "step"]
    times = [e["ts"] for e in alert["timeline"]]
    assert times == sorted(times)
    assert alert["timeline"][0]["source"] == alert["root_cause"]["source"]
    onsets = {e["layer"]: e["ts"][11:19] for e in reversed(alert["timeline"])}
    assert onsets == {"switch": "11:42:10", "nccl": "11:42:12", "gpu": "11:42:15", "step": "11:42:18"}


def test_seed_incident_resolves_once_with_the_same_identity(seed_result):
    resolved = [a for a in seed_result.alerts if a["status"] == "resolved"]
    firing = [a for a in seed_result.alerts if a["status"] == "firing"]
    assert len(resolved) == 1
    assert resolved[0]["alert_id"] == firing[0]["alert_id"]
    assert resolved[0]["dedup_key"] == firing[0]["dedup_key"]
    assert resolved[0]["resolved_at"] > firing[0]["started_at"]


def test_healthy_cluster_raises_no_alert():
    result = run_scenario("healthy")
    assert result.alerts == []
    assert result.samples > 100_000


@pytest.mark.parametrize(
    ("scenario", "job", "domain", "source", "labels"),
    [
        ("roce-retransmits", "roce-c", "network", "gpu014", {"device": "mlx5_0", "port": "1"}),
        ("storage-latency", "train-a", "storage", "lustre-a", {}),
        ("dataloader", "train-a", "dataloader", "gpu003", {}),
        ("xid", "train-a", "compute", "gpu005", {"gpu": "3"}),
    ],
)
def test_each_fault_scenario_names_its_domain_and_first_mover(scenario: str, job: str, domain: str, source: str,
                                                             labels: dict[str, str]) -> None:
    result = run_scenario(scenario)
    firing = [a for a in result.alerts if a["status"] == "firing" and a["type"] == "job_slowdown"]
    assert [(a["job_id"], a["root_cause"]["domain"], a["root_cause"]["source"]) for a in firing] == [
        (job, domain, source)]
    got = firing[0]["root_cause"]["labels"]
    assert {k: got.get(k) for k in labels} == labels
    assert [a["status"] for a in result.alerts if a["type"] == "job_slowdown"] == ["firing", "resolved"]


def test_jobs_starting_and_ending_raise_no_alert() -> None:
    assert run_scenario("healthy-churn").alerts == []


def test_two_jobs_checkpointing_together_raise_one_contention_alert_with_advice() -> None:
    alerts = run_scenario("checkpoint-contention").alerts
    assert [(a["type"], a["status"]) for a in alerts] == [("checkpoint_contention", "firing"),
                                                        ("checkpoint_contention", "resolved")]
    final = alerts[-1]
    assert final["details"]["jobs"] == ["train-a", "train-b"] and final["details"]["pool"] == "lustre-a"
    assert final["details"]["overlap"]["seconds"] == 25.0
    assert final["details"]["advice"]["move"] == "train-b"
    assert final["root_cause"]["domain"] == "storage" and final["gpus"] == 96



def test_a_straggler_is_named_from_its_first_slow_step_and_explains_the_job_slowdown() -> None:
    result = run_scenario("straggler")
    stragglers = [a for a in result.alerts if a["type"] == "straggler"]
    assert [a["status"] for a in stragglers] == ["firing", "resolved"]
    first = stragglers[0]
    assert stragglers[1]["alert_id"] == first["alert_id"]
    assert (first["job_id"], first["gpus"], first["nodes"]) == ("train-a", 64, ["gpu006"])
    assert first["root_cause"]["source"] == "gpu006" and first["root_cause"]["labels"] == {"rank": "40"}
    assert first["started_at"][11:19] == "11:41:45"  # the fault's start, not when it was confirmed
    assert 1.3 < first["details"]["ratio_to_median"] < 1.6 and first["details"]["workers_compared"] == 8
    # The job-level alert first had no first mover; the confirmed straggler becomes its root cause.
    slowdowns = [a for a in result.alerts if a["type"] == "job_slowdown"]
    assert len({a["alert_id"] for a in slowdowns}) == 1
    assert slowdowns[0]["root_cause"]["domain"] == "unknown"
    assert [(a["status"], a["root_cause"]["domain"], a["root_cause"]["source"]) for a in slowdowns[1:]] == [
        ("firing", "compute", "gpu006"), ("resolved", "compute", "gpu006")]
    assert slowdowns[1]["details"]["straggler_alert"] == first["alert_id"]


@pytest.mark.parametrize("scenario", ["seed-incident", "dataloader", "xid", "storage-latency"])
def test_job_wide_slowdowns_raise_no_straggler(scenario: str) -> None:
    assert not [a for a in run_scenario(scenario).alerts if a["type"] == "straggler"]
