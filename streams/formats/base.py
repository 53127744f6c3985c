"""The common shape of every format adapter: what it returns, how it rejects, how it builds a sample.

An adapter is a pure function ``(raw bytes, Context) -> None`` that fills ``Context.out`` (a
:class:`Converted`). It never raises on bad input: a record it cannot read becomes a
:class:`FormatRejection` naming the format, the record (``line 17``, ``jobs[3]``...) and what was
wrong, and the adapter keeps going with the next record. Time is an input: formats without in-band
timestamps use ``Context.ts`` (the collection time the caller passes, e.g. the Kafka record time) and
reject the message when it is missing.

Every sample an adapter emits goes through :func:`streams.ingest.validate_record` here, so what
leaves an adapter is exactly the native contract of :class:`models.samples.TelemetrySample`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from models.timeutil import MAX_TS, MIN_TS, TimestampError, parse_ts
from streams.catalogue import CATALOGUE
from streams.formats.state import AdapterState
from streams.ingest import validate_record

ErrorName = Literal["DecodeFailed", "ValidationFailed", "UnsupportedFormat"]

#: Headers every adapter understands (keys are case-insensitive; values are UTF-8 bytes or str).
HEADER_SOURCE = "source"        # the host / switch / pool the message is about
HEADER_LAYER = "layer"          # override the layer an adapter would choose
HEADER_TS = "ts"                # collection time (Unix seconds or RFC 3339) for formats without one
HEADER_JOB_ID = "job_id"        # attach a job id label (NCCL Inspector JSON carries none)
HEADER_DEVICE = "device"        # HCA / netdev name for perfquery and ethtool output
HEADER_STREAM = "stream"        # producing stream (file, Kafka key): NCCL Inspector v4.3 context is per stream
HEADER_CONTENT_TYPE = "content-type"

_NO_LABELS: dict[str, str] = {}
#: Formats without an explicit unit: a number is read in the first unit that lands in 2000..2100.
_UNIT_DIVISORS: tuple[tuple[str, float], ...] = (("s", 1.0), ("ms", 1e3), ("us", 1e6), ("ns", 1e9))


@dataclass(frozen=True, slots=True)
class FormatRejection:
    """One record (or a whole message, ``record=None``) an adapter could not use."""

    format: str
    record: str | None
    reason: str
    error: ErrorName = "ValidationFailed"

    def __str__(self) -> str:
        where = f" {self.record}" if self.record else ""
        return f"{self.format}{where}: {self.reason}"

    def dead_letter_fields(self) -> dict[str, Any]:
        """The fields of a ``dlq`` record (stage ``convert``) this rejection fills."""
        return {"stage": "convert", "reason": f"{self.format}: {self.reason}", "error": self.error,
                "record": self.record}


@dataclass(slots=True)
class Converted:
    """What one message became.

    - ``samples``: native telemetry sample dicts (``ts, layer, source, metric, value, labels`` and,
      when the format says so, ``kind``; ``ingest_ts`` when the caller gave one), each already valid.
      Samples of one message may share one ``labels`` dict: treat them as read-only.
    - ``inventory``: native inventory event dicts (``kind`` ``job``/``link``/``switch``/``pool``).
    - ``rejections``: one per record that could not be used, in input order.
    - ``unknown_metrics``: how many samples carry a metric name the catalogue does not know (they are
      kept, with meaning ``unknown``); ``unknown_names`` lists those names.
    - ``skipped``: documented non-measurements left out, by reason (``N/A (no PMA)``, NaN values,
      DCGM blank sentinels, OpenMetrics ``_created`` samples...). Never bad input: bad input is a
      rejection.
    """

    samples: list[dict[str, Any]] = field(default_factory=list)
    inventory: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[FormatRejection] = field(default_factory=list)
    unknown_metrics: int = 0
    unknown_names: set[str] = field(default_factory=set)
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def converted(self) -> int:
        return len(self.samples) + len(self.inventory)

    def merge(self, other: Converted) -> None:
        """Append ``other`` (used by the CLI to sum files)."""
        self.samples.extend(other.samples)
        self.inventory.extend(other.inventory)
        self.rejections.extend(other.rejections)
        self.unknown_metrics += other.unknown_metrics
        self.unknown_names |= other.unknown_names
        for reason, n in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n


class Context:
    """Per-message inputs and the output being built. Adapters use its helpers only."""

    __slots__ = ("_checked_labels", "default_source", "format", "headers", "ingest_ts", "out", "state", "ts")

    def __init__(self, fmt: str, *, headers: Mapping[str, bytes | str] | None, default_source: str | None,
                 ts: float | None, ingest_ts: float | None, state: AdapterState) -> None:
        self.format = fmt
        self.headers = decode_headers(headers)
        self.default_source = default_source or None
        self.ts = ts
        self.ingest_ts = ingest_ts
        self.state = state
        self.out = Converted()
        # Label dicts already validated in this message (adapters share one dict across the lines
        # that repeat a label block), by id; the dict is kept so its id cannot be reused.
        self._checked_labels: dict[int, dict[str, str]] = {}

    # -- inputs -----------------------------------------------------------------------------------
    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if value else None

    def source(self, *candidates: str | None) -> str | None:
        """The first non-empty of ``candidates``, then the ``source`` header, then the default."""
        for c in candidates:
            if c:
                return c
        return self.header(HEADER_SOURCE) or self.default_source

    def layer(self, default: str) -> str:
        return self.header(HEADER_LAYER) or default

    def collection_ts(self) -> float | None:
        """The collection time for formats without in-band timestamps (``ts`` argument or header)."""
        if self.ts is not None:
            return self.ts
        text = self.header(HEADER_TS)
        if text is None:
            return None
        try:
            return parse_time_value(text, "ts header")
        except ValueError:
            return None

    # -- outputs ----------------------------------------------------------------------------------
    def reject(self, record: str | None, reason: str, error: ErrorName = "ValidationFailed") -> None:
        self.out.rejections.append(FormatRejection(self.format, record, reason, error))

    def skip(self, reason: str, n: int = 1) -> None:
        self.out.skipped[reason] = self.out.skipped.get(reason, 0) + n

    def sample(self, record: str | None, ts: float, layer: str, source: str, metric: str, value: float,
               labels: dict[str, str], kind: str | None = None) -> bool:
        """Validate and append one native sample; a contract breach becomes a rejection."""
        rec: dict[str, Any] = {"ts": ts, "layer": layer, "source": source, "metric": metric, "value": value,
                               "labels": labels}
        if kind is not None:
            rec["kind"] = kind
        if self.ingest_ts is not None:
            rec["ingest_ts"] = self.ingest_ts
        checked = self._checked_labels.get(id(labels)) is labels
        try:
            if checked:  # the same rules, minus re-checking a label dict already checked
                rec["labels"] = _NO_LABELS
                validate_record(rec)
                rec["labels"] = labels
            else:
                validate_record(rec)
                self._checked_labels[id(labels)] = labels
        except ValueError as exc:
            self.reject(record, f"{metric}: {exc}")
            return False
        self.out.samples.append(rec)
        return True

    def event(self, record: str | None, event: dict[str, Any]) -> bool:
        """Validate and append one native inventory event (full pydantic model: events are rare)."""
        from pydantic import ValidationError

        from models.inventory import inventory_adapter

        try:
            inventory_adapter.validate_python(event)
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
            self.reject(record, f"inventory event breaks the contract: {errs}")
            return False
        self.out.inventory.append(event)
        return True

    def finish(self) -> Converted:
        """Count unknown metric names and return the output."""
        out = self.out
        unknown = 0
        for s in out.samples:
            if s["metric"] not in CATALOGUE:
                unknown += 1
                out.unknown_names.add(s["metric"])
        out.unknown_metrics = unknown
        return out


#: An adapter fills ``ctx.out`` from the raw bytes.
AdapterFn = Callable[[bytes, Context], None]


@dataclass(frozen=True, slots=True)
class Adapter:
    """One real format: its name in ``FORMATS``, what it produces, and where it is documented."""

    name: str
    fn: AdapterFn
    produces: Literal["samples", "inventory"]
    #: Records are separated by newlines, so a big file may be split at line boundaries.
    line_oriented: bool
    description: str
    reference: str


# -- shared helpers ---------------------------------------------------------------------------------

def decode_headers(headers: Mapping[str, bytes | str] | None) -> dict[str, str]:
    """Lower-case keys, UTF-8 values (undecodable values are dropped: a header is a hint, not data)."""
    if not headers:
        return {}
    out: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(value, bytes | bytearray):
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                continue
        else:
            text = str(value)
        out[key.lower()] = text.strip()
    return out


def decode_text(raw: bytes, ctx: Context) -> str | None:
    """UTF-8 text of a message, or a whole-message rejection."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        ctx.reject(None, f"not UTF-8 text: {exc.reason} at byte {exc.start}", "DecodeFailed")
        return None


