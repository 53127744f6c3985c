"""A real Prometheus (Debian's ``prometheus``) remote-writing into a real worker on the real broker.

Prometheus scrapes a real ``prometheus-node-exporter`` (on a free loopback port) and a served
dcgm-exporter capture (tests/fixtures/formats/dcgm_exporter_hostname.prom, by a tiny local HTTP
server), every second, with ``remote_write`` pointed at the worker's ``POST /api/v1/write`` and the
worker's API token. The samples of both must arrive in the native telemetry topics with the layer,
source and metric the adapters give them, keyed by source; a malformed body or another encoding gets
400, a request without the token 401, and a request with an unusable series 204 with that series a
dead letter on ``dlq``. Series whose names the catalogue does not know (the exporters' ``go_*``,
``process_*``, Prometheus's ``up``/``scrape_*``...) never reach the topics: they are counted as skipped.
``dev.py test`` installs the two packages with apt (like chromium); without them the test says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from agents.kafka import client_kwargs
from agents.remote_write import DLQ_TOPIC_NAME, MAX_REMOTE_WRITE_BYTES
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker
from models.settings import LockstepSettings
from streams.formats.remote_write import SKIP_UNKNOWN, known_to_lockstep

pytestmark = pytest.mark.broker

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "dcgm_exporter_hostname.prom"
TOKEN = "remote-write-test-token"
#: Bounds only (the test finishes as soon as the samples arrive): Prometheus starts shipping its WAL
#: a few seconds after its first scrape.
ARRIVAL_TIMEOUT_S = 90.0

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or NODE_EXPORTER is None,
    reason="Debian's prometheus and prometheus-node-exporter are not installed (dev.py test installs them with "
           "apt-get where apt is available: apt-get install -y prometheus prometheus-node-exporter)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served_scrape(body: bytes) -> Iterator[int]:
    """A local HTTP server answering every GET with ``body`` as a Prometheus text scrape; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def process(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def prometheus_config(node_port: int, dcgm_port: int, write_url: str) -> str:
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_port}"]}}]
  - job_name: dcgm
    static_configs: [{{targets: ["127.0.0.1:{dcgm_port}"]}}]
remote_write:
  - url: {write_url}
    authorization: {{credentials: {TOKEN}}}
    queue_config: {{batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}}
