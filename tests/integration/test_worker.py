"""A real worker on the real broker: garbage mixed into valid traffic never stops it, nothing is lost."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

T0 = 1764502800.0


def good(k: int, node: str = "gpu001") -> bytes:
    return orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": node, "metric": "DCGM_FI_DEV_GPU_UTIL",
                          "value": 90.0 + k % 3, "labels": {"gpu": str(g)}} for g in range(4)])


BAD: list[tuple[str, bytes, str]] = [
    ("gpu", b"{oops", "not JSON"),
    ("gpu", b'[{"ts": 1764502900, "layer": "gpu", "source": "n", "metric": "m", "value": NaN}]', "not JSON"),
    ("gpu", orjson.dumps({"ts": 1764502900, "layer": "gpu", "source": "n", "metric": "m", "value": "9"}),
     "value must be a number"),
    ("nic", orjson.dumps({"ts": 1764502900, "layer": "nic", "source": "n", "metric": "PortXmitData", "value": -4,
                          "labels": {"device": "mlx5_0", "port": "1"}}), "counter value is negative"),
    ("gpu", orjson.dumps({"ts": 99, "layer": "gpu", "source": "n", "metric": "m", "value": 1}), "outside"),
    ("host", orjson.dumps({"ts": 1764502900, "layer": "quantum", "source": "n", "metric": "m", "value": 1}),
     "unknown layer"),
    ("gpu", orjson.dumps({"ts": 1764502900, "layer": "gpu", "source": "n", "metric": "m", "value": 1,
                          "labels": {"big": "x" * 1_000_000}}), "longer than 1024"),
]


def test_bad_messages_go_to_the_dead_letter_topic_and_good_ones_are_processed(settings: LockstepSettings) -> None:
    async def go() -> tuple[list[dict[str, Any]], float]:
        assert settings.kafka_bootstrap_servers
        bootstrap = settings.kafka_bootstrap_servers
        await create_topics(settings, bootstrap)
        cat = TopicCatalogue(settings)
        worker = Worker(settings, bootstrap)
        await worker.start()
        producer = await start_producer(settings, bootstrap)
        try:
            sent_good = 0
            for k in range(30):
                await producer.send(cat.telemetry("gpu"), good(k), key=b"gpu001")
                sent_good += 4
                if k % 4 == 0 and k // 4 < len(BAD):
                    layer, raw, _ = BAD[k // 4]
                    await producer.send(cat.telemetry(layer), raw, key=b"n")
            await producer.send(cat.inventory, b'{"kind": "job", "job_id": "x"}', key=b"job:x")
            await producer.flush()
            deadline = time.monotonic() + 60
            dlq: list[dict[str, Any]] = []
            while time.monotonic() < deadline:
                dlq = await read_topic(settings, bootstrap, cat.dlq)
                processed = samples_processed(worker)
                if len(dlq) >= len(BAD) + 1 and processed >= sent_good:
                    break
                await asyncio.sleep(0.5)
            return dlq, processed
        finally:
            await producer.stop()
            await worker.stop()

    dlq, processed = asyncio.run(go())
    assert processed == 30 * 4  # every valid sample, none lost around the bad ones
    by_reason = {d["reason"]: d for d in dlq}
    for layer, raw, reason in BAD:
        match = [d for d in dlq if reason in d["reason"] and base64.b64decode(d["original"]) == raw]
        assert match, (reason, sorted(by_reason))
        d = match[0]
        assert d["topic"].endswith(f"telemetry.{layer}") and d["offset"] is not None and d["partition"] is not None
        assert d["original_size"] == len(raw)
    inventory_dl = [d for d in dlq if d["stage"] == "inventory"]
    assert len(inventory_dl) == 1 and "ts" in inventory_dl[0]["reason"]


def samples_processed(worker: Worker) -> float:
    return sum(s.value for m in worker.metrics.samples_in.collect() for s in m.samples if s.name.endswith("_total"))
