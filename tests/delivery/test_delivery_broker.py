"""Delivery through the real embedded broker: end to end, replay, reload, and the fault test.

The fault test runs ``lockstep deliver`` as a child process against local fake receivers::

    PagerDuty   500 500 500 500 500 500 500 500 500 500 | 202 202 202 ...
    worker      [ run 1 ............ ] KILL -9 [ run 2 ........................ ]
    alerts      k0..k5 fire    k0..k2 resolve   k3 resolves, k0 fires again (a new incident)
    Slack       receives all along

Then: every alert reaches PagerDuty once it recovers, exactly one incident per dedup_key
lifecycle (two for k0: resolved, then a new one), the poisoned trigger of k5 (400) is a dead
letter with a sanitised reason from PagerDuty's response (never the response), Slack got every
state while PagerDuty was down, and no secret appears in the logs, the dead letters, the retry
topics or the ledger.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.kafka import client_kwargs, start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.delivery.sample import sample_alert
from lockstep.delivery.service import DeliveryService
from lockstep.delivery.topics import DeliveryTopics
from models.records import DeadLetter
from models.settings import LockstepSettings

from .servers import FakePagerDuty, FakeSlack, FakeWebhook, ocsf_problems

pytestmark = pytest.mark.broker

PD_KEY = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:  # the real Tansu broker, stopped by PID at the end
        yield b


def make_settings(broker: EmbeddedBroker, routes: Path, **secrets: str) -> LockstepSettings:
    run = uuid.uuid4().hex[:8]
    return LockstepSettings(  # type: ignore[call-arg]
        _env_file=None, kafka_bootstrap_servers=broker.bootstrap, topic_prefix=f"d{run}.", app_id=f"deliver-{run}",
        partitions=1, delivery_routes_file=routes, delivery_secrets=secrets, delivery_offset_reset="earliest",
        delivery_reload_interval_s=0.2, public_url="https://lockstep.example",
    )


async def until(cond: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def read_topic(settings: LockstepSettings, topic: str) -> list[Any]:
    """Every record of ``topic`` from the beginning to its current end."""
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
        out = []
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                out += msgs
        return out
    finally:
        await consumer.stop()


def alert(tag: str, status: str = "firing", *, base: float = 1_764_503_000.0, severity: str = "critical",
          incident: int = 0) -> dict[str, Any]:
    a = sample_alert(base + incident * 600, status=status, tag=tag)
    a["alert_id"] = f"{tag}-incident{incident}"
    a["severity"] = severity
    return a


async def produce(producer: Any, topic: str, *alerts: dict[str, Any]) -> None:
    for a in alerts:
        await producer.send_and_wait(topic, orjson.dumps(a), key=b"llm-70b")


ROUTES = """
route:
  receiver: slack
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
  repeat_interval: 1h
  routes:
    - matchers: ['severity="critical"']
      receiver: pd
      continue: true
    - receiver: siem
      continue: true
    - receiver: by-domain
      continue: true
    - receiver: slack
receivers:
  - name: slack
    slack: {{webhook_url: {{secret: slack_url}}, rate_per_s: 10}}
  - name: pd
    pagerduty: {{routing_key: {{secret: pd_key}}, url: "{pd_url}", timeout: 2s}}
    retry: {{initial: 100ms, max: 400ms, max_age: 1h}}
  - name: siem
    ocsf: {{topic: alerts.ocsf}}
  - name: by-domain
    kafka: {{topic: "alerts.{{domain}}"}}