"""


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def nameless_series_request() -> bytes:
    """A WriteRequest whose only series has no ``__name__`` (snappy-compressed): one dead letter."""
    import cramjam

    labels = _field(1, _field(1, b"instance") + _field(2, b"gpu009:9400"))
    sample = _field(2, b"\x09" + struct.pack("<d", 1.0) + b"\x10" + bytes([0xD0, 0x84, 0xC8, 0xA4, 0xAD, 0x33]))
    return bytes(cramjam.snappy.compress_raw(_field(1, labels + sample)))


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


WANTED = {  # (layer, source, metric) that must arrive from each exporter
    "dcgm": ("gpu", "gpu002", "DCGM_FI_DEV_GPU_UTIL"),
    "node": ("host", "127.0.0.1", "node_cpu_seconds_total"),
}


@needs_prometheus
def test_prometheus_remote_write_reaches_the_telemetry_topics(settings: LockstepSettings) -> None:
    settings = settings.model_copy(update={"api_token": SecretStr(TOKEN), "web_port": 0})
    assert settings.kafka_bootstrap_servers and PROMETHEUS and NODE_EXPORTER
    bootstrap = settings.kafka_bootstrap_servers
    cat = TopicCatalogue(settings)

    names: set[str] = set()

    async def go(tmp: Path) -> tuple[dict[str, dict[str, Any]], tuple[int, ...], list[dict[str, Any]], int, int]:
        from aiokafka import AIOKafkaConsumer

        await create_topics(settings, bootstrap)
        worker = Worker(settings, bootstrap, serve_web=True)
        await worker.start()
        consumer = AIOKafkaConsumer(*cat.telemetry_topics, **client_kwargs(settings, bootstrap), group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=200)
        await consumer.start()
        try:
            url = f"{worker.web_url}/api/v1/write"
            loop = asyncio.get_running_loop()
            proto = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                     "X-Prometheus-Remote-Write-Version": "0.1.0"}
            bad = await loop.run_in_executor(None, post, url, b"\x05not snappy",
                                             {**proto, "Authorization": f"Bearer {TOKEN}"})
            unauthenticated = await loop.run_in_executor(None, post, url, b"\x05not snappy", proto)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            gzip = await loop.run_in_executor(None, post, url, b"\x05not snappy",
                                              {**proto, **auth, "Content-Encoding": "gzip"})
            nameless = await loop.run_in_executor(None, post, url, nameless_series_request(), {**proto, **auth})
            too_big = await loop.run_in_executor(None, post, url, b"\x00" * (MAX_REMOTE_WRITE_BYTES + 1),
                                                 {**proto, **auth})
            bomb = await loop.run_in_executor(None, post, url, bytes([0x80, 0x80, 0x80, 0x04]) + b"\x00" * 64,
                                              {**proto, **auth})  # announces 8 MiB inflated
            node_port = free_port()
            found: dict[str, dict[str, Any]] = {}
            with served_scrape(FIXTURE.read_bytes()) as dcgm_port, \
                    process([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}"], tmp / "node.log"):
                (tmp / "prometheus.yml").write_text(prometheus_config(node_port, dcgm_port, url))
                cmd = [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                       f"--web.listen-address=127.0.0.1:{free_port()}"]
                with process(cmd, tmp / "prometheus.log") as prom:
                    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
                    while len(found) < len(WANTED) and time.monotonic() < deadline and prom.poll() is None:
                        batches = await consumer.getmany(timeout_ms=1000)  # waits on records, not on time
                        for records in batches.values():
                            for rec in records:
                                for sample in orjson.loads(rec.value):
                                    names.add(sample["metric"])
                                    for name, (layer, source, metric) in WANTED.items():
                                        if (sample["layer"], sample["source"], sample["metric"]) == (layer, source,
                                                                                                    metric):
                                            found.setdefault(name, {**sample, "topic": rec.topic,
                                                                    "key": rec.key})
            sent = sum(s.value for m in worker.metrics.registry.collect() for s in m.samples
                       if s.name == "lockstep_carrier_samples_total"
                       and s.labels.get("format") == "prometheus-remote-write")
            noise = sum(s.value for m in worker.metrics.registry.collect() for s in m.samples
                        if s.name == "lockstep_carrier_skipped_total" and s.labels.get("reason") == SKIP_UNKNOWN
                        and s.labels.get("format") == "prometheus-remote-write")
            dlq = [d for d in await read_topic(settings, bootstrap, cat.dlq) if d["topic"] == DLQ_TOPIC_NAME]
            return found, (bad, unauthenticated, gzip, nameless, too_big, bomb), dlq, int(sent), int(noise)
        finally:
            await consumer.stop()
            await worker.stop()

    with tempfile.TemporaryDirectory(prefix="lockstep-rw-") as tmp:
        found, statuses, dlq, accepted, noise = asyncio.run(go(Path(tmp)))
        log = (Path(tmp) / "prometheus.log").read_text(errors="replace")[-3000:] if len(found) < 2 else ""
    # malformed, no token, wrong encoding, taken (its record dead-lettered), over the size bound, a snappy bomb
    assert statuses == (400, 401, 400, 204, 413, 413)
    assert [(d["stage"], d["error"], d["record"]) for d in dlq] == [("convert", "ValidationFailed", "timeseries[0]")]
    assert "no __name__" in dlq[0]["reason"] and dlq[0]["original_size"] == len(nameless_series_request())
    assert set(found) == set(WANTED), log
    assert accepted >= 2  # counted like carrier samples (lockstep_carrier_samples_total{format=...})
    # Scrape noise (go_*, process_*, up, scrape_*, uncatalogued node_* families) never became samples:
    # skipped and counted (a node_exporter scrape is ~90% of such series).
    assert names and all(known_to_lockstep(n) for n in names), sorted(n for n in names if not known_to_lockstep(n))
    assert noise > accepted
    for name, (layer, source, _metric) in WANTED.items():
        sample = found[name]
        assert sample["topic"] == cat.telemetry(layer)
        assert sample["key"] == source.encode()  # keyed like every native producer: by source
        assert sample["labels"]["instance"].startswith("127.0.0.1:")
    assert found["dcgm"]["labels"]["job"] == "dcgm" and found["dcgm"]["labels"]["gpu"] == "0"
    assert found["node"]["kind"] == "counter" and "cpu" in found["node"]["labels"]
