"""``lockstep convert --from FORMAT FILE...``: what a file of a real format becomes, as native JSONL.

Runs :func:`streams.formats.convert`, the code path the agents use, one message per file (a
line-oriented file larger than the message limit is cut at line boundaries). Files are converted
in order with one :class:`AdapterState`, so counters from consecutive scrapes give derived gauges
(latency per op, BER, CPU utilisation) and NCCL Inspector v4.3 context carries over.

Output: native samples and inventory events on stdout, one JSON object per line; every rejection
on stderr (``FILE: FORMAT RECORD: REASON``) and a one-line summary. Samples rejected only because
nothing names their source are summed up in one line per file (give ``--source``), not one each.
``--ts now`` is the time of the run.

Exit codes: 0 when something was converted, or the input held nothing to convert and nothing bad;
1 when there were rejections and nothing was converted; 2 for usage errors (unknown format,
missing file, bad ``--ts`` or ``--header``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import BinaryIO, TextIO

import orjson

from lockstep.safetext import safe_text
from models.samples import MAX_MESSAGE_BYTES

#: The reason every metric carrier gives a sample that nothing names the source of.
_NO_SOURCE = ": no source: "


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("convert", help="convert files of a real format (Prometheus, Slurm JSON, ...) to native JSONL",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="fmt", metavar="FORMAT", help="input format (see --list)")
    p.add_argument("--list", action="store_true", help="list the formats and exit")
    p.add_argument("--source", default=None, help="default source (host, switch, pool) when the input names none")
    p.add_argument("--ts", action="append", default=[],
                   help="collection time for formats without one (Unix seconds, RFC 3339 or 'now'); once for all "
                        "files, or once per file in order")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="a message header (layer, job_id, device, stream, ...); repeatable")
    p.add_argument("files", nargs="*", type=Path, metavar="FILE", help="input files ('-' for stdin)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return convert_files(args, sys.stdout, sys.stderr)


def _chunks(raw: bytes, line_oriented: bool) -> list[bytes]:
    """The messages a file becomes: whole, or cut at line boundaries under the message limit."""
    if len(raw) <= MAX_MESSAGE_BYTES or not line_oriented:
        return [raw]
    out: list[bytes] = []
    start = 0
    while start < len(raw):
        end = start + MAX_MESSAGE_BYTES
        if end >= len(raw):
            out.append(raw[start:])
            break
        cut = raw.rfind(b"\n", start, end)
        if cut <= start:  # one line longer than the limit: let convert reject it
            cut = raw.find(b"\n", end)
            cut = len(raw) if cut == -1 else cut
        out.append(raw[start:cut + 1])
        start = cut + 1
    return out


def _read(path: Path, stdin: BinaryIO | None = None) -> bytes:
    if str(path) == "-":
        return (stdin or sys.stdin.buffer).read()
    return path.read_bytes()


def convert_files(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The command body, with its streams as inputs (tests call it directly)."""
    from models.timeutil import TimestampError
    from streams.formats import FORMATS, AdapterState, Converted, convert
    from streams.formats.base import parse_time_value

    if args.list:
        width = max(len(n) for n in FORMATS)
        for name, adapter in FORMATS.items():
            print(f"{name:<{width}}  {adapter.produces:<9}  {adapter.description}", file=out)
        return 0
    if not args.fmt or args.fmt not in FORMATS:
        known = ", ".join(FORMATS)
        print(f"lockstep convert: --from must name a format ({known})", file=err)
        return 2
    if not args.files:
        print("lockstep convert: no input FILE", file=err)
        return 2
    headers: dict[str, bytes | str] = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"lockstep convert: --header {item!r} is not KEY=VALUE", file=err)
            return 2
        headers[key] = value
    times: list[float] = []
    now = time.time()  # the CLI is the edge where the clock may be read; one value for every `now`
    for text in args.ts:
        if text.strip().lower() == "now":
            times.append(now)
            continue
        try:
            times.append(parse_time_value(text, "--ts"))
        except (ValueError, TimestampError) as exc:
            print(f"lockstep convert: {exc}", file=err)
            return 2
    if len(times) > 1 and len(times) != len(args.files):
        print(f"lockstep convert: {len(times)} --ts values for {len(args.files)} files (give one, or one per file)",
              file=err)
        return 2
    for path in args.files:
        if str(path) != "-" and not path.is_file():
            print(f"lockstep convert: {path}: no such file", file=err)
            return 2
    adapter = FORMATS[args.fmt]
    state = AdapterState()
    total = Converted()
    for i, path in enumerate(args.files):
        ts = times[i] if len(times) > 1 else (times[0] if times else None)
        raw = _read(path)
        file_headers = dict(headers)
        file_headers.setdefault("stream", str(path))
        for chunk in _chunks(raw, adapter.line_oriented):
            result = convert(args.fmt, chunk, headers=file_headers, default_source=args.source, state=state, ts=ts)
            for record in result.samples:
                out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE).decode())
            for event in result.inventory:
                out.write(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE).decode())
            no_source = 0
            for rejection in result.rejections:
                if _NO_SOURCE in rejection.reason:
                    no_source += 1
                    continue
                print(f"{safe_text(path)}: {safe_text(rejection)}", file=err)
            if no_source:
                print(f"{safe_text(path)}: {args.fmt}: {no_source} samples name no source (no source label, no "
                      f"source header, no --source): give --source HOST", file=err)
            total.merge(result)
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(total.skipped.items()))
    print(f"lockstep convert: {len(total.samples)} samples, {len(total.inventory)} inventory events, "
          f"{len(total.rejections)} rejected, {total.unknown_metrics} samples of {len(total.unknown_names)} "
          f"unknown metric names" + (f"; skipped: {skipped}" if skipped else ""), file=err)
    if total.rejections and total.converted == 0:
        return 1
    return 0
