"""What the agents of one worker share: the app, its topics and tables, the state, and the two output paths.

:class:`Runtime` is built once by :func:`agents.app.build_app` and handed to each agent
(agents.ingest, agents.correlating). ``send`` and ``dead_letter`` are the only ways records leave an
agent; ``offsets`` is None where there is no broker to read from (Faust's agent test context).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson

from agents.deadletters import fit_dead_letter
from agents.gaps import IncompleteRead
from agents.metrics import WorkerMetrics
from agents.offsets import Offsets
from agents.recovery import SAME_RECORD_S
from agents.sink import Sink
from agents.snapshots import SnapshotWriter
from agents.stalls import StallWatch
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.correlate import CorrelatorConfig
from streams.detect import DetectorBank, DetectorConfig
from streams.health import ProgressWatch
from streams.inventory import InventoryIndex
from streams.jobs import JobPartition
from streams.lanes import SignalsConfig
from streams.pipeline import PartitionPipeline
from streams.rules import Rules

log = logging.getLogger("lockstep.agents")


class LockstepApp(faust.App):
    """The Faust app with Lockstep's per-process state attached (typed, for the worker and tests)."""

    lockstep_fetch_max_wait_ms: int | None = None
    #: (settings, bootstrap) of the side consumer that checks table recovery's end offsets (agents.transport)
    lockstep_end_probe: tuple[LockstepSettings, str] | None = None
    #: the lanes (agents.lane): the ingest and correlate agents' records a fetch at a time, read by
    #: agents.transport; none: Faust's path
    lockstep_lanes: tuple[Any, ...] = ()
    lockstep_state: WorkerState
    lockstep_metrics: WorkerMetrics
    lockstep_runtime: Runtime
    #: agents.correlating.Correlate: the correlate agent and its tick
    lockstep_correlate: Any


@dataclass
class WorkerState:
    """Everything the agents of one worker process hold in memory."""

    inventory: InventoryIndex
    pipelines: dict[str, PartitionPipeline] = field(default_factory=dict)
    #: The detector bank every input partition's pipeline shares (agents.ingest.state_bank; None until the
    #: ingest agent starts)
    bank: DetectorBank | None = None
    correlators: dict[int, JobPartition] = field(default_factory=dict)
    correlator_resume_check: set[int] = field(default_factory=set)
    last_correlator_snapshot: dict[int, float] = field(default_factory=dict)
    #: monotonic time of each correlation partition's last snapshot (the wall floor, agents.correlating)
    last_correlator_snapshot_wall: dict[int, float] = field(default_factory=dict)
    published_wm: dict[str, float] = field(default_factory=dict)
    eos: set[str] = field(default_factory=set)
    wm_dirty: bool = False
    last_broadcast: float = 0.0
    #: wall time the ingest agent last received a message of each input partition, and when the batch
    #: it is working on started (None between batches): what tells an idle partition from a busy worker
    last_message: dict[str, float] = field(default_factory=dict)
    batch_started: float | None = None
    last_snapshot_wm: dict[str, float] = field(default_factory=dict)
    #: monotonic time of each input partition's last snapshot (the wall floor, agents.ingest)
    last_snapshot_wall: dict[str, float] = field(default_factory=dict)
    finished_partitions: set[int] = field(default_factory=set)
    resume_check: set[str] = field(default_factory=set)
    offset_resets: set[str] = field(default_factory=set)
    resume_skipped: int = 0
    resume_caught_up: int = 0
    redelivered: int = 0  # messages delivered again at or before the offset already processed (skipped)
    #: when each assigned input partition (telemetry, anomalies, carriers, annotations) last delivered
    #: (see agents.stalls)
    stalls: StallWatch = field(default_factory=StallWatch)
    #: the last offset handled per partition (``topic:partition``) of the agents whose partition state is
    #: that alone: the convert agents (the same dict as their :class:`agents.carriers.CarrierPartitions`)
    #: and ``forward_annotations`` (:func:`agents.gaps.in_order`); what the stall watch re-reads after
    relay_last_offset: dict[str, int] = field(default_factory=dict)
    ingested_messages: int = 0
    ingested_samples: int = 0
    #: input partition -> offsets that raised alone (dead-lettered): a rebuild's catch-up skips them
    poison: dict[str, set[int]] = field(default_factory=dict)
    #: when ingest and correlation last made progress (the readiness rule, streams.health)
    progress: ProgressWatch = field(default_factory=lambda: ProgressWatch(60.0))
    #: the anomalies topic's name, to tell an ingest partition from a correlation partition
    anomalies_topic: str = ""

    def owner_of(self, topic: str, partition: int) -> PartitionPipeline | JobPartition | None:
        """The state that processes ``topic:partition`` on this worker, if any."""
        if topic == self.anomalies_topic:
            return self.correlators.get(partition)
        return self.pipelines.get(f"{topic}:{partition}")

    def last_processed(self, topic: str, partition: int) -> int | None:
        """The last offset of ``topic:partition`` this worker processed (an ingest, correlation, carrier or
        annotations partition it owns), or None."""
        owner = self.owner_of(topic, partition)
        if owner is not None:
            return owner.last_offset
        return self.relay_last_offset.get(f"{topic}:{partition}")

    def forget(self, topic: str, partition: int) -> None:
        """A partition left this worker (a rebalance): its state goes; the next owner restores a snapshot."""
        name = f"{topic}:{partition}"
        self.relay_last_offset.pop(name, None)
        pipe = self.pipelines.pop(name, None)
        if pipe is not None:
            pipe.release()  # its rows of the shared detector bank: reused once no batch holds the pipeline
        self.published_wm.pop(name, None)
        self.last_snapshot_wm.pop(name, None)
        self.last_snapshot_wall.pop(name, None)
        if topic == self.anomalies_topic:
            self.correlators.pop(partition, None)
            self.progress.forget(partition)
            self.correlator_resume_check.discard(partition)


