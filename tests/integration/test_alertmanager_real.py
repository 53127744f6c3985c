"""Lockstep's delivery service against Debian's real Alertmanager (``prometheus-alertmanager`` 0.25).

An incident's whole life goes through the real broker and ``DeliveryService`` (the code of
``lockstep deliver``) to an ``alertmanager`` on loopback (free port, temporary config and storage,
clustering off); its API (``/api/v2/alerts``) and ``amtool`` say what an operator would see::

    alerts topic   firing ........ firing (an update) ......... resolved (resolved_at 10 min ahead)
    Alertmanager   active, labels  one fingerprint, reposted    suppressed by an amtool silence on
                   to route on     every repeat_interval         switch/port ... then resolved (gone)

``python3 dev.py test`` installs the package; without apt-get the test skips saying so.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.delivery.sample import sample_alert
from lockstep.delivery.service import DeliveryService
from models.settings import LockstepSettings
from models.timeutil import format_ts, parse_ts

pytestmark = pytest.mark.broker

ROUTES = """
route:
  receiver: am
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
  repeat_interval: 300ms
receivers:
  - name: am
    alertmanager: {{url: "{url}", firing_ttl: 1h}}
"""

AM_CONFIG = """
route:
  receiver: blackhole
  group_by: [alertname]
  group_wait: 1s
receivers:
  - name: blackhole
"""


def binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    if shutil.which("apt-get") is None:
        pytest.skip(f"{names[0]} is not installed and this machine has no apt-get to install it "
                    "(Debian package prometheus-alertmanager)")
    pytest.fail(f"{names[0]} is not installed: `python3 dev.py test` installs Debian's prometheus-alertmanager "
                "(dev.py APT_PACKAGES); or apt-get install prometheus-alertmanager")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``cond`` until it returns something truthy (Alertmanager has no push API to wait on)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = cond()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    exe = binary("prometheus-alertmanager", "alertmanager")
    binary("amtool")
    config = tmp_path / "alertmanager.yml"
    config.write_text(AM_CONFIG)
    (tmp_path / "am-data").mkdir()
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("wb")
    proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
                 "alertmanager ready")
        assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()[-2000:]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def amtool(url: str, *args: str) -> str:
    out = subprocess.run([binary("amtool"), f"--alertmanager.url={url}", *args], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout


def ours(url: str, dedup_key: str) -> list[dict[str, Any]]:
    """Alertmanager's alerts with our dedup_key (active, silenced or not; resolved ones are not listed)."""
    return [a for a in get_json(f"{url}/api/v2/alerts") if a["labels"].get("dedup_key") == dedup_key]


