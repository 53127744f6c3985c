"""Records that travel between Lockstep's own stages: dead letters, anomalies, watermarks.

These are Lockstep's internal contracts (topics ``dlq`` and ``anomalies``). They are plain
``TypedDict`` shapes on the hot path and documented pydantic models here for the schema command.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeadLetter(BaseModel):
    """A message (or one record inside it) that a stage could not use, with everything to replay it.

    ``original`` is the exact original bytes, base64-encoded; ``record`` names the record inside a
    batch (``samples[3]``, ``line 17``) when only part of a message was bad.
    """

    model_config = ConfigDict(extra="forbid")

    stage: str
    reason: str
    error: str = Field(description="Error class name from the error tree, e.g. ValidationFailed")
    topic: str | None
    partition: int | None
    offset: int | None
    record: str | None = None
    original: str = Field(description="base64 of the original bytes (their first MiB when truncated)")
    original_size: int
    original_truncated: bool = Field(default=False, description="the original was too large to carry whole; "
                                     "it stays at topic/partition/offset until the topic's retention")
    original_sha256: str | None = None
    key: str | None = None
    ts: float = Field(description="when the stage rejected it (Unix seconds, record time)")
    retryable: bool = False


class AnomalyRecord(BaseModel):
    """An anomaly episode of one series, mapped to one job.

    ``phase`` is ``start`` when the episode is confirmed (``ts`` = its onset) and ``end`` when it
    has cleared (``ts`` = the first normal sample).
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["anomaly"] = "anomaly"
    phase: Literal["start", "end"]
    job_id: str
    ts: float
    confirmed_ts: float
    ingest_ts: float | None = None
    layer: str
    source: str
    labels: dict[str, str]
    metric: str
    meaning: str
    role: Literal["cause", "symptom"]
    direction: Literal["up", "down"]
    value: float
    p50: float | None
    p99: float | None
    score: float
    relation: str = Field(description="how the series reaches the job: node, port, switch, pool, job")
    origin: str
    clock_offset: float = Field(default=0.0, description="the source's estimated clock error (s); negative = "
                                "behind. Correlation orders evidence by ts - clock_offset")
    clock_uncertainty: float = Field(default=0.0, description="spread of that estimate (s)")
    interval: float = Field(default=0.0, description="the series' sampling interval (s): the onset is known "
                            "only to within it")


class ClockRecord(BaseModel):
    """A source's clock went beyond (``start``) or back within (``end``) the tolerance."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["clock"] = "clock"
    phase: Literal["start", "end"]
    source: str
    layer: str
    ts: float
    offset: float
    uncertainty: float
    origin: str


class WatermarkRecord(BaseModel):
    """Event-time progress of each input partition a worker owns (broadcast to every partition)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["watermark"] = "watermark"
    origins: dict[str, float]
    eos: list[str] = Field(default_factory=list, description="origins that reached end of input")
