"""``lockstep rules check FILE``: validate a rules file (inhibition, silences, maintenance windows)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lockstep.safetext import safe_text
from models.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("rules", help="validate a rules file", description=__doc__)
    rsub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    check = rsub.add_parser("check", help="load and validate FILE; print what it holds")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    from models.timeutil import format_ts
    from streams.rules import load_rules

    try:
        rules = load_rules(args.file.read_text(), str(args.file))
    except OSError as exc:
        print(f"lockstep rules: {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"lockstep rules: {exc}", file=sys.stderr)
        return 1
    print(f"{args.file}: {len(rules.inhibit)} inhibition rules, {len(rules.silences)} silences")
    for s in rules.silences.values():
        matchers = safe_text(", ".join(str(m) for m in s.matchers))
        print(f"  {s.kind:11s} {safe_text(s.silence_id)}: {matchers} from {format_ts(s.starts_at)} "
              f"to {format_ts(s.ends_at)}")
    return 0
