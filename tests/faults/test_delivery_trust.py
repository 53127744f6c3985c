"""Trust in ``lockstep deliver``, live: a receiver that echoes its secret URL, and silenced alerts.

(a) A Slack-format receiver whose route URL holds a real-looking webhook token answers 429, then
    500 three times, then 400, each answer echoing the request path (plain, percent-encoded and
    JSON-escaped) and the request body; then 200. The token (and its encoded forms) must appear
    nowhere: not in the deliver process's whole log (debug level), not in any retry record, not in
    the dead letter the 400 leaves, not on ``/metrics``::

        alerts      k1 k2
        slack       429 500 500 500 400(k1 -> dlq) 200(k2)

(b) Alerts silenced by the correlator (``silenced_by``) or by a silence the delivery service reads
    from the ``silences`` topic are posted to none of an Alertmanager, a webhook and a topic
    receiver; each suppression is one log line and counted on ``/metrics``; when the topic's
    silence is expired while its alert still fires, the alert is notified::

        silences    quiet-s2 [active ......................... expired)
        alerts      s1 firing(silenced_by maint-1)  s1 resolved(silenced_by maint-1)
                    s2 firing  u1 firing                                   (s2 notified here)
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from agents.kafka import client_kwargs, start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.delivery.sample import sample_alert
from lockstep.delivery.topics import DeliveryTopics
from models.settings import LockstepSettings
from tests.delivery.servers import FakeAlertmanager, FakeSlack, FakeWebhook

from .kit import REPO, make_settings

pytestmark = pytest.mark.broker

TOKEN = "Xk7pQ2vR9sL4mN8wZ1cY6tB3"
SLACK_PATH = f"/services/T08ZK3L7QHF/B08ZK3MN2PA/{TOKEN}"
NOW = time.time()


class Deliver:
    """``python -m lockstep.cli deliver`` with the test's settings and secrets, logging to a file."""

    def __init__(self, settings: LockstepSettings, log: Path, **env: str) -> None:
        self.log_path = log
        full = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")} | {
            "LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers or "",
            "LOCKSTEP_TOPIC_PREFIX": settings.topic_prefix, "LOCKSTEP_APP_ID": settings.app_id,
            "LOCKSTEP_PARTITIONS": "1", "LOCKSTEP_DELIVERY_OFFSET_RESET": "earliest",
            "LOCKSTEP_DELIVERY_ROUTES_FILE": str(settings.delivery_routes_file),
            "LOCKSTEP_DELIVERY_METRICS_PORT": "0", "LOCKSTEP_LOG_LEVEL": "debug",
            "LOCKSTEP_PUBLIC_URL": "https://lockstep.example", "PYTHONPATH": str(REPO), **env}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "lockstep.cli", "deliver"], cwd=REPO, env=full,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        """The text of ``/metrics`` ("" when the process serves none)."""
        found = re.search(r"metrics on http://([0-9.]+:\d+)/metrics", self.log())
        if found is None:
            return ""
        with urllib.request.urlopen(f"http://{found.group(1)}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


async def until(cond: Any, timeout_s: float) -> bool:
    """Poll ``cond()`` (a plain function) until true or ``timeout_s``; True if it became true."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample on a ``/metrics`` page (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not want and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def read_topic(settings: LockstepSettings, topic: str) -> list[bytes]:
    """Every value on ``topic`` from the beginning to its current end."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from agents.gaps import true_ends

    consumer = AIOKafkaConsumer(**client_kwargs(settings, settings.kafka_bootstrap_servers or ""),
                                enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await true_ends(settings, settings.kafka_bootstrap_servers or "", tps)  # ListOffsets: short on Tansu
        out: list[bytes] = []
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                out += [m.value for m in msgs if m.value is not None]
        return out
    finally:
        await consumer.stop()


def alert(tag: str, status: str = "firing", silenced_by: list[str] | None = None) -> dict[str, Any]:
    a = sample_alert(NOW, status=status, tag=tag)
    a["alert_id"] = f"{tag}-incident0"
    a["silenced_by"] = list(silenced_by or [])
    return a


def hits(blob: str | bytes) -> int:
    """Occurrences of the token, of the secret path in the forms a receiver may echo it, and of the channel id."""
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    forms = {TOKEN, quote(SLACK_PATH, safe=""), quote(SLACK_PATH, safe="").lower(), SLACK_PATH.replace("/", "\\/")}
    return sum(text.count(f) for f in forms) + sum(text.count(f) for f in ("B08ZK3MN2PA",))


SLACK_ROUTES = """
route:
  receiver: slack
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
receivers:
  - name: slack
    slack: {webhook_url: {secret: slack_url}, rate_per_s: 10, timeout: 2s}
    retry: {initial: 100ms, max: 200ms, max_age: 1h}
"""


def test_a_secret_echoing_receiver_leaks_no_token(broker: EmbeddedBroker, tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(SLACK_ROUTES)
    settings = make_settings(broker.bootstrap, partitions=1, delivery_routes_file=routes)
    cat, topics = TopicCatalogue(settings), DeliveryTopics(settings)
    slack = FakeSlack(SLACK_PATH)

    async def go() -> dict[str, int]:
        await slack.start()
        slack.fail(429, 1, retry_after="0", echo=True)
        slack.fail(500, 3, echo=True)
        slack.fail(400, 1, echo=True)
        await create_topics(settings, broker.bootstrap)
        producer = await start_producer(settings, broker.bootstrap)
        deliver = Deliver(settings, tmp_path / "deliver.log", LOCKSTEP_SECRET_SLACK_URL=slack.url)
        try:
            for a in (alert("k1"), alert("k2")):
                await producer.send_and_wait(cat.alerts, orjson.dumps(a), key=b"llm-70b")
            assert await until(lambda: len(slack.accepted) >= 1 and len(slack.requests) >= 6, 60), \
                f"k2 never accepted: {len(slack.requests)} requests\n{deliver.log()[-3000:]}"

            # The receiver has answered; the deliver process counts the answer once it has read it (a
            # scrape right after the fake server recorded the acceptance could come first: 0 accepted).
            def counted() -> bool:
                text = deliver.metrics()
                return (metric(text, "lockstep_delivery_accepted_total", receiver="slack") >= 1
                        and metric(text, "lockstep_delivery_dead_letters_total", receiver="slack") >= 1)

            assert await until(counted, 30), f"the answers were never counted\n{deliver.log()[-3000:]}"
            metrics = deliver.metrics()
        finally:
            deliver.stop()
            await producer.stop()
            await slack.stop()
        assert "k2-incident0" in str(slack.accepted[0])
        retry = await read_topic(settings, topics.retry("slack"))
        dead = await read_topic(settings, cat.dlq)
        ledger = await read_topic(settings, topics.ledger)
        log = deliver.log()
        found = {"log": hits(log), "retry": sum(hits(r) for r in retry), "dlq": sum(hits(d) for d in dead),
                 "ledger": sum(hits(r) for r in ledger), "metrics": hits(metrics), "retry_records": len(retry),
                 "dead_letters": len(dead), "metrics_served": int(bool(metrics)),
                 "token_alone": sum(b.count(TOKEN) for b in [log, metrics, *(r.decode() for r in retry + dead)])}
        print("token hits:", found)
        assert len(retry) >= 2 and len(dead) == 1, found                 # the failures really happened
        [dl] = [orjson.loads(d) for d in dead]
        assert dl["stage"] == "deliver.slack" and dl["reason"].startswith("rejected by slack: HTTP 400"), dl
        assert "body:" not in dl["reason"] and "k1-incident0" not in dl["reason"]   # no raw receiver body
        for rec in retry:
            assert "body:" not in orjson.loads(rec)["last_error"]
        assert "Traceback" not in log and "slack: HTTP 500 Internal Server Error (body " in log
        assert metric(metrics, "lockstep_delivery_accepted_total", receiver="slack") == 1.0
        assert metric(metrics, "lockstep_delivery_dead_letters_total", receiver="slack") == 1.0
        return found

    found = asyncio.run(go())
    assert (found["log"], found["retry"], found["dlq"], found["ledger"], found["metrics"]) == (0, 0, 0, 0, 0), found


FANOUT_ROUTES = """
route:
  receiver: am
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
  repeat_interval: 30m
  routes:
    - {{receiver: hook, continue: true}}
    - {{receiver: topic, continue: true}}
    - {{receiver: am}}
receivers:
  - name: am
    alertmanager: {{url: "{am}"}}
  - name: hook
    webhook: {{url: "{hook}"}}
  - name: topic
    kafka: {{topic: "alerts.{{domain}}"}}
"""


def test_b_silenced_alerts_reach_no_receiver_until_their_silence_ends(broker: EmbeddedBroker,
                                                                      tmp_path: Path) -> None:
    am, hook = FakeAlertmanager(), FakeWebhook()
    routes = tmp_path / "routes.yaml"
    settings = make_settings(broker.bootstrap, partitions=1, delivery_routes_file=routes)
    cat = TopicCatalogue(settings)
    network = settings.topic_prefix + "alerts.network"
    s2 = alert("s2")
    silence = {"type": "silence", "silence_id": "quiet-s2", "matchers": {"dedup_key": s2["dedup_key"]},
               "kind": "maintenance", "starts_at": NOW - 60, "ends_at": NOW + 3600, "created_by": "netops",
               "comment": "leaf03 firmware", "created_at": NOW - 60, "updated_at": NOW - 60}

    def delivered() -> dict[str, list[str]]:
        return {"am": [a["annotations"]["alert_id"] for body in am.accepted for a in body],
                "hook": [a["annotations"]["alert_id"] for body in hook.accepted for a in body["alerts"]]}

    async def go() -> dict[str, Any]:
        await am.start()
        await hook.start()
        routes.write_text(FANOUT_ROUTES.format(am=am.url.removesuffix("/api/v2/alerts"), hook=hook.url))
        await create_topics(settings, broker.bootstrap)
        producer = await start_producer(settings, broker.bootstrap)
        await producer.send_and_wait(cat.silences, orjson.dumps(silence), key=b"quiet-s2")
        deliver = Deliver(settings, tmp_path / "deliver.log")
        try:
            def silenced(at_least: int) -> bool:
                text = deliver.metrics()
                return all(metric(text, "lockstep_delivery_silenced_total", receiver=r) >= at_least
                           for r in ("am", "hook", "topic"))

            await producer.send_and_wait(cat.alerts, orjson.dumps(alert("s1", silenced_by=["maint-1"])),
                                         key=b"llm-70b")
            # Its resolve must not overtake it in one batch, so that each state is seen (and counted).
            await until(lambda: silenced(1), 30)
            for a in (alert("s1", "resolved", silenced_by=["maint-1"]), s2, alert("u1")):
                await producer.send_and_wait(cat.alerts, orjson.dumps(a), key=b"llm-70b")

            async def topic_ids() -> list[str]:
                return [orjson.loads(v)["alert_id"] for v in await read_topic(settings, network)]

            async def everywhere(alert_id: str) -> bool:
                got = delivered()
                return alert_id in got["am"] and alert_id in got["hook"] and alert_id in await topic_ids()

            deadline = time.monotonic() + 60
            while not await everywhere("u1-incident0"):
                assert time.monotonic() < deadline, f"u1 never delivered\n{deliver.log()[-3000:]}"
                await asyncio.sleep(0.1)
            # Everything before u1 has been through each receiver's dispatcher; wait for the counts.
            await until(lambda: silenced(3), 20)
            while_silenced = {**delivered(), "topic": await topic_ids()}
            metrics = deliver.metrics()

            expired = {**silence, "ends_at": time.time(), "updated_at": time.time()}
            await producer.send_and_wait(cat.silences, orjson.dumps(expired), key=b"quiet-s2")
            deadline = time.monotonic() + 30
            while not await everywhere("s2-incident0"):
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            after = {**delivered(), "topic": await topic_ids()}
        finally:
            deliver.stop()
            await producer.stop()
            await am.stop()
            await hook.stop()
        return {"while": while_silenced, "after": after, "metrics": metrics, "log": deliver.log()}

    got = asyncio.run(go())
    silenced_ids = ("s1-incident0", "s2-incident0")
    leaked = {r: [i for i in ids if i in silenced_ids] for r, ids in got["while"].items()}
    counted = {r: metric(got["metrics"], "lockstep_delivery_silenced_total", receiver=r)
               for r in ("am", "hook", "topic")}
    lines = [ln for ln in got["log"].splitlines() if "not notified: silenced by" in ln]
    print("silenced alerts delivered:", {r: len(v) for r, v in leaked.items()}, "counted:", counted,
          "log lines:", len(lines))
    assert am.violations == [] and hook.violations == []
    assert leaked == {"am": [], "hook": [], "topic": []}
    assert counted == {"am": 3.0, "hook": 3.0, "topic": 3.0}       # s1 firing, s1 resolved, s2 firing
    assert len(lines) == 9 and all("maint-1" in ln or "quiet-s2" in ln for ln in lines)
    # The topic's silence expired while s2 still fired: every receiver is told now; s1 never.
    for receiver, ids in got["after"].items():
        assert ids.count("s2-incident0") == 1 and "s1-incident0" not in ids, (receiver, ids)
