"""Prometheus remote-write 1.0: a snappy-compressed protobuf ``WriteRequest`` (the HTTP POST body).

Reference: https://prometheus.io/docs/specs/prw/remote_write_spec/ and ``prompb/remote.proto`` /
``prompb/types.proto`` in prometheus/prometheus::

    WriteRequest { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    Label        { string name = 1; string value = 2; }
    Sample       { double value = 1; int64 timestamp = 2; }          // milliseconds
    MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4; string unit = 5; }

The body is snappy's *block* format (not the framed stream format), as the spec requires. The
protobuf wire format is read here directly (five small messages; no generated code, no protobuf
runtime on the hot path); unknown fields are skipped as protobuf requires, so exemplars and
histograms of later senders do not break it.

Each sample becomes one native sample through the same profiles as a Prometheus scrape
(:mod:`streams.formats.metrics`): ``__name__`` is the metric, the other labels are labels, the
source comes from the profile's labels (``Hostname`` for dcgm-exporter), then ``host`` /
``instance`` (Prometheus adds ``instance`` to every scraped series). The kind comes from the
request's ``metadata`` (counter), else the ``_total`` naming convention. Prometheus's staleness
markers (a NaN) are skipped and counted, like every non-finite value. A body that is not snappy or
not a ``WriteRequest`` is one whole-message rejection (``DecodeFailed``): the HTTP receiver answers
400 for it, so the sender does not retry what can never succeed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from models.samples import MAX_MESSAGE_BYTES
from streams.formats.base import Context, ts_in_unit
from streams.formats.metrics import MetricEmitter, kind_from_name

#: ``MetricMetadata.MetricType`` values that are cumulative counters.
_COUNTER_TYPES = frozenset({1})  # COUNTER
SKIP_NO_SAMPLES = "remote-write series with no samples"


class WireError(ValueError):
    """The bytes are not the protobuf message they claim to be."""


@dataclass(frozen=True, slots=True)
class Series:
    """One ``TimeSeries``: its labels (``__name__`` included) and its ``(value, timestamp ms)`` samples."""

    labels: dict[str, str]
    samples: list[tuple[float, int]]


def snappy_length(raw: bytes) -> int:
    """The uncompressed length a snappy block announces (its leading varint), read before decompressing.

    >>> snappy_length(bytes([0x80, 0x01]) + b"...")
    128
    """
    value, _ = _varint(raw, 0)
    return value


def decompress(raw: bytes, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """The snappy block ``raw`` uncompressed; refuses more than ``limit`` bytes before inflating any."""
    import cramjam

    try:
        length = snappy_length(raw)
    except WireError:
        raise WireError("not a snappy block: no length preamble") from None
    if length > limit:
        raise WireError(f"the body uncompresses to {length} bytes, more than {limit}")
    try:
        return bytes(cramjam.snappy.decompress_raw(raw))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise WireError(f"not snappy block data: {exc}") from None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise WireError("varint longer than 10 bytes")


def _fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of one message: varints and fixed64 as int, bytes as bytes."""
    out: list[tuple[int, int, int | bytes]] = []
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise WireError("truncated fixed64")
            value = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise WireError("length-delimited field runs past the end of its message")
            value = buf[pos:pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise WireError("truncated fixed32")
            value = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise WireError(f"wire type {wire} is not used by proto3")
        out.append((number, wire, value))
    return out


def _text(value: int | bytes, what: str) -> str:
    if not isinstance(value, bytes):
        raise WireError(f"{what} is not a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{what} is not UTF-8") from None


def _series(buf: bytes) -> Series:
    labels: dict[str, str] = {}
    samples: list[tuple[float, int]] = []
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 2:
            assert isinstance(value, bytes)
            name = val = ""
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    name = _text(v, "label name")
                elif n == 2 and w == 2:
                    val = _text(v, "label value")
            if name:
                labels[name] = val
        elif number == 2 and wire == 2:
            assert isinstance(value, bytes)
            sample_value, ts = 0.0, 0
            for n, w, v in _fields(value):
                if n == 1 and w == 1:
                    assert isinstance(v, int)
                    sample_value = struct.unpack("<d", v.to_bytes(8, "little"))[0]
                elif n == 2 and w == 0:
                    assert isinstance(v, int)
                    ts = v - (1 << 64) if v >= 1 << 63 else v  # int64 as two's complement
            samples.append((sample_value, ts))
    return Series(labels, samples)


def decode_write_request(buf: bytes) -> tuple[list[Series], set[str]]:
    """The series of an uncompressed ``WriteRequest`` and the metric families its metadata calls counters.

    >>> label = b"\\x0a\\x08__name__\\x12\\x02up"
    >>> sample = b"\\x09" + struct.pack("<d", 1.0) + b"\\x10\\xd0\\x84\\xc8\\xa4\\xad\\x33"
    >>> ts = b"\\x0a" + bytes([len(label)]) + label + b"\\x12" + bytes([len(sample)]) + sample
    >>> series, counters = decode_write_request(b"\\x0a" + bytes([len(ts)]) + ts)
    >>> series[0].labels, series[0].samples, counters
    ({'__name__': 'up'}, [(1.0, 1764502930000)], set())
    """
    series: list[Series] = []
    counters: set[str] = set()
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 2:
            assert isinstance(value, bytes)
            series.append(_series(value))
        elif number == 3 and wire == 2:
            assert isinstance(value, bytes)
            mtype, family = 0, ""
            for n, w, v in _fields(value):
                if n == 1 and w == 0:
                    assert isinstance(v, int)
                    mtype = v
                elif n == 2 and w == 2:
                    family = _text(v, "metric_family_name")
            if mtype in _COUNTER_TYPES and family:
                counters.add(family)
    return series, counters


def convert(raw: bytes, ctx: Context) -> None:
    try:
        series, counters = decode_write_request(decompress(raw))
    except WireError as exc:
        ctx.reject(None, f"not a snappy-compressed remote-write WriteRequest: {exc}", "DecodeFailed")
        return
    emitter = MetricEmitter(ctx)
    for i, s in enumerate(series):
        rec = f"timeseries[{i}]"
        labels = dict(s.labels)
        name = labels.pop("__name__", "")
        if not name:
            ctx.reject(rec, "series has no __name__ label")
            continue
        if not s.samples:
            ctx.skip(SKIP_NO_SAMPLES)
            continue
        kind = "counter" if name in counters else kind_from_name(name)
        for value, ts_ms in s.samples:
            try:
                ts = ts_in_unit(ts_ms, 1e3, "sample timestamp (ms)")
            except ValueError as exc:
                ctx.reject(rec, f"{name}: {exc}")
                continue
            emitter.emit(rec, ts, name, labels, value, kind)
