"""The one entry point: ``lockstep <command>``.

Each command lives in its own module under :mod:`lockstep.commands` and registers itself with
``register(subparsers)``; its handler receives the parsed arguments and returns an exit code.
Settings are built once here (from ``LOCKSTEP_*`` variables) and handed down.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from collections.abc import Sequence

from pydantic import ValidationError

import lockstep.commands
from lockstep import __version__
from models.errors import ConfigError

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)*:`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}(\w[^*]*?\w|\w)\*{1,2}(?![\w*])")


def plain_text(text: str) -> str:
    """A docstring as ``--help`` shows it: without reStructuredText markup (roles, literals, emphasis).

    >>> plain_text("Runs :func:`streams.formats.convert` with one :class:`~streams.x.AdapterState` "
    ...            "(``FILE: REASON``), a *message* and **this**; globs stay: *.csv")
    'Runs streams.formats.convert with one AdapterState (FILE: REASON), a message and this; globs stay: *.csv'
    """
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return _EMPHASIS.sub(r"\1", _LITERAL.sub(r"\1", text))


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip the markup from a parser's description, epilog and every argument's and subcommand's help."""
    for attr in ("description", "epilog"):
        value = getattr(parser, attr)
        if value:
            setattr(parser, attr, plain_text(value))
    for action in parser._actions:
        if action.help:
            action.help = plain_text(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.help:
                    choice.help = plain_text(choice.help)
            for sub in set(action.choices.values()):
                _plain_help(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lockstep", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"lockstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(lockstep.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"lockstep.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    _plain_help(parser)  # the commands' descriptions are their module docstrings, written for Sphinx
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # here, where a reader that went away is caught, not at the interpreter's exit
        return code
    except ValidationError as exc:
        print(f"lockstep: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # raised while the settings are built, before a command could catch it
        print(f"lockstep: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`lockstep topics list | head`): stop quietly, as cat does
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not raise again
        return 141


if __name__ == "__main__":
    sys.exit(main())
