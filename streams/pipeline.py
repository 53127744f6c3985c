"""The per-partition telemetry pipeline, as one readable list of named stages.

    decode -> validate -> normalise -> rate -> detect -> map

One :class:`PartitionPipeline` owns the state of one input partition (series ids, counter state,
detector baselines), so its state can be snapshotted and moved with the partition. It never
imports Faust and never reads the clock: the Faust agent hands it raw bytes and their coordinates
and ships what it returns.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.deadletter import dead_letter_record
from models.errors import SeriesLimitExceeded, error_class
from models.samples import MAX_ABS_VALUE
from models.timeutil import MAX_TS, MIN_TS
from streams.catalogue import Mode
from streams.clocks import ClockConfig, ClockTracker
from streams.detect import DetectorBank, DetectorConfig
from streams.ingest import Rejection, decode_records, validate_record
from streams.inventory import InventoryIndex
from streams.lanes import LANES, PEER_LANES
from streams.rates import CounterRates
from streams.series import (
    LAYER_NAMES,
    REFUSED_PARTITION,
    SeriesRegistry,
    grow,
    occurrence_rounds,
)
from streams.snapshot import pack, unpack

#: Stage names, used in logs, metrics and dead-letter records.
STAGES = ("decode", "validate", "normalise", "rate", "detect", "map")

#: Idle series are looked for each time the partition's event time moves on by this fraction of the
#: idle span (so a series is evicted between ``idle_s`` and ``idle_s * (1 + 1/8)`` after its last sample).
SWEEPS_PER_IDLE = 8

#: Roles: a job's own signals are symptoms; everything else is a possible cause.
SYMPTOM_MEANINGS = frozenset({"step_time"})

#: Lane names (see :mod:`streams.lanes`) and their codes in the per-series lane array.
LANE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(LANES.values()))
_LANE_CODE = {(layer, meaning): LANE_NAMES.index(lane) for (layer, meaning), lane in LANES.items()}
_PEER_CODES = frozenset(LANE_NAMES.index(lane) for lane in PEER_LANES)


def _by_time(t: np.ndarray, v: np.ndarray, sids: np.ndarray | None,
             names: Mapping[int, str]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Values grouped by their exact event time: ``[[ts, [value, ...]], ...]`` in time order, and with
    ``sids`` the same groups with each value's worker: ``[[ts, [value, ...], [worker, ...]], ...]``.

    A scrape's samples share one timestamp, so a points record carries it once per group.

    >>> _by_time(np.array([5.0, 4.0, 5.0]), np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]), ["a", "b", "c"])
    ([[4.0, [2.0]], [5.0, [1.0, 3.0]]], [[4.0, [2.0], ['b']], [5.0, [1.0, 3.0], ['a', 'c']]])
    """
    if t[0] == t[-1] and (t == t[0]).all():
        cuts: list[int] = []  # the common case (one scrape): no sort
    else:
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        sids = sids[order] if sids is not None else None
        cuts = (np.flatnonzero(t[1:] != t[:-1]) + 1).tolist()
    bounds = list(zip([0, *cuts], [*cuts, int(t.size)], strict=True))
    vl = v.tolist()
    groups = [[float(t[a]), vl[a:b]] for a, b in bounds]
    if sids is None:
        return groups, []
    wl = [names[i] for i in sids.tolist()]
    return groups, [[float(t[a]), vl[a:b], wl[a:b]] for a, b in bounds]


def worker_name(source: str, labels: dict[str, str]) -> str:
    """The worker a per-rank series describes: its source, and its rank when it has one.

    >>> worker_name("gpu006", {"job_id": "train-a", "rank": "40"}), worker_name("w3", {})
    ('gpu006/rank40', 'w3')
    """
    rank = labels.get("rank")
    return source if rank is None else f"{source}/rank{rank}"
