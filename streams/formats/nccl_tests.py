"""nccl-tests result tables (``all_reduce_perf``, ``all_gather_perf``...).

Reference: NVIDIA/nccl-tests ``README.md`` and ``doc/PERFORMANCE.md``::

    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    45.01   23.30   40.77      0    44.12   23.77   41.59      0

The column header line (the one naming ``size``) is read, so older tables (``error`` instead of
``#wrong``, no ``root`` column) and single-placement tables work too. Each row gives, per placement
(``out-of-place`` / ``in-place``), ``nccl_tests_time_us``, ``nccl_tests_algbw_gbs``,
``nccl_tests_busbw_gbs`` and ``nccl_tests_wrong`` samples with labels ``placement``, ``size``,
``count``, ``type``, ``redop``, ``root`` and ``collective`` (from a ``# Collective test starting:
<name>`` line, else the ``collective`` header). ``N/A`` cells (validation off) are left out.

Source: the ``source`` header, the default source, or the host of ``Rank 0`` in the ``# Using
devices`` block. Time: the ``ts`` argument or header (the table has none).
"""

from __future__ import annotations

import re

from streams.formats.base import Context, parse_number, timed_text

_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_COLLECTIVE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_METRICS = {"time": "nccl_tests_time_us", "algbw": "nccl_tests_algbw_gbs", "busbw": "nccl_tests_busbw_gbs",
            "#wrong": "nccl_tests_wrong", "error": "nccl_tests_wrong"}
_KEYS = ("size", "count", "type", "redop", "root")


def convert(raw: bytes, ctx: Context) -> None:
    opened = timed_text(raw, ctx, "nccl-tests output carries")
    if opened is None:
        return
    text, ts = opened
    lines = text.splitlines()
    rank0 = next((m.group(2) for line in lines if (m := _RANK.match(line.strip())) and m.group(1) == "0"), None)
    source = ctx.source() or rank0
    if source is None:
        ctx.reject(None, "no source: no source header, no default source and no '# Rank 0 ... on <host>' line")
        return
    collective = ctx.header("collective")
    layer = ctx.layer("nccl")
    columns: list[tuple[str, str | None]] | None = None  # (column name, placement)
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            m = _COLLECTIVE.match(stripped)
            if m is not None:
                collective = m.group(1)
            body = stripped.lstrip("#").split()
            if body[:1] == ["size"]:
                columns = _columns(body)
            continue
        record = f"line {lineno}"
        if columns is None:
            ctx.reject(record, "result row before the column header line (# size count type ...)")
            continue
        cells = stripped.split()
        if len(cells) != len(columns):
            ctx.reject(record, f"{len(cells)} cells, the header has {len(columns)} columns")
            continue
        keys = {name: cell for (name, placement), cell in zip(columns, cells, strict=True)
                if placement is None and name in _KEYS}
        if "size" not in keys or not keys["size"].isdigit():
            ctx.reject(record, f"size {keys.get('size', '')[:20]!r} is not a byte count")
            continue
        labels = dict(keys)
        if collective:
            labels["collective"] = collective
        for (name, placement), cell in zip(columns, cells, strict=True):
            metric = _METRICS.get(name)
            if metric is None or placement is None:
                continue
            if cell in ("N/A", "n/a", "-"):
                continue
            value = parse_number(cell)
            if value is None:
                ctx.reject(record, f"{placement} {name} {cell[:20]!r} is not a number")
                continue
            ctx.sample(record, ts, layer, source, metric, value, {**labels, "placement": placement}, "gauge")


def _columns(names: list[str]) -> list[tuple[str, str | None]]:
    """Column names with their placement: measure columns after ``size..root`` repeat per placement."""
    out: list[tuple[str, str | None]] = []
    placement_index = -1
    for name in names:
        if name in _KEYS:
            out.append((name, None))
            continue
        if name == "time":
            placement_index += 1
        placement = ("out-of-place", "in-place")[min(placement_index, 1)] if placement_index >= 0 else None
        out.append((name, placement))
    return out
