"""Alertmanager: push to ``POST /api/v2/alerts``, so an existing Alertmanager routes Lockstep's alerts.

``/api/v2/alerts`` takes a JSON array of postable alerts: ``labels`` (required; names match
``[a-zA-Z_][a-zA-Z0-9_]*``, values strings), ``annotations``, ``startsAt``, ``endsAt`` and
``generatorURL``. Alertmanager resolves an alert by itself once ``endsAt`` passes, so a firing
alert carries ``endsAt = now + firing_ttl`` and the route's ``repeat_interval`` (validated below
``firing_ttl``) refreshes it; a resolved alert carries ``endsAt = resolved_at``. 200 is success.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field

from lockstep.delivery.base import DeliveryContext, HttpReceiver, IntegrationConfig, SenderDeps
from lockstep.delivery.redaction import Redactor, SecretRef, UrlOrSecret
from lockstep.delivery.text import timeline_table, truncate
from streams.dispatch import Notification
from streams.matchers import alert_labels
from streams.routes import Duration, Route

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

BAD_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


class BearerTarget(IntegrationConfig):
    """A URL to POST to (literal or secret) and an optional bearer token: Alertmanager's and a webhook's."""

    url: UrlOrSecret
    bearer_token: SecretRef | None = None


class AlertmanagerConfig(BearerTarget):
    """``alertmanager:`` its base URL (literal or secret), an optional bearer token, the firing TTL."""

    url: UrlOrSecret = Field(description="base URL; alerts are POSTed to <url>/api/v2/alerts")
    firing_ttl: Duration = Field(default=3600.0, description="endsAt of a firing alert = now + firing_ttl")

    def route_problem(self, route: Route) -> tuple[str, str] | None:
        if self.firing_ttl <= route.options.repeat_interval:
            return ("firing_ttl", f"must exceed repeat_interval ({route.options.repeat_interval:g}s) of route "
                                  f"{route.id}, or Alertmanager resolves firing alerts")
        return None


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
        clean = BAD_LABEL_CHARS.sub("_", name)
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


class BearerReceiver(HttpReceiver):
    """POSTs JSON to a :class:`BearerTarget`'s URL with its token (``Authorization: Bearer``)."""

    def __init__(self, config: ReceiverConfig, redactor: Redactor, url: str, token: str | None) -> None:
        super().__init__(config, redactor)
        self._url = url
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> BearerReceiver:
        cfg = config.integration_as(BearerTarget)
        return cls(config, deps.redactor, deps.secret(cfg.url), deps.secrets.value(cfg.bearer_token))

    async def post(self, body: Any, accept: frozenset[int], now: float) -> None:
        await self.post_json(self._url, body, accept=accept, now=now, headers=self._auth)


class AlertmanagerReceiver(BearerReceiver):
    kind = "alertmanager"
    config_model = AlertmanagerConfig

    def __init__(self, config: ReceiverConfig, redactor: Redactor, url: str, token: str | None) -> None:
        super().__init__(config, redactor, url.rstrip("/") + "/api/v2/alerts", token)
        cfg = config.integration_as(AlertmanagerConfig)
        self._ttl = cfg.firing_ttl

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        await self.post([am_postable_alert(a, ctx, self._ttl) for a in notification.alerts], frozenset({200}), ctx.now)