"""


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())  # type: ignore[arg-type]


def test_end_to_end_replay_and_reload(broker: EmbeddedBroker, tmp_path: Path) -> None:
    async def go() -> None:
        slack, pd, hook = FakeSlack(), FakePagerDuty(PD_KEY), FakeWebhook()
        for s in (slack, pd, hook):
            await s.start()
        routes = tmp_path / "routes.yaml"
        routes.write_text(ROUTES.format(pd_url=pd.url))
        settings = make_settings(broker, routes, slack_url=slack.url, pd_key=PD_KEY)
        await create_topics(settings, broker.bootstrap)
        cat = TopicCatalogue(settings)
        producer = await start_producer(settings, broker.bootstrap)
        service = DeliveryService(settings, broker.bootstrap, hostname="test-host")
        try:
            await producer.send_and_wait(cat.alerts, b"{not an alert", key=b"llm-70b")   # bad input is data
            await produce(producer, cat.alerts, alert("k1"), alert("k2", severity="warning"))
            await service.start()
            await until(lambda: len(pd.incidents) == 1 and len(slack.accepted) == 2, what="first deliveries")
            await produce(producer, cat.alerts, alert("k1", "resolved"), alert("k2", "resolved", severity="warning"))
            await until(lambda: pd.incidents[0].resolved and len(slack.accepted) == 4, what="resolves")
            assert pd.violations == [] and slack.violations == []
            assert len(pd.incidents) == 1                                    # k2 is a warning: Slack only
            dead = [DeadLetter.model_validate(orjson.loads(m.value)) for m in await read_topic(settings, cat.dlq)]
            assert sorted(d.stage for d in dead) == ["deliver.by-domain", "deliver.pd", "deliver.siem", "deliver.slack"]
            assert {(d.error, d.offset, base64.b64decode(d.original)) for d in dead} == {
                ("ValidationFailed", 0, b"{not an alert")}

            ocsf = [orjson.loads(m.value) for m in await read_topic(settings, settings.topic_prefix + "alerts.ocsf")]
            assert [(f["finding_info"]["uid"], f["activity_id"], f["status_id"]) for f in ocsf] == [
                ("k1-incident0", 1, 1), ("k2-incident0", 1, 1), ("k1-incident0", 3, 4), ("k2-incident0", 3, 4)]
            assert all(ocsf_problems(f) == [] for f in ocsf)
            network = await read_topic(settings, settings.topic_prefix + "alerts.network")
            assert len(network) == 4 and orjson.loads(network[0].value)["alert_id"] == "k1-incident0"

            # Reload without restart: a new webhook receiver for warnings, and the file watcher applies it.
            good = ROUTES.format(pd_url=pd.url).replace(
                "    - receiver: slack\n", "    - matchers: ['severity=\"warning\"']\n      receiver: hook\n"
                "    - receiver: slack\n", 1) + f'  - name: hook\n    webhook: {{url: "{hook.url}"}}\n'
            routes.write_text(good)
            await until(lambda: service.reloads == 1, what="reload")
            assert "hook" in service.workers
            await produce(producer, cat.alerts, alert("k3", severity="warning"))
            await until(lambda: any(a["annotations"]["alert_id"] == "k3-incident0"
                                    for body in hook.accepted for a in body["alerts"]), what="webhook after reload")
            assert hook.violations == []
            # A bad file keeps the running routes and says why.
            routes.write_text("route: {receiver: nobody}\nreceivers:\n  - name: x\n    ocsf: {}\n")
            await until(lambda: service.last_reload_error is not None, what="reload error")
            assert service.last_reload_error == (f'{routes}: route.receiver: undefined receiver "nobody" used in route')
            assert "hook" in service.workers
        finally:
            await service.stop()

        # Replay: new consumer groups read the alerts topic again from the start; the ledger knows.
        events_before, slack_before = sum(len(i.events) for i in pd.incidents), len(slack.accepted)
        hook_before = len(hook.accepted)
        replay = DeliveryService(settings.model_copy(update={"app_id": settings.app_id + "-replay"}),
                                 broker.bootstrap, routes_file=routes.with_name("replay.yaml"))
        routes.with_name("replay.yaml").write_text(good)
        try:
            await replay.start()
            await until(lambda: replay.workers["pd"].stats["duplicates"] == 2
                        and replay.workers["slack"].stats["duplicates"] == 4
                        and replay.workers["hook"].stats["duplicates"] >= 2, what="replay")
            await asyncio.sleep(0.3)
            assert sum(len(i.events) for i in pd.incidents) == events_before
            assert len(slack.accepted) == slack_before and len(hook.accepted) == hook_before
        finally:
            await replay.stop()
            await producer.stop()
            for s in (slack, pd, hook):
                await s.stop()

    run(go)


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen([sys.executable, "-m", "lockstep.cli", "deliver"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        out.close()


def test_fault_pagerduty_down_and_worker_killed(broker: EmbeddedBroker, tmp_path: Path) -> None:
    async def go() -> None:
        slack, pd = FakeSlack(), FakePagerDuty(PD_KEY)
        await slack.start()
        await pd.start()
        pd.down = True
        pd.poison = {alert("k5")["dedup_key"]}
        routes = tmp_path / "routes.yaml"
        routes.write_text(ROUTES.format(pd_url=pd.url))
        settings = make_settings(broker, routes)
        await create_topics(settings, broker.bootstrap)
        cat = TopicCatalogue(settings)
        key_file = tmp_path / "pd_key"
        key_file.write_text(PD_KEY + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")} | {
            "LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "LOCKSTEP_TOPIC_PREFIX": settings.topic_prefix,
            "LOCKSTEP_APP_ID": settings.app_id, "LOCKSTEP_PARTITIONS": "1",
            "LOCKSTEP_DELIVERY_ROUTES_FILE": str(routes), "LOCKSTEP_DELIVERY_OFFSET_RESET": "earliest",
            "LOCKSTEP_SECRET_SLACK_URL": slack.url, "LOCKSTEP_SECRET_PD_KEY_FILE": str(key_file),
            "LOCKSTEP_LOG_LEVEL": "debug", "LOCKSTEP_PUBLIC_URL": "https://lockstep.example",
        }
        log = tmp_path / "deliver.log"
        producer = await start_producer(settings, broker.bootstrap)
        keys = {t: alert(t)["dedup_key"] for t in ("k0", "k1", "k2", "k3", "k4", "k5")}
        worker = start_worker(env, log)
        try:
            await produce(producer, cat.alerts, *(alert(t) for t in keys))
            await until(lambda: len(slack.accepted) >= 6, what="Slack while PagerDuty is down")
            await until(lambda: len(pd.requests) >= 3, what="PagerDuty retries")
            await produce(producer, cat.alerts, *(alert(t, "resolved") for t in ("k0", "k1", "k2")))
            await until(lambda: len(slack.accepted) >= 9, what="Slack resolves while PagerDuty is down")

            worker.send_signal(signal.SIGKILL)  # mid-outage, with retries parked and in flight
            worker.wait(10)
            await produce(producer, cat.alerts, alert("k3", "resolved"), alert("k0", incident=1))
            worker = start_worker(env, log)
            await until(lambda: len(slack.accepted) >= 11, what="Slack after the restart")
            assert pd.accepted == []                       # still down all this while
            failed_while_down = len(pd.requests)

            pd.down = False                                # the receiver recovers
            await until(lambda: len(pd.incidents_for(keys["k0"])) == 2 and pd.incidents_for(keys["k3"])
                        and pd.incidents_for(keys["k3"])[0].resolved and pd.incidents_for(keys["k4"]),
                        timeout=60, what="PagerDuty catching up")
            await asyncio.sleep(1.0)                       # anything more would be a duplicate page
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
            await producer.stop()
            await slack.stop()
            await pd.stop()

        assert failed_while_down >= 3
        # Exactly one incident per dedup_key lifecycle; k0 had two lifecycles.
        expected = {"k0": [True, False], "k1": [True], "k2": [True], "k3": [True], "k4": [False], "k5": []}
        for tag, key in keys.items():
            assert [i.resolved for i in pd.incidents_for(key)] == expected[tag], tag
        triggers = [e for i in pd.incidents for e in i.events if e["event_action"] == "trigger"]
        assert len(triggers) == 6                          # no trigger delivered twice
        assert pd.violations == [f"event for routing_key {PD_KEY} refused: poisoned dedup_key {keys['k5']}"]
        assert slack.violations == []
        slack_states = {(m["text"].split("]")[0], t) for m in slack.accepted for t in keys if f"/{t}/" in str(m)}
        assert {("[FIRING:1", t) for t in keys} <= slack_states
        assert {("[RESOLVED", t) for t in ("k0", "k1", "k2", "k3")} <= slack_states

        # The poisoned trigger is a dead letter with PagerDuty's reason - no routing key, no raw answer.
        dead = [DeadLetter.model_validate(orjson.loads(m.value)) for m in await read_topic(settings, cat.dlq)]
        [dl] = [d for d in dead if d.stage == "deliver.pd"]
        assert dl.error == "ReceiverRejected" and not dl.retryable
        assert dl.reason.startswith("rejected by pd: HTTP 400 Bad Request: ") and "poisoned dedup_key" in dl.reason
        assert "(body " in dl.reason and keys["k5"] not in dl.reason
        assert "[REDACTED]" in dl.reason
        assert orjson.loads(base64.b64decode(dl.original))["alerts"][0]["dedup_key"] == keys["k5"]

        # No secret anywhere we wrote: logs, dead letters, retry topics, ledger.
        secrets = [PD_KEY, slack.url, slack.path]
        topics = DeliveryTopics(settings)
        blobs = [log.read_bytes()]
        for topic in (cat.dlq, topics.ledger, topics.retry("pd"), topics.retry("slack")):
            blobs += [m.value for m in await read_topic(settings, topic)]
        assert len(blobs) > 20
        for blob in blobs:
            for secret in secrets:
                assert secret.encode() not in blob
        text = log.read_text()
        assert "parked" in text and "Traceback" not in text

    run(go)


SILENCE_ROUTES = """
route:
  receiver: hook
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
  repeat_interval: 1h
