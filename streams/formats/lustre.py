"""Lustre job_stats (``lctl get_param obdfilter.*.job_stats`` / ``mdt.*.job_stats``).

Reference: Lustre Operations Manual, "Lustre Jobstats" (https://doc.lustre.org/lustre_manual.xhtml)::

    obdfilter.lustre-OST0000.job_stats=
    job_stats:
    - job_id:          llm-70b:1000:gpu001
      snapshot_time:   1764502930
      read_bytes:      { samples:         256, unit: bytes, min: 4194304, max: 4194304, sum: 1073741824 }
      write_bytes:     { samples:           0, unit: bytes, min:       0, max:       0, sum:          0 }
      read:            { samples:         256, unit: usecs, min:     120, max:    9000, sum:     180000 }
      getattr:         { samples:           0, unit:  reqs }

YAML-like, one entry per job id, several targets concatenated. For each operation the cumulative
``samples`` and ``sum`` become counters ``jobstats_<op>_samples`` and ``jobstats_<op>_sum`` with
labels ``target`` (``lustre-OST0000``), ``job_id`` (as Lustre prints it) and ``unit``; ``min``,
``max``, ``sumsq`` and ``hist`` are lifetime extremes and distributions, not emitted. Operations
timed in ``usecs`` (``read``/``write`` on OSTs, metadata ops on MDTs, Lustre >= 2.12) give a
derived ``jobstats_<op>_latency_seconds`` = delta sum / delta samples (see
:mod:`streams.formats.derive`).

Layer ``storage``; source the ``source`` header or default source (the pool name the inventory
uses), else the file-system name from the target (``lustre`` of ``lustre-OST0000``). Time:
``snapshot_time`` (``secs`` or ``secs.nsecs``), else the ``ts`` argument or header.
"""

from __future__ import annotations

import re

from streams.formats.base import Context, decode_text, parse_number, ts_in_unit

_TARGET = re.compile(r"^(?:obdfilter|mdt|ost|osd-\w+)\.([^.\s]+)\.job_stats=\s*$")
_JOB = re.compile(r"^-\s+job_id:\s*(.*?)\s*$")
_FIELD = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*):\s*(.*?)\s*$")
_STAT_ITEM = re.compile(r"([A-Za-z_]+):\s*([^,{}]+?)\s*(?:,|$)")
_EMITTED = ("samples", "sum")


def fsname(target: str) -> str:
    """``lustre-OST0000`` -> ``lustre`` (the file system); a name that is not a target stays as it is.

    >>> fsname("lustre-OST0000"), fsname("fs-MDT0000"), fsname("MGS")
    ('lustre', 'fs', 'MGS')
    """
    head, sep, tail = target.rpartition("-")
    return head if sep and (tail.startswith(("OST", "MDT"))) else target


def convert(raw: bytes, ctx: Context) -> None:
    text = decode_text(raw, ctx)
    if text is None:
        return
    layer = ctx.layer("storage")
    target: str | None = None
    job: dict[str, object] | None = None
    jobs: list[dict[str, object]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.strip() == "job_stats:":
            continue
        m = _TARGET.match(line.strip())
        if m is not None:
            target = m.group(1)
            job = None
            continue
        mj = _JOB.match(line)
        if mj is not None:
            job_id = mj.group(1).strip().strip('"').strip("'")
            if not job_id:
                ctx.reject(f"line {lineno}", "empty job_id")
                job = None
                continue
            job = {"job_id": job_id, "target": target, "line": lineno, "ops": {}, "snapshot": None}
            jobs.append(job)
            continue
        mf = _FIELD.match(line)
        if mf is None or job is None:
            ctx.reject(f"line {lineno}", f"not a job_stats line: {line.strip()[:60]!r}")
            continue
        key, value = mf.groups()
        if key == "snapshot_time":
            job["snapshot"] = value.split()[0] if value else None
        elif key in ("start_time", "elapsed_time"):
            continue
        elif value.startswith("{"):
            stats = _stats(value)
            if stats is None:
                ctx.reject(f"line {lineno}", f"{key}: not a {{ samples: N, unit: U, ... }} block")
                continue
            ops = job["ops"]
            assert isinstance(ops, dict)
            ops[key] = (stats, lineno)
        else:
            ctx.reject(f"line {lineno}", f"{key}: unexpected value {value[:40]!r}")
    for job in jobs:
        _emit(job, layer, ctx)


def _stats(text: str) -> dict[str, str] | None:
    body = text.strip()
    if not body.endswith("}"):
        return None
    body = body[1:-1]
    hist = body.find("hist:")
    if hist != -1:
        body = body[:hist]
    return {k: v.strip() for k, v in _STAT_ITEM.findall(body)} or None


def _emit(job: dict[str, object], layer: str, ctx: Context) -> None:
    record = f"line {job['line']}"
    job_id = str(job["job_id"])
    target = job["target"]
    snapshot = job["snapshot"]
    ts: float | None
    if isinstance(snapshot, str):
        number = parse_number(snapshot)
        if number is None:
            ctx.reject(record, f"job {job_id}: snapshot_time {snapshot[:30]!r} is not a number")
            return
        try:
            ts = ts_in_unit(number, 1.0, "snapshot_time")
        except ValueError as exc:
            ctx.reject(record, f"job {job_id}: {exc}")
            return
    else:
        ts = ctx.collection_ts()
        if ts is None:
            ctx.reject(record, f"job {job_id}: no snapshot_time and no collection time given")
            return
    source = ctx.source() or (fsname(target) if isinstance(target, str) else None)
    if source is None:
        ctx.reject(record, f"job {job_id}: no target line (obdfilter.<target>.job_stats=), no source header"
                           " and no default source")
        return
    ops = job["ops"]
    assert isinstance(ops, dict)
    for op, (stats, lineno) in ops.items():
        unit = stats.get("unit", "")
        labels = {"job_id": job_id, "unit": unit} if unit else {"job_id": job_id}
        if isinstance(target, str):
            labels["target"] = target
        for field in _EMITTED:
            if field not in stats:
                continue
            value = parse_number(stats[field])
            if value is None:
                ctx.reject(f"line {lineno}", f"job {job_id}: {op}.{field} {stats[field][:20]!r} is not a number")
                continue
            ctx.sample(f"line {lineno}", ts, layer, source, f"jobstats_{op}_{field}", value, dict(labels), "counter")
