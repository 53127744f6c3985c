"""``lockstep fabric`` without a worker: its rendering (doctests) and its answer when nobody listens."""

from __future__ import annotations

import doctest
import socket

import lockstep.commands.fabric as fabric_command
from lockstep.cli import main


def test_the_rendering_examples_hold() -> None:
    result = doctest.testmod(fabric_command)
    assert result.attempted >= 1 and result.failed == 0


def test_no_worker_is_exit_code_2_with_a_hint(capsys) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        code = main(["fabric", "--url", f"http://127.0.0.1:{port}", "--timeout", "2"])
    assert code == 2
    assert "no worker answers" in capsys.readouterr().err
