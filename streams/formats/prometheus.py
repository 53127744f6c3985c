"""Prometheus text exposition (0.0.4) and OpenMetrics 1.0, one whole scrape per message.

Reference: https://prometheus.io/docs/instrumenting/exposition_formats/ and
https://github.com/OpenObservability/OpenMetrics/blob/main/specification/OpenMetrics.md

- ``# TYPE`` gives each family's kind: counter samples (and histogram/summary ``_count``/``_sum``/
  ``_bucket``) get ``kind: counter``, gauges ``kind: gauge``; untyped families follow the naming
  convention (``*_total`` is a counter) and otherwise let the catalogue decide.
- Sample timestamps: integer **milliseconds** in the text format, **seconds** (float) in OpenMetrics
  (recognised by its ``# EOF`` line or an ``application/openmetrics-text`` content type). A sample
  without one takes the collection time (``ts`` argument or header); a scrape with neither is rejected.
- OpenMetrics ``_created`` samples (creation times, not measurements), ``NaN``/``Inf`` values and
  DCGM blank sentinels are skipped and counted. Exemplars are ignored.
- Labels with an empty value are dropped (in Prometheus an empty label equals no label).
- Scrape noise, the exporters' own process metrics (``go_*``, ``process_*``, ``promhttp_*``,
  ``scrape_*``: 89% of a node_exporter scrape), is skipped and counted (``skipped``, and
  ``lockstep_carrier_skipped_total`` on the carrier path); the header ``keep-noise: true`` keeps it.
- Source: the profile's labels (``Hostname``/``hostname`` for dcgm-exporter, ``node`` for NCCL
  Inspector, ``device_name``/``source``/``node_guid`` for UFM), then ``host``, ``hostname``,
  ``instance`` (without its port), then the ``source`` header, then the default source.

The same adapter serves the exporter-specific names in ``FORMATS`` (``dcgm-exporter``,
``node-exporter``, ``ufm``, ``nccl-prometheus``), which only force the profile.
"""

from __future__ import annotations

import re

from streams.formats.base import HEADER_CONTENT_TYPE, Context, decode_text, parse_number, ts_in_unit
from streams.formats.metrics import MetricEmitter, kind_from_name
from streams.formats.profiles import FORCED, Profile

# A sample line without backslashes: name, optional label block, value, optional timestamp, exemplar.
_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{((?:[^"}]|"[^"]*")*)\})?[ \t]+(\S+)'
                     r'(?:[ \t]+([^\s#]\S*))?[ \t]*(?:#.*)?$')
_ONE = r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"]*)"[ \t]*'
_LABEL_PAIR = re.compile(_ONE)
_LABELS_FULL = re.compile(rf"(?:{_ONE.replace('(', '(?:')},)*(?:{_ONE.replace('(', '(?:')})?[ \t]*")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

_COUNTERISH = {"counter": {"_total": "counter", "": "counter"},
               "histogram": {"_bucket": "counter", "_count": "counter", "_sum": "counter"},
               "summary": {"_count": "counter", "_sum": "counter", "": "gauge"},
               "gaugehistogram": {"_bucket": "gauge", "_gcount": "gauge", "_gsum": "gauge"},
               "gauge": {"": "gauge"}, "info": {"_info": "gauge", "": "gauge"}, "stateset": {"": "gauge"}}
_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
SKIP_CREATED = "OpenMetrics _created sample (a creation time, not a measurement)"
SKIP_NOISE = "scrape noise (go_*, process_*, promhttp_*, scrape_*)"
#: Metric-name prefixes of the exporters' own runtime and scrape bookkeeping.
NOISE_PREFIXES = ("go_", "process_", "promhttp_", "scrape_")
HEADER_KEEP_NOISE = "keep-noise"
_SKIP = "skip"


class ParseError(ValueError):
    """A line that is not a valid sample line; the message names what is wrong."""


