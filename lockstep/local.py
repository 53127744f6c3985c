"""Run the pure pipeline and correlator in-process, without a broker.

The same stages the agents run (:data:`streams.pipeline.PIPELINE`), wired by plain function calls
instead of topics: each message goes through its input partition's
:class:`~streams.pipeline.PartitionPipeline` (the ingest stages, :data:`streams.pipeline.INGEST_STAGES`,
as the ``ingest`` agent runs them), and what comes out — anomaly episodes by job, points records,
clock records by source — to the :class:`~streams.jobs.JobPartition` that the ``correlate`` agent
would hold for that key (correlate, inhibit, silence, track, emit). Route and deliver are not run:
the result holds the alerts as they would reach the ``alerts`` topic.

Messages are spread over ``partitions`` pipelines by a stable hash of their key, anomalies over
correlators by job, and watermarks advance after every second of input. Used by unit tests (fast
scenario checks), by benchmarks/scenario_outputs.py (every scenario, to diff two trees) and by
benchmarks as the no-Kafka baseline. Integration tests use the real broker instead.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from models.inventory import inventory_adapter
from streams.correlate import CorrelatorConfig
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.jobs import JobPartition, PartitionResult
from streams.pipeline import INGEST_STAGES, Origin, PartitionPipeline, PipelineOutput
from streams.stages import Stage


@dataclass
class LocalResult:
    alerts: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    timelines: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: int = 0
    samples: int = 0
    #: Dead letters by the stage that refused them.
    dead_letters_by_stage: dict[str, int] = field(default_factory=dict)
    #: Seconds spent in each ingest stage, over the run (with a ``timer``).
    stage_seconds: dict[str, float] = field(default_factory=dict)


class LocalRunner:
    """``stages``: the ingest stages every input partition runs (default: the agents' own);
    ``timer``: a clock to time them with (e.g. ``time.perf_counter``; default: not timed)."""

    def __init__(self, partitions: int = 4, detector: DetectorConfig | None = None,
                 correlator: CorrelatorConfig | None = None, stages: Sequence[Stage] = INGEST_STAGES,
                 timer: Callable[[], float] | None = None) -> None:
        self.partitions = partitions
        self.inventory = InventoryIndex()
        self.detector = detector or DetectorConfig()
        self.stages = tuple(stages)
        self.timer = timer
        self.pipelines: dict[str, PartitionPipeline] = {}
        self.correlators = [JobPartition(correlator or CorrelatorConfig(), self.inventory)
                            for _ in range(partitions)]
        self.result = LocalResult()
        self._second: float | None = None

    def _partition(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self.partitions

    def inventory_event(self, doc: dict[str, Any]) -> None:
        self.inventory.apply(inventory_adapter.validate_python(doc))

    def message(self, layer: str, key: str, raw: bytes, event_second: float | None = None) -> PipelineOutput:
        """Process one telemetry message (a JSON batch) for ``layer`` keyed by ``key``."""
        if event_second is not None and self._second is not None and event_second > self._second:
            self._advance()
        if event_second is not None:
            self._second = event_second
        topic = f"telemetry.{layer}"
        p = self._partition(key)
        origin = f"{topic}:{p}"
        out = self._pipeline(origin).process_many([(raw, Origin(topic, p))], self.timer)
        self._ingested(out)
        self._correlate(origin, out)
        return out

    def _pipeline(self, origin: str) -> PartitionPipeline:
        pipe = self.pipelines.get(origin)
        if pipe is None:
            pipe = self.pipelines[origin] = PartitionPipeline(origin, self.detector, self.inventory,
                                                              stages=self.stages)
        return pipe

    def _ingested(self, out: PipelineOutput) -> None:
        res = self.result
        res.samples += out.samples
        res.dead_letters += len(out.dead_letters)
        for dl in out.dead_letters:
            res.dead_letters_by_stage[dl.stage] = res.dead_letters_by_stage.get(dl.stage, 0) + 1
        for stage, seconds in out.stage_seconds.items():
            res.stage_seconds[stage] = res.stage_seconds.get(stage, 0.0) + seconds

    def _correlate(self, origin: str, out: PipelineOutput) -> None:
        """An ingest output to the correlation partitions, keyed as the ingest agent keys it on ``anomalies``
        (episodes and points records by job, clock records by source, and a ``retime_only`` copy of each to
        every partition)."""
        for rec in out.anomalies:
            self.result.anomalies.append(rec)
            self._collect(self.correlators[self._partition(rec["job_id"])].on_record(rec, 0.0))
        for rec in out.points_records(origin):
            self._collect(self.correlators[self._partition(rec["job_id"])].on_record(rec, 0.0))
        for rec in out.clocks:
            self._collect(self.correlators[self._partition(rec["source"])].on_record(rec, 0.0))
            copy = dict(rec, retime_only=True)
            for corr in self.correlators:
                self._collect(corr.on_record(copy, 0.0))

    def _collect(self, res: PartitionResult) -> None:
        self.result.alerts += res.alerts
        self.result.timelines += res.timelines
        self.result.stats += res.stats

    def _advance(self) -> None:
        wm = {o: p.watermark for o, p in self.pipelines.items() if p.watermark is not None}
        for corr in self.correlators:
            self._collect(corr.on_record({"type": "watermark", "origins": wm}, 0.0))

    def finish(self) -> LocalResult:
        """End of input: every open window closes."""
        self._advance()
        for corr in self.correlators:
            corr.correlator.expect_inputs(set(self.pipelines))
            self._collect(corr.on_record({"type": "watermark", "origins": {}, "eos": sorted(self.pipelines)}, 0.0))
        return self.result

    def run_messages(self, messages: Iterable[Any]) -> LocalResult:
        """Feed :class:`lockstep.simulate.Message` objects (inventory and telemetry) and finish.

        The messages of one event second are processed as one batch per input partition, in their
        order, as the ingest agent takes what queued up (the pipeline's results do not depend on how
        its input is cut into batches: tests/streams/test_local_batching.py); an inventory event or the
        next second ends the batch."""
        pending: dict[str, list[tuple[bytes, Origin]]] = {}
        second: float | None = None
        for msg in messages:
            if msg.topic == "inventory":
                self._flush(pending)
                self.inventory_event(msg.value)
                continue
            at = float(int(msg.ts))
            if second is not None and at > second:
                self._flush(pending)
                self._advance()
            second = at
            p = self._partition(msg.key)
            topic = f"telemetry.{msg.topic}"
            pending.setdefault(f"{topic}:{p}", []).append((orjson.dumps(msg.value), Origin(topic, p)))
        self._flush(pending)
        return self.finish()

    def _flush(self, pending: dict[str, list[tuple[bytes, Origin]]]) -> None:
        """Each input partition's queued messages through its pipeline, then their outputs to correlation."""
        for origin, items in pending.items():
            out = self._pipeline(origin).process_many(items, self.timer)
            self._ingested(out)
            self._correlate(origin, out)
        pending.clear()


def run_scenario(name: str, seed: int = 7, partitions: int = 4, **kwargs: Any) -> LocalResult:
    """Simulate scenario ``name`` and run it through the local pipeline."""
    from lockstep.simulate import SCENARIOS, Simulator

    sim = Simulator(SCENARIOS[name], seed=seed)
    return LocalRunner(partitions, **kwargs).run_messages(sim.run())
