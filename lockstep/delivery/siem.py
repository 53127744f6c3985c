"""SIEM: OCSF Detection Finding records (class 2004), CEF, and RFC 5424 syslog framing.

OCSF 1.1 Detection Finding — the fields this builder always sets, required ones first:
``class_uid`` 2004, ``category_uid`` 2 (Findings), ``activity_id`` 1 Create / 2 Update / 3 Close,
``type_uid`` = class_uid * 100 + activity_id, ``time`` (ms), ``severity_id`` (1 Informational,
3 Medium, 4 High, 5 Critical), ``metadata`` (``product`` with name/vendor_name/version, schema
``version``), ``finding_info`` (``uid`` = alert_id, ``title``, ``first_seen_time``,
``last_seen_time``, ``types``, ``src_url``); and ``status_id`` 1 New / 4 Resolved, ``message``,
``resources`` (the job, its nodes, the root-cause switch port or component) and ``unmapped``
(root cause and timeline as Lockstep reports them).

CEF (ArcSight Common Event Format, version 0): ``CEF:0|Vendor|Product|Version|SignatureID|Name|
Severity|Extension`` with ``|`` and ``\\`` escaped in the header, ``=``, ``\\`` and newlines in
extension values, severity 0-10.

RFC 5424: ``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG`` (facility
local0); over TCP each message is framed by octet counting (RFC 6587: ``LEN SP MSG``), over UDP
one message per datagram.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockstep.delivery.base import DeliveryContext, Receiver, truncate
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.redaction import Redactor
from models.timeutil import parse_ts
from streams.routing import Notification, ReceiverConfig

OCSF_VERSION = "1.1.0"
CLASS_UID = 2004
CATEGORY_UID = 2
ACTIVITIES = {1: "Create", 2: "Update", 3: "Close"}
SEVERITY_ID = {"info": 1, "warning": 3, "error": 4, "critical": 5}
SEVERITY_NAME = {1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal"}
STATUS = {"firing": (1, "New"), "resolved": (4, "Resolved")}
CEF_SEVERITY = {"info": 3, "warning": 5, "error": 8, "critical": 10}
SYSLOG_SEVERITY = {"info": 6, "warning": 4, "error": 3, "critical": 2}
SYSLOG_FACILITY_LOCAL0 = 16
UDP_MAX = 65_000


def _ms(ts: str | None) -> int | None:
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
        "first_seen_time": _ms(alert["started_at"]), "last_seen_time": _ms(last_seen),
        "created_time": _ms(alert["detected_at"]),
    }
    url = ctx.timeline_url(alert) or ctx.alert_url(alert)
    if url:
        info["src_url"] = url
    return {
        "class_uid": CLASS_UID, "class_name": "Detection Finding",
        "category_uid": CATEGORY_UID, "category_name": "Findings",
        "activity_id": activity, "activity_name": ACTIVITIES[activity],
        "type_uid": CLASS_UID * 100 + activity, "type_name": f"Detection Finding: {ACTIVITIES[activity]}",
        "time": _ms(alert["resolved_at"] if alert["status"] == "resolved" and alert.get("resolved_at")
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


def _cef_header(value: str) -> str:
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _cef_value(value: str) -> str:
    value = value.replace("\\", "\\\\").replace("=", "\\=")
    return value.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")


def cef_event(alert: dict[str, Any], ctx: DeliveryContext) -> str:
    r"""One CEF line for an alert state change.

    >>> a = {"type": "job_slowdown", "severity": "critical", "status": "firing", "summary": "a|b=c",
    ...      "alert_id": "x1", "dedup_key": "k", "job_id": "llm", "started_at": "2025-11-30T11:42:18Z",
    ...      "detected_at": "2025-11-30T11:42:23Z", "root_cause": {"domain": "network", "source": "leaf03"}}
    >>> cef_event(a, DeliveryContext(now=0.0, version="0.1.0"))[:70]
    'CEF:0|Lockstep|Lockstep|0.1.0|job_slowdown|a\\|b=c|10|rt=1764502943000 '
    """
    root = alert.get("root_cause") or {}
    ext = {
        "rt": str(_ms(alert.get("resolved_at") or alert["detected_at"])), "start": str(_ms(alert["started_at"])),
        "externalId": alert["alert_id"], "cat": str(root.get("domain") or "unknown"), "act": alert["status"],
        "msg": truncate(alert["summary"], 1023), "dvchost": ctx.hostname,
        "cs1Label": "job", "cs1": str(alert.get("job_id") or ""),
        "cs2Label": "dedupKey", "cs2": alert["dedup_key"],
        "cs3Label": "rootCause", "cs3": str(root.get("source") or ""),
        "cn1Label": "gpus", "cn1": str(alert.get("gpus", 0)),
    }
    if alert.get("resolved_at"):
        ext["end"] = str(_ms(alert["resolved_at"]))
    url = ctx.timeline_url(alert)
    if url:
        ext["request"] = url
    header = "|".join(_cef_header(x) for x in ("Lockstep", "Lockstep", ctx.version, alert["type"],
                                                 truncate(alert["summary"], 512)))
    extension = " ".join(f"{k}={_cef_value(v)}" for k, v in ext.items())
    return f"CEF:0|{header}|{CEF_SEVERITY.get(alert['severity'], 5)}|{extension}"


def syslog_message(alert: dict[str, Any], body: str, ctx: DeliveryContext, app_name: str = "lockstep") -> bytes:
    """An RFC 5424 message carrying ``body`` (UTF-8, with the BOM the RFC asks for).

    >>> syslog_message({"severity": "critical", "detected_at": "2025-11-30T11:42:23Z", "status": "firing"},
    ...                "x", DeliveryContext(now=0.0, hostname="h1"))[:60]
    b'<130>1 2025-11-30T11:42:23.000Z h1 lockstep - alert - \\xef\\xbb\\xbfx'
    """
    from models.timeutil import format_ts

    pri = SYSLOG_FACILITY_LOCAL0 * 8 + SYSLOG_SEVERITY.get(alert["severity"], 5)
    ts = format_ts(parse_ts(alert.get("resolved_at") or alert["detected_at"]))
    host = truncate("".join(c for c in ctx.hostname if "!" <= c <= "~") or "-", 255, "")
    head = f"<{pri}>1 {ts} {host} {app_name} - alert - "
    return head.encode("ascii") + b"\xef\xbb\xbf" + body.encode("utf-8")


def octet_frame(message: bytes) -> bytes:
    """RFC 6587 octet counting for syslog over TCP: ``LEN SP MSG``."""
    return str(len(message)).encode("ascii") + b" " + message


class SyslogReceiver(Receiver):
    """Sends each changed alert as one syslog message (OCSF JSON or CEF) over UDP or TCP."""

    kind = "syslog"
    per_alert = True

    def __init__(self, config: ReceiverConfig, redactor: Redactor) -> None:
        super().__init__(config, redactor)
        assert config.syslog is not None
        self.cfg = config.syslog
        self._writer: asyncio.StreamWriter | None = None

    def _payload(self, alert: dict[str, Any], repeat: bool, ctx: DeliveryContext) -> bytes:
        import orjson

        body = cef_event(alert, ctx) if self.cfg.format == "cef" else orjson.dumps(
            ocsf_finding(alert, ctx, repeat)).decode()
        return syslog_message(alert, body, ctx, self.cfg.app_name)

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        for alert in notification.changed:
            message = self._payload(alert, notification.repeat, ctx)
            try:
                if self.cfg.protocol == "udp":
                    await self._send_udp(message)
                else:
                    await self._send_tcp(octet_frame(message))
            except (OSError, TimeoutError) as exc:
                await self.close()
                raise ReceiverUnavailable(f"{self.name}: syslog {self.cfg.protocol} send failed "
                                          f"({type(exc).__name__})") from None

    async def _send_udp(self, message: bytes) -> None:
        if len(message) > UDP_MAX:
            raise ReceiverRejected(f"{self.name}: syslog message of {len(message)} bytes exceeds one UDP datagram")
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                           remote_addr=(self.cfg.host, self.cfg.port))
        try:
            transport.sendto(message)
        finally:
            transport.close()

    async def _send_tcp(self, frame: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            connected = await asyncio.wait_for(asyncio.open_connection(self.cfg.host, self.cfg.port),
                                               self.cfg.timeout)
            self._writer = connected[1]
        writer: asyncio.StreamWriter = self._writer
        writer.write(frame)
        await asyncio.wait_for(writer.drain(), self.cfg.timeout)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
