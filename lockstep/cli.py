"""The one entry point: ``lockstep <command>``.

Each command lives in its own module under :mod:`lockstep.commands` and registers itself with
``register(subparsers)``; its handler receives the parsed arguments and returns an exit code.
Settings are built once here (from ``LOCKSTEP_*`` variables) and handed down.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from pydantic import ValidationError

import lockstep.commands
from lockstep import __version__
from models.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lockstep", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"lockstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(lockstep.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"lockstep.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except ValidationError as exc:
        print(f"lockstep: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # raised while the settings are built, before a command could catch it
        print(f"lockstep: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
