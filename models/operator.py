"""Operator writes: annotations and silences (topics ``annotations`` and ``silences``, docs/api.md).

Two kinds of model per record:

- the *request* an operator sends to the HTTP API (:class:`AnnotationRequest`,
  :class:`SilenceRequest`): strict, unknown fields refused, nothing coerced ("5" is not 5);
- the *record* Lockstep writes to the topic (:class:`AnnotationRecord`, :class:`SilenceRecord`),
  which is what consumers (the correlation stage, the read model) read back.

Times on these records are Unix seconds (``float``), like every record between Lockstep's stages.
A silence's times are wall-clock times (an operator silences "for the next two hours"); an
annotation's ``ts`` is the event time of the change it describes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from models.timeutil import parse_ts

#: Label names a silence may match on (an alert's labels as :func:`streams.rules.match_labels` makes
#: them: job_id, alertname, domain, severity, dedup_key, switch, port, node, pool, ...).
LABEL_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_SILENCE_S = 30 * 24 * 3600.0

AnnotationKind = Literal["fix", "change", "note"]
SilenceKind = Literal["silence", "maintenance"]

Text = Annotated[str, Field(min_length=1, max_length=1024)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


def _ts(value: Any) -> float:
    """A timestamp field: a number or an RFC 3339 string with an offset (see :func:`parse_ts`)."""
    return parse_ts(value)


class AnnotationRequest(BaseModel):
    """``POST /annotations``: "at ``ts`` we did this to ``job_id``".

    ``ts`` defaults to the time the API received the request.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    job_id: Name
    text: Text
    kind: AnnotationKind = "note"
    ts: float | None = None
    author: Annotated[str, Field(min_length=1, max_length=128)] | None = None

    @field_validator("ts", mode="before")
    @classmethod
    def _parse_ts(cls, value: Any) -> float | None:
        return None if value is None else _ts(value)


class AnnotationRecord(BaseModel):
    """One record of the ``annotations`` topic (key: ``job_id``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["annotation"] = "annotation"
    annotation_id: str
    job_id: str
    ts: float = Field(description="event time of the change (Unix seconds)")
    kind: AnnotationKind
    text: str
    author: str | None = None
    created_at: float = Field(description="when the API accepted it (Unix seconds, wall clock)")


class SilenceRequest(BaseModel):
    """``POST /silences``: mute alerts whose labels equal every matcher, from ``starts_at`` to ``ends_at``.

    The labels are those of :func:`streams.rules.match_labels` (``job_id``, ``alertname``, ``domain``,
    ``severity``, ``switch``, ``port``, ``node``, ``pool``, ...); ``kind: maintenance`` marks a
    planned window on infrastructure.

    Give ``ends_at`` or ``duration_s`` (not both). ``starts_at`` defaults to the time of the request.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    matchers: dict[Annotated[str, Field(pattern=LABEL_NAME, max_length=64)], Name] = Field(
        min_length=1, max_length=16)
    kind: SilenceKind = "silence"
    created_by: Annotated[str, Field(min_length=1, max_length=128)]
    comment: Text
    starts_at: float | None = None
    ends_at: float | None = None
    duration_s: float | None = Field(default=None, gt=0, le=MAX_SILENCE_S)

    @field_validator("starts_at", "ends_at", mode="before")
    @classmethod
    def _parse_ts(cls, value: Any) -> float | None:
        return None if value is None else _ts(value)

    @model_validator(mode="after")
    def _one_end(self) -> SilenceRequest:
        if (self.ends_at is None) == (self.duration_s is None):
            raise ValueError("give exactly one of ends_at and duration_s")
        return self


class SilenceRecord(BaseModel):
    """One record of the compacted ``silences`` topic (key: ``silence_id``; the latest is current).

    Expiring a silence writes it again with ``ends_at`` set to the time of expiry.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["silence"] = "silence"
    silence_id: str
    matchers: dict[str, str]
    kind: SilenceKind = Field(default="silence", description="maintenance: a planned window on infrastructure")
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float
    updated_at: float

    @model_validator(mode="after")
    def _order(self) -> SilenceRecord:
        if self.ends_at < self.starts_at:
            raise ValueError("ends_at is before starts_at")
        return self
