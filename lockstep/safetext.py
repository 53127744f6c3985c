"""Text that is safe to print to a terminal: what the CLI prints from the broker, the API or a file.

Data that reaches Lockstep (label values, job names, receiver answers, dead-letter originals) can
hold terminal escape sequences (``ESC [ 2 J`` clears the screen, ``ESC ] 52`` writes the
clipboard, OSC 8 makes links) and Unicode bidirectional overrides that make a printed line read
differently from its bytes. Every CLI output path passes such data through :func:`safe_text` (a
field) or :func:`safe_json` (a JSON line), which escape these characters *visibly*:

- C0 controls U+0000-U+001F, DEL U+007F and C1 controls U+0080-U+009F, as ``\\xNN``; tab,
  newline and carriage return too (``\\t``, ``\\n``, ``\\r``): inside a field they would forge a
  line or hide what came before;
- bidi embeddings, overrides and isolates U+202A-U+202E, U+2066-U+2069, the marks U+200E, U+200F
  and U+061C, and the line and paragraph separators U+2028, U+2029, as ``\\uNNNN``.

Everything else, including other non-ASCII text, is printed as it is. A backslash is not
doubled: the output is for reading, not for parsing back, and a literal ``\\x1b`` in the data is
as harmless as its display.
"""

from __future__ import annotations

import json
from typing import Any

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
#: Bidi controls and marks, and the Unicode line/paragraph separators.
BIDI_AND_SEPARATORS: tuple[int, ...] = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                        0x2028, 0x2029)
#: Every code point :func:`safe_text` escapes.
UNSAFE: frozenset[int] = frozenset((*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *BIDI_AND_SEPARATORS))


def _escape(cp: int) -> str:
    if cp in _NAMED:
        return _NAMED[cp]
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}"


_TEXT_TABLE: dict[int, str] = {cp: _escape(cp) for cp in UNSAFE}
# json.dumps escapes C0 inside strings itself (a newline left is the indentation's); every other
# unsafe code point can only be inside a string, where a \\uNNNN escape keeps the JSON valid and
# decodes to the same data.
_JSON_TABLE: dict[int, str] = {cp: f"\\u{cp:04x}" for cp in UNSAFE if cp >= 0x20}


def safe_text(value: object) -> str:
    """``value`` as text (``str()`` of a non-string) with control and bidi characters escaped visibly.

    >>> safe_text("leaf03\\x1b[2J")
    'leaf03\\\\x1b[2J'
    >>> print(safe_text("job\\u202egpj.exe"), safe_text("a\\tb\\nc\\r"), safe_text(None), safe_text("naïve ✓"))
    job\\u202egpj.exe a\\tb\\nc\\r None naïve ✓
    """
    text = value if isinstance(value, str) else str(value)
    return text.translate(_TEXT_TABLE)


def safe_data(value: Any) -> Any:
    """A copy of a decoded JSON value with every string (keys too) passed through :func:`safe_text`.

    Renderers call it once on a record from outside, so every field they format is safe whatever
    field they pick.

    >>> safe_data({"job\\x07": ["a\\x1b", 1, None, {"k": "\\u2066x"}]})
    {'job\\\\x07': ['a\\\\x1b', 1, None, {'k': '\\\\u2066x'}]}
    """
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: safe_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_data(v) for v in value]
    return value


def safe_json(value: Any, indent: int | None = None) -> str:
    """``value`` as one line of JSON (or indented) with no raw control or bidi character in it.

    The result decodes to ``value`` exactly: the unsafe characters are written as JSON escapes.

    >>> safe_json({"job": "x\\u202e\\x7f\\x1b"})
    '{"job":"x\\\\u202e\\\\u007f\\\\u001b"}'
    >>> json.loads(safe_json({"job": "x\\u202e\\x7f\\x1b"})) == {"job": "x\\u202e\\x7f\\x1b"}
    True
    """
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators).translate(_JSON_TABLE)

