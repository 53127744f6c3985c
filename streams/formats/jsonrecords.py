"""Reading JSON carriers: one JSON document per message, or JSON lines (one document per line).

A message that parses as one JSON value is that value; otherwise each non-empty line must parse on
its own (``line N`` names the record in rejections). An array at top level is a batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from streams.formats.base import Context


def json_documents(raw: bytes, ctx: Context, *, split_arrays: bool = True) -> Iterator[tuple[str | None, Any]]:
    """Yield ``(record name, document)``; undecodable lines become rejections."""
    stripped = raw.strip()
    if not stripped:
        return
    try:
        doc = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        doc = _NOT_ONE
    if doc is not _NOT_ONE:
        if split_arrays and isinstance(doc, list):
            for i, item in enumerate(doc):
                yield f"[{i}]", item
        else:
            yield None, doc
        return
    for lineno, line in enumerate(stripped.split(b"\n"), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            ctx.reject(f"line {lineno}", f"not JSON: {exc}", "DecodeFailed")
            continue
        if split_arrays and isinstance(item, list):
            for i, sub in enumerate(item):
                yield f"line {lineno}[{i}]", sub
        else:
            yield f"line {lineno}", item


_NOT_ONE: Any = object()


def join(record: str | None, sub: str) -> str:
    """``record`` + ``.sub`` (or ``sub`` alone)."""
    return f"{record}.{sub}" if record else sub
