"""Real local HTTP servers standing in for Slack, PagerDuty, Alertmanager and a webhook receiver.

Each validates every request against the published shape and limits and answers as the real
service does: Slack 200 ``ok`` / 400 ``invalid_blocks``; PagerDuty 202 / 400 ``invalid event``;
Alertmanager 200 / 400. Each can fail on purpose: ``fail(status, times, retry_after)`` queues
answers (``echo=True``: the answer repeats the request path, query and body, as some proxies and
receivers do, so a test can check that nothing of a secret URL leaks from a receiver's answer),
``down`` answers 500 to everything, ``hang`` stalls each answer that many seconds. Violations of the
published rules are collected in ``violations`` (a test asserts there are none).

PagerDuty keeps incidents as PagerDuty does: a trigger opens an incident for its ``dedup_key`` or
joins the open one, a resolve closes it, a trigger after a resolve opens a new one.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web


@dataclass
class Planned:
    status: int
    retry_after: str | None = None
    body: str = ""
    echo: bool = False


class FakeServer:
    """An aiohttp app on 127.0.0.1:<free port>; subclasses implement ``check``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.query = ""                         # appended to ``url`` (a token in a query value)
        self.requests: list[Any] = []           # every body received (valid or not)
        self.accepted: list[Any] = []           # bodies answered with success
        self.violations: list[str] = []
        self.planned: list[Planned] = []
        self.down = False
        self.hang = 0.0                         # seconds to stall before answering
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.headers: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}" + (f"?{self.query}" if self.query else "")

    def fail(self, status: int, times: int = 1, retry_after: str | None = None, body: str = "",
             echo: bool = False) -> None:
        self.planned += [Planned(status, retry_after, body, echo)] * times

    async def start(self) -> FakeServer:
        app = web.Application()
        app.router.add_post(self.path, self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        raw = await request.text()
        try:
            body = await request.json()
        except Exception:
            self.violations.append("body is not JSON")
            return web.Response(status=400, text="invalid_payload")
        self.requests.append(body)
        if self.hang:
            await asyncio.sleep(self.hang)
        if self.planned:
            p = self.planned.pop(0)
            headers = {"Retry-After": p.retry_after} if p.retry_after else {}
            if p.echo:  # the path plain, percent-encoded and JSON-escaped, then the request body
                escaped = str(request.url).replace("/", "\\/")
                text = (f"{p.status} for POST {request.path_qs} ({quote(request.path_qs, safe='')}) "
                        f'{{"url": "{escaped}"}} body: {raw}')
                return web.Response(status=p.status, text=text, headers=headers)
            return web.Response(status=p.status, text=p.body or f"planned {p.status}", headers=headers)
        if self.down:
            return web.Response(status=500, text="internal error")
        problems = self.check(body, request)
        if problems:
            self.violations += problems
            return self.reject(problems)
        self.accepted.append(body)
        return self.accept(body)

    def check(self, body: Any, request: web.Request) -> list[str]:
        raise NotImplementedError

    def reject(self, problems: list[str]) -> web.Response:
        return web.json_response({"errors": problems}, status=400)

    def accept(self, body: Any) -> web.Response:
        return web.Response(status=200, text="ok")


def _rfc3339(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _text_obj(obj: Any, limit: int, where: str, types: tuple[str, ...] = ("plain_text", "mrkdwn")) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in types:
        return [f"{where}: text object of type {types} expected"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"{where}: empty text"]
    if len(text) > limit:
        return [f"{where}: {len(text)} chars > {limit}"]
    return []


class FakeSlack(FakeServer):
    """Slack incoming webhook: Block Kit limits as published."""

    def __init__(self, path: str = "/services/T0LOCKSTEP/B0LOCKSTEP/s3cr3tW3bh00kT0k3n") -> None:
        super().__init__(path)

    def reject(self, problems: list[str]) -> web.Response:
        return web.Response(status=400, text="invalid_blocks")

    def check(self, body: Any, request: web.Request) -> list[str]:
        out: list[str] = []
        if not isinstance(body, dict):
            return ["body is not an object"]
        text = body.get("text")
        if not isinstance(text, str) or not text or len(text) > 40_000:
            out.append("text: a non-empty fallback of <= 40000 chars is required")
        blocks = body.get("blocks", [])
        if not isinstance(blocks, list) or len(blocks) > 50:
            return [*out, f"blocks: at most 50 (got {len(blocks) if isinstance(blocks, list) else '?'})"]
        for i, b in enumerate(blocks):
            where = f"blocks[{i}]"
            kind = b.get("type")
            if kind == "header":
                out += _text_obj(b.get("text"), 150, f"{where}.text", ("plain_text",))
            elif kind == "section":
                if "text" not in b and "fields" not in b:
                    out.append(f"{where}: section needs text or fields")
                if "text" in b:
                    out += _text_obj(b["text"], 3000, f"{where}.text")
                fields = b.get("fields", [])
                if len(fields) > 10:
                    out.append(f"{where}.fields: {len(fields)} > 10")
                for j, f in enumerate(fields):
                    out += _text_obj(f, 2000, f"{where}.fields[{j}]")
            elif kind == "context":
                elements = b.get("elements", [])
                if not 1 <= len(elements) <= 10:
                    out.append(f"{where}.elements: 1..10")
                for j, e in enumerate(elements):
                    out += _text_obj(e, 3000, f"{where}.elements[{j}]")
            elif kind == "actions":
                elements = b.get("elements", [])
                if not 1 <= len(elements) <= 25:
                    out.append(f"{where}.elements: 1..25")
                for j, e in enumerate(elements):
                    if e.get("type") != "button":
                        out.append(f"{where}.elements[{j}]: button expected")
                    out += _text_obj(e.get("text"), 75, f"{where}.elements[{j}].text", ("plain_text",))
                    if not isinstance(e.get("url"), str) or len(e["url"]) > 3000:
                        out.append(f"{where}.elements[{j}].url: <= 3000 chars")
            elif kind != "divider":
                out.append(f"{where}: unknown block type {kind!r}")
        return out


PD_KEYS = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client", "client_url"}
PD_PAYLOAD_KEYS = {"summary", "source", "severity", "timestamp", "component", "group", "class", "custom_details"}


@dataclass
class Incident:
    dedup_key: str
    events: list[dict[str, Any]] = field(default_factory=list)
    resolved: bool = False


class FakePagerDuty(FakeServer):
    """PagerDuty Events API v2 (``/v2/enqueue``) with PagerDuty's incident semantics."""

    def __init__(self, routing_key: str) -> None:
        super().__init__("/v2/enqueue")
        self.routing_key = routing_key
        self.incidents: list[Incident] = []
        self.open: dict[str, Incident] = {}
        self.poison: set[str] = set()  # dedup_keys whose trigger is answered 400


    def reject(self, problems: list[str]) -> web.Response:
        return web.json_response({"status": "invalid event", "message": "Event object is invalid",
                                  "errors": problems}, status=400)

    def check(self, body: Any, request: web.Request) -> list[str]:
        out: list[str] = []
        if not isinstance(body, dict):
            return ["body is not an object"]
        if set(body) - PD_KEYS:
            out.append(f"unknown keys {sorted(set(body) - PD_KEYS)}")
        if body.get("routing_key") != self.routing_key or len(str(body.get("routing_key"))) != 32:
            # PagerDuty's error text names the key it refused (so delivery must redact responses)
            out.append(f"'routing_key' {body.get('routing_key')} is invalid")
        action = body.get("event_action")
        if action not in ("trigger", "acknowledge", "resolve"):
            out.append("'event_action' is invalid")
        dedup = body.get("dedup_key")
        if action != "trigger" and not dedup:
            out.append("'dedup_key' is required for acknowledge and resolve")
        if dedup is not None and (not isinstance(dedup, str) or not 1 <= len(dedup) <= 255):
            out.append("'dedup_key' must be 1..255 characters")
        if action == "trigger" and dedup in self.poison:
            out.append(f"event for routing_key {body.get('routing_key')} refused: poisoned dedup_key {dedup}")
        if action == "trigger":
            p = body.get("payload")
            if not isinstance(p, dict):
                return [*out, "'payload' is required for trigger"]
            if set(p) - PD_PAYLOAD_KEYS:
                out.append(f"payload: unknown keys {sorted(set(p) - PD_PAYLOAD_KEYS)}")
            if not isinstance(p.get("summary"), str) or not 1 <= len(p["summary"]) <= 1024:
                out.append("'payload.summary' must be 1..1024 characters")
            if not isinstance(p.get("source"), str) or not p["source"]:
                out.append("'payload.source' is required")
            if p.get("severity") not in ("critical", "error", "warning", "info"):
                out.append("'payload.severity' must be critical, error, warning or info")
            if "timestamp" in p and not _rfc3339(p["timestamp"]):
                out.append("'payload.timestamp' must be ISO 8601")
            for k in ("component", "group", "class"):
                if k in p and not isinstance(p[k], str):
                    out.append(f"'payload.{k}' must be a string")
            if "custom_details" in p and not isinstance(p["custom_details"], dict):
                out.append("'payload.custom_details' must be an object")
            for link in body.get("links", []):
                if not isinstance(link, dict) or not isinstance(link.get("href"), str):
                    out.append("'links' entries need href")
        return out

    def accept(self, body: Any) -> web.Response:
        key = body["dedup_key"]
        if body["event_action"] == "trigger":
            inc = self.open.get(key)
            if inc is None:
                inc = Incident(key)
                self.incidents.append(inc)
                self.open[key] = inc
            inc.events.append(body)
        elif body["event_action"] == "resolve":
            inc = self.open.pop(key, None)
            if inc is not None:
                inc.resolved = True
                inc.events.append(body)
        return web.json_response({"status": "success", "message": "Event processed", "dedup_key": key}, status=202)

    def incidents_for(self, key: str) -> list[Incident]:
        return [i for i in self.incidents if i.dedup_key == key]


_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
AM_KEYS = {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
WEBHOOK_KEYS = {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels", "commonLabels",
                "commonAnnotations", "externalURL", "alerts"}
WEBHOOK_ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}


def _labelset(value: Any, where: str, *, names: bool = True) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: object expected"]
    out = []
    for k, v in value.items():
        if names and not _LABEL.match(k):
            out.append(f"{where}: invalid label name {k!r}")
        if not isinstance(v, str):
            out.append(f"{where}.{k}: string expected")
    return out


class FakeAlertmanager(FakeServer):
    """Alertmanager ``POST /api/v2/alerts`` (postableAlerts)."""

    def __init__(self) -> None:
        super().__init__("/api/v2/alerts")

    def check(self, body: Any, request: web.Request) -> list[str]:
        if not isinstance(body, list) or not body:
            return ["body must be a non-empty array of alerts"]
        out = []
        for i, a in enumerate(body):
            if set(a) - AM_KEYS:
                out.append(f"[{i}]: unknown keys {sorted(set(a) - AM_KEYS)}")
            if not a.get("labels"):
                out.append(f"[{i}].labels: required")
            out += _labelset(a.get("labels", {}), f"[{i}].labels")
            out += _labelset(a.get("annotations", {}), f"[{i}].annotations", names=False)
            for k in ("startsAt", "endsAt"):
                if k in a and not _rfc3339(a[k]):
                    out.append(f"[{i}].{k}: date-time expected")
            if "generatorURL" in a and not str(a["generatorURL"]).startswith("http"):
                out.append(f"[{i}].generatorURL: uri expected")
        return out


class FakeWebhook(FakeServer):
    """A receiver written for Alertmanager's webhook (version 4), with a bearer token."""

    def __init__(self, token: str | None = None) -> None:
        super().__init__("/hook")
        self.token = token

    def check(self, body: Any, request: web.Request) -> list[str]:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return ["unauthorised"]
        if not isinstance(body, dict) or set(body) != WEBHOOK_KEYS:
            return [f"keys must be exactly {sorted(WEBHOOK_KEYS)}"]
        out = []
        if body["version"] != "4" or body["status"] not in ("firing", "resolved"):
            out.append("version 4 and status firing|resolved expected")
        if not isinstance(body["truncatedAlerts"], int):
            out.append("truncatedAlerts: integer expected")
        for k in ("groupLabels", "commonLabels"):
            out += _labelset(body[k], k)
        out += _labelset(body["commonAnnotations"], "commonAnnotations", names=False)
        for i, a in enumerate(body["alerts"]):
            if set(a) != WEBHOOK_ALERT_KEYS:
                out.append(f"alerts[{i}]: keys must be exactly {sorted(WEBHOOK_ALERT_KEYS)}")
                continue
            out += _labelset(a["labels"], f"alerts[{i}].labels")
            if not (_rfc3339(a["startsAt"]) and _rfc3339(a["endsAt"])):
                out.append(f"alerts[{i}]: startsAt/endsAt date-time expected")
            if not re.fullmatch(r"[0-9a-f]{16}", a["fingerprint"]):
                out.append(f"alerts[{i}].fingerprint: 16 hex digits expected")
        return out


def ocsf_problems(f: dict[str, Any]) -> list[str]:
    """OCSF 1.1 Detection Finding: required attributes and their enumerations."""
    out = []
    for k in ("activity_id", "category_uid", "class_uid", "finding_info", "metadata", "severity_id", "time",
              "type_uid"):
        if k not in f:
            out.append(f"{k}: required")
    if out:
        return out
    if f["class_uid"] != 2004 or f["category_uid"] != 2:
        out.append("class_uid 2004, category_uid 2 expected")
    if f["activity_id"] not in (1, 2, 3, 99) or f["type_uid"] != 200400 + f["activity_id"]:
        out.append("activity_id / type_uid mismatch")
    if f["severity_id"] not in (0, 1, 2, 3, 4, 5, 6, 99):
        out.append("severity_id out of range")
    if f.get("status_id") not in (None, 0, 1, 2, 3, 4, 5, 6, 99):
        out.append("status_id out of range")
    if not isinstance(f["time"], int):
        out.append("time: integer ms expected")
    info = f["finding_info"]
    for k in ("uid", "title"):
        if not isinstance(info.get(k), str) or not info[k]:
            out.append(f"finding_info.{k}: required")
    for k in ("first_seen_time", "last_seen_time", "created_time"):
        if k in info and not isinstance(info[k], int):
            out.append(f"finding_info.{k}: integer ms expected")
    meta = f["metadata"]
    if not isinstance(meta.get("version"), str) or not isinstance(meta.get("product"), dict):
        out.append("metadata.version and metadata.product required")
    elif not meta["product"].get("vendor_name"):
        out.append("metadata.product.vendor_name required")
    for i, r in enumerate(f.get("resources", [])):
        if not (r.get("uid") or r.get("name")):
            out.append(f"resources[{i}]: uid or name required")
    return out
