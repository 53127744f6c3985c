"""The telemetry sample contract: one measurement of one series at one event time.

This pydantic model is the *reference* for the contract (JSON Schema, docs, edge validation). The
ingest hot path validates batches with :mod:`streams.ingest`, which applies exactly these rules
without building a model per sample; a differential test keeps the two in agreement.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

from models.timeutil import parse_ts

#: Size limits applied to every string in a sample ("oversized strings" are rejected, never cut).
MAX_SOURCE_LEN = 256
MAX_METRIC_LEN = 256
MAX_LABELS = 64
MAX_LABEL_KEY_LEN = 128
MAX_LABEL_VALUE_LEN = 1024
#: A message larger than this is dead-lettered before it is decoded.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: A batch with more samples than this is dead-lettered whole.
MAX_BATCH_SAMPLES = 100_000
#: Largest magnitude a sample value may have: what a 64-bit counter can hold. Anything beyond it is not a
#: measurement (and would overflow a rate or a percentile sketch): it is rejected as bad input.
MAX_ABS_VALUE = 2.0**64


class Layer(StrEnum):
    """The telemetry layers. Each has its own input topic ``telemetry.<layer>``."""

    GPU = "gpu"
    NCCL = "nccl"
    NIC = "nic"
    SWITCH = "switch"
    STORAGE = "storage"
    HOST = "host"
    STEP = "step"


class MetricKind(StrEnum):
    """``gauge``: a level; ``counter``: cumulative, monotone except for resets."""

    GAUGE = "gauge"
    COUNTER = "counter"


Timestamp = Annotated[float, Field(description="Unix seconds, or an RFC 3339 string with an offset")]


class TelemetrySample(BaseModel):
    """One measurement. Unknown extra fields are ignored so producers can add their own.

    >>> TelemetrySample.model_validate({"ts": "2025-11-30T11:42:10Z", "layer": "switch",
    ...     "source": "leaf03", "metric": "SymbolErrorCounter", "value": 4211,
    ...     "labels": {"port": "17"}}).ts
    1764502930.0
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    ts: Timestamp
    ingest_ts: Timestamp | None = Field(
        default=None, description="When the collector received it; stands in for the Kafka timestamp in replays"
    )
    layer: Layer
    source: str = Field(min_length=1, max_length=MAX_SOURCE_LEN)
    metric: str = Field(min_length=1, max_length=MAX_METRIC_LEN)
    value: StrictInt | StrictFloat
    labels: dict[str, str] = Field(default_factory=dict)
    kind: MetricKind | None = None

    @field_validator("ts", "ingest_ts", mode="before")
    @classmethod
    def _parse_time(cls, value: Any) -> Any:
        if value is None:
            return None
        return parse_ts(value)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("value is not finite")
        if abs(value) > MAX_ABS_VALUE:
            raise ValueError(f"value {value:.6g} is beyond +-2^64 (no counter or gauge holds it)")
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("labels must be an object of strings")
        if len(value) > MAX_LABELS:
            raise ValueError(f"more than {MAX_LABELS} labels")
        for key, val in value.items():
            if not isinstance(val, str):
                raise ValueError(f"label {key!r} is not a string")
            if len(key) > MAX_LABEL_KEY_LEN or not key:
                raise ValueError(f"label name {key[:40]!r} is empty or longer than {MAX_LABEL_KEY_LEN}")
            if len(val) > MAX_LABEL_VALUE_LEN:
                raise ValueError(f"label {key!r} longer than {MAX_LABEL_VALUE_LEN}")
        return value

    @model_validator(mode="after")
    def _counter_non_negative(self) -> TelemetrySample:
        if self.kind is MetricKind.COUNTER and self.value < 0:
            raise ValueError("counter value is negative")
        return self
