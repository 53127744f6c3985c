"""The Alertmanager webhook payload (``version: "4"``), as Alertmanager POSTs it to a ``webhook_configs`` URL.

Reference: https://prometheus.io/docs/alerting/latest/configuration/#webhook_config (the JSON shape
is Alertmanager's ``notify/webhook.Message``, version "4" since Alertmanager 0.7)::

    {"version": "4", "groupKey": "...", "truncatedAlerts": 0, "status": "firing", "receiver": "lockstep",
     "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...}, "externalURL": "http://am:9093",
     "alerts": [{"status": "firing", "labels": {...}, "annotations": {...}, "startsAt": "RFC 3339",
                 "endsAt": "RFC 3339 or 0001-01-01T00:00:00Z", "generatorURL": "...", "fingerprint": "..."}]}

Two models, so one bad alert costs that alert only (its siblings are still used): the envelope
(:class:`WebhookMessage`, ``alerts`` as a list of objects) and each alert (:class:`WebhookAlert`).
Fields Lockstep does not read are allowed (later Alertmanager versions add some); the ones it reads
are checked, never coerced (a label value that is not a string is refused).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: Alerts one message may carry (Alertmanager's ``max_alerts`` is 0 = all; a group of thousands is
#: possible, but one message stays within a carrier message's 4 MiB anyway).
MAX_ALERTS = 10_000


class WebhookAlert(BaseModel):
    """One alert of a webhook message."""

    model_config = ConfigDict(extra="allow", strict=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    #: RFC 3339 with nanoseconds as Go prints them; parsed by the adapter (the range is checked there).
    startsAt: str = Field(min_length=1)
    #: ``0001-01-01T00:00:00Z`` (Go's zero time) while the alert fires without an end.
    endsAt: str = ""
    generatorURL: str = ""
    fingerprint: str = ""


class WebhookMessage(BaseModel):
    """The envelope of one webhook POST (version "4")."""

    model_config = ConfigDict(extra="allow", strict=True)

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    alerts: list[dict[str, Any]] = Field(max_length=MAX_ALERTS)
    groupKey: str = ""
    truncatedAlerts: int = Field(default=0, ge=0)
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""


__all__ = ["MAX_ALERTS", "WebhookAlert", "WebhookMessage"]