_NO_LABELS: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message came from."""

    topic: str
    partition: int
    offset: int | None = None
    timestamp: float | None = None  # Kafka record time (seconds)
    key: bytes | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(slots=True)
class DeadLetterOut:
    stage: str
    reason: str
    error: str
    record: str | None
    original: bytes
    #: The message it came from (a batch holds many messages; each dead letter keeps its own).
    origin: Origin | None = None

    def to_record(self, origin: Origin | None = None, rejected_ts: float | None = None) -> dict[str, Any]:
        """The ``dlq`` record (see :class:`models.records.DeadLetter`).

        ``origin`` defaults to the message the record came from; ``rejected_ts`` to its Kafka time.
        """
        origin = origin or self.origin or Origin("<unknown>", -1)
        if rejected_ts is None:
            rejected_ts = origin.timestamp or 0.0
        return dead_letter_record(stage=self.stage, error=error_class(self.error), reason=self.reason,
                                  original=self.original, topic=origin.topic, partition=origin.partition,
                                  offset=origin.offset, key=origin.key, ts=rejected_ts, record=self.record)


@dataclass(slots=True)
class PipelineOutput:
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[DeadLetterOut] = field(default_factory=list)
    messages: int = 0
    samples: int = 0
    rejected: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    resets: int = 0
    unknown_metrics: int = 0
    unmapped_anomalies: int = 0
    #: Samples of new series the series caps refused, by cap (``partition``, ``source``).
    refused: dict[str, int] = field(default_factory=dict)
    #: Idle series evicted after this batch.
    evicted: int = 0
    max_ts: float | None = None
    control: str | None = None
    by_layer: dict[str, int] = field(default_factory=dict)
    #: job -> lane -> [[ts, [value, ...]], ...]: the job's own signals grouped by event time, forwarded
    #: to its correlation partition.
    points: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    #: job -> lane -> [[ts, [value, ...], [worker, ...]], ...]: per-worker values of the peer-compared lanes
    #: (:data:`streams.lanes.PEER_LANES`), for straggler detection on the correlation side.
    workers: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    #: ``clock`` records: a source's clock went beyond (or back within) the tolerance.
    clocks: list[dict[str, Any]] = field(default_factory=list)

    def points_records(self, origin: str) -> list[dict[str, Any]]:
        """One ``points`` record per job (see :mod:`streams.lanes`)."""
        return merged_points_records([(origin, self)])


def merged_points_records(outputs: Sequence[tuple[str, PipelineOutput]]) -> list[dict[str, Any]]:
    """One ``points`` record per job for the outputs of several input partitions of one batch.

    The correlation side folds a record's groups whatever partition they came from, so a worker
    sends one record per job per batch instead of one per job per input partition (with 56 input
    partitions and batches of 0.2 s, that is 56x fewer records to send and to consume). ``origins``
    lists the input partitions it covers. Group order is kept (partition order, then time).

    >>> a, b = PipelineOutput(), PipelineOutput()
    >>> a.points = {"j": {"gpu_util": [[1.0, [90.0]]]}}
    >>> b.points = {"j": {"gpu_util": [[1.0, [80.0]]], "step_time": [[1.0, [2.0]]]}, "k": {"gpu_util": [[1.0, [5.0]]]}}
    >>> b.workers = {"j": {"step_time": [[1.0, [2.0], ["n1/rank0"]]]}}
    >>> [(r["job_id"], r["lanes"], r.get("workers"), r["origins"])
    ...  for r in merged_points_records([("t:0", a), ("t:1", b)])]  # doctest: +NORMALIZE_WHITESPACE
    [('j', {'gpu_util': [[1.0, [90.0]], [1.0, [80.0]]], 'step_time': [[1.0, [2.0]]]},
      {'step_time': [[1.0, [2.0], ['n1/rank0']]]}, ['t:0', 't:1']),
     ('k', {'gpu_util': [[1.0, [5.0]]]}, None, ['t:1'])]
    """
    jobs: dict[str, dict[str, Any]] = {}
    for origin, out in outputs:
        for job, lanes in out.points.items():
            rec = jobs.get(job)
            if rec is None:
                rec = jobs[job] = {"type": "points", "job_id": job, "lanes": {}, "origins": []}
            rec["origins"].append(origin)
            for lane, groups in lanes.items():
                rec["lanes"].setdefault(lane, []).extend(groups)
            for lane, groups in out.workers.get(job, {}).items():
                rec.setdefault("workers", {}).setdefault(lane, []).extend(groups)
    return [jobs[job] for job in sorted(jobs)]


class PartitionPipeline:
    """State and processing for one input partition."""

    def __init__(self, origin: str, config: DetectorConfig, inventory: InventoryIndex,
                 clock: ClockConfig | None = None) -> None:
        self.origin = origin
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
        self.detector = DetectorBank(config)
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
        self._jobset_version = np.full(0, -1, dtype=np.int64)
        self._jobsets: list[tuple[str, ...]] = []
        self._jobset_ids: dict[tuple[str, ...], int] = {}
        self._intervals: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._intervals_version = -1
        #: Per series of a peer-compared lane: the worker it describes (see :func:`worker_name`).
        self._worker: dict[int, str] = {}

    # -- series bookkeeping -------------------------------------------------------------------
    def _register_new(self, out: PipelineOutput | None) -> None:
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
            self.detector.register(sid, info.mode, info.bad)
            self._lane[sid] = _LANE_CODE.get((meta.layer, info.meaning.value), -1)
            if self._lane[sid] in _PEER_CODES:
                self._worker[sid] = worker_name(meta.source, meta.labels)
            if out is not None and info.meaning.value == "unknown":
                out.unknown_metrics += 1

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
        self.rates.clear(sids)
        self.detector.clear(sids)
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

    def _jobset_of(self, sid: int) -> int:
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

    def _active(self, job: str, t: np.ndarray) -> np.ndarray:
        """Where ``job`` is running at times ``t`` (``inventory.job(job, t) is not None``, vectorised)."""
        if self._intervals_version != self.inventory.version:
            self._intervals = {}
            self._intervals_version = self.inventory.version
        iv = self._intervals.get(job)
        if iv is None:
            history = self.inventory.jobs.get(job) or []
            iv = (np.array([h.start for h in history], dtype=np.float64),
                  np.array([math.inf if h.end is None else h.end for h in history], dtype=np.float64))
            self._intervals[job] = iv
        starts, ends = iv
        if starts.size == 1:
            return (t >= starts[0]) & (t < ends[0])  # type: ignore[no-any-return]
        mask = np.zeros(t.shape[0], dtype=bool)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            mask |= (t >= s) & (t < e)
        return mask

    # -- processing -----------------------------------------------------------------------------
    def process(self, raw: bytes, origin: Origin) -> PipelineOutput:
        """Run one message through every stage. Never raises on bad input."""
        return self.process_many([(raw, origin)])

    def process_many(self, messages: Sequence[tuple[bytes, Origin]]) -> PipelineOutput:
        """Run the messages of one partition (in offset order) through every stage at once.

        Equivalent to :meth:`process` on each message in turn, with one set of array operations for
        the whole batch. Never raises on bad input.

        A sample of a new series that the series caps (:class:`streams.series.SeriesLimits`) refuse
        is dropped and counted (:attr:`PipelineOutput.refused`); each message with such samples gives
        one dead letter (``SeriesLimitExceeded``, with the count), and its other samples go on. After
        the batch, idle series are evicted (:meth:`_sweep`).
        """
        out = PipelineOutput(messages=len(messages))
        reg = self.registry
        known = reg.raw_ids
        ids_l: list[int] = []
        ts_l: list[float] = []
        val_l: list[float] = []
        ing_l: list[float] = []
        msg_l: list[int] = []
        #: message -> [first refused record, refused by the partition cap, by the source cap]
        refusals: dict[int, list[int]] = {}
        nan = math.nan
        # decode + validate: known series take the fast path (their key, and so their labels, were
        # validated when the series was first seen); anything else goes through validate_record.
        for m, (raw, origin) in enumerate(messages):
            records, rejection, control = decode_records(raw)
            if control is not None:
                out.control = control
                continue
            if rejection is not None or records is None:
                rej = rejection or Rejection(None, "empty message")
                stage = "decode" if rej.error == "DecodeFailed" else "validate"
                out.dead_letters.append(DeadLetterOut(stage, rej.reason, rej.error, None, raw, origin))
                continue
            for i, rec in enumerate(records):
                if type(rec) is dict:
                    try:
                        labels = rec.get("labels", _NO_LABELS)
                        sid = known[(rec["layer"], rec["source"], rec["metric"], tuple(labels.items()))]
                        ts = rec["ts"]
                        value = rec["value"]
                    except (KeyError, TypeError, AttributeError):
                        sid = -1
                    if sid >= 0:
                        tt = type(ts)
                        tv = type(value)
                        if ((tt is float or tt is int) and MIN_TS <= ts < MAX_TS
                                and (tv is float or tv is int) and -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE):
                            kind = rec.get("kind")
                            ingest = rec.get("ingest_ts")
                            ti = type(ingest)
                            if ((kind is None or kind == "gauge" or (kind == "counter" and value >= 0))
                                    and (ingest is None or ((ti is float or ti is int) and MIN_TS <= ingest < MAX_TS))):
                                ids_l.append(sid)
                                ts_l.append(ts)
                                val_l.append(value)
                                ing_l.append(nan if ingest is None else ingest)
                                msg_l.append(m)
                                continue
                try:
                    s = validate_record(rec)
                except ValueError as exc:
                    out.dead_letters.append(DeadLetterOut("validate", str(exc), "ValidationFailed", f"samples[{i}]",
                                                          raw, origin))
                    out.rejected += 1
                    continue
                sid = reg.admit(s.layer, s.source, s.metric, s.labels, s.kind)
                if sid < 0:
                    refused = refusals.get(m)
                    if refused is None:
                        refused = refusals[m] = [i, 0, 0]
                    refused[1 if sid == REFUSED_PARTITION else 2] += 1
                    continue
                ids_l.append(sid)
                ts_l.append(s.ts)
                val_l.append(s.value)
                ing_l.append(nan if s.ingest_ts is None else s.ingest_ts)
                msg_l.append(m)
        self._register_new(out)
        if refusals:
            self._refused(refusals, messages, out)
        if ids_l:
            self._arrays(ids_l, ts_l, val_l, ing_l, msg_l, messages, out)
        self._sweep(out, bool(refusals), messages)
        # Only now, after every stage succeeded: a batch that raised has not moved the offset, so the
        # agent's one-by-one retry processes its messages instead of skipping them as already seen.
        if messages and messages[-1][1].offset is not None:
            self.last_offset = messages[-1][1].offset
            self.last_record_ts = messages[-1][1].timestamp
        return out

    def _refused(self, refusals: dict[int, list[int]], messages: Sequence[tuple[bytes, Origin]],
                 out: PipelineOutput) -> None:
        """One dead letter per message whose new series a cap refused, with how many samples and why."""
        lim = self.config.limits
        for m, (first, by_partition, by_source) in refusals.items():
            why = []
            if by_partition:
                why.append(f"{by_partition} beyond max_series_per_partition ({lim.max_series} series held)")
                out.refused["partition"] = out.refused.get("partition", 0) + by_partition
            if by_source:
                why.append(f"{by_source} beyond max_series_per_source ({lim.max_per_source} per source)")
                out.refused["source"] = out.refused.get("source", 0) + by_source
            n = by_partition + by_source
            out.rejected += n
            raw, origin = messages[m]
            out.dead_letters.append(DeadLetterOut(
                "validate", f"series cap: {n} samples of new series refused: " + "; ".join(why),
                SeriesLimitExceeded.__name__, f"samples[{first}]", raw, origin))

    def _arrays(self, ids_l: list[int], ts_l: list[float], val_l: list[float], ing_l: list[float],
                msg_l: list[int], messages: Sequence[tuple[bytes, Origin]], out: PipelineOutput) -> None:
        """normalise -> rate -> detect -> map over the batch's valid samples (as arrays)."""
        reg = self.registry
        # normalise: catalogue kinds, counter sanity
        ids = np.array(ids_l, dtype=np.int64)
        ts_a = np.array(ts_l, dtype=np.float64)
        values = np.array(val_l, dtype=np.float64)
        ingest_a = np.array(ing_l, dtype=np.float64)
        msg = np.array(msg_l, dtype=np.int64)
        negative = reg.counter[ids] & (values < 0)
        if negative.any():
            for bad in np.flatnonzero(negative).tolist():
                out.dead_letters.append(self._dead_letter("normalise", "counter value is negative", "ValidationFailed",
                                                          int(ids[bad]), float(ts_a[bad]), messages[int(msg[bad])]))
            keep = np.flatnonzero(~negative)
            out.rejected += int(negative.sum())
            ids, ts_a, values, ingest_a, msg = ids[keep], ts_a[keep], values[keep], ingest_a[keep], msg[keep]
        if ids.size == 0:
            return
        counts = np.bincount(reg.layer_code[ids], minlength=len(LAYER_NAMES))
        out.by_layer = {LAYER_NAMES[c]: int(counts[c]) for c in np.flatnonzero(counts).tolist()}
        # Arrival order: messages in offset order, each message's samples in event-time order.
        order = np.lexsort((ts_a, msg)) if len(messages) > 1 else np.argsort(ts_a, kind="stable")
        ids, ts_a, values, ingest_a, msg = ids[order], ts_a[order], values[order], ingest_a[order], msg[order]
        self._observe_clocks(ids, ts_a, ingest_a, msg, messages, out)
        # rate + detect, a round of unique series at a time (a scrape is one round)
        for rnd in occurrence_rounds(ids):
            self._round(ids[rnd], ts_a[rnd], values[rnd], ingest_a[rnd], msg[rnd], out, messages)
        out.samples = int(ids.size) - out.out_of_order - out.duplicates
        mx = float(ts_a.max())
        out.max_ts = mx
        self.watermark = mx if self.watermark is None else max(self.watermark, mx)

    def _observe_clocks(self, ids: np.ndarray, ts: np.ndarray, ingest: np.ndarray, msg: np.ndarray,
                        messages: Sequence[tuple[bytes, Origin]], out: PipelineOutput) -> None:
        """Feed each (message, source)'s arrival delays to the clock tracker (arrival: ``ingest_ts``,
        else the Kafka record time); report sources whose clock crosses the tolerance."""
        kafka_ts = np.array([o.timestamp if o.timestamp is not None else math.nan for _, o in messages])
        arrival = np.where(np.isnan(ingest), kafka_ts[msg], ingest)
        ok = ~np.isnan(arrival)
        if not ok.any():
            return
        src = self._src_code[ids[ok]]
        pair = msg[ok].astype(np.int64) * (len(self._src_names) + 1) + src
        delay = arrival[ok] - ts[ok]
        t_ok = ts[ok]
        sids = ids[ok]
        # One median delay and one latest event time per (message, source), all groups at once.
        order = np.lexsort((delay, pair))
        pair, src, sids, delay = pair[order], src[order], sids[order], delay[order]
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        ends = np.r_[starts[1:], pair.size]
        n = ends - starts
        medians = 0.5 * (delay[starts + (n - 1) // 2] + delay[starts + n // 2])
        latest = np.maximum.reduceat(t_ok[order], starts)
        layer_code = self.registry.layer_code
        names = self._src_names
        for f, med, last in zip(starts.tolist(), medians.tolist(), latest.tolist(), strict=True):
            source = names[int(src[f])]
            layer = LAYER_NAMES[int(layer_code[sids[f]])]
            for t in self.clocks.observe_delay(layer, source, med, last):
                out.clocks.append({"type": "clock", "phase": t.phase, "source": t.source, "layer": t.layer,
                                   "ts": t.ts, "offset": t.offset, "uncertainty": t.uncertainty,
                                   "origin": self.origin})

    def _dead_letter(self, stage: str, reason: str, error: str, sid: int, ts: float,
                     message: tuple[bytes, Origin]) -> DeadLetterOut:
        meta = self.registry.meta[sid]
        return DeadLetterOut(stage, reason, error, f"{meta.layer}/{meta.source}/{meta.metric}@{ts}", message[0],
                             message[1])

    def _round(self, ids: np.ndarray, ts: np.ndarray, raw_values: np.ndarray, ingest: np.ndarray, msg: np.ndarray,
               out: PipelineOutput, messages: Sequence[tuple[bytes, Origin]]) -> None:
        reg = self.registry
        counter = reg.counter[ids]
        # Every series goes through the rate stage: counters get a rate; for all, a sample at or
        # before the series' last time is a duplicate (dropped, counted) or out of order (dead letter).
        last = self.rates.last_ts
        prev_ts = last[ids] if last.shape[0] > int(ids.max()) else np.full(ids.shape[0], np.nan)
        res = self.rates.update(ids, ts, raw_values)
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.where(counter, res.rate * reg.scale[ids], raw_values)
        usable = np.where(counter, ~np.isnan(res.rate), ~(res.out_of_order | res.duplicate))
        overflow = usable & ~np.isfinite(x)
        if overflow.any():  # a rate beyond float range (a huge jump over a tiny interval): bad input, not a value
            for bad in np.flatnonzero(overflow).tolist():
                out.rejected += 1
                out.dead_letters.append(self._dead_letter(
                    "rate", f"rate overflows: {raw_values[bad]:.6g} over {ts[bad] - prev_ts[bad]:.3g} s",
                    "ValidationFailed", int(ids[bad]), float(ts[bad]), messages[int(msg[bad])]))
            usable &= ~overflow
        if res.reset.any():
            out.resets += int((res.reset & counter).sum())
        if res.duplicate.any():
            out.duplicates += int(res.duplicate.sum())
        if res.out_of_order.any():
            for late in np.flatnonzero(res.out_of_order).tolist():
                out.out_of_order += 1
                out.dead_letters.append(self._dead_letter(
                    "rate", f"out of order: ts {ts[late]:.3f} is not after the series' last sample", "LateData",
                    int(ids[late]), float(ts[late]), messages[int(msg[late])]))
        use = np.flatnonzero(usable)
        if use.size == 0:
            return
        if use.size < ids.size:
            ids, ts, x, ingest, prev_ts = ids[use], ts[use], x[use], ingest[use], prev_ts[use]
        else:
            use = None  # type: ignore[assignment]
        self._forward_points(ids, ts, x, out)
        tr = self.detector.update(ids, ts, x)
        for k in range(tr.pos.size):
            i = int(tr.pos[k])
            meta = reg.meta[int(ids[i])]
            if meta.info.mode is Mode.CONTEXT:
                continue
            phase = "start" if tr.phase[k] == 1 else "end"
            onset = float(tr.onset_ts[k])
            labels = meta.labels
            affected = self.inventory.affected_jobs(meta.layer, meta.source, labels, onset)
            if not affected:
                out.unmapped_anomalies += 1
                continue
            direction = meta.info.bad.value
            if direction == "both":
                direction = "up" if (tr.value[k] >= tr.p50[k] or np.isnan(tr.p50[k])) else "down"
            ing = float(ingest[i])
            # Only a source flagged as skewed is re-timed; within tolerance, clocks are trusted as they are.
            offset, uncertainty = self.clocks.offset(meta.source)
            if not self.clocks.skewed(meta.source):
                offset = 0.0
            gap = float(ts[i] - prev_ts[i])
            interval = gap if math.isfinite(gap) and gap > 0 else 0.0
            for a in affected:
                out.anomalies.append({
                    "type": "anomaly", "phase": phase, "job_id": a.job_id, "ts": onset,
                    "confirmed_ts": float(ts[i]), "ingest_ts": None if math.isnan(ing) else ing,
                    "layer": meta.layer, "source": meta.source, "labels": labels, "metric": meta.metric,
                    "meaning": meta.info.meaning.value,
                    "role": "symptom" if meta.info.meaning.value in SYMPTOM_MEANINGS else "cause",
                    "direction": direction, "value": _f(tr.value[k]), "p50": _opt(tr.p50[k]),
                    "p99": _opt(tr.p99[k]), "score": _f(tr.score[k]), "relation": a.relation,
                    "origin": self.origin, "clock_offset": offset, "clock_uncertainty": uncertainty,
                    "interval": interval,
                })

    def _forward_points(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray, out: PipelineOutput) -> None:
        """Each job's own signals, grouped by (candidate job set, lane) with array operations."""
        lane = self._lane[ids]
        sel = np.flatnonzero(lane >= 0)
        if sel.size == 0:
            return
        sids = ids[sel]
        version = self.inventory.version
        stale = self._jobset_version[sids] != version
        if stale.any():
            for sid in np.unique(sids[stale]).tolist():
                self._jobset[sid] = self._jobset_of(sid)
                self._jobset_version[sid] = version
        js = self._jobset[sids].astype(np.int64)
        mapped = js >= 0
        if not mapped.all():
            sel, js = sel[mapped], js[mapped]
            if sel.size == 0:
                return
        group = js * 64 + lane[sel]
        order = np.argsort(group, kind="stable")
        sel, group = sel[order], group[order]
        bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), int(sel.size)]
        points = out.points
        names = self._worker
        for a, b in zip(starts, ends, strict=True):
            g = int(group[a])
            rows = sel[a:b]
            t = ts[rows]
            v = x[rows]
            lane_name = LANE_NAMES[g % 64]
            peer = g % 64 in _PEER_CODES
            whole: tuple[list[list[Any]], list[list[Any]]] | None = None
            for job in self._jobsets[g // 64]:
                active = self._active(job, t)
                if active.all():
                    if whole is None:
                        whole = _by_time(t, v, ids[rows] if peer else None, names)
                    groups, wgroups = whole
                elif active.any():
                    groups, wgroups = _by_time(t[active], v[active], ids[rows[active]] if peer else None, names)
                else:
                    continue
                lanes = points.get(job)
                if lanes is None:
                    lanes = points[job] = {}
                have = lanes.get(lane_name)
                if have is None:
                    lanes[lane_name] = list(groups)
                else:
                    have.extend(groups)
                if peer:
                    out.workers.setdefault(job, {}).setdefault(lane_name, []).extend(wgroups)

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The partition's state: every array over the whole id space (a free id's rows are clean),
        the registry with its free ids, and the event time of the last look for idle series."""
        n = self.registry.size
        arrays = {**self.rates.snapshot(n), **self.detector.snapshot(n)}
        meta = {"origin": self.origin, "series": self.registry.snapshot(), "watermark": self.watermark,
                "offset": self.last_offset, "record_ts": self.last_record_ts, "window": self.config.window,
                "clocks": self.clocks.snapshot(), "swept": self._swept}
        return pack(arrays, meta)

    def restore(self, blob: bytes) -> None:
        arrays, meta = unpack(blob)
        self.registry = SeriesRegistry.restore(meta["series"], self.config.limits)
        if arrays["rates.last_ts"].shape[0] != self.registry.size:
            raise ValueError("snapshot: the state arrays and the series registry differ in size")
        self.rates = CounterRates()
        self.rates.restore(arrays)
        self.detector = DetectorBank(self.config)
        self._src_code = np.full(0, -1, dtype=np.int32)
        self._src_names = []
        self._src_ids = {}
        self._src_free = []
        self._lane = np.full(0, -1, dtype=np.int8)
        self._jobset = np.full(0, -1, dtype=np.int32)
        self._jobset_version = np.full(0, -1, dtype=np.int64)
        self._worker = {}
        self._register_new(None)
        self.detector.restore(arrays)
        self.watermark = meta["watermark"]
        self.last_offset = meta["offset"]
        self.last_record_ts = meta.get("record_ts")
        self._swept = meta.get("swept")
        self.clocks = ClockTracker(self.clock_config)
        if "clocks" in meta:
            self.clocks.restore(meta["clocks"])

    def state_bytes(self) -> dict[str, float]:
        """Bytes of state by part (numpy arrays at their allocated capacity, plus the registry)."""
        n = max(len(self.registry), 1)
        parts = {k: v * max(self.detector.mode.shape[0], 1) for k, v in self.detector.nbytes_per_series().items()}
        parts["rates"] = float(self.rates.last_ts.nbytes + self.rates.last_value.nbytes)
        parts["registry"] = float(self.registry.nbytes())
        parts["lanes"] = float(self._lane.nbytes + self._jobset.nbytes + self._jobset_version.nbytes)
        parts["per_series"] = sum(parts.values()) / n
        return parts


def _f(v: Any) -> float:
    f = float(v)
    return f if np.isfinite(f) else 0.0


def _opt(v: Any) -> float | None:
    f = float(v)
    return f if np.isfinite(f) else None
