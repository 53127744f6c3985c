"""``lockstep tail alerts|dlq|anomalies``: follow a topic in readable form."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import signal
import sys
from typing import Any

import orjson

from lockstep.safetext import safe_data, safe_json, safe_text
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tail", help="follow alerts, dead letters or anomalies", description=__doc__)
    p.add_argument("what", choices=("alerts", "dlq", "anomalies"))
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    p.add_argument("--json", action="store_true",
                   help="print each record as one JSON line (control and bidi characters as JSON escapes)")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--max-records", type=int, default=None, help="stop after printing this many records")
    p.set_defaults(handler=run)


def _clock(ts: Any) -> str:
    """An event time as ``HH:MM:SS.mmm`` (UTC), or the value itself when it is not a time."""
    from models.timeutil import format_ts

    try:
        return format_ts(float(ts))[11:23]
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)


def _points(rec: dict[str, Any]) -> str:
    """A ``points`` record: the job's lanes, each with its groups (one per event second) and values."""
    lanes = rec.get("lanes") or {}
    parts = []
    for lane, groups in sorted(lanes.items()) if isinstance(lanes, dict) else ():
        groups = groups if isinstance(groups, list) else []
        values = sum(len(g[1]) for g in groups if isinstance(g, list) and len(g) > 1 and isinstance(g[1], list))
        times = [g[0] for g in groups if isinstance(g, list) and g and isinstance(g[0], int | float)]
        span = "" if not times else f" at {_clock(times[0])}" if min(times) == max(times) else (
            f" {_clock(min(times))}-{_clock(max(times))}")
        parts.append(f"{lane} {values} value{'' if values == 1 else 's'} in {len(groups)} s{span}")
    origins = rec.get("origins") or []
    workers = rec.get("workers") or {}
    tail = f"; workers for {', '.join(sorted(workers))}" if isinstance(workers, dict) and workers else ""
    more = f", +{len(origins) - 4} more" if len(origins) > 4 else ""
    return (f"points    {rec.get('job_id')}: {', '.join(parts) or 'no lanes'}{tail} "
            f"(from {', '.join(str(o) for o in origins[:4]) or '-'}{more})")


def _watermark(rec: dict[str, Any]) -> str:
    """A ``watermark`` record: how many input partitions it reports and the range of their times."""
    origins = rec.get("origins") or {}
    eos = rec.get("eos") or []
    times = [v for v in origins.values() if isinstance(v, int | float)] if isinstance(origins, dict) else []
    span = f", event time {_clock(min(times))} (slowest) to {_clock(max(times))}" if times else ""
    n = len(origins)
    return f"watermark of {n} input partition{'' if n == 1 else 's'}{span}, {len(eos)} at end of input"