def test_an_incident_through_the_real_alertmanager(broker: EmbeddedBroker, alertmanager: str,
                                                   tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES.format(url=alertmanager))
    settings = LockstepSettings(  # type: ignore[call-arg]
        _env_file=None, kafka_bootstrap_servers=broker.bootstrap, topic_prefix=f"am{run}.", app_id=f"am-{run}",
        partitions=1, delivery_routes_file=routes, delivery_offset_reset="earliest",
        public_url="https://lockstep.example")
    now = time.time()
    firing = sample_alert(now, tag=run)
    key = firing["dedup_key"]

    async def go() -> None:
        await create_topics(settings, broker.bootstrap)
        topic = TopicCatalogue(settings).alerts
        producer = await start_producer(settings, broker.bootstrap)
        service = DeliveryService(settings, broker.bootstrap, hostname="am-test")
        loop = asyncio.get_running_loop()

        async def until(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
            return await loop.run_in_executor(None, wait_for, cond, what, timeout)

        async def send(alert: dict[str, Any]) -> None:
            await producer.send_and_wait(topic, orjson.dumps(alert), key=b"llm-70b")

        try:
            await service.start()
            await send(firing)
            [shown] = await until(lambda: ours(alertmanager, key), "the firing alert in Alertmanager")
            labels = shown["labels"]
            assert {k: labels.get(k) for k in ("alertname", "severity", "domain", "job", "switch", "port",
                                               "root_layer", "gpus_bucket", "fabric")} == {
                "alertname": "job_slowdown", "severity": "critical", "domain": "network", "job": "llm-70b",
                "switch": "leaf03", "port": "17", "root_layer": "switch", "gpus_bucket": "256-1023",
                "fabric": "ib"}
            assert shown["status"]["state"] == "active"
            assert parse_ts(shown["startsAt"]) <= time.time()
            fingerprint = shown["fingerprint"]

            # Repeats (repeat_interval 300ms) and an updated firing record: still one alert, one fingerprint.
            worker = service.workers["am"]
            posted = worker.stats["accepted"]
            await send(dict(firing, summary=firing["summary"] + " (updated)"))
            await until(lambda: worker.stats["accepted"] >= posted + 3, "three more posts")
            again = ours(alertmanager, key)
            assert [a["fingerprint"] for a in again] == [fingerprint]

            # An operator's silence on the switch port, made with amtool.
            silence_id = amtool(alertmanager, "silence", "add", "switch=leaf03", "port=17", "--duration=1h",
                                "--author=oncall", "--comment=leaf03 port 17 optics swap").strip()
            silenced = await until(lambda: [a for a in ours(alertmanager, key)
                                            if a["status"]["state"] == "suppressed"], "the alert silenced")
            assert silenced[0]["status"]["silencedBy"] == [silence_id]
            queried = json.loads(amtool(alertmanager, "alert", "query", "--silenced", "-o", "json",
                                        f"dedup_key={key}"))
            assert [a["fingerprint"] for a in queried] == [fingerprint]

            # Resolved with a resolved_at ten minutes ahead of the wall clock (as a demo at 10x stamps it):
            # endsAt is clamped to the delivery's clock, so Alertmanager resolves it now, not in ten minutes.
            resolved = dict(firing, status="resolved", resolved_at=format_ts(time.time() + 600))
            await send(resolved)
            await until(lambda: not ours(alertmanager, key), "the alert resolved in Alertmanager")
            assert not [a for a in json.loads(amtool(alertmanager, "alert", "query", "-o", "json", "--silenced",
                                                     "--active", f"dedup_key={key}"))]
        finally:
            await service.stop()
            await producer.stop()

    asyncio.run(go())


def test_a_revised_root_cause_leaves_no_stale_alert_in_alertmanager(broker: EmbeddedBroker, alertmanager: str,
                                                                    tmp_path: Path) -> None:
    """Late evidence moves the root cause (same alert id and dedup key): delivery drops the revised
    firing record as already notified, and the resolve carries the new root cause's labels; the
    label set Alertmanager was told about must end with it, not an hour later (``firing_ttl``)."""
    run = uuid.uuid4().hex[:8]
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES.format(url=alertmanager))
    settings = LockstepSettings(  # type: ignore[call-arg]
        _env_file=None, kafka_bootstrap_servers=broker.bootstrap, topic_prefix=f"amr{run}.", app_id=f"amr-{run}",
        partitions=1, delivery_routes_file=routes, delivery_offset_reset="earliest")
    firing = sample_alert(time.time(), tag=run)
    key = firing["dedup_key"]
    old_root = dict(firing["root_cause"], source="leaf02", labels={"port": "9"})
    firing["root_cause"] = old_root
    before = {k: old_root[k] for k in ("domain", "layer", "source", "labels", "metric")}
    revised = dict(firing, root_cause=dict(old_root, source="leaf03", labels={"port": "17"}),
                   details={"revised_from": before})

    async def go() -> None:
        await create_topics(settings, broker.bootstrap)
        topic = TopicCatalogue(settings).alerts
        producer = await start_producer(settings, broker.bootstrap)
        service = DeliveryService(settings, broker.bootstrap, hostname="am-test")
        loop = asyncio.get_running_loop()

        async def until(cond: Callable[[], Any], what: str) -> Any:
            return await loop.run_in_executor(None, wait_for, cond, what, 30.0)

        try:
            await service.start()
            await producer.send_and_wait(topic, orjson.dumps(firing), key=b"llm-70b")
            [shown] = await until(lambda: ours(alertmanager, key), "the firing alert")
            assert (shown["labels"]["switch"], shown["labels"]["port"]) == ("leaf02", "9")
            await producer.send_and_wait(topic, orjson.dumps(revised), key=b"llm-70b")
            resolved = dict(revised, status="resolved", resolved_at=format_ts(time.time()))
            await producer.send_and_wait(topic, orjson.dumps(resolved), key=b"llm-70b")
            await until(lambda: not ours(alertmanager, key), "no alert of the dedup key left active")
        finally:
            await service.stop()
            await producer.stop()

    asyncio.run(go())
