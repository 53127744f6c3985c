"""Slack incoming webhook with Block Kit: one message per group notification.

Published limits this builder keeps (checked again by the test server): at most 50 blocks; a
``header`` block's plain text <= 150 characters; a ``section``'s text <= 3,000 characters and at
most 10 ``fields`` of <= 2,000 each; button text <= 75 and URLs <= 3,000; a plain-text ``text``
fallback for notifications and clients without blocks. Slack allows about one message per second
per webhook: :class:`SlackReceiver` paces itself with a :class:`RateLimiter`, and honours
``Retry-After`` on 429.

Layout per alert: a section with the summary; a section of fields (job, GPUs, nodes, severity,
root cause, domain, started, status); the timeline as a compact monospace table; buttons to the
timeline page and the alert (from ``public_url``). Alerts beyond what 50 blocks hold are counted
in a closing context block.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import hostlist
from pydantic import Field

from lockstep.delivery.base import DeliveryContext, HttpReceiver, IntegrationConfig, SenderDeps
from lockstep.delivery.errors import ReceiverUnavailable
from lockstep.delivery.redaction import Redactor, SecretOnly
from lockstep.delivery.text import timeline_table, truncate
from streams.dispatch import Notification

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

MAX_BLOCKS = 50
HEADER_MAX = 150
SECTION_TEXT_MAX = 3000
FIELDS_MAX = 10
FIELD_TEXT_MAX = 2000
BUTTON_TEXT_MAX = 75
URL_MAX = 3000
FALLBACK_MAX = 3000
BLOCKS_PER_ALERT = 5


def _mrkdwn(text: str, limit: int = SECTION_TEXT_MAX) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": truncate(text, limit)}


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def compact_nodes(nodes: list[str], limit: int = 200) -> str:
    """``gpu[001-032]`` style host list, cut to ``limit`` characters.

    >>> compact_nodes(["gpu001", "gpu002", "gpu003"])
    'gpu[001-003]'
    """
    if not nodes:
        return "-"
    try:
        text = str(hostlist.collect_hostlist(nodes))
    except Exception:  # names hostlist cannot fold: list them
        text = ",".join(nodes)
    return truncate(text, limit)


def _alert_blocks(alert: dict[str, Any], ctx: DeliveryContext) -> list[dict[str, Any]]:
    root = alert.get("root_cause") or {}
    status = "RESOLVED" if alert["status"] == "resolved" else alert["severity"].upper()
    where = " ".join(x for x in (root.get("layer"), root.get("source"),
                                 " ".join(f"{k}={v}" for k, v in sorted((root.get("labels") or {}).items())))
                     if x) or "unknown"
    fields = [
        ("Job", alert.get("job_id") or "-"), ("GPUs", str(alert.get("gpus", 0))),
        ("Nodes", compact_nodes(list(alert.get("nodes") or []))), ("Severity", alert["severity"]),
        ("Root cause", f"{where} ({root.get('metric') or '-'})"), ("Domain", root.get("domain") or "unknown"),
        ("Started", alert["started_at"]), ("Status", alert["status"] + (f" at {alert['resolved_at']}"
                                                                         if alert.get("resolved_at") else "")),
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": _mrkdwn(f"*{status}* {_escape(alert['summary'])}")},
        {"type": "section", "fields": [_mrkdwn(f"*{k}*\n{_escape(str(v))}", FIELD_TEXT_MAX)
                                       for k, v in fields[:FIELDS_MAX]]},
    ]
    if alert.get("timeline"):
        table = timeline_table(alert["timeline"])
        blocks.append({"type": "section",
                       "text": _mrkdwn("*Timeline*\n```" + truncate(_escape(table), SECTION_TEXT_MAX - 20) + "```")})
    buttons = []
    for text, url in (("Open timeline", ctx.timeline_url(alert)), ("Alert", ctx.alert_url(alert))):
        if url and len(url) <= URL_MAX:
            buttons.append({"type": "button", "text": {"type": "plain_text", "text": truncate(text, BUTTON_TEXT_MAX)},
                            "url": url})
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    blocks.append({"type": "context", "elements": [_mrkdwn(f"dedup `{_escape(alert['dedup_key'])}` · "
                                                           f"alert `{alert['alert_id']}`", 2000)]})
    return blocks


def slack_message(notification: Notification, ctx: DeliveryContext) -> dict[str, Any]:
    """The webhook body for one group notification; always within Slack's published limits."""
    alerts = notification.alerts
    firing = [a for a in alerts if a["status"] == "firing"]
    state = f"FIRING:{len(firing)}" if firing else "RESOLVED"
    first = alerts[0]
    title = f"[{state}] {first['type']} {first.get('job_id') or ''}".strip()
    if len(alerts) > 1:
        title += f" (+{len(alerts) - 1} more)"
    header = {"type": "plain_text", "text": truncate(title, HEADER_MAX)}
    blocks: list[dict[str, Any]] = [{"type": "header", "text": header}]
    shown = 0
    for alert in alerts:
        chunk = _alert_blocks(alert, ctx)
        room = MAX_BLOCKS - len(blocks) - (1 if shown else 0) - 1  # divider, closing context
        if len(chunk) > room:
            break
        if shown:
            blocks.append({"type": "divider"})
        blocks.extend(chunk)
        shown += 1
    if shown < len(alerts):
        more = _mrkdwn(f"…and {len(alerts) - shown} more alerts in this group")
        blocks.append({"type": "context", "elements": [more]})
    fallback = f"{title}: " + " | ".join(a["summary"] for a in alerts)
    return {"text": truncate(fallback, FALLBACK_MAX), "blocks": blocks}


class RateLimiter:
    """At most ``rate`` sends per second, spaced evenly; time is an argument.

    >>> r = RateLimiter(1.0)
    >>> r.reserve(10.0), r.reserve(10.0), r.reserve(12.5)
    (0.0, 1.0, 0.0)
    """

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next_free = float("-inf")

    def reserve(self, now: float) -> float:
        """Claim the next slot; return how long to wait before using it."""
        slot = max(now, self.next_free)
        self.next_free = slot + self.interval
        return slot - now

    def push_back(self, until: float) -> None:
        """The receiver said ``Retry-After``: no slot before ``until``."""
        self.next_free = max(self.next_free, until)


class SlackConfig(IntegrationConfig):
    """``slack:`` the incoming webhook's URL (always a secret: it is the credential) and the pace."""

    webhook_url: SecretOnly
    rate_per_s: float = Field(default=1.0, gt=0, le=10, description="Slack allows about 1 message/s per webhook")


_LIMITERS: dict[str, RateLimiter] = {}


class SlackReceiver(HttpReceiver):
    kind = "slack"
    config_model = SlackConfig

    def __init__(self, config: ReceiverConfig, redactor: Redactor, webhook_url: str) -> None:
        super().__init__(config, redactor)
        cfg = config.integration_as(SlackConfig)
        self._url = webhook_url
        # One pace per webhook, shared by receivers (and their reloaded successors) that post to it.
        self.limiter = _LIMITERS.setdefault(webhook_url, RateLimiter(cfg.rate_per_s))
        self.limiter.interval = 1.0 / cfg.rate_per_s

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> SlackReceiver:
        return cls(config, deps.redactor, deps.secret(config.integration_as(SlackConfig).webhook_url))

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        wait = self.limiter.reserve(time.monotonic())
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            await self.post_json(self._url, slack_message(notification, ctx), accept=frozenset({200}), now=ctx.now)
        except ReceiverUnavailable as exc:
            if exc.retry_after:
                self.limiter.push_back(time.monotonic() + exc.retry_after)
            raise