def render(what: str, rec: Any) -> str:
    """One record of ``what`` as readable lines, every field escaped (:mod:`lockstep.safetext`).

    Anomaly-topic records of each type (``anomaly``, ``points``, ``watermark``, ``clock``,
    ``annotation``) have their own line; a record of another type says so.

    >>> print(render("anomalies", {"type": "points", "job_id": "llm", "origins": ["telemetry.gpu:0"],
    ...     "lanes": {"gpu_util": [[1764502930.0, [90.0, 91.0]], [1764502931.0, [89.0]]]}}))
    points    llm: gpu_util 3 values in 2 s 11:42:10.000-11:42:11.000 (from telemetry.gpu:0)
    >>> print(render("anomalies", {"type": "watermark", "origins": {"telemetry.gpu:0": 1764502930.0,
    ...     "telemetry.nic:3": 1764502932.5}, "eos": []}))
    watermark of 2 input partitions, event time 11:42:10.000 (slowest) to 11:42:12.500, 0 at end of input
    """
    from lockstep.render import render_alert

    if not isinstance(rec, dict):
        return f"not a record object: {safe_json(rec)[:200]}"
    if what == "alerts":
        return render_alert(rec)
    rec = safe_data(rec)
    if what == "dlq":
        try:
            original = safe_text(base64.b64decode(rec.get("original") or "").decode("utf-8", "replace"))
        except ValueError:
            original = f"(not base64: {rec.get('original')!s:.60})"
        where = f"{rec.get('topic')}[{rec.get('partition')}]@{rec.get('offset')}"
        size = rec.get("original_size")
        return (f"DEAD LETTER {rec.get('stage')}/{rec.get('error')} {where} {rec.get('record') or ''}\n"
                f"  reason   {rec.get('reason')}\n  original {original[:200] if original else '(empty)'}"
                f"{f' ({size} bytes)' if size is not None else ''}")
    kind = rec.get("type")
    if kind == "points":
        return _points(rec)
    if kind == "watermark":
        return _watermark(rec)
    if kind == "clock":
        return (f"clock {rec.get('phase', '?'):5} {rec.get('layer')}/{rec.get('source')} offset "
                f"{rec.get('offset')} s (+/- {rec.get('uncertainty')}) at {_clock(rec.get('ts'))}")
    if kind == "annotation":
        author = f" ({rec['author']})" if rec.get("author") else ""
        return f"annotation {rec.get('job_id')} {rec.get('kind')} at {_clock(rec.get('ts'))}: {rec.get('text')}{author}"
    if kind != "anomaly":
        return f"record of type {kind!r}: {safe_json(rec)[:200]}"
    score = rec.get("score")
    shown = f"{score:.2f}" if isinstance(score, int | float) else str(score)
    return (f"{rec.get('phase', '?'):5} {rec.get('job_id')} {rec.get('layer')}/{rec.get('source')} {rec.get('metric')} "
            f"{rec.get('labels')} value={rec.get('value')} p50={rec.get('p50')} score={shown} "
            f"at {_clock(rec.get('ts'))}")


def render_message(what: str, value: bytes | None, as_json: bool) -> str:
    """The line(s) ``lockstep tail`` prints for one message value (``None``: a tombstone)."""
    if value is None:
        return "tombstone (a record with no value)"
    try:
        rec = orjson.loads(value)
    except orjson.JSONDecodeError:
        return f"not JSON ({len(value)} bytes): {safe_text(value[:200].decode('utf-8', 'replace'))}"
    if as_json:
        return safe_json(rec)
    try:
        return render(what, rec)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a record not of the topic's shape
        return f"malformed record ({safe_text(repr(exc))}): {safe_json(rec)[:200]}"


async def _tail(settings: LockstepSettings, args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaConsumer

    from agents.kafka import client_kwargs
    from agents.topics import TopicCatalogue

    cat = TopicCatalogue(settings)
    topic = {"alerts": cat.alerts, "dlq": cat.dlq, "anomalies": cat.anomalies}[args.what]
    assert settings.kafka_bootstrap_servers is not None
    consumer = AIOKafkaConsumer(topic, **client_kwargs(settings, settings.kafka_bootstrap_servers), group_id=None,
                                auto_offset_reset="earliest" if args.from_beginning else "latest")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if args.max_seconds is not None:
        loop.call_later(args.max_seconds, stop.set)
    await consumer.start()
    printed = 0
    try:
        while not stop.is_set():
            for msgs in (await consumer.getmany(timeout_ms=200)).values():
                for m in msgs:
                    print(render_message(args.what, m.value, args.json), flush=True)
                    printed += 1
                    if args.max_records is not None and printed >= args.max_records:
                        stop.set()
                        break
                if stop.is_set():
                    break
    finally:
        await consumer.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    settings = LockstepSettings()
    if settings.kafka_bootstrap_servers is None:
        print("lockstep tail: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS to the broker to follow "
              "(`lockstep run` prints alerts itself)", file=sys.stderr)
        return 2
    return asyncio.run(_tail(settings, args))
