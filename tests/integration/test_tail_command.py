"""`lockstep tail` through the real broker: each record type readable, nothing raw from the topic printed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.safetext import UNSAFE
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

EVIL = "llm\x1b[2J\x1b]52;c;aGk=\x07\u202e\x9b"


def test_tail_anomalies_prints_points_watermarks_and_tombstones_readably_and_escaped(
        settings: LockstepSettings) -> None:
    records: list[bytes | None] = [
        orjson.dumps({"type": "anomaly", "phase": "start", "job_id": EVIL, "ts": 1764502930.0, "layer": "switch",
                      "source": "leaf03", "labels": {"port": "17"}, "metric": "SymbolErrorCounter", "value": 32.0,
                      "p50": 0.0, "score": 8.25}),
        orjson.dumps({"type": "points", "job_id": EVIL, "origins": ["telemetry.gpu:0"],
                      "lanes": {"gpu_util": [[1764502930.0, [90.0, 91.0]]]}}),
        orjson.dumps({"type": "watermark", "origins": {"telemetry.gpu:0": 1764502931.0}, "eos": []}),
        None,
    ]

    async def produce() -> None:
        assert settings.kafka_bootstrap_servers is not None
        await create_topics(settings, settings.kafka_bootstrap_servers)
        producer = await start_producer(settings, settings.kafka_bootstrap_servers)
        try:
            for value in records:  # one partition, so they are read in this order
                await producer.send_and_wait(TopicCatalogue(settings).anomalies, value, key=b"k", partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce())
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env.update({"LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": str(settings.kafka_bootstrap_servers),
                "LOCKSTEP_TOPIC_PREFIX": settings.topic_prefix})
    proc = subprocess.run([sys.executable, "-m", "lockstep.cli", "tail", "anomalies", "--from-beginning",
                           "--max-records", str(len(records))], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = "llm\\x1b[2J\\x1b]52;c;aGk=\\x07\\u202e\\x9b"
    assert proc.stdout.splitlines() == [
        f"start {shown} switch/leaf03 SymbolErrorCounter {{'port': '17'}} value=32.0 p50=0.0 score=8.25 "
        "at 11:42:10.000",
        f"points    {shown}: gpu_util 2 values in 1 s at 11:42:10.000 (from telemetry.gpu:0)",
        "watermark of 1 input partition, event time 11:42:11.000 (slowest) to 11:42:11.000, 0 at end of input",
        "tombstone (a record with no value)",
    ]
    assert not [ch for ch in proc.stdout if ord(ch) in UNSAFE and ch != "\n"]
