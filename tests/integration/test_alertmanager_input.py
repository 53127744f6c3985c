"""Debian's real Alertmanager (``prometheus-alertmanager`` 0.25) posting its webhook to a live worker.

A worker on the real broker serves its API (a token set); its inventory holds job ``j1`` on
``gpu[001-004]``. An ``alertmanager`` on loopback (free port, temporary storage, clustering off) has
one receiver, a ``webhook_configs`` pointing at the worker's ``POST /api/v1/alertmanager`` with the
token. Alerts are posted to Alertmanager with ``amtool``, as an alerting rule's would arrive::

    amtool alert add   NodeInfinibandLinkDown instance=gpu001:9100   (j1's node)
                       InstanceDown           instance=gpu999:9100   (no job there)
    Alertmanager  ──webhook v4──►  worker  ──►  telemetry.nic / telemetry.host  ──►  ingest  ──►  anomalies
    GET /jobs/j1/timeline           the link-down event at the alert's startsAt; nothing of gpu999

Then ``amtool`` ends the link-down alert and Alertmanager posts it resolved (the 0 sample arrives), a
malformed body gets 400 (nothing written) and a request without the token 401, and a malformed body on
the carrier topic ``telemetry.raw.alertmanager-webhook`` becomes a dead letter. ``python3 dev.py test``
installs the package; without apt-get the test skips saying so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from agents.alert_input import DLQ_TOPIC_NAME
from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker
from models.settings import LockstepSettings
from models.timeutil import format_ts, parse_ts
from tests.integration.test_alertmanager_real import amtool, binary, free_port, wait_for

pytestmark = pytest.mark.broker

TOKEN = "alertmanager-input-token"
AM_CONFIG = """
route:
  receiver: lockstep
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: lockstep
    webhook_configs:
      - url: {url}
        send_resolved: true
        http_config: {{authorization: {{credentials: {token}}}}}
