"""The read model: every worker follows the output topics into its own :class:`ReadStore`.

One plain aiokafka consumer per worker, **without a consumer group**, assigned every partition of
``timelines``, ``alerts``, ``stats``, ``anomalies`` (only ``type: anomaly`` records are kept; the
``points`` and ``watermark`` records there are skipped by their first bytes, unparsed),
``annotations``, ``silences`` and ``capacity`` (the GPU-time lost ledger). So whichever worker
correlates a job, every worker can answer for it: the HTTP API of any worker is correct across partitions.
It also reads ``fabric-rollup``, the per-port NIC and switch summaries each input partition's ingest
publishes (streams/fabric_publish.py), into the store's per-port rollup
(:class:`streams.fabric.FabricRollup`, O(ports) memory) that ``/fabric/report`` answers from: the
raw telemetry is folded once, where it is ingested, not again on every worker.

Where reading starts: the time-bounded topics (``timelines``, ``anomalies``, ``stats``, ``fabric-rollup``)
at the first record produced within the store's history (``offsets_for_times``, wall clock minus
``history_s``; from the beginning where the broker cannot say); ``alerts``, ``annotations``, ``capacity`` and
the compacted ``silences`` from the beginning (the store keeps the latest of each, bounded).
:attr:`ReadModel.caught_up` turns true once every partition reached the end offset it had at
start-up (``/readyz`` waits for it).

Metrics (on the worker's registry): records read per topic and result, the consumer's lag per
topic and partition (``lockstep_consumer_lag_records{consumer="readmodel"}``), whether it caught
up, and the event time it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge

from agents.gaps import fetched_ends
from agents.kafka import client_kwargs
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.readstore import ReadStore

log = logging.getLogger("lockstep.readmodel")

#: Records on ``anomalies`` the read model does not keep, recognised by their first bytes
#: (the agents write them with orjson, ``type`` first), so they are never parsed.
SKIP_PREFIXES = (b'{"type":"points"', b'{"type":"watermark"')
#: Topics read from a point in time (their history is bounded), and from the beginning.
TIME_BOUNDED = ("timelines", "anomalies", "stats", "fabric")


class ReadModelMetrics:
    """The read model's metrics, and the consumer-lag gauge the web server also fills for the agents."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter("lockstep_readmodel_records_total", "Records the read model read, by result "
                               "(applied, skipped, rejected)", ["topic", "result"], registry=registry)
        self.lag = Gauge("lockstep_consumer_lag_records", "Records between a consumer's position and the partition's "
                         "end, by consumer (readmodel, agents)", ["consumer", "topic", "partition"], registry=registry)
        self.caught_up = Gauge("lockstep_readmodel_caught_up", "1 once the read model reached the end offsets it "
                               "saw at start-up", registry=registry)
        self.event_time = Gauge("lockstep_readmodel_event_time_seconds", "Latest second of any job's lanes the "
                                "read model holds (event time)", registry=registry)


