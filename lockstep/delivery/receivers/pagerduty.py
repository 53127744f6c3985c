"""PagerDuty Events API v2: one ``trigger`` or ``resolve`` event per alert state change.

Published rules this builder keeps (checked again by the test server): ``routing_key`` (32
characters, a secret), ``event_action`` in trigger|acknowledge|resolve, ``dedup_key`` <= 255
characters and stable per (job, cause); a trigger carries ``payload`` with ``summary`` (<= 1,024),
``source``, ``severity`` in critical|error|warning|info, optional ``timestamp``, ``component``,
``group``, ``class`` and ``custom_details``, plus ``links`` (``href``/``text``), ``client`` and
``client_url``. PagerDuty answers 202 when it accepted the event; 400 means the event is invalid
(never retried: dead letter with the response); 429 and 5xx are retried with backoff.

Incidents: a trigger opens an incident for its ``dedup_key`` (or adds to the open one); a resolve
closes it; a trigger after a resolve opens a new incident. The delivery ledger
(:func:`streams.dispatch.lifecycle`) drops replays so a crash never re-opens a resolved incident.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from pydantic import Field

from lockstep.delivery.base import DeliveryContext, HttpReceiver, IntegrationConfig, SenderDeps
from lockstep.delivery.redaction import Redactor, SecretOnly
from lockstep.delivery.text import timeline_table, truncate
from streams.dispatch import Notification

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

SUMMARY_MAX = 1024
DEDUP_KEY_MAX = 255
SEVERITIES = ("critical", "error", "warning", "info")


class PagerDutyConfig(IntegrationConfig):
    """``pagerduty:`` the integration's routing key (always a secret), the endpoint, the event source."""

    routing_key: SecretOnly
    url: str = "https://events.pagerduty.com/v2/enqueue"
    source: str | None = Field(default=None, description="default: the root-cause source, else the job")


def pagerduty_dedup_key(dedup_key: str) -> str:
    """The alert's ``dedup_key`` if it fits 255 characters, else a stable shortened form.

    >>> pagerduty_dedup_key("job_slowdown/llm/network/switch/leaf03/port=17")
    'job_slowdown/llm/network/switch/leaf03/port=17'
    >>> len(pagerduty_dedup_key("x" * 400))
    255
    """
    if len(dedup_key) <= DEDUP_KEY_MAX:
        return dedup_key
    digest = hashlib.sha256(dedup_key.encode()).hexdigest()[:40]
    return dedup_key[: DEDUP_KEY_MAX - 41] + "~" + digest


def pagerduty_event(alert: dict[str, Any], routing_key: str, ctx: DeliveryContext,
                    source: str | None = None) -> dict[str, Any]:
    """The Events API v2 body for ``alert``: ``resolve`` when it is resolved, else ``trigger``."""
    dedup = pagerduty_dedup_key(alert["dedup_key"])
    if alert["status"] == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup}
    root = alert.get("root_cause") or {}
    severity = alert["severity"] if alert["severity"] in SEVERITIES else "error"
    src = source or root.get("source") or alert.get("job_id") or "lockstep"
    component = " ".join(x for x in (root.get("layer"), root.get("source"),
                                     ",".join(f"{k}={v}" for k, v in sorted((root.get("labels") or {}).items())))
                         if x) or "unknown"
    details: dict[str, Any] = {
        "alert_id": alert["alert_id"], "job_id": alert.get("job_id"), "gpus": alert.get("gpus"),
        "nodes": alert.get("nodes", [])[:64], "node_count": len(alert.get("nodes", [])),
        "started_at": alert["started_at"], "detected_at": alert["detected_at"],
        "root_cause": root, "symptom": alert.get("symptom"),
        "timeline": timeline_table(alert.get("timeline") or [], rows=20),
        "other_jobs": alert.get("other_jobs", [])[:20], "labels": alert.get("labels", {}),
    }
    links = [{"href": url, "text": text} for text, url in
             (("Job timeline", ctx.timeline_url(alert)), ("Alert", ctx.alert_url(alert))) if url]
    event: dict[str, Any] = {
        "routing_key": routing_key, "event_action": "trigger", "dedup_key": dedup,
        "payload": {
            "summary": truncate(alert["summary"], SUMMARY_MAX), "source": truncate(str(src), 255),
            "severity": severity, "timestamp": alert["started_at"], "component": truncate(component, 255),
            "group": alert.get("job_id") or "unknown", "class": f"{alert['type']}/{root.get('domain') or 'unknown'}",
            "custom_details": details,
        },
        "client": "Lockstep", "links": links,
    }
    if ctx.public_url:
        event["client_url"] = ctx.public_url
    return event


class PagerDutyReceiver(HttpReceiver):
    kind = "pagerduty"
    config_model = PagerDutyConfig
    per_alert = True

    def __init__(self, config: ReceiverConfig, redactor: Redactor, routing_key: str) -> None:
        super().__init__(config, redactor)
        cfg = config.integration_as(PagerDutyConfig)
        self._key = routing_key
        self._pd = cfg

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> PagerDutyReceiver:
        return cls(config, deps.redactor, deps.secret(config.integration_as(PagerDutyConfig).routing_key))

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        for alert in notification.changed:
            event = pagerduty_event(alert, self._key, ctx, self._pd.source)
            await self.post_json(self._pd.url, event, accept=frozenset({202}), now=ctx.now)
