"""InfluxDB line protocol, Telegraf's default output (``data_format = "influx"``): one point per line.

Reference: https://docs.influxdata.com/influxdb/v2/reference/syntax/line-protocol/

    measurement[,tag=value...] field=value[,field=value...] [timestamp]
    infiniband,device=mlx5_0,host=gpu001,port=1 port_xmit_data=85378896588i,symbol_error=0i 1737652060000000000

Each numeric field becomes one sample named ``<measurement>_<field>``, exactly as the Telegraf JSON
adapter names them (:mod:`streams.formats.telegraf`), so one catalogue serves both outputs. Tags are
labels and the ``host`` tag names the source (then the metric profile's labels, the ``source``
header, the default). Values: floats (``1.5``, ``1e3``), integers (``12i``), unsigned (``12u``);
booleans and strings are not measurements (skipped and counted). Escapes follow the spec: ``\\,``
``\\=`` ``\\ `` in names, tag keys/values and field keys; ``\\"`` and ``\\\\`` inside strings. The
timestamp is nanoseconds by default, or whatever ``precision`` the writer used (the unit that lands
in 2000..2100); a line without one takes the collection time, and is rejected when there is none.
Comment lines (``#``) and blank lines are skipped. Line protocol has no metric type: the catalogue
decides (``infiniband_*`` fields are cumulative counters there).
"""

from __future__ import annotations

from streams.formats.base import Context, decode_text, infer_epoch, ts_in_unit
from streams.formats.metrics import MetricEmitter
from streams.formats.telegraf import SKIP_NON_NUMERIC

_BOOLS = frozenset({"t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"})


class LineError(ValueError):
    pass


def _token(line: str, pos: int, stops: str, escapes: str = ",= ") -> tuple[str, int]:
    """Read up to the first unescaped character of ``stops``; a backslash escapes ``escapes`` and itself
    (the spec's set for tag keys, tag values and field keys; measurements escape only comma and space)."""
    out: list[str] = []
    n = len(line)
    while pos < n:
        c = line[pos]
        if c == "\\" and pos + 1 < n and (line[pos + 1] in escapes or line[pos + 1] == "\\"):
            out.append(line[pos + 1])
            pos += 2
            continue
        if c in stops:
            break
        out.append(c)
        pos += 1
    return "".join(out), pos


def _string_value(line: str, pos: int) -> int:
    """Skip a double-quoted field value starting at ``pos`` (the quote); return the index after it."""
    pos += 1
    n = len(line)
    while pos < n:
        c = line[pos]
        if c == "\\" and pos + 1 < n:
            pos += 2
            continue
        if c == '"':
            return pos + 1
        pos += 1
    raise LineError("unterminated string field value")


def parse_line(line: str) -> tuple[str, dict[str, str], list[tuple[str, float | None]], str | None]:
    """``(measurement, tags, [(field, number or None for a non-number)], timestamp text or None)``.

    >>> parse_line('cpu\\\\ load,host=a\\\\,b usage=1.5,n=3i,ok=true,msg="x y" 1700000000')
    ('cpu load', {'host': 'a,b'}, [('usage', 1.5), ('n', 3.0), ('ok', None), ('msg', None)], '1700000000')
    """
    measurement, pos = _token(line, 0, ", ", ", ")
    if not measurement:
        raise LineError("no measurement name")
    tags: dict[str, str] = {}
    while pos < len(line) and line[pos] == ",":
        key, pos = _token(line, pos + 1, "=, ")
        if pos >= len(line) or line[pos] != "=":
            raise LineError(f"tag {key[:40]!r} has no '='")
        value, pos = _token(line, pos + 1, ", ")
        if not key or not value:
            raise LineError("empty tag key or value")
        tags[key] = value
    if pos >= len(line) or line[pos] != " ":
        raise LineError("no field set after the measurement and tags")
    pos += 1
    fields: list[tuple[str, float | None]] = []
    while True:
        key, pos = _token(line, pos, "= ,")
        if not key or pos >= len(line) or line[pos] != "=":
            raise LineError(f"field {key[:40]!r} has no '=value'")
        pos += 1
        if pos < len(line) and line[pos] == '"':
            pos = _string_value(line, pos)
            fields.append((key, None))
        else:
            start = pos
            while pos < len(line) and line[pos] not in ", ":
                pos += 1
            fields.append((key, _number(line[start:pos], key)))
        if pos < len(line) and line[pos] == ",":
            pos += 1
            continue
        break
    rest = line[pos:].strip()
    return measurement, tags, fields, rest or None


def _number(text: str, key: str) -> float | None:
    if text in _BOOLS:
        return None
    body = text[:-1] if text[-1:] in ("i", "u") else text
    if text[-1:] in ("i", "u"):
        # 64-bit integers at most (20 digits): longer digit strings overflow a float
        if not body.lstrip("-").isdigit() or (text[-1] == "u" and body.startswith("-")) or len(body) > 21:
            raise LineError(f"field {key[:40]!r}: {text[:40]!r} is not a 64-bit integer")
        return float(int(body))
    try:
        if "_" in body:
            raise ValueError
        return float(body)
    except ValueError:
        raise LineError(f"field {key[:40]!r}: {text[:40]!r} is not a number, boolean or string") from None


def _timestamp(text: str) -> float:
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise LineError(f"timestamp {text[:40]!r} is not a 64-bit integer")
    value = int(text)
    if abs(value) >= 10**17:  # nanoseconds: integer microseconds first (a float loses ns precision)
        return ts_in_unit(value // 1000, 1e6, "timestamp")
    return infer_epoch(value, "timestamp")


def convert(raw: bytes, ctx: Context) -> None:
    text = decode_text(raw, ctx)
    if text is None:
        return
    emitter = MetricEmitter(ctx)
    collected: float | None = None
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rec = f"line {lineno}"
        try:
            measurement, tags, fields, ts_text = parse_line(line)
            ts = _timestamp(ts_text) if ts_text is not None else None
        except ValueError as exc:
            ctx.reject(rec, str(exc))
            continue
        if ts is None:
            collected = collected if collected is not None else ctx.collection_ts()
            if collected is None:
                ctx.reject(rec, f"{measurement}: no timestamp and no collection time given")
                continue
            ts = collected
        for key, value in fields:
            if value is None:
                ctx.skip(SKIP_NON_NUMERIC)
                continue
            emitter.emit(rec, ts, f"{measurement}_{key}", tags, value, None)
