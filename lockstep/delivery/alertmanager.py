"""Alertmanager: push to ``POST /api/v2/alerts``, and a generic webhook in the webhook v4 shape.

``/api/v2/alerts`` takes a JSON array of postable alerts: ``labels`` (required; names match
``[a-zA-Z_][a-zA-Z0-9_]*``, values strings), ``annotations``, ``startsAt``, ``endsAt`` and
``generatorURL``. Alertmanager resolves an alert by itself once ``endsAt`` passes, so a firing
alert carries ``endsAt = now + firing_ttl`` and the route's ``repeat_interval`` (validated below
``firing_ttl``) refreshes it; a resolved alert carries ``endsAt = resolved_at``. 200 is success.

The webhook body is Alertmanager's own (``version: "4"``): ``groupKey``, ``truncatedAlerts``,
``status``, ``receiver``, ``groupLabels``, ``commonLabels``, ``commonAnnotations``,
``externalURL`` and ``alerts`` (each with ``status``, ``labels``, ``annotations``, ``startsAt``,
``endsAt``, ``generatorURL``, ``fingerprint``), so any receiver written for Alertmanager plugs in.
Any 2xx is success.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from lockstep.delivery.base import DeliveryContext, HttpReceiver, truncate
from lockstep.delivery.redaction import Redactor
from lockstep.delivery.slack import timeline_table
from streams.routing import Notification, ReceiverConfig, alert_labels

ZERO_TIME = "0001-01-01T00:00:00Z"
_BAD_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def am_labels(alert: dict[str, Any]) -> dict[str, str]:
    """Routing labels made valid Prometheus label names (``[a-zA-Z_][a-zA-Z0-9_]*``), empty values dropped.

    >>> am_labels({"type": "job_slowdown", "severity": "critical", "job_id": "llm", "dedup_key": "k",
    ...            "root_cause": {"domain": "network"}, "labels": {"gpu.vendor": "x"}})["gpu_vendor"]
    'x'
    """
    out: dict[str, str] = {}
    for name, value in alert_labels(alert).items():
        clean = _BAD_LABEL_CHARS.sub("_", name)
        if clean[:1].isdigit():
            clean = "_" + clean
        if value != "" and clean:
            out[clean] = value
    return out


def am_annotations(alert: dict[str, Any], ctx: DeliveryContext) -> dict[str, str]:
    root = alert.get("root_cause") or {}
    notes = {
        "summary": alert["summary"], "description": root.get("reason") or "",
        "root_cause": " ".join(str(x) for x in (root.get("layer"), root.get("source"), root.get("metric")) if x),
        "first_seen": root.get("first_seen") or "", "gpus": str(alert.get("gpus", 0)),
        "nodes": str(len(alert.get("nodes") or [])), "alert_id": alert["alert_id"],
        "timeline": timeline_table(alert.get("timeline") or [], rows=12),
        "timeline_url": ctx.timeline_url(alert) or "",
    }
    return {k: truncate(v, 4000) for k, v in notes.items() if v}


def am_postable_alert(alert: dict[str, Any], ctx: DeliveryContext, firing_ttl: float) -> dict[str, Any]:
    """One element of the ``/api/v2/alerts`` array."""
    ends = alert["resolved_at"] if alert["status"] == "resolved" and alert.get("resolved_at") \
        else _rfc3339(ctx.now + firing_ttl)
    out = {"labels": am_labels(alert), "annotations": am_annotations(alert, ctx),
           "startsAt": alert["started_at"], "endsAt": ends}
    url = ctx.alert_url(alert)
    if url:
        out["generatorURL"] = url
    return out


def fingerprint(labels: dict[str, str]) -> str:
    """A stable 16-hex-digit fingerprint of a label set (as Alertmanager shows one)."""
    text = "\xff".join(f"{k}\xff{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def webhook_v4(notification: Notification, ctx: DeliveryContext, max_alerts: int = 0) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one group notification."""
    alerts = []
    for alert in notification.alerts:
        labels = am_labels(alert)
        resolved = alert["status"] == "resolved"
        alerts.append({
            "status": "resolved" if resolved else "firing", "labels": labels,
            "annotations": am_annotations(alert, ctx), "startsAt": alert["started_at"],
            "endsAt": alert.get("resolved_at") or ZERO_TIME if resolved else ZERO_TIME,
            "generatorURL": ctx.alert_url(alert) or "", "fingerprint": fingerprint(labels),
        })
    truncated = 0
    if max_alerts and len(alerts) > max_alerts:
        truncated = len(alerts) - max_alerts
        alerts = alerts[:max_alerts]
    common_labels = dict(set.intersection(*(set(a["labels"].items()) for a in alerts))) if alerts else {}
    common_ann = dict(set.intersection(*(set(a["annotations"].items()) for a in alerts))) if alerts else {}
    firing = any(a["status"] == "firing" for a in notification.alerts)
    return {
        "version": "4", "groupKey": notification.group_key, "truncatedAlerts": truncated,
        "status": "firing" if firing else "resolved", "receiver": notification.receiver,
        "groupLabels": {_BAD_LABEL_CHARS.sub("_", k): v for k, v in notification.group_labels.items()},
        "commonLabels": common_labels, "commonAnnotations": common_ann,
        "externalURL": ctx.public_url or "", "alerts": alerts,
    }


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class AlertmanagerReceiver(HttpReceiver):
    kind = "alertmanager"

    def __init__(self, config: ReceiverConfig, redactor: Redactor, url: str, token: str | None) -> None:
        super().__init__(config, redactor)
        assert config.alertmanager is not None
        self._url = url.rstrip("/") + "/api/v2/alerts"
        self._token = token
        self._ttl = config.alertmanager.firing_ttl

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        body = [am_postable_alert(a, ctx, self._ttl) for a in notification.alerts]
        await self.post_json(self._url, body, accept=frozenset({200}), now=ctx.now, headers=_auth(self._token))


class WebhookReceiver(HttpReceiver):
    kind = "webhook"

    def __init__(self, config: ReceiverConfig, redactor: Redactor, url: str, token: str | None) -> None:
        super().__init__(config, redactor)
        assert config.webhook is not None
        self._url = url
        self._token = token
        self._max = config.webhook.max_alerts

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        body = webhook_v4(notification, ctx, self._max)
        await self.post_json(self._url, body, accept=frozenset(range(200, 300)), now=ctx.now,
                             headers=_auth(self._token))