@dataclass(frozen=True)
class Topics:
    """The Faust topic objects the agents write to (and read from)."""

    telemetry: Any
    anomalies: Any
    alerts: Any
    dlq: Any
    stats: Any
    timelines: Any
    annotations: Any


@dataclass
class Runtime:
    settings: LockstepSettings
    app: LockstepApp
    catalogue: TopicCatalogue
    topics: Topics
    detector_table: Any
    correlator_table: Any
    state: WorkerState
    metrics: WorkerMetrics
    sink: Sink
    offsets: Offsets | None
    snapshots: SnapshotWriter
    inventory: InventoryIndex
    detector: DetectorConfig
    correlator: CorrelatorConfig
    signals: SignalsConfig
    rules: Rules | None
    expected_origins: set[str] | None
    on_finished: Callable[[int], None] | None
    #: (topic, partition) -> (offset, whether the record there is the one processed): same_record's answers
    _same: dict[tuple[str, int], tuple[int, bool]] = field(default_factory=dict)

    async def send(self, topic: Any, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        await self.sink.send(topic, key, value, partition)

    async def same_record(self, topic: str, partition: int, offset: int, record_ts: float | None,
                          handed: dict[int | None, float | None]) -> bool | None:
        """Whether the record at ``offset`` is still the one processed there (Kafka time ``record_ts``): from
        the records handed over when they include it, else read from the broker (once per offset); None when
        it cannot be told (no record time kept, no broker)."""
        if record_ts is None:
            return None
        if offset in handed and handed[offset] is not None:
            return abs(float(handed[offset]) - record_ts) < SAME_RECORD_S  # type: ignore[arg-type]
        key = (topic, partition)
        cached = self._same.get(key)
        if cached is not None and cached[0] == offset:
            return cached[1]
        if self.offsets is None:
            return None
        try:
            at = await self.offsets.record_time(topic, partition, offset)
        except IncompleteRead:  # unknown is not "another record": the records' own times decide (held)
            return None
        same = at is not None and abs(at - record_ts) < SAME_RECORD_S
        self._same[key] = (offset, same)
        return same

    async def dead_letter(self, record: dict[str, Any]) -> None:
        self.metrics.dead_letters.labels(record["stage"], record["error"]).inc()
        key = record.get("key")
        await self.sink.send(self.topics.dlq, key.encode() if key else None, orjson.dumps(fit_dead_letter(record)))


def never_raises(name: str, every_s: float = 30.0) -> Callable[[Callable[[], Awaitable[None]]],
                                                              Callable[[], Awaitable[None]]]:
    """Wrap a Faust timer so that an exception is logged instead of raised: Faust crashes the whole app
    on a timer's exception (a broker outage made the stall watch's side consumer fail to bootstrap, and
    the worker never consumed again). The first failure is logged with its traceback, then one line
    every ``every_s`` while it keeps failing, and one when it works again."""

    def wrap(fun: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        failing: dict[str, float] = {}  # "since", "logged", "count"

        async def guarded() -> None:
            try:
                await fun()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = time.monotonic()
                if not failing:
                    failing.update(since=now, logged=now, count=1)
                    log.exception("timer %s failed; it keeps running", name)
                    return
                failing["count"] += 1
                if now - failing["logged"] >= every_s:
                    failing["logged"] = now
                    log.error("timer %s still failing (%d times in %.0f s): %r", name, failing["count"],
                              now - failing["since"], exc)
                return
            if failing:
                log.warning("timer %s works again after %d failures in %.0f s", name, failing["count"],
                            time.monotonic() - failing["since"])
                failing.clear()

        guarded.__name__ = getattr(fun, "__name__", name)
        guarded.__qualname__ = getattr(fun, "__qualname__", name)
        return guarded

    return wrap
