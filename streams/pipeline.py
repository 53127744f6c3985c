"""The per-partition telemetry pipeline, assembled in one place as a list of named stages.

    decode -> validate -> normalise -> fabric -> clocks -> rate -> score -> episodes -> points  (ingest, per partition)
    -> correlate -> inhibit -> silence -> track -> emit                                     (correlate, per job)
    -> route -> deliver                                                                     (lockstep deliver)

:data:`INGEST_STAGES` is what :meth:`PartitionPipeline.process_many` runs, in order, over one
:class:`~streams.stages.base.Batch`; each stage is one module of :mod:`streams.stages` with a
``name`` and ``run(batch)``. :data:`PIPELINE` names every stage of a sample's path, the ones that
run on the correlation and delivery side too, and where each lives. A stage's name is the one in
dead letters (``stage``), in ``lockstep_stage_seconds{stage}`` and in logs.

One :class:`PartitionPipeline` owns the state of one input partition (series ids, counter state,
detector baselines, lanes), so its state can be snapshotted and moved with the partition. It never
imports Faust and never reads the clock: the Faust agent (agents/ingest.py) and the broker-free runner
(lockstep/local.py) alike hand it raw bytes and their coordinates and ship what it returns.

:meth:`PartitionPipeline.process_many` takes every message a batch holds for the partition at once,
so the array work of the rate and detect stages is paid per batch, not per Kafka message. The
result is the same as feeding the messages one by one (each series sees its samples in arrival
order; a sample at or before its series' last one is still out of order), and every dead letter
keeps the coordinates of its own message. One exception: idle series are evicted between batches
(:meth:`PartitionPipeline._sweep`), so where a batch ends can decide whether a series that was
idle for just over ``series_idle_s`` comes back with its old state or a new one.

The state is bounded: at most :class:`streams.series.SeriesLimits` series (per partition, per
source), with the ids of evicted series reused from a clean state.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from streams.clocks import ClockConfig, ClockTracker
from streams.detect import DetectorBank, DetectorConfig
from streams.fabric import FabricConfig
from streams.fabric_publish import PartitionFabric
from streams.inventory import InventoryIndex
from streams.rates import CounterRates
from streams.series import SeriesRegistry, grow
from streams.snapshot import pack, unpack
from streams.stages import (
    Batch,
    Clocks,
    DeadLetterOut,
    Decode,
    Episodes,
    Fabric,
    Normalise,
    Origin,
    PipelineOutput,
    Points,
    Rate,
    Score,
    Stage,
    StageRef,
    Validate,
    merged_points_records,
)
from streams.stages.episodes import SYMPTOM_MEANINGS
from streams.stages.points import LANE_NAMES, PEER_CODES, lane_code
from streams.stages.score import score_together

__all__ = ["CORRELATION_STAGES", "INGEST_STAGES", "LANE_NAMES", "PIPELINE", "STAGES", "SYMPTOM_MEANINGS",
           "DeadLetterOut", "Origin", "PartitionPipeline", "PipelineOutput", "merged_points_records", "run_together",
           "worker_name"]

# -- the pipeline ---------------------------------------------------------------------------------
#: The ingest stages, in the order they run over each batch of an input partition.
INGEST_STAGES: tuple[Stage, ...] = (
    Decode(),     # bytes -> records; not JSON, empty, too big: dead letter
    Validate(),   # records -> samples of known series (new ones admitted under the series caps)
    Normalise(),  # samples -> arrays in arrival order; negative counters: dead letter
    Fabric(),     # NIC and switch samples -> the partition's fabric rollup (published as summaries by the agent)
    Clocks(),     # arrival delays -> per-source clock offsets; clock records
    Rate(),       # counters -> rates; duplicates dropped, out of order: dead letter
    Score(),      # values -> scores against each series' baseline; episode transitions
    Episodes(),   # transitions -> anomaly records, one per affected job (inventory at the onset)
    Points(),     # each job's own signals -> its points record, grouped by event time
)

#: The stages after ingest: they run per job on the correlation side (the ``correlate`` agent) and in
#: ``lockstep deliver``; named here so the whole path reads in one place.
CORRELATION_STAGES: tuple[StageRef, ...] = (
    StageRef("correlate", "correlate agent",
             ("streams.correlation.correlator.Correlator.on_record", "streams.correlation.registry.RULES"),
             "anomaly episodes, points and clock records onto per-job timelines; each rule judges each job as "
             "the watermark moves"),
    StageRef("inhibit", "correlate agent",
             ("streams.correlation.rule.RuleContext.inhibit", "streams.correlation.rule.Emitter.inhibited_by"),
             "a symptom alert that a firing cause alert explains is reported, not emitted"),
    StageRef("silence", "correlate agent", ("streams.correlation.rule.Emitter.emit", "streams.rules.Rules.silenced_by"),
             "each alert stamped with the silences and maintenance windows active at its event time"),
    StageRef("track", "correlate agent",
             ("streams.correlation.rule.Emitter", "streams.correlation.correlator.Correlator._unsilence"),
             "firing alerts kept until resolved: inhibition sources, emitted again when a silence ends"),
    StageRef("emit", "correlate agent", ("streams.correlation.rule.CorrelatorOutput", "agents.correlating.Correlate"),
             "alerts (and timelines, stats) to their topics"),
    StageRef("route", "lockstep deliver", ("streams.routes.Route.match", "streams.dispatch.Notification"),
             "the route tree and grouping pick each alert's receivers"),
    StageRef("deliver", "lockstep deliver",
             ("lockstep.delivery.worker.ReceiverWorker", "lockstep.delivery.receivers.RECEIVERS"),
             "each receiver's sender (one module per kind), retries and parking; dead letters with stage "
             "``deliver.<receiver>``"),
)

#: Every stage of a sample's path, by name, in order: what ``process_many`` runs, then the rest.
PIPELINE: tuple[Stage | StageRef, ...] = (*INGEST_STAGES, *CORRELATION_STAGES)

#: The ingest stage names, used in logs, metrics and dead-letter records.
STAGES: tuple[str, ...] = tuple(stage.name for stage in INGEST_STAGES)

#: Idle series are looked for each time the partition's event time moves on by this fraction of the
#: idle span (so a series is evicted between ``idle_s`` and ``idle_s * (1 + 1/8)`` after its last sample).
SWEEPS_PER_IDLE = 8


def worker_name(source: str, labels: dict[str, str]) -> str:
    """The worker a per-rank series describes: its source, and its rank when it has one.

    >>> worker_name("gpu006", {"job_id": "train-a", "rank": "40"}), worker_name("w3", {})
    ('gpu006/rank40', 'w3')
    """
    rank = labels.get("rank")
    return source if rank is None else f"{source}/rank{rank}"


class PartitionPipeline:
    """The state of one input partition, and :data:`INGEST_STAGES` run over its batches.

    The stages (:mod:`streams.stages`) hold no state: they read and update this object's (series
    registry, rates, detector bank, clock tracker, the per-series source, lane and job-set arrays),
    which :meth:`snapshot` and :meth:`restore` carry and :meth:`_evict` clears.
    """

    def __init__(self, origin: str, config: DetectorConfig, inventory: InventoryIndex,
                 clock: ClockConfig | None = None, stages: Sequence[Stage] = INGEST_STAGES,
                 fabric: FabricConfig | None = None, fabric_interval_s: float = 5.0,
                 bank: DetectorBank | None = None) -> None:
        self.origin = origin
        #: What :meth:`process_many` runs, in order (:data:`INGEST_STAGES`).
        self.stages = tuple(stages)
        #: Where the ``score`` stage is in :attr:`stages` (their number without one): :meth:`begin` runs
        #: the stages before it, :meth:`finish` those after.
        self._score_at = next((i for i, st in enumerate(self.stages) if st.name == "score"), len(self.stages))
        self.config = config
        self.inventory = inventory
        self.clock_config = clock or ClockConfig()
        self.clocks = ClockTracker(self.clock_config)
        self._src_code = np.full(0, -1, dtype=np.int32)
        self._src_names: list[str] = []
        self._src_ids: dict[str, int] = {}
        self._src_free: list[int] = []
        self.registry = SeriesRegistry(config.limits)
        self.rates = CounterRates()
        #: The detector bank: the pipeline's own (a series' row is its id), or one shared with the worker's
        #: other input partitions (``bank``; :func:`run_together` scores their rounds together), in which
        #: each series has a row of its own (:attr:`_rows`), given back by :meth:`release`.
        self.detector = bank if bank is not None else DetectorBank(config)
        #: Series id -> its row of a shared bank (capacity grown as the registry's; the first
        #: :attr:`_nrows` hold rows); None: the pipeline's own bank, rows are ids.
        self._rows: np.ndarray | None = None if bank is None else np.zeros(0, dtype=np.int32)
        self._nrows = 0
        #: The bank's recycle count when :meth:`release` gave the rows back (None: not released).
        self._released_at: int | None = None
        self.watermark: float | None = None
        self.last_offset: int | None = None
        #: Kafka record time of the last message processed: tells a rebuilt topic (its offsets start
        #: again at 0 with new, later records) from messages this state already holds
        self.last_record_ts: float | None = None
        #: The event time (watermark) of the last look for idle series
        self._swept: float | None = None
        # Per series: lane code (-1: not forwarded), candidate job set and the inventory version it is for.
        self._lane = np.full(0, -1, dtype=np.int8)
        self._jobset = np.full(0, -1, dtype=np.int32)
        self._jobset_version = np.full(0, -1, dtype=np.int32)
        self._jobsets: list[tuple[str, ...]] = []
        self._jobset_ids: dict[tuple[str, ...], int] = {}
        self._intervals: dict[str, tuple[tuple[float, float], ...]] = {}
        self._intervals_version = -1
        #: Per series of a peer-compared lane: the worker it describes (see :func:`worker_name`).
        self._worker: dict[int, str] = {}
        #: The NIC and switch-port rollup of this partition, published as summaries for every read model
        #: (streams.fabric_publish); None: the fabric report is off.
        self.fabric = PartitionFabric(fabric, fabric_interval_s) if fabric is not None else None
        #: The validate stage's index of typed rows (:class:`streams.ingest.Row`), for series the registry
        #: holds: (layer, source, the labels' raw JSON bytes) -> an entry ``(layout, id, id, ...)``, the
        #: series ids of that label set's metrics, where ``layout`` maps each metric to its id's position
        #: in the entry: ``entry[entry[0][metric]]`` is the series id, and a metric not in the layout is not
        #: indexed (a KeyError, as for a label set not indexed). Label sets with the same metrics (every GPU's
        #: DCGM fields) share one layout (:attr:`row_layouts`), so each holds only a tuple of the registry's
        #: own id objects. Not state: rebuilt from the registry as rows come (:meth:`index_rows`), emptied
        #: (with the layouts) when series are evicted.
        self.row_ids: dict[tuple[str, str, bytes], tuple[Any, ...]] = {}
        #: The layouts of :attr:`row_ids`, by their metrics in position order (sorted): one per distinct
        #: metric set indexed since the index was last emptied.
        self.row_layouts: dict[tuple[str, ...], dict[str, int]] = {}

    # -- series bookkeeping -------------------------------------------------------------------
    def register_new(self, out: PipelineOutput | None) -> None:
        """Give every series registered since the last call (a new id or a reused one, whose state
        :meth:`_evict` cleared) its detector slot and lane."""
        reg = self.registry
        added = reg.take_added()
        if not added:
            return
        n = reg.size
        if n > self._lane.shape[0]:
            self._lane = grow(self._lane, n, -1)
            self._jobset = grow(self._jobset, n, -1)
            self._jobset_version = grow(self._jobset_version, n, -1)
        if n > self._src_code.shape[0]:
            self._src_code = grow(self._src_code, n, -1)
        if self._rows is not None and n > self._nrows:  # rows of the shared bank for ids never held
            if n > self._rows.shape[0]:
                self._rows = grow(self._rows, n, -1)
            self._rows[self._nrows:n] = self.detector.allocate(n - self._nrows)
            self._nrows = n
        rows = self._rows
        for sid in added:
            meta = reg.meta[sid]
            info = meta.info
            src = self._src_ids.get(meta.source)
            if src is None:
                if self._src_free:
                    src = self._src_free.pop()
                    self._src_names[src] = meta.source
                else:
                    src = len(self._src_names)
                    self._src_names.append(meta.source)
                self._src_ids[meta.source] = src
            self._src_code[sid] = src
            self.detector.register(sid if rows is None else int(rows[sid]), info.mode, info.bad)
            self._lane[sid] = lane_code(meta.layer, meta.metric, info)
            if self._lane[sid] in PEER_CODES:
                self._worker[sid] = worker_name(meta.source, meta.labels)
            if out is not None and info.meaning.value == "unknown":
                out.unknown_metrics += 1
        if self.fabric is not None:
            self.fabric.register(added, reg.meta)

    def index_rows(self, found: Sequence[tuple[int, bytes]]) -> None:
        """Let typed rows find the series of ``found``: pairs of a series id and the JSON text of labels
        the validate stage found to be that series' labels. Each label set's entry is rebuilt once with
        all its new metrics (a message usually brings every metric of a label set at once), and takes
        the shared layout of its metric set. The keys and layouts hold the registry's own strings."""
        keys = self.registry.keys
        adds: dict[tuple[str, str, bytes], dict[str, int]] = {}
        for sid, labels_raw in found:
            key = keys[sid]
            assert key is not None
            adds.setdefault((key[0], key[1], labels_raw), {})[key[2]] = sid
        index, layouts = self.row_ids, self.row_layouts
        for row_key, ids in adds.items():
            entry = index.get(row_key)
            if entry is not None:
                ids = {metric: entry[pos] for metric, pos in entry[0].items()} | ids
            metrics = tuple(sorted(ids))
            layout = layouts.get(metrics)
            if layout is None:
                layout = layouts[metrics] = {metric: pos for pos, metric in enumerate(metrics, 1)}
            index[row_key] = (layout, *[ids[metric] for metric in metrics])

    def row_index_items(self) -> Iterator[tuple[tuple[str, str, bytes], str, int]]:
        """Every (layer, source, labels' raw JSON bytes), metric and series id :attr:`row_ids` finds."""
        for row_key, entry in self.row_ids.items():
            for metric, pos in entry[0].items():
                yield row_key, metric, entry[pos]

    def _sweep(self, out: PipelineOutput, refused: bool, messages: Sequence[tuple[bytes, Origin]]) -> None:
        """Evict the series without a sample for ``limits.idle_s`` of the partition's event time.

        That time is the watermark, but never past the Kafka record time of the batch's latest
        message when the messages have one: a sample stamped far ahead of its arrival (a bad clock)
        moves the watermark, and must not make every other series look idle. Looked for each time
        that time is ``idle_s / SWEEPS_PER_IDLE`` past the last look, and at once when a cap refused
        a series and time moved on (a flood at one event time does not scan the state per batch). A
        series whose samples were all rejected has no time: it goes too. Runs between batches, so a
        series is never evicted while a batch holds its samples.
        """
        idle_s = self.config.limits.idle_s
        now = self.watermark
        if now is None or not math.isfinite(idle_s):
            return
        arrived = [o.timestamp for _, o in messages if o.timestamp is not None]
        if arrived:
            now = min(now, max(arrived))
        if self._swept is None:
            self._swept = now
        if not (now >= self._swept + idle_s / SWEEPS_PER_IDLE or (refused and now > self._swept)):
            return
        self._swept = now
        reg = self.registry
        n = reg.size
        last = np.full(n, -math.inf)
        have = min(n, self.rates.last_ts.shape[0])
        last[:have] = np.nan_to_num(self.rates.last_ts[:have], nan=-math.inf)
        idle = np.flatnonzero(reg.live[:n] & (last < now - idle_s))
        if idle.size:
            self._evict(idle, out)

    def _evict(self, sids: np.ndarray, out: PipelineOutput | None) -> None:
        """Forget series ``sids``: registry, rates, detector and the pipeline's own per-series arrays
        back to what a new series starts from, their ids free for reuse. A source left without series
        gives up its code and, unless its clock is flagged as skewed, its clock statistics."""
        gone = self.registry.evict(sids)
        # An evicted id is reused by the next new series: no row may find it under its old labels.
        self.row_ids = {}
        self.row_layouts = {}
        self.rates.clear(sids)
        self.detector.clear(self.rows_of(sids))
        self._lane[sids] = -1
        self._jobset[sids] = -1
        self._jobset_version[sids] = -1
        self._src_code[sids] = -1
        for sid in sids.tolist():
            self._worker.pop(sid, None)
        held = self.registry.per_source
        for source in {m.source for m in gone}:
            if source in held:
                continue
            code = self._src_ids.pop(source)
            self._src_names[code] = ""
            self._src_free.append(code)
            if not self.clocks.skewed(source):
                self.clocks.sources.pop(source, None)
        if out is not None:
            out.evicted += len(gone)

    def jobset_of(self, sid: int) -> int:
        """Jobs this series can affect at any time (cached per series until the inventory changes)."""
        meta = self.registry.meta[sid]
        jobs = tuple(a.job_id for a in self.inventory.affected_jobs(meta.layer, meta.source, meta.labels, None))
        if not jobs:
            return -1
        idx = self._jobset_ids.get(jobs)
        if idx is None:
            idx = self._jobset_ids[jobs] = len(self._jobsets)
            self._jobsets.append(jobs)
        return idx

    def _job_intervals(self, job: str) -> tuple[tuple[float, float], ...]:
        """When ``job`` ran: its runs as ``(start, end)`` pairs (end inf: running), cached until the
        inventory changes."""
        if self._intervals_version != self.inventory.version:
            self._intervals = {}
            self._intervals_version = self.inventory.version
        iv = self._intervals.get(job)
        if iv is None:
            history = self.inventory.jobs.get(job) or []
            iv = tuple((float(h.start), math.inf if h.end is None else float(h.end)) for h in history)
            self._intervals[job] = iv
        return iv

    def active_at(self, job: str, t: float) -> bool:
        """Whether ``job`` is running at time ``t`` (:meth:`active` of one time)."""
        # (a loop, not any() over a generator: points asks per job and lane of every round of a live batch)
        for s, e in self._job_intervals(job):  # noqa: SIM110
            if s <= t < e:
                return True
        return False

    def active(self, job: str, t: np.ndarray) -> np.ndarray:
        """Where ``job`` is running at times ``t`` (``inventory.job(job, t) is not None``, vectorised)."""
        runs = self._job_intervals(job)
        if len(runs) == 1:
            (s, e), = runs
            return (t >= s) & (t < e)
        mask = np.zeros(t.shape[0], dtype=bool)
        for s, e in runs:
            mask |= (t >= s) & (t < e)
        return mask

    # -- processing -----------------------------------------------------------------------------
    # -- processing -----------------------------------------------------------------------------
    def process(self, raw: bytes, origin: Origin) -> PipelineOutput:
        """Run one message through every stage. Never raises on bad input."""
        return self.process_many([(raw, origin)])

    def process_many(self, messages: Sequence[tuple[bytes, Origin]],
                     timer: Callable[[], float] | None = None) -> PipelineOutput:
        """Run the messages of one partition (in offset order) through every stage at once.

        Equivalent to :meth:`process` on each message in turn, with one set of array operations for
        the whole batch. Never raises on bad input; an exception (a bug) leaves with a note naming the
        stage it came from, and the offsets not moved. With ``timer`` (a monotonic clock, e.g.
        ``time.perf_counter``; this package reads none itself) the seconds each stage took are in
        ``out.stage_seconds``, by stage name.

        A sample of a new series that the series caps (:class:`streams.series.SeriesLimits`) refuse
        is dropped and counted (:attr:`PipelineOutput.refused`); each message with such samples gives
        one dead letter (``SeriesLimitExceeded``, with the count), and its other samples go on. After
        the batch, idle series are evicted (:meth:`_sweep`).

        :meth:`begin`, the ``score`` stage, then :meth:`finish`; :func:`run_together` does the same for
        several partitions with one ``score`` for all.
        """
        batch = self.begin(messages, timer)
        self.run_stages(batch, self.score_stage)
        return self.finish(batch)

    @property
    def score_stage(self) -> tuple[Stage, ...]:
        """The ``score`` stage (empty: the pipeline has none), between :meth:`begin` and :meth:`finish`."""
        return self.stages[self._score_at:self._score_at + 1]

    def begin(self, messages: Sequence[tuple[bytes, Origin]], timer: Callable[[], float] | None = None) -> Batch:
        """The stages before ``score`` over one batch of messages (what :meth:`process_many` starts with)."""
        if self._released_at is not None and self._released_at != self.detector.recycled:
            raise RuntimeError(f"{self.origin}: pipeline used after its rows of the shared bank were recycled")
        batch = Batch(self, messages, PipelineOutput(messages=len(messages)), timer=timer)
        self.run_stages(batch, self.stages[:self._score_at])
        return batch

    def run_stages(self, batch: Batch, stages: Sequence[Stage]) -> None:
        """``stages`` over ``batch``, each timed with ``batch.timer`` when there is one. An exception (a
        bug) leaves with a note naming the stage and the partition."""
        if not stages:
            return
        stage = stages[0]
        timer = batch.timer
        try:
            if timer is None:
                for stage in stages:
                    stage.run(batch)
            else:
                seconds = batch.out.stage_seconds
                t0 = timer() if batch.last_tick is None else batch.last_tick
                for stage in stages:
                    lent = batch.deferred_total
                    stage.run(batch)
                    t1 = timer()
                    # less what a lazy stage before it did inside its run (decode, inside validate's)
                    seconds[stage.name] = seconds.get(stage.name, 0.0) + t1 - t0 - (batch.deferred_total - lent)
                    t0 = t1
                batch.last_tick = t0
        except Exception as exc:  # a bug: the agent logs it (with this note) and retries message by message
            exc.add_note(f"in ingest stage {stage.name!r} of {self.origin}")
            raise

    def finish(self, batch: Batch) -> PipelineOutput:
        """The stages after ``score``, then the batch's end: the watermark, idle series evicted, the offset."""
        self.run_stages(batch, self.stages[self._score_at + 1:])
        out, messages = batch.out, batch.messages
        if batch.timer is not None:
            seconds = out.stage_seconds
            for name, s in batch.deferred.items():
                seconds[name] = seconds.get(name, 0.0) + s
        if out.max_ts is not None:
            self.watermark = out.max_ts if self.watermark is None else max(self.watermark, out.max_ts)
        self._sweep(out, batch.refused, messages)
        # Only now, after every stage succeeded: a batch that raised has not moved the offset, so the
        # agent's one-by-one retry processes its messages instead of skipping them as already seen.
        if messages and messages[-1][1].offset is not None:
            self.last_offset = messages[-1][1].offset
            self.last_record_ts = messages[-1][1].timestamp
        return out

    # -- a shared bank --------------------------------------------------------------------------
    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The detector bank's rows of series ``ids`` (the ids themselves in a bank of its own)."""
        return ids if self._rows is None else self._rows[ids]

    @property
    def shares_bank(self) -> bool:
        return self._rows is not None

    def release(self) -> None:
        """Give the pipeline's rows of a shared bank back (it is being dropped: its partition left the
        worker, or a rebuilt pipeline replaces it). They stay as they are until the bank's next
        :meth:`~streams.detect.DetectorBank.recycle`; using this pipeline after that raises."""
        if self._rows is None or self._released_at is not None:
            return
        self.detector.release(self._rows[:self._nrows])
        self._released_at = self.detector.recycled

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The partition's state: every array over the whole id space (a free id's rows are clean),
        the registry with its free ids, and the event time of the last look for idle series."""
        n = self.registry.size
        arrays = {**self.rates.snapshot(n), **self.detector.snapshot(n if self._rows is None else self._rows[:n])}
        meta = {"origin": self.origin, "series": self.registry.snapshot(), "watermark": self.watermark,
                "offset": self.last_offset, "record_ts": self.last_record_ts, "window": self.config.window,
                "clocks": self.clocks.snapshot(), "swept": self._swept}
        if self.fabric is not None:
            meta["fabric"] = self.fabric.snapshot()
        return pack(arrays, meta)

    def restore(self, blob: bytes) -> None:
        arrays, meta = unpack(blob)
        self.registry = SeriesRegistry.restore(meta["series"], self.config.limits)
        self.row_ids = {}
        self.row_layouts = {}
        if arrays["rates.last_ts"].shape[0] != self.registry.size:
            raise ValueError("snapshot: the state arrays and the series registry differ in size")
        self.rates = CounterRates()
        self.rates.restore(arrays)
        if self._rows is None:
            self.detector = DetectorBank(self.config)
        else:  # the rows held go back; each restored series gets one (register_new below)
            self.detector.release(self._rows[:self._nrows])
            self._rows = np.zeros(0, dtype=np.int32)
            self._nrows = 0
        self._src_code = np.full(0, -1, dtype=np.int32)
        self._src_names = []
        self._src_ids = {}
        self._src_free = []
        self._lane = np.full(0, -1, dtype=np.int8)
        self._jobset = np.full(0, -1, dtype=np.int32)
        self._jobset_version = np.full(0, -1, dtype=np.int32)
        self._worker = {}
        if self.fabric is not None:
            self.fabric = PartitionFabric(self.fabric.config, self.fabric.interval_s)
        self.register_new(None)
        if self.fabric is not None and "fabric" in meta:
            self.fabric.restore(meta["fabric"])
        self.detector.restore(arrays, None if self._rows is None else self._rows[:self.registry.size])
        self.watermark = meta["watermark"]
        self.last_offset = meta["offset"]
        self.last_record_ts = meta.get("record_ts")
        self._swept = meta.get("swept")
        self.clocks = ClockTracker(self.clock_config)
        if "clocks" in meta:
            self.clocks.restore(meta["clocks"])

    def state_bytes(self) -> dict[str, float]:
        """Bytes of state by part (numpy arrays at their allocated capacity, plus the registry); ``lanes``
        is this object's own per-series arrays (lane, job set and its inventory version, source code);
        ``row_index`` the validate stage's :attr:`row_ids` with its shared layouts (not state: not
        snapshotted, but held)."""
        n = max(len(self.registry), 1)
        # the bank at its allocated capacity; a shared one, this pipeline's share of it by rows held (its map
        # of ids to rows is counted with the lanes)
        rows = float(max(self.detector.mode.shape[0], 1))
        if self._rows is not None:
            rows *= self._nrows / max(self.detector.rows_in_use, 1)
        parts = {k: v * rows for k, v in self.detector.nbytes_per_series().items()}
        parts["rates"] = float(self.rates.last_ts.nbytes + self.rates.last_value.nbytes)
        parts["registry"] = float(self.registry.nbytes())
        parts["lanes"] = float(self._lane.nbytes + self._jobset.nbytes + self._jobset_version.nbytes
                               + self._src_code.nbytes + (0 if self._rows is None else self._rows.nbytes))
        # the index: its table, each key with its labels' bytes and its entry, and each shared layout
        # once with its metrics tuple (the strings and ids are the registry's own objects)
        parts["row_index"] = float(
            sys.getsizeof(self.row_ids)
            + sum(sys.getsizeof(k) + sys.getsizeof(k[2]) + sys.getsizeof(e) for k, e in self.row_ids.items())
            + sys.getsizeof(self.row_layouts)
            + sum(sys.getsizeof(m) + sys.getsizeof(layout) for m, layout in self.row_layouts.items()))
        parts["per_series"] = sum(parts.values()) / n
        return parts


def run_together(work: Sequence[tuple[PartitionPipeline, Sequence[tuple[bytes, Origin]]]],
                 timer: Callable[[], float] | None = None) -> list[PipelineOutput | Exception]:
    """Each input partition's messages through its pipeline, as :meth:`PartitionPipeline.process_many`
    does, with one ``score`` stage for all the pipelines that share a detector bank
    (:func:`streams.stages.score.score_together`): every partition's stages before ``score``, the
    score of them all, then every partition's stages after it. The outputs are those ``process_many``
    gives each partition alone.

    An exception (a bug) is returned in place of the output of each partition it reached: one
    partition's (in a stage before or after ``score``; the others go on), or every partition scored
    with it. Such a partition's state is partly changed and its offset not moved, as when
    ``process_many`` raises: the caller puts its state back (a snapshot) before trying it again.
    """
    results: list[PipelineOutput | Exception] = []
    groups: dict[int, list[tuple[int, Batch]]] = {}
    for i, (pipe, messages) in enumerate(work):
        try:
            batch = pipe.begin(messages, timer)
        except Exception as exc:
            results.append(exc)
            continue
        results.append(batch.out)
        key = id(pipe.detector) if pipe.score_stage and pipe.shares_bank else id(pipe)
        groups.setdefault(key, []).append((i, batch))
    for group in groups.values():
        batches = [batch for _, batch in group]
        for batch in batches:
            batch.last_tick = None  # other partitions' stages ran since: not this one's time
        try:
            if len(batches) == 1:
                batches[0].part.run_stages(batches[0], batches[0].part.score_stage)
            else:
                score_together(batches, timer)
        except Exception as exc:
            if len(batches) > 1:
                exc.add_note("in ingest stage 'score' of " + ", ".join(b.part.origin for b in batches))
            for i, _ in group:
                results[i] = exc
            continue
        for i, batch in group:
            batch.last_tick = None
            try:
                results[i] = batch.part.finish(batch)
            except Exception as exc:
                results[i] = exc
    return results