receivers:
  - name: hook
    webhook: {{url: "{hook}"}}
"""


def test_a_silence_created_while_an_alert_fires_mutes_it_but_its_resolve_is_delivered(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    """t1 fires and is notified; a silence on the ``silences`` topic then mutes it (counted once);
    t1 resolves under the silence: the receiver was told it fires, so it is told it is over. t2 fires
    and resolves under the silence: never notified."""

    async def go() -> None:
        hook = FakeWebhook()
        await hook.start()
        routes = tmp_path / "routes.yaml"
        routes.write_text(SILENCE_ROUTES.format(hook=hook.url))
        settings = make_settings(broker, routes)
        await create_topics(settings, broker.bootstrap)
        cat = TopicCatalogue(settings)
        producer = await start_producer(settings, broker.bootstrap)
        service = DeliveryService(settings, broker.bootstrap, hostname="test-host")

        def states() -> list[tuple[str, str]]:
            return [(a["annotations"]["alert_id"], a["status"]) for body in hook.accepted for a in body["alerts"]]

        try:
            await service.start()
            await produce(producer, cat.alerts, alert("t1"))
            await until(lambda: states() == [("t1-incident0", "firing")], what="t1 notified")
            now = time.time()
            rec = {"type": "silence", "silence_id": "quiet", "matchers": {"job_id": "llm-70b"}, "kind": "silence",
                   "starts_at": now - 1, "ends_at": now + 3600, "created_by": "me", "comment": "c",
                   "created_at": now, "updated_at": now}
            await producer.send_and_wait(cat.silences, orjson.dumps(rec), key=b"quiet")
            worker = service.workers["hook"]
            await until(lambda: worker.stats["silenced"] == 1, what="t1 muted once the silence is known")
            await produce(producer, cat.alerts, alert("t2"), alert("t2", "resolved"),
                          {**alert("t1", "resolved"), "silenced_by": ["quiet"]})
            await until(lambda: ("t1-incident0", "resolved") in states(), what="t1's resolve")
            await until(lambda: worker.stats["silenced"] >= 2 and not worker.dispatcher.groups, what="t2 dropped")
            assert states() == [("t1-incident0", "firing"), ("t1-incident0", "resolved")]
            assert hook.violations == [] and len(service.silences) == 1
        finally:
            await service.stop()
            await producer.stop()
            await hook.stop()

    run(go)
