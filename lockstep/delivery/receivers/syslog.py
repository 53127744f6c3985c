"""Syslog for a SIEM: each alert state change as one RFC 5424 message carrying an OCSF finding or a CEF line.

CEF (ArcSight Common Event Format, version 0): ``CEF:0|Vendor|Product|Version|SignatureID|Name|
Severity|Extension`` with ``|`` and ``\\`` escaped in the header, ``=``, ``\\`` and newlines in
extension values, severity 0-10. The OCSF record is :func:`lockstep.delivery.receivers.ocsf.ocsf_finding`.

RFC 5424: ``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG`` (facility
local0); over TCP each message is framed by octet counting (RFC 6587: ``LEN SP MSG``), over UDP
one message per datagram.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import Field

from lockstep.delivery.base import DeliveryContext, IntegrationConfig, Receiver, SenderDeps
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.receivers.ocsf import epoch_ms, ocsf_finding
from lockstep.delivery.redaction import Redactor
from lockstep.delivery.text import truncate
from models.timeutil import format_ts, parse_ts
from streams.dispatch import Notification

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig

CEF_SEVERITY = {"info": 3, "warning": 5, "error": 8, "critical": 10}
SYSLOG_SEVERITY = {"info": 6, "warning": 4, "error": 3, "critical": 2}
SYSLOG_FACILITY_LOCAL0 = 16
UDP_MAX = 65_000


class SyslogConfig(IntegrationConfig):
    """``syslog:`` where to send, over which protocol, in which format, as which application."""

    host: str
    port: int = Field(default=514, ge=1, le=65535)
    protocol: Literal["udp", "tcp"] = "udp"
    format: Literal["ocsf", "cef"] = "ocsf"
    app_name: str = Field(default="lockstep", pattern=r"^[!-~]{1,48}$")


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
        "rt": str(epoch_ms(alert.get("resolved_at") or alert["detected_at"])),
        "start": str(epoch_ms(alert["started_at"])),
        "externalId": alert["alert_id"], "cat": str(root.get("domain") or "unknown"), "act": alert["status"],
        "msg": truncate(alert["summary"], 1023), "dvchost": ctx.hostname,
        "cs1Label": "job", "cs1": str(alert.get("job_id") or ""),
        "cs2Label": "dedupKey", "cs2": alert["dedup_key"],
        "cs3Label": "rootCause", "cs3": str(root.get("source") or ""),
        "cn1Label": "gpus", "cn1": str(alert.get("gpus", 0)),
    }
    if alert.get("resolved_at"):
        ext["end"] = str(epoch_ms(alert["resolved_at"]))
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
    config_model = SyslogConfig
    per_alert = True

    def __init__(self, config: ReceiverConfig, redactor: Redactor) -> None:
        super().__init__(config, redactor)
        cfg = config.integration_as(SyslogConfig)
        self.cfg = cfg
        self._writer: asyncio.StreamWriter | None = None

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> SyslogReceiver:
        return cls(config, deps.redactor)

    def _payload(self, alert: dict[str, Any], repeat: bool, ctx: DeliveryContext) -> bytes:
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
