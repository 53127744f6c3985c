"""One Lockstep worker in this process: inventory loaded first, then the Faust agents.

Used by ``lockstep worker`` (production), ``lockstep run`` and ``lockstep replay`` (embedded),
and the integration tests. The Faust app runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from agents.app import WorkerState, build_app
from agents.inventory_reader import InventoryReader
from agents.kafka import client_kwargs, describe_group, start_producer
from agents.metrics import WorkerMetrics
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.health import BrokerWatch, GroupWatch, group_line
from streams.inventory import InventoryIndex

log = logging.getLogger("lockstep.worker")


def settle_heap(young_threshold: int) -> bool:
    """Tune this process's cyclic garbage collector for a worker that has started: collect once, move every
    object alive (imported modules, the app, its clients) to the permanent generation (``gc.freeze``), and
    collect the youngest generation every ``young_threshold`` allocations instead of 700. Returns whether it
    did anything (0: Python's defaults kept).

    Why: on the bench's backlog (150 scrapes of a 1,024-GPU cluster, ``benchmarks.worker_ab --drain``) a
    worker made 4-5 full collections of 60-80 ms each (an event-loop stall as well as CPU) and ~500 young
    ones, 0.5 of its 10 CPU-seconds; settled (~120,000 objects frozen), one full collection of 10-18 ms and
    ~10 young ones, 0.06-0.1 CPU-s (docs/performance.md, the fourteenth session). For the process entry
    points (``lockstep worker``, ``lockstep run``), not for code that shares its process (tests, replay): frozen
    objects are never collected.
    """
    if young_threshold <= 0:
        return False
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    _, mid, old = gc.get_threshold()
    gc.set_threshold(young_threshold, mid, old)
    log.info("heap settled: %d objects frozen (collect and freeze %.0f ms); youngest generation collected every %d "
             "allocations", gc.get_freeze_count(), 1000 * (time.perf_counter() - t0), young_threshold)
    return True


class Worker:
    def __init__(self, settings: LockstepSettings, bootstrap: str, *, expected_origins: set[str] | None = None,
                 on_finished: Callable[[int], None] | None = None, serve_web: bool = False) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.catalogue = TopicCatalogue(settings)
        self.inventory = InventoryIndex()
        self.metrics = WorkerMetrics()
        self.expected_origins = expected_origins
        self.on_finished = on_finished
        self.app: Any = None
        self.state: WorkerState | None = None
        self.reader: InventoryReader | None = None
        self._dlq_producer: Any = None
        #: streams.rules.Rules (file + the silences topic) and its topic reader, set in start()
        self.rules: Any = None
        self.silences: Any = None
        #: The HTTP API and timeline page (agents.web), when ``serve_web``; replay and tests run without.
        self.serve_web = serve_web
        self.web: Any = None
        #: whether the broker answers (streams.health), from the probe task started in start()
        self.broker = BrokerWatch()
        self._probe: asyncio.Task[None] | None = None
        #: how long the consumer group has kept this worker waiting for partitions (streams.health): the
        #: ``group`` readiness check, ``lockstep_group_wait_seconds`` and a log line with the group's state
        self.group = GroupWatch(settings.group_wait_warn_after_s, now=None)  # (waiting from the agents' start)
        self._group_task: asyncio.Task[None] | None = None

    @property
    def web_url(self) -> str | None:
        """``http://host:port`` of the HTTP API and page (the port actually bound), or None."""
        return self.web.url if self.web is not None else None

    async def _inventory_dead_letter(self, record: dict[str, Any]) -> None:
        self.metrics.dead_letters.labels(record["stage"], record["error"]).inc()
        if self._dlq_producer is None:
            self._dlq_producer = await start_producer(self.settings, self.bootstrap)
        await self._dlq_producer.send_and_wait(self.catalogue.dlq, orjson.dumps(record))

    async def start(self) -> None:
        """Load the inventory to its end, then start the agents; return once they consume (the consumer
        group assigned this worker its partitions).

        The HTTP server (when ``serve_web``), the broker probe and the group watch start before the agents,
        so that a worker the group keeps waiting answers ``/healthz``, says why it is not ready on
        ``/readyz`` and logs the group's state (:meth:`_watch_group`). Cancelling this (a stop during
        start-up) leaves a worker that :meth:`stop` stops."""
        self.reader = InventoryReader(self.settings, self.bootstrap, self.catalogue.inventory, self.inventory,
                                      self._inventory_dead_letter)
        await self.reader.load()
        self.metrics.inventory_events.set(self.reader.applied)
        from agents.inventory_reader import SilenceReader
        from streams.rules import default_rules, load_rules

        if self.settings.rules_file is not None:
            self.rules = load_rules(self.settings.rules_file.read_text(), str(self.settings.rules_file))
        else:
            self.rules = default_rules()
        self.silences = SilenceReader(self.settings, self.bootstrap, self.catalogue.silences, self.rules,
                                      self._inventory_dead_letter)
        await self.silences.load()
        self.app, self.state = build_app(
            self.settings, self.bootstrap, self.inventory, metrics=self.metrics,
            expected_origins=self.expected_origins, on_finished=self.on_finished, rules=self.rules,
            loop=asyncio.get_running_loop())
        self.app.finalize()
        self.app.on_partitions_revoked.connect(self._on_revoked)
        self.app.on_partitions_assigned.connect(self._on_assigned)
        self._probe = asyncio.ensure_future(self._probe_broker())
        self._group_task = asyncio.ensure_future(self._watch_group())
        if self.serve_web:
            from agents.web import WebServer

            self.web = WebServer(self)
            await self.web.start()
        self.group.revoked(time.monotonic())  # the join begins with the consumer's start
        await self.app.start()
        self.reader.follow()
        self.silences.follow()
        log.info("worker %s consuming from %s", self.settings.app_id, self.bootstrap)

    async def _on_revoked(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        self.group.revoked(time.monotonic())

    async def _on_assigned(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        line = self.group.assigned(time.monotonic())
        self.metrics.group_wait.set(0)
        if line is not None:
            log.warning("%s", line)

    async def _watch_group(self, every_s: float = 1.0) -> None:
        """Every ``every_s``: ``lockstep_group_wait_seconds``, and while the group keeps this worker waiting
        past ``group_wait_warn_s``, a warning with the group's state as the broker describes it (once, then
        every minute). Nothing else says it: the Kafka client retries its join and sync quietly."""
        while True:
            now = time.monotonic()
            self.metrics.group_wait.set(self.group.wait_s(now))
            line = self.group.overdue(now)
            if line is not None:
                log.warning("%s; %s (docs/operations.md, 'A worker waits for its group')", line,
                            await self._describe_group())
            await asyncio.sleep(every_s)

    async def _describe_group(self) -> str:
        """The consumer group as the broker describes it (DescribeGroups), in one line for the log."""
        try:
            g = await describe_group(self.settings, self.bootstrap, self.settings.app_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return f"the broker did not describe the group: {_short_error(exc)}"
        return group_line(g.state, g.protocol, g.members)

    async def _probe_broker(self) -> None:
        """Ask the broker for its metadata every ``broker_probe_interval_s`` (a new connection each time, as
        a client starting afresh would): one log line when it stops answering and one when it is back (the
        clients' own errors repeat many times a second), the ``broker`` readiness check and
        ``lockstep_broker_up`` meanwhile."""
        from aiokafka import AIOKafkaClient

        interval = self.settings.broker_probe_interval_s
        while True:
            client = AIOKafkaClient(**client_kwargs(self.settings, self.bootstrap),
                                    request_timeout_ms=int(interval * 2000), metadata_max_age_ms=3_600_000)
            try:
                await asyncio.wait_for(client.bootstrap(), timeout=interval * 2)
                line = self.broker.answered(time.monotonic())
                if line is not None:
                    log.warning("%s (%s)", line, self.bootstrap)
                self.metrics.broker_up.set(1)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                line = self.broker.failed(time.monotonic(), _short_error(exc))
                if line is not None:
                    log.error("%s (%s)", line, self.bootstrap)
                self.metrics.broker_up.set(0)
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        for task in (self._probe, self._group_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.web is not None:
            await self.web.stop()
        if self.app is not None:
            await self.app.stop()
        offsets = getattr(self.app, "lockstep_runtime", None) and self.app.lockstep_runtime.offsets
        if offsets is not None:
            await offsets.ranges.close()
        if self.reader is not None:
            await self.reader.stop()
        if self.silences is not None:
            await self.silences.stop()
        if self._dlq_producer is not None:
            await self._dlq_producer.stop()

    async def flush(self) -> None:
        """Wait until everything the agents produced has been acknowledged by the broker."""
        if self.app is not None:
            await self.app.producer.flush()


async def start_unless_stopped(worker: Worker, stop: asyncio.Event) -> bool:
    """:meth:`Worker.start`, abandoned when ``stop`` is set first (a SIGTERM while the consumer group keeps
    the worker waiting): True once started, False when abandoned; either way the caller stops ``worker``.
    Without it a worker asked to stop during a long join ignores the request until the join ends."""
    starting = asyncio.ensure_future(worker.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()  # (its error, if it failed)
        return True
    log.warning("stop requested during start-up (%.0f s waiting for the consumer group); not starting",
                worker.group.wait_s(time.monotonic()))
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


def _short_error(exc: BaseException) -> str:
    """One line for a probe failure (a timeout has no message of its own)."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