class ReadModel:
    """Follows the output topics into ``store``. ``start`` returns once it is assigned and positioned."""

    def __init__(self, settings: LockstepSettings, bootstrap: str, store: ReadStore, metrics: ReadModelMetrics,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.store = store
        self.metrics = metrics
        self.clock = clock
        cat = TopicCatalogue(settings)
        self.kinds = {cat.timelines: "timelines", cat.alerts: "alerts", cat.stats: "stats",
                      cat.anomalies: "anomalies", cat.annotations: "annotations", cat.silences: "silences",
                      cat.capacity: "capacity"}
        if settings.fabric_report:
            self.kinds[cat.fabric_rollup] = "fabric"
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: list[TopicPartition] = []
        self.targets: dict[TopicPartition, int] = {}
        self.caught_up = False
        #: Poll rounds completed (a round folds everything its fetch returned before it counts): a caller
        #: that saw the positions reach an end waits for the next count to know the records are applied.
        self.rounds = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            **client_kwargs(self.settings, self.bootstrap), group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=self.settings.kafka_fetch_max_wait_ms,
            max_partition_fetch_bytes=8 * 1024 * 1024)
        await consumer.start()
        self.consumer = consumer
        tps: list[TopicPartition] = []
        for topic in self.kinds:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                await consumer.force_metadata_update()
                parts = consumer.partitions_for_topic(topic)
            if not parts:
                log.warning("read model: topic %s does not exist (yet); run `lockstep topics create`", topic)
                continue
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        self.partitions = tps
        consumer.assign(tps)
        await self._position(consumer, tps)
        # The ends to reach before /readyz says ready, each from a fetch answer: Tansu's ListOffsets can be
        # short for partitions written in batches, and the read model then called itself caught up before
        # it held what was on the broker at start-up (the fabric-rollup broker test, under load).
        listed = dict(await consumer.end_offsets(tps)) if tps else {}
        self.targets = {tp: end if end is not None else 0 for tp, end in
                        (await fetched_ends(self.settings, self.bootstrap, listed)).items()}
        await self._check_caught_up()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="read-model")

    async def _position(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        bounded = [tp for tp in tps if self.kinds[tp.topic] in TIME_BOUNDED]
        rest = [tp for tp in tps if tp not in bounded]
        if rest:
            await consumer.seek_to_beginning(*rest)
        if not bounded:
            return
        since_ms = int((self.clock() - self.store.config.history_s) * 1000)
        try:
            found = await consumer.offsets_for_times(dict.fromkeys(bounded, since_ms))
        except Exception as exc:  # a broker without timestamp lookups: read the whole (bounded) topic
            log.info("read model: offsets_for_times unsupported (%s); reading from the beginning", exc)
            await consumer.seek_to_beginning(*bounded)
            return
        missing = []
        for tp in bounded:
            hit = found.get(tp)
            if hit is None:
                missing.append(tp)  # nothing that recent: only what comes next matters
            else:
                consumer.seek(tp, hit.offset)
        if missing:
            await consumer.seek_to_end(*missing)

    async def _check_caught_up(self) -> bool:
        if self.caught_up:
            return True
        assert self.consumer is not None
        for tp, end in self.targets.items():
            high = self.consumer.highwater(tp)  # a fetch answer's end: ListOffsets can be misreported high (Tansu)
            if await self.consumer.position(tp) < (end if high is None else min(end, high)):
                return False
        self.caught_up = True
        self.metrics.caught_up.set(1)
        log.info("read model caught up: %s", {k: v for k, v in self.store.applied.items() if v})
        return True

    async def _loop(self) -> None:
        assert self.consumer is not None
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=500, max_records=2000)
                for tp, messages in batches.items():
                    self._fold(tp, messages)
                    await asyncio.sleep(0)  # let the HTTP server answer while catching up
                await self._update_lag()
                if not self.caught_up:
                    await self._check_caught_up()
                self.rounds += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("read model: poll failed; retrying in 1 s")
                await asyncio.sleep(1.0)

    def _fold(self, tp: TopicPartition, messages: list[Any]) -> None:
        kind = self.kinds[tp.topic]
        applied = skipped = rejected = 0
        if kind == "fabric":  # per-port summaries (streams.fabric_publish): merged, whatever was read before
            for msg in messages:
                if msg.value is not None and self.store.fabric.merge_message(msg.value):
                    applied += 1
                else:
                    skipped += 1
            messages = []
        for msg in messages:
            value = msg.value
            key = msg.key.decode("utf-8", "replace") if msg.key is not None else None
            if value is None:
                rec: Any = None
            elif kind == "anomalies" and value.startswith(SKIP_PREFIXES):
                skipped += 1
                continue
            else:
                try:
                    rec = orjson.loads(value)
                except orjson.JSONDecodeError:
                    rejected += 1
                    self.store.rejected[kind] = self.store.rejected.get(kind, 0) + 1
                    continue
            before = self.store.rejected.get(kind, 0)
            if self.store.apply(kind, rec, key):
                applied += 1
            elif self.store.rejected.get(kind, 0) > before:
                rejected += 1
            else:
                skipped += 1
        for result, n in (("applied", applied), ("skipped", skipped), ("rejected", rejected)):
            if n:
                self.metrics.records.labels(kind, result).inc(n)
        if self.store.event_time is not None:
            self.metrics.event_time.set(self.store.event_time)

    async def _update_lag(self) -> None:
        assert self.consumer is not None
        for tp in self.partitions:
            high = self.consumer.highwater(tp)
            if high is None:
                continue  # no fetch answered for it yet
            pos = await self.consumer.position(tp)
            self.metrics.lag.labels("readmodel", tp.topic, str(tp.partition)).set(max(0, high - pos))

    def lag(self) -> dict[str, int]:
        """``{"topic:partition": records behind}`` as last measured."""
        out = {}
        for metric in self.metrics.lag.collect():
            for s in metric.samples:
                if s.labels.get("consumer") == "readmodel":
                    out[f"{s.labels['topic']}:{s.labels['partition']}"] = int(s.value)
        return out

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.consumer is not None:
            await self.consumer.stop()
