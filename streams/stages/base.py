"""The one small interface every ingest stage has, and the batch the stages hand on.

A stage is an object with a ``name`` and ``run(batch)``. :meth:`streams.pipeline.PartitionPipeline.process_many`
builds one :class:`Batch` per call (the messages of one input partition, in offset order) and runs its
stages over it in order; each stage reads what the stages before it left in the batch and adds its
own part. The work is per batch, on arrays: a stage loops over messages or records only where the input
is still bytes (decode, validate).

A stage's ``name`` is the one in dead letters (``stage``), in ``lockstep_stage_seconds{stage}`` and in
logs. Stages hold no state of their own: they read and update the partition's (the
:class:`~streams.pipeline.PartitionPipeline` in ``batch.part``, whose state is snapshotted and moved
with the partition), so one stage object serves every partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from models.deadletter import dead_letter_record
from models.errors import error_class
from streams.detect import Transitions

if TYPE_CHECKING:
    from streams.pipeline import PartitionPipeline


class Stage(Protocol):
    """One step of the ingest pipeline."""

    #: The stage's name in dead letters, metrics and logs.
    name: str

    def run(self, batch: Batch) -> None:
        """Do this stage's part of ``batch``. Bad input becomes dead letters in ``batch.out``; never raises on it."""
        ...


@dataclass(frozen=True, slots=True)
class StageRef:
    """A stage that runs elsewhere (the correlation and delivery side), named where the pipeline is listed."""

    name: str
    #: Where it runs (the agent or service).
    runs_in: str
    #: The code that does it, as importable dotted names (module, class or function, method).
    code: tuple[str, ...]
    does: str


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
    #: Seconds each stage took, by stage name, when the caller passed a timer to ``process_many``.
    stage_seconds: dict[str, float] = field(default_factory=dict)

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


@dataclass(slots=True)
class Round:
    """One round of a batch's usable samples (each series at most once), as the rate stage leaves it.

    ``x`` is the value the detector scores (a counter's rate, a gauge's value); ``prev_ts`` the
    series' sample time before this one (NaN for its first).
    """

    ids: np.ndarray
    ts: np.ndarray
    x: np.ndarray
    ingest: np.ndarray
    prev_ts: np.ndarray
    #: Episode transitions, once the score stage ran.
    transitions: Transitions | None = None


@dataclass(slots=True)
class Batch:
    """What the stages of one ``process_many`` call share, filled in stage by stage.

    - decode: ``decoded``, one entry per message (lazily, as validate reads them): its typed rows or records, its
      dead letter, or None (a control message);
    - validate: the valid samples as parallel lists (``ids_l``, ``ts_l``, ``val_l``), the message each came
      from as runs (``run_msg[i]`` gave the next ``run_len[i]`` samples), the arrival times the samples
      carry (``ing_at``: a list of the arrival times from a position on, NaN where a sample has none; a
      sample in no such list has none) and ``refused``, whether a series cap refused any;
    - normalise: the same samples as arrays in arrival order (``ids``..``msg``; None: no sample left);
    - rate: ``rounds``, the usable samples a round of unique series at a time;
    - score: each round's ``transitions``.
    """

    part: PartitionPipeline
    messages: Sequence[tuple[bytes, Origin]]
    out: PipelineOutput
    decoded: Iterable[list[Any] | DeadLetterOut | None] = ()  # list[Any]: records or typed rows
    ids_l: list[int] = field(default_factory=list)
    ts_l: list[float] = field(default_factory=list)
    val_l: list[float] = field(default_factory=list)
    run_msg: list[int] = field(default_factory=list)
    run_len: list[int] = field(default_factory=list)
    ing_at: list[tuple[int, list[float]]] = field(default_factory=list)
    refused: bool = False
    ids: np.ndarray | None = None
    ts: np.ndarray | None = None
    values: np.ndarray | None = None
    ingest: np.ndarray | None = None
    msg: np.ndarray | None = None
    rounds: list[Round] = field(default_factory=list)
    #: The clock the stage timings are taken with (None: not timed).
    timer: Callable[[], float] | None = None
    #: Seconds a lazy stage spent inside a later stage's ``run``, by the lazy stage's name, and in all.
    deferred: dict[str, float] = field(default_factory=dict)
    deferred_total: float = 0.0
    #: The timer's last reading at the end of a run of stages (the next run's start; None: read it anew,
    #: as when other partitions' stages ran in between).
    last_tick: float | None = None

    def defer(self, stage: str, seconds: float) -> None:
        """Count ``seconds`` of work done inside another stage's ``run`` as ``stage``'s."""
        self.deferred[stage] = self.deferred.get(stage, 0.0) + seconds
        self.deferred_total += seconds

    def dead_letter(self, stage: str, reason: str, error: str, sid: int, ts: float, m: int) -> None:
        """A dead letter for series ``sid``'s sample at ``ts`` of message ``m``."""
        meta = self.part.registry.meta[sid]
        raw, origin = self.messages[m]
        record = f"{meta.layer}/{meta.source}/{meta.metric}@{ts}"
        self.out.dead_letters.append(DeadLetterOut(stage, reason, error, record, raw, origin))
