"""OCSF Detection Finding records (class 2004), and the receiver that writes them to a Kafka topic for a SIEM.

OCSF 1.1 Detection Finding — the fields this builder always sets, required ones first:
``class_uid`` 2004, ``category_uid`` 2 (Findings), ``activity_id`` 1 Create / 2 Update / 3 Close,
``type_uid`` = class_uid * 100 + activity_id, ``time`` (ms), ``severity_id`` (1 Informational,
3 Medium, 4 High, 5 Critical), ``metadata`` (``product`` with name/vendor_name/version, schema
``version``), ``finding_info`` (``uid`` = alert_id, ``title``, ``first_seen_time``,
``last_seen_time``, ``types``, ``src_url``); and ``status_id`` 1 New / 4 Resolved, ``message``,
``resources`` (the job, its nodes, the root-cause switch port or component) and ``unmapped``
(root cause and timeline as Lockstep reports them). The ``syslog`` receiver sends the same
records over syslog.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import Field

from lockstep.delivery.base import DeliveryContext, IntegrationConfig, ProducerReceiver
from lockstep.delivery.text import truncate
from models.timeutil import parse_ts
from streams.dispatch import Notification

OCSF_VERSION = "1.1.0"
CLASS_UID = 2004
CATEGORY_UID = 2
ACTIVITIES = {1: "Create", 2: "Update", 3: "Close"}
SEVERITY_ID = {"info": 1, "warning": 3, "error": 4, "critical": 5}
SEVERITY_NAME = {1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal"}
STATUS = {"firing": (1, "New"), "resolved": (4, "Resolved")}


def epoch_ms(ts: str | None) -> int | None:
    """Milliseconds since the epoch of an RFC 3339 time (None stays None), as OCSF and CEF write times."""
    return None if not ts else round(parse_ts(ts) * 1000)


def ocsf_activity(alert: dict[str, Any], repeat: bool = False) -> int:
    """3 Close when resolved, 2 Update for a repeat of a still-firing incident, 1 Create otherwise."""
    if alert["status"] == "resolved":
        return 3
    return 2 if repeat else 1


def ocsf_resources(alert: dict[str, Any]) -> list[dict[str, Any]]:
    """The job, each node (up to 100) and the root-cause component (a switch port when it is one)."""
    out: list[dict[str, Any]] = []
    if alert.get("job_id"):
        out.append({"type": "job", "uid": alert["job_id"], "name": alert["job_id"],
                    "labels": [f"gpus={alert.get('gpus', 0)}"]})
    out += [{"type": "node", "uid": n, "name": n} for n in (alert.get("nodes") or [])[:100]]
    root = alert.get("root_cause") or {}
    if root.get("source"):
        labels = root.get("labels") or {}
        if root.get("layer") == "switch" and "port" in labels:
            out.append({"type": "switch_port", "uid": f"{root['source']}:{labels['port']}",
                        "name": f"{root['source']} port {labels['port']}"})
        else:
            out.append({"type": str(root.get("layer") or "component"), "uid": str(root["source"]),
                        "name": str(root["source"]), "labels": [f"{k}={v}" for k, v in sorted(labels.items())]})
    return out


def ocsf_finding(alert: dict[str, Any], ctx: DeliveryContext, repeat: bool = False) -> dict[str, Any]:
    """One OCSF Detection Finding for an alert state change (``repeat``: a re-notification)."""
    activity = ocsf_activity(alert, repeat)
    sev = SEVERITY_ID.get(alert["severity"], 3)
    status_id, status = STATUS[alert["status"]]
    last_seen = alert.get("resolved_at") or alert["detected_at"]
    info: dict[str, Any] = {
        "uid": alert["alert_id"], "title": truncate(f"{alert['type']}: {alert.get('job_id') or 'cluster'}", 256),
        "desc": alert["summary"], "types": [alert["type"]],
        "first_seen_time": epoch_ms(alert["started_at"]), "last_seen_time": epoch_ms(last_seen),
        "created_time": epoch_ms(alert["detected_at"]),
    }
    url = ctx.timeline_url(alert) or ctx.alert_url(alert)
    if url:
        info["src_url"] = url
    return {
        "class_uid": CLASS_UID, "class_name": "Detection Finding",
        "category_uid": CATEGORY_UID, "category_name": "Findings",
        "activity_id": activity, "activity_name": ACTIVITIES[activity],
        "type_uid": CLASS_UID * 100 + activity, "type_name": f"Detection Finding: {ACTIVITIES[activity]}",
        "time": epoch_ms(alert["resolved_at"] if alert["status"] == "resolved" and alert.get("resolved_at")
                    else alert["detected_at"]),
        "severity_id": sev, "severity": SEVERITY_NAME[sev],
        "status_id": status_id, "status": status,
        "message": alert["summary"],
        "metadata": {
            "version": OCSF_VERSION, "correlation_uid": alert["dedup_key"], "uid": alert["alert_id"],
            "product": {"name": "Lockstep", "vendor_name": "Lockstep", "version": ctx.version},
        },
        "finding_info": info,
        "resources": ocsf_resources(alert),
        "unmapped": {"root_cause": alert.get("root_cause"), "timeline": alert.get("timeline", []),
                     "gpus": alert.get("gpus"), "other_jobs": alert.get("other_jobs", [])},
    }


class OcsfConfig(IntegrationConfig):
    """``ocsf:`` the topic the findings go to."""

    topic: str = Field(default="alerts.ocsf", pattern=r"^[A-Za-z0-9._-]+$", description="topic_prefix applied")

    def output_topics(self, receiver: str) -> list[tuple[str, str]]:
        return [(self.topic, "OCSF Detection Findings (class 2004)")]


class OcsfTopicReceiver(ProducerReceiver):
    """One OCSF Detection Finding per alert state change on the SIEM topic."""

    kind = "ocsf"
    config_model = OcsfConfig

    def record(self, alert: dict[str, Any], notification: Notification, ctx: DeliveryContext) -> tuple[str, bytes]:
        return self.config.integration_as(OcsfConfig).topic, orjson.dumps(ocsf_finding(alert, ctx, notification.repeat))
