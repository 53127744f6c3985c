"""10% malformed input mixed into valid traffic, and late data, through a real worker on the real broker:
every bad record lands in ``dlq`` with its reason and original bytes, every valid sample is processed,
late samples are dead-lettered as ``LateData`` and counted, and the worker never stops."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
import pytest

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec
from lockstep.replay import read_topic
from lockstep.worker import Worker

from .kit import make_settings, send_inventory, wait_until

pytestmark = pytest.mark.broker

T = 1764502800.0


def bad_messages(k: int) -> list[tuple[str, bytes, str]]:
    """(layer, message, reason fragment): one of each kind the issue names, varied by ``k``."""
    s = {"ts": T + k, "layer": "gpu", "source": f"bad{k}", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 1.0}
    return [
        ("gpu", b"{not json" + str(k).encode(), "not JSON"),
        ("gpu", orjson.dumps(s)[:-1] + b', "value": NaN}', "not JSON"),
        ("gpu", orjson.dumps(s).replace(b'"value":1.0', b'"value":1e999'), "not JSON"),
        ("gpu", orjson.dumps({**s, "value": "95"}), "value must be a number"),
        ("nic", orjson.dumps({**s, "layer": "nic", "metric": "PortXmitData", "value": -5.0, "kind": "counter"}),
         "counter value is negative"),
        ("gpu", orjson.dumps({**s, "ts": 99}), "outside 2000-01-01..2100-01-01"),
        ("gpu", orjson.dumps({**s, "ts": 9e9}), "outside 2000-01-01..2100-01-01"),
        ("host", orjson.dumps({**s, "layer": "quantum"}), "unknown layer"),
        ("gpu", orjson.dumps({**s, "labels": {"blob": "x" * 1_000_000}}), "longer than 1024"),  # a 1 MB message
    ]


def test_ten_percent_garbage_and_late_data_are_dead_lettered_and_everything_valid_is_processed(
        broker: EmbeddedBroker) -> None:
    settings = make_settings(broker.bootstrap)
    spec = LoadSpec(gpus=16, nodes_per_job=2, seed=3)

    async def go() -> tuple[list[dict[str, Any]], list[tuple[str, bytes, str]], int, Worker]:
        await create_topics(settings, broker.bootstrap)
        gen = LoadGenerator(spec)
        await send_inventory(settings, gen)
        worker = Worker(settings, broker.bootstrap)
        await worker.start()
        cat = TopicCatalogue(settings)
        producer = await start_producer(settings, broker.bootstrap)
        sent_bad: list[tuple[str, bytes, str]] = []
        valid = 0
        try:
            good_messages = 0
            for k in range(12):
                for layer, key, value in gen.messages(k):
                    await producer.send(cat.telemetry(layer), value, key=key)
                    valid += len(orjson.loads(value))
                    good_messages += 1
                    if good_messages % 9 == 0:  # ~10% of the messages are garbage
                        kinds = bad_messages(k)
                        bad = kinds[(good_messages // 9) % len(kinds)]
                        await producer.send(cat.telemetry(bad[0]), bad[1], key=b"garbage")
                        sent_bad.append(bad)
            # one bad record inside an otherwise valid batch: only that record is rejected
            mixed = [{"ts": T + 50, "layer": "host", "source": "mix", "metric": "cpu_utilization", "value": 5.0},
                     {"ts": T + 50, "layer": "host", "source": "mix", "metric": "cpu_utilization", "value": None}]
            await producer.send(cat.telemetry("host"), orjson.dumps(mixed), key=b"mix")
            valid += 1
            # late data: a series at 100..119, then a sample at 105 (beyond its last time)
            for t in range(100, 120):
                await producer.send(cat.telemetry("host"), orjson.dumps(
                    {"ts": T + t, "layer": "host", "source": "late", "metric": "cpu_utilization", "value": 5.0}),
                    key=b"late")
                valid += 1
            late_raw = orjson.dumps({"ts": T + 105.5, "layer": "host", "source": "late", "metric": "cpu_utilization",
                                     "value": 5.0})
            await producer.send(cat.telemetry("host"), late_raw, key=b"late")
            sent_bad.append(("host", late_raw, "out of order"))
            await producer.flush()
            dlq: list[dict[str, Any]] = []

            async def done() -> bool:
                nonlocal dlq
                dlq = await read_topic(settings, broker.bootstrap, cat.dlq)
                return len(dlq) >= len(sent_bad) + 1 and worker.state is not None and (
                    worker.state.ingested_samples >= valid)

            await wait_until(done, 90)
            return dlq, sent_bad, valid, worker
        finally:
            await producer.stop()
            await worker.stop()

    dlq, sent_bad, valid, worker = asyncio.run(go())
    assert len(sent_bad) >= 12
    for layer, raw, reason in sent_bad:
        matches = [d for d in dlq if base64.b64decode(d["original"]) == raw[: 1024 * 1024]
                   or (d.get("original_truncated") and d["original_size"] == len(raw))]
        assert matches, f"{layer} message not dead-lettered ({reason}): {raw[:80]!r}"
        assert any(reason in d["reason"] for d in matches), (reason, [d["reason"] for d in matches])
    mixed = [d for d in dlq if d.get("record") == "samples[1]" and d.get("key") == "mix"]
    assert mixed and "value must be a number" in mixed[0]["reason"]
    late = [d for d in dlq if d["error"] == "LateData"]
    assert late and late[0]["stage"] == "rate"
    assert worker.state is not None
    assert worker.state.ingested_samples == valid  # every valid sample, none lost around the garbage
    assert worker.metrics.out_of_order.labels(TopicCatalogue(settings).telemetry("host"))._value.get() == 1
