"""The storage scenarios (lockstep/scenarios/storage.py) through the pure pipeline (LocalRunner).

Nothing is injected into a job: the storage leaf's port samples name only the switch and port and
reach the job through the inventory (the pool's servers hang off the leaf); per-job write bytes
arrive in the real formats and are converted by the same adapters the worker runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.local import LocalRunner
from lockstep.scenarios.storage import messages, native


def run(name: str, seed: int = 7) -> list[dict[str, Any]]:
    return LocalRunner(4).run_messages(native(messages(name, seed))).alerts


@pytest.mark.parametrize("seed", [7, 11])
def test_a_storage_leaf_port_erring_with_the_pools_latency_is_storage_via_network(seed: int) -> None:
    alerts = run("storage-via-network", seed)
    assert [(a["type"], a["status"], a["job_id"]) for a in alerts] == [("job_slowdown", "firing", "train-a"),
                                                                     ("job_slowdown", "resolved", "train-a")]
    rc = alerts[0]["root_cause"]
    assert (rc["domain"], rc["layer"], rc["source"], rc["labels"]) == ("network", "switch", "stor-leaf01",
                                                                       {"port": "1"})
    assert rc["reason"].startswith("storage via network: stor-leaf01 port 1 on pool lustre-a's path moved first")
    entries = [(e["layer"], e["source"], e["metric"]) for e in alerts[0]["timeline"]]
    assert entries[0] == ("switch", "stor-leaf01", "SymbolErrorCounter")
    assert ("storage", "lustre-a", "write_latency_seconds") in entries
    # train-b uses the same pool through the same leaf: it is at risk, and named.
    assert {"job_id": "train-b", "gpus": 32, "relation": "same_pool_path"} in alerts[0]["other_jobs"]


@pytest.mark.parametrize(("name", "seed"), [("checkpoint-contention-lustre-exporter", 7),
                                          ("checkpoint-contention-lustre-exporter", 11),
                                          ("checkpoint-contention-jobstats", 7)])
def test_two_jobs_checkpointing_in_real_lustre_counters_are_one_contention(name: str, seed: int) -> None:
    alerts = run(name, seed)
    assert [(a["type"], a["status"]) for a in alerts] == [("checkpoint_contention", "firing"),
                                                        ("checkpoint_contention", "resolved")]
    final = alerts[-1]
    assert final["details"]["jobs"] == ["train-a", "train-b"] and final["details"]["pool"] == "lustre-a"
    assert final["details"]["advice"]["move"] == "train-b"
    assert final["details"]["overlap"]["seconds"] == pytest.approx(25.0, abs=2.0)
