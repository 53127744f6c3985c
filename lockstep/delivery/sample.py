"""A sample alert in the ``alerts`` contract: the textbook incident (used by ``lockstep receivers test``)."""

from __future__ import annotations

from typing import Any

from models.alerts import Alert
from models.timeutil import format_ts


def sample_alert(now: float, *, status: str = "firing", tag: str = "test") -> dict[str, Any]:
    """A complete, valid alert starting 60 s before ``now``; ``tag`` makes its dedup_key unique."""
    onset = now - 60.0
    ts = [format_ts(onset - 8 + d) for d in (0, 2, 5, 8)]
    timeline = [
        {"ts": ts[0], "layer": "switch", "source": "leaf03", "labels": {"port": "17"},
         "metric": "SymbolErrorCounter", "value": 1200.0, "p50": 0.0, "p99": 2.0, "score": 0.99,
         "meaning": "link_errors", "entities": 1},
        {"ts": ts[1], "layer": "nccl", "source": "gpu007", "labels": {}, "metric": "coll_exec_time_us",
         "value": 9100.0, "p50": 2100.0, "p99": 2600.0, "score": 0.97, "meaning": "collective_time", "entities": 12},
        {"ts": ts[2], "layer": "gpu", "source": "gpu007", "labels": {"gpu": "0"}, "metric": "DCGM_FI_DEV_GPU_UTIL",
         "value": 41.0, "p50": 97.0, "p99": 99.0, "score": 0.95, "meaning": "utilisation", "entities": 64},
        {"ts": ts[3], "layer": "step", "source": "llm-70b", "labels": {}, "metric": "step_time_seconds",
         "value": 4.1, "p50": 1.6, "p99": 1.8, "score": 0.99, "meaning": "step_time", "entities": 1},
    ]
    alert = {
        "alert_id": f"sample-{tag}", "dedup_key": f"lockstep-test/{tag}/network/switch/leaf03/port=17",
        "type": "job_slowdown", "status": status, "severity": "critical", "job_id": "llm-70b", "gpus": 256,
        "nodes": [f"gpu{i:03d}" for i in range(1, 33)], "started_at": format_ts(onset),
        "detected_at": format_ts(onset + 5), "resolved_at": format_ts(now) if status == "resolved" else None,
        "symptom": {"layer": "step", "metric": "step_time_seconds", "baseline": 1.6, "value": 4.1, "ratio": 2.563,
                    "onset": format_ts(onset)},
        "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"},
                       "metric": "SymbolErrorCounter", "first_seen": ts[0], "meaning": "link_errors",
                       "reason": "switch leaf03 port 17 link_errors moved first"},
        "timeline": timeline, "other_jobs": [{"job_id": "vision-8b", "gpus": 32, "relation": "same_switch"}],
        "summary": (f"[TEST] job llm-70b (256 GPUs, 32 nodes) slowed: step time x2.6 since {format_ts(onset)[11:19]}; "
                    "network: switch leaf03 port 17 moved first (SymbolErrorCounter); switch -> nccl -> gpu -> step"),
        "labels": {"job_id": "llm-70b", "domain": "network", "alertname": "job_slowdown"},
    }
    return Alert.model_validate(alert).model_dump(mode="json")
