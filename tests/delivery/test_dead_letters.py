"""Delivery's dead letters: every path a receiver worker dead-letters on builds a valid ``DeadLetter``.

The paths, each driven through :class:`ReceiverWorker` as it runs them (a real webhook sender
against a local server, or against a closed port; the records the consumer would hand over):
a record on ``alerts`` that is not an alert, a notification the receiver rejects (400), an
unusable record on the retry topic, and a parked notification given up after ``max_age``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import orjson
import pytest
from aiokafka import TopicPartition

from lockstep.broker import free_port
from lockstep.delivery.config import load_routing
from lockstep.delivery.ledger import Ledger
from lockstep.delivery.receivers.webhook import WebhookReceiver
from lockstep.delivery.redaction import MASK, Redactor
from lockstep.delivery.retry import park_record
from lockstep.delivery.worker import ReceiverWorker
from models.records import DeadLetter
from streams.dispatch import Notification

from .servers import FakeWebhook

SECRET = "hook-token-5f2e9a0c"
SCHEMA = DeadLetter.model_json_schema()
ROUTES = """
route: {receiver: hook, group_wait: 0s}
receivers:
  - name: hook
    webhook: {url: "http://127.0.0.1:9/hook"}
    retry: {initial: 1s, max: 1s, max_age: 1s}
"""


@dataclass
class Record:
    """What aiokafka's consumer hands the worker: the fields it reads."""

    value: bytes
    offset: int
    key: bytes | None = None


def worker_for(url: str, letters: list[dict[str, Any]]) -> ReceiverWorker:
    routing = load_routing(ROUTES)
    rc = routing.receivers["hook"]
    redactor = Redactor([SECRET])

    async def dead_letter(record: dict[str, Any]) -> None:
        letters.append(record)

    return ReceiverWorker(WebhookReceiver(rc, redactor, url, SECRET), routing, alerts_topic="alerts",
                          retry_topic="delivery.retry.hook", group_id="g", consumer_factory=lambda **_: None,
                          producer=None, ledger=Ledger("delivery.ledger"), redactor=redactor,
                          dead_letter=dead_letter, public_url=None, hostname="h", max_pending=10,
                          offset_reset="earliest", seed=1)


def notification(alert: dict[str, Any]) -> Notification:
    return Notification("hook", "0:{}", {}, [alert], [alert], False)


async def not_an_alert(w: ReceiverWorker, url: str) -> None:
    await w._take(TopicPartition("alerts", 2), Record(b'{"alert_id": "x", "note": "' + SECRET.encode() + b'"}', 41,
                                                  b"k"), 0.0)


async def rejected(w: ReceiverWorker, alert: dict[str, Any], server: FakeWebhook) -> None:
    server.fail(400, body="bad payload")
    await w._deliver_unguarded(notification(dict(alert, summary=f"see {SECRET}")))


async def unusable_retry_record(w: ReceiverWorker, url: str) -> None:
    await w._retry_one(TopicPartition("delivery.retry.hook", 0), Record(b"[1, 2]", 5, b"hook"))


async def given_up(w: ReceiverWorker, alert: dict[str, Any]) -> None:
    rec = park_record(notification(alert), first_failed=0.0, not_before=0.0, attempts=3, last_error="HTTP 503")
    await w._retry_one(TopicPartition("delivery.retry.hook", 0), Record(orjson.dumps(rec), 9, b"hook"))


def run(path: str, alert: dict[str, Any]) -> list[dict[str, Any]]:
    letters: list[dict[str, Any]] = []

    async def go() -> None:
        server = FakeWebhook(SECRET)
        await server.start()
        url = server.url if path != "given_up" else f"http://127.0.0.1:{free_port()}/hook"  # nothing listens
        w = worker_for(url, letters)
        try:
            steps: dict[str, Callable[[], Any]] = {
                "not_an_alert": lambda: not_an_alert(w, url), "rejected": lambda: rejected(w, alert, server),
                "unusable_retry_record": lambda: unusable_retry_record(w, url), "given_up": lambda: given_up(w, alert),
            }
            await steps[path]()
        finally:
            await w.receiver.close()
            await server.stop()

    asyncio.run(go())
    return letters


@pytest.mark.parametrize(("path", "error", "topic", "offset", "retryable"), [
    ("not_an_alert", "ValidationFailed", "alerts", 41, False),
    ("rejected", "ReceiverRejected", "alerts", None, False),
    ("unusable_retry_record", "ValidationFailed", "delivery.retry.hook", 5, False),
    ("given_up", "ReceiverUnavailable", "delivery.retry.hook", 9, True),
])
def test_every_delivery_dead_letter_validates_against_the_dead_letter_schema(
        path: str, error: str, topic: str, offset: int | None, retryable: bool, alert: dict[str, Any]) -> None:
    [letter] = run(path, alert)
    jsonschema.validate(letter, SCHEMA)
    dl = DeadLetter.model_validate(letter)
    assert (dl.stage, dl.error, dl.topic, dl.offset, dl.retryable) == ("deliver.hook", error, topic, offset, retryable)
    original = base64.b64decode(dl.original)
    assert len(original) == dl.original_size and original
    assert SECRET not in orjson.dumps(letter).decode() and SECRET.encode() not in original


def test_a_dead_letter_keeps_the_original_with_its_secrets_masked(alert: dict[str, Any]) -> None:
    [letter] = run("not_an_alert", alert)
    assert orjson.loads(base64.b64decode(letter["original"])) == {"alert_id": "x", "note": MASK}
    assert letter["key"] == "k" and letter["reason"].startswith("not an alert: ValidationError")

