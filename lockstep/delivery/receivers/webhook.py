"""A generic webhook in Alertmanager's own body (``version: "4"``), so any receiver written for Alertmanager plugs in.

The body: ``groupKey``, ``truncatedAlerts``, ``status``, ``receiver``, ``groupLabels``,
``commonLabels``, ``commonAnnotations``, ``externalURL`` and ``alerts`` (each with ``status``,
``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``generatorURL``, ``fingerprint``), one per
group notification. Any 2xx is success.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from pydantic import Field

from lockstep.delivery.base import DeliveryContext
from lockstep.delivery.receivers.alertmanager import (
    BAD_LABEL_CHARS,
    BearerReceiver,
    BearerTarget,
    am_annotations,
    am_labels,
)
from lockstep.delivery.redaction import Redactor
from streams.dispatch import Notification

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

ZERO_TIME = "0001-01-01T00:00:00Z"


class WebhookConfig(BearerTarget):
    """``webhook:`` the URL (literal or secret), an optional bearer token, how many alerts a body lists."""

    max_alerts: int = Field(default=0, ge=0, description="0 = all; more are counted in truncatedAlerts")


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
        "groupLabels": {BAD_LABEL_CHARS.sub("_", k): v for k, v in notification.group_labels.items()},
        "commonLabels": common_labels, "commonAnnotations": common_ann,
        "externalURL": ctx.public_url or "", "alerts": alerts,
    }


class WebhookReceiver(BearerReceiver):
    kind = "webhook"
    config_model = WebhookConfig

    def __init__(self, config: ReceiverConfig, redactor: Redactor, url: str, token: str | None) -> None:
        super().__init__(config, redactor, url, token)
        cfg = config.integration_as(WebhookConfig)
        self._max = cfg.max_alerts

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        await self.post(webhook_v4(notification, ctx, self._max), frozenset(range(200, 300)), ctx.now)