def timed_text(raw: bytes, ctx: Context, what: str) -> tuple[str, float] | None:
    """The opening of a text format without in-band time (a report, a table, a dump): its UTF-8 text and
    the collection time, or None after rejecting the message (``what`` names the output in the reason:
    ``"the ports report carries"``)."""
    text = decode_text(raw, ctx)
    if text is None:
        return None
    ts = ctx.collection_ts()
    if ts is None:
        ctx.reject(None, f"{what} no time: give the collection time (ts)")
        return None
    return text, ts


def host_text(raw: bytes, ctx: Context, what: str) -> tuple[str, float, str] | None:
    """The opening of a per-host text format without in-band host or time (ethtool, perfquery, sysfs):
    the UTF-8 text, the collection time and the host, or None after rejecting the message (``what``
    names the output in the reason: ``"ethtool output carries"``)."""
    text = decode_text(raw, ctx)
    if text is None:
        return None
    ts = ctx.collection_ts()
    source = ctx.source()
    if ts is None or source is None:
        missing = " and ".join(m for m, ok in (("collection time (ts)", ts is not None),
                                               ("source", source is not None)) if not ok)
        ctx.reject(None, f"{what} no host or time: give the {missing}")
        return None
    return text, ts, source


def ts_in_unit(value: float, divisor: float, what: str) -> float:
    """``value`` in a known unit (``divisor`` per second) as Unix seconds, range-checked."""
    if not math.isfinite(value):
        raise ValueError(f"{what} is not finite")
    ts = value / divisor
    if not MIN_TS <= ts < MAX_TS:
        raise ValueError(f"{what} {value!r} is outside 2000-01-01..2100-01-01")
    return ts


