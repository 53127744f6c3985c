"""Fault-test helpers: worker subprocesses (``python -m lockstep.cli worker``), generated traffic and a
reference run of the same traffic through the pure pipeline, to compare what reached the topics.

Workers run as real processes so they can be SIGKILLed; each test has its own topics and group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep.broker import EmbeddedBroker
from models.settings import LockstepSettings
from tests.broker_timing import SESSION_TIMEOUT_S, worker_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:  # the real Tansu broker, stopped by PID at the end
        yield b


def make_settings(bootstrap: str, partitions: int = 4, **extra: Any) -> LockstepSettings:
    """Settings of a fault test: topics and group of its own, the tests' consumer-group timing
    (tests/broker_timing.py: in-process workers; worker processes get theirs from :class:`WorkerProcess`);
    ``extra`` overrides."""
    run = uuid.uuid4().hex[:8]
    extra = {"kafka_session_timeout_s": SESSION_TIMEOUT_S, **extra}
    return LockstepSettings(  # type: ignore[call-arg]
        _env_file=None, kafka_bootstrap_servers=bootstrap, topic_prefix=f"f{run}.", app_id=f"lockstep-fault-{run}",
        partitions=partitions, data_dir=Path(f"/tmp/lockstep-fault-{run}"), **extra)


class WorkerProcess:
    """``python -m lockstep.cli worker`` with the test's settings, logging to a file."""

    def __init__(self, settings: LockstepSettings, name: str, extra_env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.name = name
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = settings.data_dir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        env.update({
            "LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers or "",
            "LOCKSTEP_TOPIC_PREFIX": settings.topic_prefix, "LOCKSTEP_APP_ID": settings.app_id,
            "LOCKSTEP_PARTITIONS": str(settings.partitions), "LOCKSTEP_DATA_DIR": str(settings.data_dir),
            "LOCKSTEP_INVENTORY_PARTITIONS": str(settings.inventory_partitions),
            "LOCKSTEP_ALERTS_PARTITIONS": str(settings.alerts_partitions),
            "LOCKSTEP_SNAPSHOT_INTERVAL_S": str(settings.snapshot_interval_s),
            "LOCKSTEP_SNAPSHOT_WALL_FLOOR_S": str(settings.snapshot_wall_floor_s), "LOCKSTEP_LOG_LEVEL": "info",
            **worker_env(),
            "LOCKSTEP_WEB_PORT": "0",
            "PYTHONPATH": str(REPO),
        })
        env.update(extra_env or {})
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "lockstep.cli", "worker"], env=env, cwd=REPO,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final commit, no flush."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: a graceful leave (the group rebalances)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        with contextlib.suppress(Exception):
            w.kill()


async def committed(settings: LockstepSettings, topics: list[str]) -> dict[tuple[str, int], int]:
    """The group's committed offsets (read by a consumer that never joins the group)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=settings.app_id,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        for topic in topics:
            for p in range(settings.partitions):
                out[(topic, p)] = await consumer.committed(TopicPartition(topic, p)) or 0
        return out
    finally:
        await consumer.stop()


async def end_offsets(settings: LockstepSettings, topics: list[str]) -> dict[tuple[str, int], int]:
    from aiokafka import TopicPartition

    from agents.gaps import true_ends

    tps = [TopicPartition(t, p) for t in topics for p in range(settings.partitions)]
    ends = await true_ends(settings, settings.kafka_bootstrap_servers or "", tps)  # Tansu's ListOffsets can be short
    return {(tp.topic, tp.partition): v for tp, v in ends.items()}


async def wait_until(predicate: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(every_s)
    return False


def anomaly_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec["job_id"], rec["phase"], rec["layer"], rec["source"], rec["metric"],
            tuple(sorted(rec["labels"].items())), round(float(rec["ts"]), 3))


def reference_anomalies(spec: Any, scrapes: int) -> set[tuple[Any, ...]]:
    """The anomalies the same traffic gives through the pure pipeline, without Kafka or faults."""
    from lockstep.loadgen import LoadGenerator
    from lockstep.local import LocalRunner

    gen = LoadGenerator(spec)
    runner = LocalRunner(4)
    for doc in gen.inventory():
        runner.inventory_event(doc)
    for k in range(scrapes):
        for layer, key, value in gen.messages(k):
            runner.message(layer, key.decode(), value, spec.start_ts + k * spec.interval_s)
    res = runner.finish()
    return {anomaly_key(a) for a in res.anomalies}


async def send_inventory(settings: LockstepSettings, gen: Any) -> None:
    from agents.kafka import start_producer
    from agents.topics import TopicCatalogue
    from models.inventory import inventory_adapter, inventory_key

    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "")
    try:
        cat = TopicCatalogue(settings)
        for doc in gen.inventory():
            event = inventory_adapter.validate_python(doc)
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def send_scrapes(settings: LockstepSettings, gen: Any, scrapes: range, pace_s: float = 0.0) -> int:
    """Produce scrapes ``scrapes`` of one :class:`lockstep.loadgen.LoadGenerator` (kept across calls)."""
    from agents.kafka import start_producer
    from agents.topics import TopicCatalogue

    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "")
    cat = TopicCatalogue(settings)
    n = 0
    try:
        for k in scrapes:
            for layer, key, value in gen.messages(k):
                await producer.send(cat.telemetry(layer), value, key=key)
                n += 1
            if pace_s:
                await producer.flush()
                await asyncio.sleep(pace_s)
        await producer.flush()
        return n
    finally:
        await producer.stop()


def web_url(worker: WorkerProcess) -> str | None:
    """The worker's API address once its start line is logged whole (print writes the line's end apart: a
    read between the two would see no end to the address)."""
    found = re.search(r"API and page at (http://\S+?)/?\s", worker.log())
    return found.group(1) if found else None
