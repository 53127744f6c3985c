"""Senders against real local servers: accepted, rejected, and every way of failing on purpose."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

import pytest
from pydantic import SecretStr

from lockstep.broker import free_port
from lockstep.delivery.base import DeliveryContext
from lockstep.delivery.config import ReceiverConfig, load_routing, receiver_config
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.receivers.alertmanager import AlertmanagerReceiver
from lockstep.delivery.receivers.pagerduty import PagerDutyReceiver
from lockstep.delivery.receivers.slack import _LIMITERS, SlackReceiver
from lockstep.delivery.receivers.syslog import SyslogReceiver
from lockstep.delivery.receivers.webhook import WebhookReceiver
from lockstep.delivery.redaction import MASK, Redactor, SecretResolver, install_redaction
from models.errors import ConfigError, DeliveryError
from models.settings import LockstepSettings
from streams.dispatch import Notification

from .servers import FakeAlertmanager, FakePagerDuty, FakeSlack, FakeWebhook

KEY = "0123456789abcdef0123456789abcdef"
TOKEN = "hook-token-5f2e9a"


def rc(kind: str, **cfg: Any) -> ReceiverConfig:
    return receiver_config({"name": f"test-{kind}", kind: cfg})


def note(*alerts: dict[str, Any]) -> Notification:
    return Notification("r", "0:{}", {}, list(alerts), list(alerts), False)


async def with_server(server, fn):
    await server.start()
    try:
        return await fn()
    finally:
        await server.stop()


def test_every_http_receiver_delivers_a_valid_payload(alert, ctx) -> None:
    async def go() -> None:
        slack, pd, am, hook = FakeSlack(), FakePagerDuty(KEY), FakeAlertmanager(), FakeWebhook(TOKEN)
        for s in (slack, pd, am, hook):
            await s.start()
        red = Redactor([KEY, slack.url, TOKEN])
        receivers = [
            SlackReceiver(rc("slack", webhook_url={"secret": "s"}, rate_per_s=10), red, slack.url),
            PagerDutyReceiver(rc("pagerduty", routing_key={"secret": "p"}, url=pd.url), red, KEY),
            AlertmanagerReceiver(rc("alertmanager", url=am.url.removesuffix("/api/v2/alerts")), red,
                                 am.url.removesuffix("/api/v2/alerts"), None),
            WebhookReceiver(rc("webhook", url=hook.url, bearer_token={"secret": "t"}), red, hook.url, TOKEN),
        ]
        try:
            resolved = dict(alert, status="resolved", resolved_at="2025-11-30T11:50:00Z")
            for r in receivers:
                await r.send(note(alert), ctx)
                await r.send(note(resolved), ctx)
        finally:
            for r in receivers:
                await r.close()
            for s in (slack, pd, am, hook):
                await s.stop()
        for s in (slack, pd, am, hook):
            assert s.violations == [] and len(s.accepted) == 2, type(s).__name__
        [incident] = pd.incidents
        assert incident.resolved and incident.dedup_key == alert["dedup_key"]
        assert hook.headers[0]["Authorization"] == f"Bearer {TOKEN}"

    asyncio.run(go())


def send_pd(alert: dict, ctx: DeliveryContext, setup, *, timeout: str = "10s", key: str = KEY,
            redactor: Redactor | None = None) -> tuple[Exception | None, FakePagerDuty]:
    async def go() -> tuple[Exception | None, FakePagerDuty]:
        pd = FakePagerDuty(KEY)
        setup(pd)
        await pd.start()
        r = PagerDutyReceiver(rc("pagerduty", routing_key={"secret": "p"}, url=pd.url, timeout=timeout),
                              redactor or Redactor([KEY]), key)
        try:
            await r.send(note(alert), ctx)
            return None, pd
        except DeliveryError as exc:
            return exc, pd
        finally:
            await r.close()
            await pd.stop()

    return asyncio.run(go())


def test_429_with_retry_after_is_retryable_and_carries_the_delay(alert, ctx) -> None:
    exc, _ = send_pd(alert, ctx, lambda pd: pd.fail(429, retry_after="7"))
    assert isinstance(exc, ReceiverUnavailable) and exc.retryable
    assert exc.status == 429 and exc.retry_after == 7.0


def test_500_is_retryable(alert, ctx) -> None:
    exc, _ = send_pd(alert, ctx, lambda pd: pd.fail(500))
    assert isinstance(exc, ReceiverUnavailable) and exc.status == 500 and exc.retry_after is None


def test_400_is_rejected_with_a_sanitised_reason_not_the_response(alert, ctx) -> None:
    wrong = "ffffffffffffffffffffffffffffffff"
    exc, pd = send_pd(alert, ctx, lambda pd: None, key=wrong, redactor=Redactor([wrong]))
    assert isinstance(exc, ReceiverRejected) and not exc.retryable and exc.status == 400
    assert pd.violations == [f"'routing_key' {wrong} is invalid"]   # the server did name it...
    assert wrong not in str(exc)                                     # ...we never repeat it
    assert str(exc).startswith("test-pagerduty: HTTP 400 Bad Request: Event object is invalid: invalid event: "
                               f"'routing_key' {MASK} is invalid (body 138 B, sha256 ")


def test_timeout_is_retryable(alert, ctx) -> None:
    def hang(pd: FakePagerDuty) -> None:
        pd.hang = 1.0

    exc, _ = send_pd(alert, ctx, hang, timeout="200ms")
    assert isinstance(exc, ReceiverUnavailable) and "no answer within 0.2s" in str(exc)


def test_connection_refused_is_retryable_and_names_no_url(alert, ctx) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/services/T/B/secret-path-123"

    async def go() -> Exception:
        r = SlackReceiver(rc("slack", webhook_url={"secret": "s"}), Redactor([url]), url)
        try:
            await r.send(note(alert), ctx)
        except DeliveryError as exc:
            return exc
        finally:
            await r.close()
        raise AssertionError("no error")

    exc = asyncio.run(go())
    assert isinstance(exc, ReceiverUnavailable) and "connection failed" in str(exc)
    assert "secret-path-123" not in str(exc)


def test_slack_429_pushes_its_pacing_back(alert, ctx) -> None:
    async def go() -> float:
        slack = FakeSlack()
        slack.fail(429, retry_after="30")
        await slack.start()
        r = SlackReceiver(rc("slack", webhook_url={"secret": "s"}), Redactor(), slack.url)
        try:
            with pytest.raises(ReceiverUnavailable):
                await r.send(note(alert), ctx)
            return r.limiter.next_free - asyncio.get_running_loop().time()
        finally:
            _LIMITERS.pop(slack.url, None)  # a later server may get this port: no inherited pause
            await r.close()
            await slack.stop()

    assert asyncio.run(go()) > 25.0


@pytest.mark.parametrize("protocol", ["udp", "tcp"])
@pytest.mark.parametrize("fmt", ["ocsf", "cef"])
def test_syslog_over_udp_and_tcp(alert, ctx, protocol: str, fmt: str) -> None:
    async def go() -> bytes:
        got: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        if protocol == "udp":
            class Proto(asyncio.DatagramProtocol):
                def datagram_received(self, data: bytes, addr: Any) -> None:
                    got.put_nowait(data)
            transport, _ = await loop.create_datagram_endpoint(Proto, local_addr=("127.0.0.1", 0))
            port = transport.get_extra_info("sockname")[1]
            closer = transport.close
        else:
            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                length = int((await reader.readuntil(b" "))[:-1])
                got.put_nowait(await reader.readexactly(length))
                writer.close()
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            closer = server.close
        r = SyslogReceiver(rc("syslog", host="127.0.0.1", port=port, protocol=protocol, format=fmt), Redactor())
        try:
            await r.send(note(alert), ctx)
            return await asyncio.wait_for(got.get(), 5)
        finally:
            await r.close()
            closer()

    message = asyncio.run(go())
    assert message.startswith(b"<130>1 2025-11-30T11:42:25.000Z deliver-1 lockstep - alert - \xef\xbb\xbf")
    body = message.split(b"\xef\xbb\xbf", 1)[1].decode()
    assert body.startswith("CEF:0|Lockstep|") if fmt == "cef" else '"class_uid":2004' in body


def test_syslog_tcp_refused_is_retryable(alert, ctx) -> None:
    r = SyslogReceiver(rc("syslog", host="127.0.0.1", port=free_port(), protocol="tcp"), Redactor())
    with pytest.raises(ReceiverUnavailable):
        asyncio.run(r.send(note(alert), ctx))


# -- secrets ------------------------------------------------------------------------------------

def test_secrets_from_env_file_variant_and_directory(tmp_path, monkeypatch) -> None:
    (tmp_path / "pd_key").write_text("from-file-value\n")
    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "slack_oncall").write_text("https://hooks.example/dir-value\n")
    (folder / "pd_key").write_text("dir-loses")
    monkeypatch.setenv("LOCKSTEP_SECRET_PD_KEY_FILE", str(tmp_path / "pd_key"))
    monkeypatch.setenv("LOCKSTEP_SECRET_AM_TOKEN", "env-value")
    monkeypatch.setenv("LOCKSTEP_DELIVERY_SECRETS_DIR", str(folder))
    s = LockstepSettings(_env_file=None)  # type: ignore[call-arg]
    values = {k: v.get_secret_value() for k, v in s.delivery_secrets.items()}
    assert values == {"pd_key": "from-file-value", "am_token": "env-value",
                      "slack_oncall": "https://hooks.example/dir-value"}
    assert "from-file-value" not in repr(s) and "env-value" not in str(s.model_dump())


def test_unreadable_secret_file_names_the_variable_not_the_value(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LOCKSTEP_SECRET_PD_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="LOCKSTEP_SECRET_PD_KEY_FILE: cannot read the secret file"):
        LockstepSettings(_env_file=None)  # type: ignore[call-arg]


def test_missing_secret_fails_with_its_path() -> None:
    config = load_routing("route: {receiver: pd}\nreceivers:\n"
                          "  - name: pd\n    pagerduty: {routing_key: {secret: pd_key}}\n")
    with pytest.raises(ConfigError) as exc:
        SecretResolver({}).check(config, "routes.yaml")
    assert str(exc.value) == ('routes.yaml: receivers[0].pagerduty.routing_key: secret "pd_key" is not set '
                              "(set LOCKSTEP_SECRET_PD_KEY or LOCKSTEP_SECRET_PD_KEY_FILE)")
    SecretResolver({"PD_KEY": SecretStr("x" * 32)}).check(config, "routes.yaml")


def test_log_redaction_masks_messages_args_and_tracebacks(caplog) -> None:
    secret = "https://hooks.slack.com/services/T1/B2/abcdefSECRET"
    logger = logging.getLogger("lockstep.test-redaction")
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    keeper = Keep()
    logger.addHandler(keeper)
    install_redaction(Redactor([secret]), logger)
    try:
        logger.warning("posting to %s failed", secret)
        try:
            raise RuntimeError(f"bad url {secret}")
        except RuntimeError:
            logger.exception("oops")
    finally:
        logger.removeHandler(handler)
        logger.removeHandler(keeper)
    text = "\n".join(records)
    assert "abcdefSECRET" not in text and text.count(MASK) >= 2
    assert Redactor([secret]).record({"a": [quote(secret, safe="")]}) == {"a": [MASK]}
