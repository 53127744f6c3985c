"""Baseline consumers for ``lockstep bench``, each run as its own process like a worker.

    python -m benchmarks.consumers bare  --bootstrap H:P --group G --topics T1,T2,...
    python -m benchmarks.consumers faust --bootstrap H:P --group G --topics T1,T2,...
    python -m benchmarks.consumers faust-stock --bootstrap H:P --group G --topics T1,T2,...

- ``bare``: an aiokafka consumer in a group that decodes every message with orjson and counts its
  samples (the floor any Kafka consumer in Python pays), tuned for throughput (:data:`BARE_SETTINGS`);
- ``faust``: a Faust app with Lockstep's transport and commit settings and one agent that does
  nothing with its events (the floor any Faust agent pays per message, with Lockstep's inline
  hand-over from the fetcher: ``agents.transport``);
- ``faust-stock``: the same agent with Faust's own hand-over (``Service.wait_first`` per message):
  the do-nothing Faust agent of the issue's cost table, about 80 us per message.

The Faust agents commit every second, like the worker, the bare consumer every 250 ms (it drains a
backlog fastest), so ``lockstep bench`` measures all three the same way: from the group's committed
offsets. They run until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

import orjson

#: The bare consumer's settings, tuned for throughput on the embedded broker (100 scrapes of the 1,024-GPU
#: backlog, in-process, same machine): ``max_records=None`` drains every fetched record per ``getmany``
#: (5000 cut each fetch into several calls), 16 MiB per partition and 64 MiB per fetch so one fetch
#: carries every partition's backlog it has. aiokafka keeps one fetch in flight per broker, so the
#: loop never awaits between messages, only between fetches. Auto-commit every 250 ms gives the bench
#: enough progress points for a consumer that drains the quick backlog in a few seconds.
BARE_SETTINGS: dict[str, Any] = {"fetch_max_wait_ms": 100, "max_partition_fetch_bytes": 16 << 20,
                                 "fetch_max_bytes": 64 << 20, "auto_commit_interval_ms": 250}


async def bare(bootstrap: str, group: str, topics: list[str]) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=True, **BARE_SETTINGS)
    await consumer.start()
    samples = 0
    loads = orjson.loads
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=None)
            for msgs in batches.values():
                for m in msgs:
                    doc = loads(m.value)
                    samples += len(doc) if isinstance(doc, list) else 1
    finally:
        await consumer.stop()


def stock_transport() -> type:
    """Lockstep's transport with Faust's own fetcher loop (its per-message ``wait_first``) put back."""
    from faust.transport.drivers import aiokafka as faust_aiokafka

    from agents import transport

    class StockDrainConsumer(transport.LockstepConsumer):
        _drain_messages = faust_aiokafka.Consumer._drain_messages

    class StockDrainTransport(transport.Transport):
        Consumer = StockDrainConsumer

    return StockDrainTransport


def faust_noop(bootstrap: str, group: str, topics: list[str], stock: bool = False) -> None:
    import faust
    from faust.transport import drivers

    from agents import transport

    transport.register()
    scheme = "lockstep"
    if stock:
        globals()["StockDrainTransport"] = stock_transport()
        drivers.TRANSPORTS.aliases["lockstep-stock"] = f"{__name__}:StockDrainTransport"
        scheme = "lockstep-stock"
    app = faust.App(group, broker=f"{scheme}://{bootstrap}", store="memory://", web_enabled=False,
                    datadir=f"/tmp/lockstep-bench-faust-{group}",
                    topic_allow_declare=False, topic_disable_leader=True, consumer_auto_offset_reset="earliest",
                    broker_commit_interval=1.0, broker_session_timeout=10.0, broker_heartbeat_interval=1.0,
                    broker_rebalance_timeout=10.0)
    app.lockstep_fetch_max_wait_ms = 100  # type: ignore[attr-defined]
    topic = app.topic(*topics, key_serializer="raw", value_serializer="raw")

    @app.agent(topic, name="noop")
    async def noop(stream: faust.StreamT[bytes]) -> None:
        async for _ in stream.events():
            pass

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("bare", "faust", "faust-stock"))
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topics", required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    topics = args.topics.split(",")
    if args.mode == "bare":
        asyncio.run(bare(args.bootstrap, args.group, topics))
    else:
        faust_noop(args.bootstrap, args.group, topics, stock=args.mode == "faust-stock")


if __name__ == "__main__":
    main()