def parse_labels_slow(text: str, pos: int) -> tuple[str | None, dict[str, str], int]:
    """Scan a label block from ``text[pos] == '{'``: escapes, quoted names, quoted metric name.

    Returns ``(quoted metric name or None, labels, index after '}')``.
    """
    labels: dict[str, str] = {}
    quoted_name: str | None = None
    i = pos + 1
    n = len(text)
    first = True
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            raise ParseError("label block not closed")
        if text[i] == "}":
            return quoted_name, labels, i + 1
        if text[i] == '"':
            key, i = _quoted(text, i)
        else:
            start = i
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            key = text[start:i]
            if not key or not _LABEL_NAME.match(key):
                raise ParseError(f"bad label name at column {start + 1}")
        while i < n and text[i] in " \t":
            i += 1
        if first and i < n and text[i] in ",}" and text[pos + 1:].lstrip().startswith('"'):
            quoted_name = key  # Prometheus 3 UTF-8 names: {"metric.name", a="b"}
        else:
            if i >= n or text[i] != "=":
                raise ParseError(f"expected '=' after label {key[:40]!r}")
            i += 1
            while i < n and text[i] in " \t":
                i += 1
            if i >= n or text[i] != '"':
                raise ParseError(f"label {key[:40]!r} value is not quoted")
            value, i = _quoted(text, i)
            if key in labels:
                raise ParseError(f"label {key[:40]!r} repeated")
            labels[key] = value
        first = False
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == ",":
            i += 1
        elif i < n and text[i] != "}":
            raise ParseError(f"expected ',' or '}}' at column {i + 1}")


def _quoted(text: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                break
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise ParseError(f"invalid escape \\{nxt} in a label value")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ParseError("unterminated quoted string")


def parse_sample_line(line: str, cache: dict[str, dict[str, str]] | None = None
                      ) -> tuple[str, dict[str, str], str, str | None]:
    """``(name, labels, value text, timestamp text or None)`` of one sample line.

    ``cache`` maps label-block text to its parsed labels within one scrape (exporters repeat the
    same block on many lines); the returned dicts are shared and must not be mutated.

    >>> parse_sample_line('up{job="node",instance="a:9100"} 1 1764502930000')
    ('up', {'job': 'node', 'instance': 'a:9100'}, '1', '1764502930000')
    >>> parse_sample_line('msg{text="a \\\\"quoted\\\\" }"} 2')[1]
    {'text': 'a "quoted" }'}
    """
    if "\\" not in line and not line.startswith("{"):
        m = _SAMPLE.match(line)
        if m is not None:
            name, block, value, ts = m.groups()
            if not block:
                return name, {}, value, ts
            labels = cache.get(block) if cache is not None else None
            if labels is not None:
                return name, labels, value, ts
            if _LABELS_FULL.fullmatch(block) is not None:
                pairs = _LABEL_PAIR.findall(block)
                labels = dict(pairs)
                if len(labels) != len(pairs):
                    dup = next(k for i, (k, _) in enumerate(pairs) if any(k == p[0] for p in pairs[:i]))
                    raise ParseError(f"label {dup!r} repeated")
                if cache is not None:
                    cache[block] = labels
                return name, labels, value, ts
    # Slow path: escapes, quoted names, or something malformed (a precise reason comes out).
    brace = line.find("{")
    space = min((i for i in (line.find(" "), line.find("\t")) if i != -1), default=-1)
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace].strip()
        quoted, labels, after = parse_labels_slow(line, brace)
        if quoted is not None:
            if name:
                raise ParseError("metric name given twice")
            name = quoted
        rest = line[after:]
    else:
        if space == -1:
            raise ParseError("no value after the metric name")
        name, labels, rest = line[:space], {}, line[space:]
    if not name:
        raise ParseError("no metric name")
    if not _NAME.match(name) and brace == -1:
        raise ParseError(f"bad metric name {name[:60]!r}")
    parts = rest.split("#", 1)[0].split()
    if not parts:
        raise ParseError("no value")
    if len(parts) > 2:
        raise ParseError(f"unexpected text after the timestamp: {' '.join(parts[2:])[:40]!r}")
    return name, labels, parts[0], parts[1] if len(parts) == 2 else None


