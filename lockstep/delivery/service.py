"""The delivery service (``lockstep deliver``): one :class:`ReceiverWorker` per configured receiver.

Start-up, in order: load and validate the routing file (a bad file or a missing secret stops
start-up with the path and the reason); install log redaction; create the delivery topics; read
the ledger and the ``silences`` topic to their ends; start one worker per receiver; serve
``/metrics`` when ``delivery_metrics_port`` is set. Then, until stopped: reload the routing
file on SIGHUP or when its content changes (checked every ``delivery_reload_interval_s``). A bad
new file is reported and the running config stays.

This is a plain aiokafka service, not a Faust agent, on purpose (docs/delivery.md): each receiver
needs its own offsets committed only after its receiver accepted or parked an alert, and Faust acks
an event whose agent raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from agents.kafka import client_kwargs, start_producer
from agents.topics import TopicCatalogue
from lockstep.delivery.base import Receiver, SenderDeps
from lockstep.delivery.config import ReceiverConfig, RoutingConfig, load_routing_file, reload_routing
from lockstep.delivery.ledger import Ledger
from lockstep.delivery.metrics import DeliveryCollector, MetricsServer
from lockstep.delivery.receivers import RECEIVERS
from lockstep.delivery.redaction import RedactingFilter, Redactor, SecretResolver, install_redaction
from lockstep.delivery.silences import KnownSilences
from lockstep.delivery.topics import DeliveryTopics, create_delivery_topics
from lockstep.delivery.worker import ReceiverWorker
from models.errors import ConfigError
from models.settings import LockstepSettings

__all__ = ["DeliveryService", "build_receiver", "load_routing_file"]

log = logging.getLogger("lockstep.delivery")


def build_receiver(rc: ReceiverConfig, resolver: SecretResolver, *, producer: Any = None,
                   topics: DeliveryTopics | None = None) -> Receiver:
    """The sender for one receiver definition (its kind's, from the registry), secrets resolved."""
    return RECEIVERS[rc.kind].from_config(rc, SenderDeps(resolver, producer, topics))


class DeliveryService:
    """Every receiver's worker in one process, sharing a producer, the ledger and the redactor."""

    def __init__(self, settings: LockstepSettings, bootstrap: str, *, hostname: str | None = None,
                 routes_file: Path | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.hostname = hostname or socket.gethostname()
        self.routes_file = routes_file or settings.delivery_routes_file
        self.resolver = SecretResolver(settings.delivery_secrets)
        self.redactor: Redactor = self.resolver.redactor
        self.topics = DeliveryTopics(settings)
        self.catalogue = TopicCatalogue(settings)
        self.routing: RoutingConfig | None = None
        self.workers: dict[str, ReceiverWorker] = {}
        self.producer: Any = None
        self.ledger: Ledger | None = None
        self.reloads = 0
        self.last_reload_error: str | None = None
        self._filter: RedactingFilter | None = None
        self._watch: asyncio.Task[None] | None = None
        self._text: str | None = None
        self.silences = KnownSilences()
        self.registry = CollectorRegistry()
        self.registry.register(DeliveryCollector(lambda: self.workers, lambda: len(self.silences)))
        self.metrics_server: MetricsServer | None = None

    def _consumer(self, **kwargs: Any) -> Any:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(**client_kwargs(self.settings, self.bootstrap), enable_auto_commit=False,
                                fetch_max_wait_ms=self.settings.kafka_fetch_max_wait_ms,
                                max_partition_fetch_bytes=8 * 1024 * 1024, **kwargs)

    async def dead_letter(self, record: dict[str, Any]) -> None:
        """Produce a (redacted) dead letter to ``dlq`` and wait for the broker's ack."""
        record = dict(self.redactor.record(record))
        key = record.get("key")
        await self.producer.send_and_wait(self.catalogue.dlq, key=str(key).encode() if key else None,
                                          value=orjson.dumps(record))

    async def start(self) -> None:
        self._filter = install_redaction(self.redactor)
        assert self.routes_file is not None
        self._text = Path(self.routes_file).read_text(encoding="utf-8")
        self.routing = load_routing_file(self.settings, Path(self.routes_file))
        await create_delivery_topics(self.settings, self.bootstrap, self.routing)
        self.producer = await start_producer(self.settings, self.bootstrap, acks="all")
        self.ledger = Ledger(self.topics.ledger, self.producer)
        rows = await self.ledger.load(lambda: self._consumer())
        log.info("delivery ledger: %d records, %d open alerts", rows, len(self.ledger.firing))
        await self.silences.start(self.settings, self.bootstrap, self.catalogue.silences)
        for rc in self.routing.receivers.values():
            await self._start_worker(rc)
        if self.settings.delivery_metrics_port is not None:
            self.metrics_server = MetricsServer(self.registry, self.settings.web_host,
                                                self.settings.delivery_metrics_port)
            await self.metrics_server.start()
        self._watch = asyncio.create_task(self._watch_file(), name="deliver.reload")
        log.info("delivering to %s", ", ".join(f"{n} ({w.receiver.kind})" for n, w in self.workers.items()))

    async def _start_worker(self, rc: ReceiverConfig) -> None:
        assert self.routing is not None and self.ledger is not None
        worker = ReceiverWorker(
            build_receiver(rc, self.resolver, producer=self.producer, topics=self.topics), self.routing,
            alerts_topic=self.catalogue.alerts, retry_topic=self.topics.retry(rc.name),
            group_id=f"{self.settings.app_id}-deliver-{rc.name}", consumer_factory=self._consumer,
            producer=self.producer, ledger=self.ledger, redactor=self.redactor, dead_letter=self.dead_letter,
            public_url=self.settings.public_url, hostname=self.hostname,
            max_pending=self.settings.delivery_max_pending, offset_reset=self.settings.delivery_offset_reset,
            muted=self.silences.muted_by)
        await worker.start()
        self.workers[rc.name] = worker

    async def reload(self) -> bool:
        """Re-read the routing file; apply it if valid and changed. Returns True when applied."""
        assert self.routing is not None and self.routes_file is not None
        try:
            text = Path(self.routes_file).read_text(encoding="utf-8")
        except OSError as exc:
            self.last_reload_error = f"{self.routes_file}: cannot read the routing file: {exc.strerror}"
            log.error("routing reload failed, keeping the running routes: %s", self.last_reload_error)
            return False
        self._text = text
        result = reload_routing(self.routing, text, str(self.routes_file))
        if result.error is None and result.changed:
            try:
                SecretResolver(self.settings.delivery_secrets).check(result.config, str(self.routes_file))
            except ConfigError as exc:
                result = type(result)(self.routing, False, error=str(exc))
        if result.error is not None:
            self.last_reload_error = result.error
            log.error("routing reload failed, keeping the running routes: %s", result.error)
            return False
        if not result.changed:
            return False
        self.routing = result.config
        await create_delivery_topics(self.settings, self.bootstrap, self.routing)
        for name in result.removed:
            await self.workers.pop(name).stop()
        for name, worker in self.workers.items():
            new = None
            if name in result.modified:
                new = build_receiver(self.routing.receivers[name], self.resolver, producer=self.producer,
                                     topics=self.topics)
            await worker.reload(self.routing, new)
        for name in sorted(result.added):
            await self._start_worker(self.routing.receivers[name])
        self.reloads += 1
        self.last_reload_error = None
        log.info("routing reloaded (%s): +%s -%s ~%s", self.routing.digest, sorted(result.added),
                 sorted(result.removed), sorted(result.modified))
        return True

    async def _watch_file(self) -> None:
        while True:
            await asyncio.sleep(self.settings.delivery_reload_interval_s)
            try:
                text = Path(self.routes_file).read_text(encoding="utf-8") if self.routes_file else None
            except OSError:
                text = None
            if text is not None and text != self._text:
                with contextlib.suppress(Exception):
                    await self.reload()

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        for worker in list(self.workers.values()):
            await worker.stop()
            await worker.receiver.close()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.silences.stop()
        if self.producer is not None:
            await self.producer.stop()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Start, reload on SIGHUP, stop on SIGTERM/SIGINT (or when ``stop`` is set)."""
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload()))
            loop.add_signal_handler(signal.SIGTERM, stop.set)
            loop.add_signal_handler(signal.SIGINT, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
