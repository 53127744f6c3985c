"""Alertmanager: push to ``POST /api/v2/alerts``, so an existing Alertmanager routes Lockstep's alerts.

``/api/v2/alerts`` takes a JSON array of postable alerts: ``labels`` (required; names match
``[a-zA-Z_][a-zA-Z0-9_]*``, values strings), ``annotations``, ``startsAt``, ``endsAt`` and
``generatorURL``. Alertmanager resolves an alert by itself once ``endsAt`` passes, so a firing
alert carries ``endsAt = now + firing_ttl`` and the route's ``repeat_interval`` (validated below
``firing_ttl``) refreshes it; a resolved alert carries ``endsAt = resolved_at``. 200 is success.

Neither ``startsAt`` nor a resolved ``endsAt`` is ever after the delivery's wall clock (``ctx.now``):
Alertmanager keeps an alert whose ``endsAt`` is in the future active until then, and a demo or a
source with a fast clock can stamp event times ahead of the wall clock.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

from pydantic import Field

from lockstep.delivery.base import DeliveryContext, HttpReceiver, IntegrationConfig, SenderDeps
from lockstep.delivery.redaction import Redactor, SecretRef, UrlOrSecret
from lockstep.delivery.text import timeline_table, truncate
from models.timeutil import format_ts, parse_ts
from streams.catalogue import FABRICS
from streams.dispatch import Notification
from streams.routes import Duration, Route
from streams.rules import match_labels

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

BAD_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")

#: Lower edges of the ``gpus_bucket`` label: one node (1-7), a rack (8-63), then x4 steps.
GPU_BUCKET_EDGES = (1, 8, 64, 256, 1024, 4096)

#: ``fabric`` label per family of the catalogue's network metric names.
FABRIC_LABELS = {"InfiniBand": "ib", "RoCE (Ethernet)": "roce"}


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


def gpus_bucket(gpus: int) -> str:
    """The GPU-count bucket of an alert, a label value to route and silence on by job size.

    >>> [gpus_bucket(n) for n in (0, 1, 8, 64, 255, 256, 5000)]
    ['0', '1-7', '8-63', '64-255', '64-255', '256-1023', '4096+']
    """
    if gpus < GPU_BUCKET_EDGES[0]:
        return "0"
    for low, high in itertools.pairwise(GPU_BUCKET_EDGES):
        if low <= gpus < high:
            return f"{low}-{high - 1}"
    return f"{GPU_BUCKET_EDGES[-1]}+"


def alert_fabric(alert: dict[str, Any]) -> str:
    """``ib`` or ``roce`` when the root cause is a metric of that fabric in the catalogue; empty
    otherwise (the label is then left out). From the root cause alone, so the label set of a
    revised root cause can be rebuilt (:func:`am_postable_alerts`).

    >>> alert_fabric({"root_cause": {"metric": "SymbolErrorCounter"}}), alert_fabric({"root_cause": {
    ...     "metric": "rx_discards_phy"}}), alert_fabric({"root_cause": {"metric": "step_time_seconds"}})
    ('ib', 'roce', '')
    """
    metric = (alert.get("root_cause") or {}).get("metric")
    return FABRIC_LABELS.get(FABRICS.get(str(metric), ""), "")


def am_labels(alert: dict[str, Any]) -> dict[str, str]:
    """Labels to route, silence and inhibit on, made valid Prometheus label names
    (``[a-zA-Z_][a-zA-Z0-9_]*``), empty values dropped.

    The routing labels (``alertname``, ``type``, ``severity``, ``domain``, ``job``, ``job_id``,
    ``dedup_key``, the alert's own labels), where the root cause is exactly as Lockstep's own
    silences see it (``root_layer``, ``root_source`` and ``switch`` + ``port``, ``pool`` or
    ``node``: ``streams.rules.match_labels``), the root cause's ``device`` (a NIC's device, a GPU's
    index), ``gpus_bucket`` and ``fabric``. They stay the same through an incident's repeats and
    its resolution, so Alertmanager sees one fingerprint, unless late evidence revises the root
    cause (:func:`am_postable_alerts` then ends the old label set).

    >>> labels = am_labels({"type": "job_slowdown", "severity": "critical", "job_id": "llm", "dedup_key": "k",
    ...     "gpus": 256, "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03",
    ...     "labels": {"port": "17"}, "metric": "SymbolErrorCounter"}, "labels": {"gpu.vendor": "x"}})
    >>> [labels[k] for k in ("gpu_vendor", "switch", "port", "gpus_bucket", "fabric")]
    ['x', 'leaf03', '17', '256-1023', 'ib']
    """
    root = alert.get("root_cause") or {}
    root_labels = root.get("labels") or {}
    found = match_labels(alert)
    device = root_labels.get("device") or (root_labels.get("gpu") if root.get("layer") == "gpu" else None)
    if device is not None:
        found.setdefault("device", str(device))
    found.setdefault("gpus_bucket", gpus_bucket(int(alert.get("gpus") or 0)))
    found.setdefault("fabric", alert_fabric(alert))
    out: dict[str, str] = {}
    for name, value in found.items():
        clean = BAD_LABEL_CHARS.sub("_", name)
        if clean[:1].isdigit():
            clean = "_" + clean
        if value != "" and clean:
            out[clean] = value
    return out


def not_after(ts: str, now: float) -> str:
    """An RFC 3339 time, or ``now`` when it is later (Alertmanager must never see the future).

    >>> not_after("2025-11-30T11:42:10.000Z", 1764502930.0), not_after("2099-01-01T00:00:00Z", 1764502930.0)
    ('2025-11-30T11:42:10.000Z', '2025-11-30T11:42:10.000Z')
    """
    return ts if parse_ts(ts) <= now else format_ts(now)


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
    """One element of the ``/api/v2/alerts`` array, at the delivery's wall clock ``ctx.now``.

    ``startsAt`` is the incident's start and a resolved ``endsAt`` its resolution, each clamped to
    ``ctx.now``; a firing ``endsAt`` is ``ctx.now + firing_ttl`` (Alertmanager's "still firing until").
    """
    starts = not_after(alert["started_at"], ctx.now)
    if alert["status"] == "resolved":
        ends = not_after(alert.get("resolved_at") or format_ts(ctx.now), ctx.now)
        ends = max(ends, starts, key=parse_ts)
    else:
        ends = format_ts(ctx.now + firing_ttl)
    out = {"labels": am_labels(alert), "annotations": am_annotations(alert, ctx),
           "startsAt": starts, "endsAt": ends}
    url = ctx.alert_url(alert)
    if url:
        out["generatorURL"] = url
    return out


def am_postable_alerts(alert: dict[str, Any], ctx: DeliveryContext, firing_ttl: float) -> list[dict[str, Any]]:
    """The ``/api/v2/alerts`` elements for one alert state: itself and, when late evidence revised its
    root cause (``details.revised_from``), the label set it had before, ended now, so Alertmanager
    does not keep the old fingerprint active until its ``endsAt``.

    >>> from lockstep.delivery.sample import sample_alert
    >>> a = sample_alert(1764502930.0)
    >>> a["details"] = {"revised_from": {"domain": "compute", "layer": "gpu", "source": "gpu007",
    ...                                  "labels": {"gpu": "0"}, "metric": "DCGM_FI_DEV_GPU_UTIL"}}
    >>> [(p["labels"].get("switch") or p["labels"]["node"], p["endsAt"][11:19])
    ...  for p in am_postable_alerts(a, DeliveryContext(now=1764502930.0), 3600.0)]
    [('leaf03', '12:42:10'), ('gpu007', '11:42:10')]
    """
    out = [am_postable_alert(alert, ctx, firing_ttl)]
    before = (alert.get("details") or {}).get("revised_from")
    if isinstance(before, dict):
        old = dict(alert, status="resolved", resolved_at=format_ts(ctx.now),
                   root_cause=dict(alert.get("root_cause") or {}, **before))
        old_labels = dict(old.get("labels") or {})
        if before.get("domain"):
            old_labels["domain"] = str(before["domain"])
        old["labels"] = old_labels
        previous = am_postable_alert(old, ctx, firing_ttl)
        if previous["labels"] != out[0]["labels"]:
            out.append(previous)
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
        body = [p for a in notification.alerts for p in am_postable_alerts(a, ctx, self._ttl)]
        await self.post(body, frozenset({200}), ctx.now)