"""


@pytest.fixture
def alertmanager_to(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start an Alertmanager whose webhook posts to the URL given; yields the starter (returns its URL)."""
    procs: list[subprocess.Popen[bytes]] = []
    exe = binary("prometheus-alertmanager", "alertmanager")
    binary("amtool")

    def start(webhook_url: str) -> str:
        config = tmp_path / "alertmanager.yml"
        config.write_text(AM_CONFIG.format(url=webhook_url, token=TOKEN))
        (tmp_path / "am-data").mkdir()
        port = free_port()
        log = (tmp_path / "alertmanager.log").open("wb")
        proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: proc.poll() is not None
                 or urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200, "alertmanager ready")
        assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()[-2000:]
        return url

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_alertmanager_webhook_alerts_become_events_on_the_jobs_timeline(
        settings: LockstepSettings, alertmanager_to: Callable[[str], str]) -> None:
    settings = settings.model_copy(update={"api_token": SecretStr(TOKEN), "web_port": 0})
    assert settings.kafka_bootstrap_servers
    bootstrap = settings.kafka_bootstrap_servers
    cat = TopicCatalogue(settings)
    now = time.time()
    start = format_ts(float(int(now) - 120))  # as a rule with `for: 2m` fires: two minutes ago
    ib = ["alertname=NodeInfinibandLinkDown", "instance=gpu001:9100", "job=node", "device=mlx5_0", "port=1",
          "severity=critical", "--annotation=summary=InfiniBand port mlx5_0/1 on gpu001 is down", f"--start={start}"]

    async def go() -> dict[str, Any]:
        await create_topics(settings, bootstrap)
        producer = await start_producer(settings, bootstrap)
        await producer.send_and_wait(cat.inventory, orjson.dumps({
            "kind": "job", "ts": now - 600, "job_id": "j1", "state": "RUNNING", "nodes": "gpu[001-004]",
            "gpus_per_node": 8}), key=b"job:j1")
        worker = Worker(settings, bootstrap, serve_web=True)
        await worker.start()
        loop = asyncio.get_running_loop()

        async def until(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
            return await loop.run_in_executor(None, wait_for, cond, what, timeout)

        try:
            assert worker.web_url
            hook = f"{worker.web_url}/api/v1/alertmanager"
            await until(lambda: worker.inventory.job("j1") is not None, "the job in the worker's inventory")
            am = await loop.run_in_executor(None, alertmanager_to, hook)
            timeline = f"{worker.web_url}/jobs/j1/timeline?from={int(now) - 300}&to={int(now) + 60}"

            def markers() -> list[dict[str, Any]]:
                return [m for m in get_json(timeline)["anomalies"] if m["metric"].startswith("alertmanager_")]

            await loop.run_in_executor(None, amtool, am, "alert", "add", *ib)
            await loop.run_in_executor(None, amtool, am, "alert", "add", "alertname=InstanceDown",
                                       "instance=gpu999:9100", "job=node", "severity=critical", f"--start={start}")
            [marker] = await until(markers, "the link-down event on j1's timeline")
            webhook_samples = lambda: sum(  # noqa: E731 - a probe
                s.value for m in worker.metrics.registry.collect() for s in m.samples
                if s.name == "lockstep_carrier_samples_total" and s.labels.get("format") == "alertmanager-webhook")
            await until(lambda: webhook_samples() >= 2, "both alerts taken by the worker")

            # Ended with amtool: Alertmanager posts the alert resolved; its 0 sample is taken too.
            taken = webhook_samples()
            await loop.run_in_executor(None, amtool, am, "alert", "add", *ib, f"--end={format_ts(time.time())}")
            await until(lambda: webhook_samples() >= taken + 1, "the resolved alert taken")

            body = orjson.dumps({"version": "3", "status": "firing", "alerts": []})
            auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            statuses = (await loop.run_in_executor(None, post, hook, body, auth),
                        await loop.run_in_executor(None, post, hook, b"{not json", auth),
                        await loop.run_in_executor(None, post, hook, body, {"Content-Type": "application/json"}))
            carrier = cat._n("telemetry.raw.alertmanager-webhook")
            await producer.send_and_wait(carrier, b'{"version": "4", "status": "firing"}', key=b"am")

            dlq: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while not [d for d in dlq if d["topic"] == carrier] and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # a poll: the convert agent's dead letter has no other signal
                dlq = await read_topic(settings, bootstrap, cat.dlq)
            # (the worker serves on this loop: its API is asked from another thread)
            return {"marker": marker, "markers": await loop.run_in_executor(None, markers), "statuses": statuses,
                    "dlq": dlq, "carrier": carrier}
        finally:
            await producer.stop()
            await worker.stop()

    got = asyncio.run(go())
    marker = got["marker"]
    assert (marker["layer"], marker["source"], marker["metric"], marker["meaning"]) == (
        "nic", "gpu001", "alertmanager_link_down", "link_down")
    assert marker["ts"] == parse_ts(start) and marker["labels"]["device"] == "mlx5_0"
    assert marker["labels"]["alertname"] == "NodeInfinibandLinkDown"
    # gpu999 runs no job of j1: its InstanceDown is not on j1's timeline (one marker, still, after the resolve)
    assert [m["source"] for m in got["markers"]] == ["gpu001"]
    assert got["statuses"] == (400, 400, 401)  # another version, not JSON, no token
    assert not [d for d in got["dlq"] if d["topic"] == DLQ_TOPIC_NAME]  # every alert Alertmanager sent was used
    # ... and the ingest stage took every sample: the re-sent firing one a duplicate, none out of order
    assert [d["topic"] for d in got["dlq"]] == [got["carrier"]], [d["reason"] for d in got["dlq"]]
    [dead] = [d for d in got["dlq"] if d["topic"] == got["carrier"]]
    assert (dead["stage"], dead["error"]) == ("convert", "DecodeFailed") and "version" in dead["reason"]