def infer_epoch(value: float, what: str) -> float:
    """A number that is Unix time in s, ms, us or ns, whichever lands in 2000..2100 (they cannot overlap).

    >>> infer_epoch(1764502930, "t"), infer_epoch(1764502930500, "t"), infer_epoch(1764502930e9, "t")
    (1764502930.0, 1764502930.5, 1764502930.0)
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number")
    for _unit, div in _UNIT_DIVISORS:
        ts = value / div
        if MIN_TS <= ts < MAX_TS:
            return float(ts)
    raise ValueError(f"{what} {value!r} is not a time in 2000..2100 in s, ms, us or ns")


def parse_time_value(value: Any, what: str) -> float:
    """A number (unit inferred) or an RFC 3339 string (nanosecond fractions allowed) as Unix seconds."""
    if isinstance(value, str):
        text = value.strip()
        # Python parses at most microseconds: cut longer fractions (Vector and Go print nanoseconds).
        dot = text.find(".")
        if dot != -1:
            end = dot + 1
            while end < len(text) and text[end].isdigit():
                end += 1
            if end - dot - 1 > 6:
                text = text[: dot + 7] + text[end:]
        try:
            return parse_ts(text)
        except TimestampError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{what} {value[:40]!r} is neither a number nor RFC 3339 with an offset") from None
        return infer_epoch(number, what)
    return infer_epoch(value, what)


def parse_number(text: str) -> float | None:
    """A decimal/float literal as float; None when it is not one (Python's ``1_0`` is refused)."""
    if "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def clean_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """String label values; empty values dropped (Prometheus: an empty label equals no label)."""
    return {str(k): v if isinstance(v, str) else str(v) for k, v in labels.items() if v != "" and v is not None}


def strip_port(instance: str) -> str:
    """``host:9100`` -> ``host``; ``[::1]:9100`` -> ``::1``; anything else unchanged.

    >>> strip_port("gpu001:9100"), strip_port("[fe80::1]:9400"), strip_port("gpu001")
    ('gpu001', 'fe80::1', 'gpu001')
    """
    if instance.startswith("["):
        close = instance.find("]")
        return instance[1:close] if close > 0 else instance
    head, sep, tail = instance.rpartition(":")
    if sep and tail.isdigit() and head and ":" not in head:
        return head
    return instance
