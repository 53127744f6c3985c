"""``lockstep ... --help`` is plain text: the module docstrings it shows are written for Sphinx."""

from __future__ import annotations

import argparse
import doctest
import importlib
import re

import pytest

from lockstep.cli import build_parser
from lockstep.commands.topics import topic_table

MARKUP = re.compile(r":[a-z]+:`|``|\*\*|(?<![\w*])\*\w[^*\n]*\w\*(?![\w*])")


def every_parser(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += every_parser(sub)
    return out


def test_no_help_shows_restructuredtext_markup() -> None:
    parsers = every_parser(build_parser())
    assert len(parsers) > 15  # every command and subcommand, not just the top
    found = {prog: MARKUP.findall(p.format_help()) for prog, p in parsers}
    assert {prog: hits for prog, hits in found.items() if hits} == {}


def test_topics_list_columns_stay_inside_the_width() -> None:
    from agents.topics import TopicCatalogue
    from models.settings import LockstepSettings

    specs = TopicCatalogue(LockstepSettings(_env_file=None)).specs()  # type: ignore[call-arg]
    rows = [(s.name, str(s.partitions), s.key, "compact" if s.compact else "6h", s.purpose) for s in specs]
    lines = topic_table(rows, 120).splitlines()
    assert lines[0].split() == ["TOPIC", "PARTS", "KEY", "RETENTION", "PURPOSE"]
    assert max(len(line) for line in lines) <= 120
    purpose_at = lines[0].index("PURPOSE")
    starts = [line for line in lines[1:] if line[:1] != " "]
    assert len(starts) == len(rows)  # one first line per topic; continuations start blank
    assert all(line[purpose_at - 2:purpose_at] == "  " for line in lines if len(line) > purpose_at)
    assert "".join(lines).count("link:<node>:<dev>:<port>") == 1  # the long inventory key, whole


@pytest.mark.parametrize("module", ["lockstep.cli", "lockstep.commands.topics"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted and result.failed == 0


def test_a_reader_that_goes_away_is_no_traceback() -> None:
    """`lockstep topics list | head -1`: the pipe closes under the command; it stops quietly (status 141)."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "lockstep.cli", "topics", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
                            env={"PATH": "/usr/bin:/bin", "COLUMNS": "60"})
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"TOPIC")
    proc.stdout.close()  # the reader goes away after one line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err, err
