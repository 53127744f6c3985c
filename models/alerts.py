"""The alert contract: what Lockstep tells operators, on the ``alerts`` topic and in replay output.

Times are RFC 3339 UTC strings. ``timeline`` is in event-time order and its first entry is the root
cause. Later issues may add fields; these never break.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Severity(StrEnum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class AlertStatus(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class Domain(StrEnum):
    NETWORK = "network"
    STORAGE = "storage"
    COMPUTE = "compute"
    DATALOADER = "dataloader"
    UNKNOWN = "unknown"


class Symptom(BaseModel):
    """How the job itself degraded: the job-level signal and how far it moved."""

    model_config = ConfigDict(extra="forbid")

    layer: str
    metric: str
    baseline: float
    value: float
    ratio: float
    onset: str


class RootCause(BaseModel):
    """The first mover: ``source`` and ``labels`` exactly as in the sample that moved first."""

    model_config = ConfigDict(extra="forbid")

    domain: Domain
    layer: str | None
    source: str | None
    labels: dict[str, str] = Field(default_factory=dict)
    metric: str | None
    first_seen: str | None
    meaning: str | None = None
    reason: str = ""


class TimelineEntry(BaseModel):
    """One anomaly on the job's timeline (the earliest of its kind; ``entities`` says how many)."""

    model_config = ConfigDict(extra="forbid")

    ts: str
    layer: str
    source: str
    labels: dict[str, str] = Field(default_factory=dict)
    metric: str
    value: float
    p50: float | None
    p99: float | None
    score: float
    meaning: str | None = None
    entities: int = 1
    clock_offset: float | None = Field(default=None, description="set when ts was corrected for the source's clock")


class OtherJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    gpus: int
    relation: str = "same_switch"


AlertType = Literal["job_slowdown", "clock_skew", "checkpoint_contention", "gpu_utilisation", "straggler",
                    "job_stalled"]


class Alert(BaseModel):
    """One alert record. ``alert_id`` is unique per incident; ``dedup_key`` is stable per (job, cause)."""

    model_config = ConfigDict(extra="forbid")

    alert_id: str
    dedup_key: str
    type: AlertType
    status: AlertStatus
    severity: Severity
    job_id: str | None
    gpus: int
    nodes: list[str]
    started_at: str
    detected_at: str
    resolved_at: str | None = None
    symptom: Symptom | None
    root_cause: RootCause
    timeline: list[TimelineEntry]
    other_jobs: list[OtherJob] = Field(default_factory=list)
    summary: str
    labels: dict[str, str] = Field(default_factory=dict)
    details: dict[str, object] = Field(default_factory=dict)
    silenced_by: list[str] = Field(default_factory=list, description="silences/maintenance windows muting it: "
                                   "recorded, not notified")