def _kind_of(name: str, types: dict[str, str], cache: dict[str, str | None]) -> str | None:
    """The sample kind from the family's TYPE (``_SKIP`` for ``_created``)."""
    if name in cache:
        return cache[name]
    kind: str | None
    family_type = types.get(name)
    suffix = ""
    if family_type is None:
        for sfx in _SUFFIXES:
            if name.endswith(sfx) and name[: -len(sfx)] in types:
                family_type = types[name[: -len(sfx)]]
                suffix = sfx
                break
    if family_type is None:
        kind = kind_from_name(name)
    elif suffix == "_created" and family_type in ("counter", "histogram", "summary", "gaugehistogram"):
        kind = _SKIP
    else:
        kind = _COUNTERISH.get(family_type, {}).get(suffix)
    cache[name] = kind
    return kind


def convert_exposition(raw: bytes, ctx: Context, forced: Profile | None = None) -> None:
    """Fill ``ctx.out`` from one scrape (see the module docstring)."""
    text = decode_text(raw, ctx)
    if text is None:
        return
    ctype = (ctx.header(HEADER_CONTENT_TYPE) or "").lower()
    openmetrics = "openmetrics" in ctype or text.rstrip().endswith("# EOF")
    divisor = 1.0 if openmetrics else 1e3
    types: dict[str, str] = {}
    kinds: dict[str, str | None] = {}
    blocks: dict[str, dict[str, str]] = {}
    emitter = MetricEmitter(ctx, forced)
    drop_noise = (ctx.header(HEADER_KEEP_NOISE) or "").lower() not in ("true", "1", "yes")
    scrape_ts: float | None = None
    scrape_ts_known = False
    saw_eof = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line or line.isspace():
            continue
        if line[0] in " \t":  # blanks before the first token are allowed
            line = line.lstrip(" \t")
        if saw_eof:
            ctx.reject(f"line {lineno}", "text after # EOF")
            break
        if line[0] == "#":
            if line.startswith("# TYPE "):
                parts = line.split(None, 3)
                if len(parts) < 4:
                    ctx.reject(f"line {lineno}", "TYPE line without a metric name and type")
                    continue
                family = parts[2].strip('"')
                types[family] = parts[3].strip().lower()
                kinds.clear()
            elif line.rstrip() == "# EOF":
                saw_eof = True
            continue
        record = f"line {lineno}"
        try:
            name, labels, value_text, ts_text = parse_sample_line(line, blocks)
        except ParseError as exc:
            ctx.reject(record, f"not a sample line: {exc}")
            continue
        if drop_noise and name.startswith(NOISE_PREFIXES):
            ctx.skip(SKIP_NOISE)
            continue
        kind = _kind_of(name, types, kinds)
        if kind == _SKIP:
            ctx.skip(SKIP_CREATED)
            continue
        value = parse_number(value_text)
        if value is None:
            ctx.reject(record, f"{name}: value {value_text[:40]!r} is not a number")
            continue
        if ts_text is not None:
            number = parse_number(ts_text)
            if number is None or (not openmetrics and not ts_text.lstrip("-").isdigit()):
                unit = "seconds" if openmetrics else "integer milliseconds"
                ctx.reject(record, f"{name}: timestamp {ts_text[:40]!r} is not {unit}")
                continue
            try:
                ts = ts_in_unit(number, divisor, "timestamp")
            except ValueError as exc:
                ctx.reject(record, f"{name}: {exc} (read as {'seconds' if openmetrics else 'milliseconds'})")
                continue
        else:
            if not scrape_ts_known:
                scrape_ts = ctx.collection_ts()
                scrape_ts_known = True
            if scrape_ts is None:
                ctx.reject(None, "samples carry no timestamp and no collection time was given (ts argument "
                                 "or ts header)")
                return
            ts = scrape_ts
        if "" in labels.values():
            labels = {k: v for k, v in labels.items() if v != ""}
        emitter.emit(record, ts, name, labels, value, kind)


def convert(raw: bytes, ctx: Context) -> None:
    """The ``prometheus`` format: the profile follows each metric's name."""
    convert_exposition(raw, ctx)


def forced(profile_name: str):  # type: ignore[no-untyped-def]
    """An adapter function with the profile forced (``dcgm-exporter``, ``ufm``...)."""
    profile = FORCED[profile_name]

    def _convert(raw: bytes, ctx: Context) -> None:
        convert_exposition(raw, ctx, profile)

    _convert.__name__ = f"convert_{profile_name.replace('-', '_')}"
    return _convert
