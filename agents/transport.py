"""Faust's aiokafka transport with one fix: a configurable consumer ``fetch_max_wait_ms``.

faust-streaming hard-codes ``fetch_max_wait_ms=1500`` for the worker consumer, so on a quiet topic
every record can wait up to 1.5 s in the broker's long poll (alert latency p99 ~1.7 s). This
transport sets it from ``LockstepSettings.kafka_fetch_max_wait_ms``; it is registered under the URL
scheme ``lockstep://``.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka


class FetchTunedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "lockstep_fetch_max_wait_ms", None)
        if wait_ms is not None:
            # The fetcher is built in start() from this attribute (aiokafka 0.10-0.14).
            consumer._fetch_max_wait_ms = int(wait_ms)
        return consumer


class FetchTunedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return FetchTunedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = FetchTunedConsumer


def register() -> None:
    """Make ``lockstep://host:port`` resolve to this transport (idempotent)."""
    drivers.TRANSPORTS.aliases["lockstep"] = f"{__name__}:Transport"
