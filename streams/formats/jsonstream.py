"""A stream of JSON values as files hold them: one document, JSON lines, or pretty-printed (multi-line)
documents one after another (``jq .`` output, multi-line writers).

:func:`json_values` first tries the two cheap shapes of :mod:`streams.formats.jsonrecords` (one
document; one document per line). Only when the message is neither, and some line is a bare ``{``
or ``[`` (a pretty-printed value starts there), it reads the text as concatenated JSON values. A value
that does not parse is one rejection naming the line it starts on; reading resumes at the next
line that starts a value (``{`` or ``[`` in column 0), so one damaged object costs that object only.
``NaN`` / ``Infinity`` are not JSON and are refused, as orjson refuses them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

from streams.formats.base import Context
from streams.formats.jsonrecords import json_documents


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)
_WS = " \t\r\n"


def json_values(raw: bytes, ctx: Context) -> Iterator[tuple[str | None, Any]]:
    """Yield ``(record name, value)``: ``None`` for a whole-message document, else ``line N``.

    >>> from streams.formats.state import AdapterState
    >>> ctx = Context("t", headers=None, default_source=None, ts=None, ingest_ts=None, state=AdapterState())
    >>> [(r, v) for r, v in json_values(b'{\\n  "a": 1\\n}\\n{\\n  "b": [\\n 2\\n ]\\n}\\n', ctx)]
    [('line 1', {'a': 1}), ('line 4', {'b': [2]})]
    """
    stripped = raw.strip()
    if not stripped:
        return
    try:
        orjson.loads(stripped)
        pretty = False
    except orjson.JSONDecodeError:
        pretty = any(line.strip() in (b"{", b"[") for line in stripped.split(b"\n"))
    if not pretty:
        yield from json_documents(raw, ctx, split_arrays=False)
        return
    try:
        text = stripped.decode("utf-8")
    except UnicodeDecodeError as exc:
        ctx.reject(None, f"not UTF-8 text: {exc.reason} at byte {exc.start}", "DecodeFailed")
        return
    yield from _concatenated(text, ctx)


def _concatenated(text: str, ctx: Context) -> Iterator[tuple[str, Any]]:
    pos, end = 0, len(text)
    line = 1
    while True:
        while pos < end and text[pos] in _WS:
            if text[pos] == "\n":
                line += 1
            pos += 1
        if pos >= end:
            return
        try:
            value, stop = _DECODER.raw_decode(text, pos)
        except ValueError as exc:  # json.JSONDecodeError and the refused constants
            ctx.reject(f"line {line}", f"not JSON: {exc}", "DecodeFailed")
            resume = _next_start(text, pos + 1)
            line += text.count("\n", pos, resume)
            pos = resume
            continue
        yield f"line {line}", value
        line += text.count("\n", pos, stop)
        pos = stop


def _next_start(text: str, pos: int) -> int:
    """The offset of the next line that starts a value (``{`` or ``[`` in column 0), or the end."""
    candidates = [i + 1 for i in (text.find("\n{", pos), text.find("\n[", pos)) if i != -1]
    return min(candidates) if candidates else len(text)
