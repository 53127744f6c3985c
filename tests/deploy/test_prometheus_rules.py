"""Lockstep watching itself: the Prometheus rules, their unit tests, the Grafana dashboard, /metrics.

``promtool`` (Debian's ``prometheus`` package, installed by ``python3 dev.py test``) checks and
unit-tests ``deploy/prometheus/lockstep-rules.yaml``; every metric name the rules and the dashboard
use is one a live worker's ``/metrics`` or the delivery service exports; ``promtool check metrics``
finds nothing to say about a live worker's exposition.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.delivery.metrics import DeliveryCollector
from lockstep.worker import Worker
from models.settings import LockstepSettings

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "lockstep-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "lockstep-rules.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "lockstep.json"
METRIC = re.compile(r"\blockstep_[a-z0-9_]+\b")


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("promtool is not installed and this machine has no apt-get to install it (Debian package "
                    "prometheus)")
    pytest.fail("promtool is not installed: `python3 dev.py test` installs Debian's prometheus (dev.py "
                "APT_PACKAGES); or apt-get install prometheus")


def run_promtool(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=60)


def rule_expressions() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"]}


def dashboard_expressions() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def exported_names(exposition: str) -> set[str]:
    """Every sample name an exposition can carry (a histogram's ``_bucket``, ``_sum``, ``_count`` too)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_promtool_checks_the_rules() -> None:
    out = run_promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in out.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    out = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULES.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case["alert_rule_test"]}
    assert tested == set(rule_expressions())  # every rule has a test


def test_a_wrong_expectation_fails_the_rule_tests(tmp_path: Path) -> None:
    shutil.copy(RULES, tmp_path / RULES.name)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text().replace("60000 records", "6000 records"))
    out = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert out.returncode != 0 and "LockstepConsumerLagHigh" in out.stdout + out.stderr


def test_the_dashboard_is_grafana_json_with_unique_panels() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "lockstep" and doc["panels"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]


@pytest.fixture(scope="module")
def worker_exposition() -> Iterator[str]:
    """``GET /metrics`` of a live worker on the embedded broker that has processed a few samples."""
    async def go() -> str:
        broker = await EmbeddedBroker().astart()
        run = uuid.uuid4().hex[:8]
        settings = LockstepSettings(  # type: ignore[call-arg]
            _env_file=None, kafka_bootstrap_servers=broker.bootstrap, topic_prefix=f"prom{run}.",
            app_id=f"prom-{run}", partitions=1, data_dir=f"/tmp/lockstep-test-{run}", web_port=0)
        worker: Worker | None = None
        try:
            await create_topics(settings, broker.bootstrap)
            worker = Worker(settings, broker.bootstrap, serve_web=True)
            await worker.start()
            producer = await start_producer(settings, broker.bootstrap)
            cat = TopicCatalogue(settings)
            t0 = time.time() - 60
            for k in range(20):
                await producer.send(cat.telemetry("gpu"), orjson.dumps([{
                    "ts": t0 + k, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL",
                    "value": 90.0, "labels": {"gpu": "0"}}]), key=b"gpu001")
            await producer.send(cat.telemetry("gpu"), b"{not json", key=b"gpu001")
            await producer.stop()
            deadline = time.monotonic() + 60
            while not any(s.value >= 20 for m in worker.metrics.samples_in.collect() for s in m.samples
                          if s.name.endswith("_total")):
                assert time.monotonic() < deadline, "the worker processed no samples in 60 s"
                await asyncio.sleep(0.1)
            url = f"{worker.web_url}/metrics"
            loop = asyncio.get_running_loop()  # the worker serves on this loop: fetch from a thread
            return await loop.run_in_executor(None, lambda: urllib.request.urlopen(url, timeout=10).read().decode())
        finally:
            if worker is not None:
                await worker.stop()
            broker.stop()

    yield asyncio.run(go())


def delivery_exposition() -> str:
    registry = CollectorRegistry()
    worker = SimpleNamespace(stats={"accepted": 1}, tracker=SimpleNamespace(pending=0))
    registry.register(DeliveryCollector(lambda: {"oncall": worker}, lambda: 0))
    return generate_latest(registry).decode()


@pytest.mark.broker
def test_promtool_check_metrics_is_clean_on_a_live_worker(worker_exposition: str) -> None:
    assert "lockstep_samples_in_total{" in worker_exposition
    out = run_promtool("check", "metrics", stdin=worker_exposition)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr
    out = run_promtool("check", "metrics", stdin=delivery_exposition())
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr


@pytest.mark.broker
def test_every_metric_the_rules_and_dashboard_use_is_exported(worker_exposition: str) -> None:
    exported = exported_names(worker_exposition) | exported_names(delivery_exposition())
    used = {name for expr in [*rule_expressions().values(), *dashboard_expressions()] for name in METRIC.findall(expr)}
    assert used and used <= exported, sorted(used - exported)
    assert "lockstep_series_resets_total" in exported  # renamed: promtool rejects a name with "counter" in it
