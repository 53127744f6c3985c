"""lockstep.safetext: what the CLI prints from outside is escaped visibly, the rest is left alone."""

from __future__ import annotations

import json

import pytest

from lockstep.safetext import UNSAFE, safe_data, safe_json, safe_text

CASES = [
    # (input, printed)
    ("leaf03", "leaf03"),
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),                     # clear screen, cursor home
    ("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07"),   # OSC 52: write the clipboard
    ("\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\x\\x1b]8;;\\x1b\\"),  # OSC 8 link
    ("\x9b2J", "\\x9b2J"),                                    # C1 CSI
    ("\x85", "\\x85"),                                        # C1 NEL: a newline on some terminals
    ("a\x7fb", "a\\x7fb"),                                    # DEL
    ("\x00", "\\x00"),
    ("a\tb", "a\\tb"),
    ("line\nforged line", "line\\nforged line"),
    ("progress\rrewritten", "progress\\rrewritten"),
    ("\u202egpj.exe", "\\u202egpj.exe"),                      # right-to-left override
    ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
    ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),  # isolates
    ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),          # marks
    ("\u2028\u2029", "\\u2028\\u2029"),                       # line and paragraph separators
    ("naïve ✓ 日本 ━━", "naïve ✓ 日本 ━━"),                    # other text is printed as it is
    ("C:\\path", "C:\\path"),                                 # a backslash is not doubled
    (42, "42"),
    (None, "None"),
]


@pytest.mark.parametrize(("value", "printed"), CASES)
def test_safe_text(value: object, printed: str) -> None:
    assert safe_text(value) == printed


def test_every_unsafe_code_point_is_escaped_and_nothing_else() -> None:
    for cp in range(0x3000):
        out = safe_text(chr(cp))
        if cp in UNSAFE:
            assert out.startswith("\\") and out.isascii() and out.isprintable(), hex(cp)
        else:
            assert out == chr(cp), hex(cp)


def test_safe_data_escapes_keys_and_nested_values_and_keeps_numbers() -> None:
    rec = {"job\x1b": {"labels": {"port": "17\u202e"}}, "values": [1.5, None, True, "x\n"]}
    assert safe_data(rec) == {"job\\x1b": {"labels": {"port": "17\\u202e"}}, "values": [1.5, None, True, "x\\n"]}


@pytest.mark.parametrize("value", [c[0] for c in CASES if isinstance(c[0], str)])
def test_safe_json_decodes_to_the_same_data_and_holds_no_unsafe_character(value: str) -> None:
    doc = {"k" + value: [value, {"v": value}], "n": 1}
    for indent in (None, 2):
        text = safe_json(doc, indent=indent)
        assert json.loads(text) == doc
        assert not any(ord(ch) in UNSAFE for ch in text.replace("\n", "")), text
        assert "\n" not in text if indent is None else text.count("\n") == json.dumps(doc, indent=2).count("\n"), text
