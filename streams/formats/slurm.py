"""Slurm ``squeue --json`` and ``sacct --json`` -> native job events.

References: https://slurm.schedmd.com/squeue.html, https://slurm.schedmd.com/sacct.html and the
``slurmrestd`` OpenAPI data_parser plugins (v0.0.37 .. v0.0.42), whose shapes both commands print::

    {"jobs": [{"job_id": 4242, "name": "llm-70b-pretrain", "user_name": "alice",
               "job_state": ["RUNNING"], "nodes": "gpu[001-004]",
               "start_time": {"set": true, "infinite": false, "number": 1764502870},
               "tres_alloc_str": "cpu=256,mem=2T,node=4,billing=256,gres/gpu=32",
               "licenses": "lustre-a:1"}]}                                         # squeue
    {"jobs": [{"job_id": 4242, "name": "...", "user": "alice",
               "state": {"current": ["RUNNING"], "reason": "None"}, "nodes": "gpu[001-004]",
               "time": {"start": 1764502870, "end": 0},
               "tres": {"allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": 32},
                                      {"type": "node", "name": "", "id": 4, "count": 4}]}}]}  # sacct

- Numbers may be wrapped as ``{"set", "infinite", "number"}`` (v0.0.39+); ``set: false`` or
  ``infinite: true`` means "no value". States may be a string (older) or a list whose first item is
  the base state (``["PENDING", "REQUEUED"]``); ``state.current`` nests it in sacct.
- Nodes are a Slurm hostlist, expanded with python-hostlist.
- GPUs: ``tres.allocated`` (``type: gres``, ``name: gpu`` or ``gpu:<model>``; the untyped entry wins)
  or ``gres/gpu=N`` in ``tres_alloc_str``, divided by the node count. A count that does not divide
  evenly is rejected (the job contract has one GPU count per node).
- Storage pools: Slurm has no storage field; sites that gate file systems with licenses
  (``#SBATCH -L scratch``) get them from ``licenses`` (``scratch:1,cfs:1`` -> ``scratch``, ``cfs``).
- Time: the start time for running states, the end time for ended ones, the submit time for
  pending ones; when Slurm has none, the ``ts`` argument or header.
- Job arrays: ``array_job_id``/``array_task_id`` set -> ``job_id`` is ``<array>_<task>`` as Slurm
  prints it; heterogeneous job components likewise ``<het_job_id>+<offset>``.
"""

from __future__ import annotations

from typing import Any

import hostlist

from models.inventory import JobState
from streams.formats.base import Context, infer_epoch
from streams.formats.jsonrecords import json_documents

_STATES = frozenset(s.value for s in JobState)
_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                    "BOOT_FAIL", "DEADLINE"})


class _Bad(ValueError):
    """A field that makes the job unusable; the message is the rejection reason."""


def unwrap(value: Any, field: str) -> float | None:
    """A Slurm number: plain, or ``{"set", "infinite", "number"}``; None when unset or infinite.

    >>> unwrap({"set": True, "infinite": False, "number": 4}, "n"), unwrap({"set": False, "number": 0}, "n")
    (4.0, None)
    """
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{field} is not a number")
    return float(value)


def _state(value: Any, field: str) -> str:
    if isinstance(value, dict):
        value = value.get("current")
        field = f"{field}.current"
    if isinstance(value, list):
        if not value or not isinstance(value[0], str):
            raise _Bad(f"{field} is an empty or non-string list")
        value = value[0]
    if not isinstance(value, str):
        raise _Bad(f"{field} is missing or not a string")
    state = value.upper()
    if state not in _STATES:
        raise _Bad(f"{field} {value[:30]!r} is not a Slurm job state Lockstep knows")
    return state


def _nodes(value: Any) -> list[str]:
    if value in (None, "", "None assigned", "(null)"):
        return []
    if not isinstance(value, str):
        raise _Bad("nodes is not a hostlist string")
    try:
        return list(hostlist.expand_hostlist(value))
    except hostlist.BadHostlist as exc:
        raise _Bad(f"nodes {value[:60]!r} is not a hostlist: {exc}") from None


def _gpus_from_tres_str(text: Any) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    typed: int | None = None
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            continue
        if key == "gres/gpu":
            if not value.isdigit():
                raise _Bad(f"tres gres/gpu={value[:20]!r} is not a count")
            return int(value)
        if key.startswith("gres/gpu:") and value.isdigit():
            typed = (typed or 0) + int(value)
    return typed


def _gpus_from_tres_list(items: Any) -> int | None:
    if not isinstance(items, list):
        return None
    untyped: int | None = None
    typed: int | None = None
    for item in items:
        if not isinstance(item, dict) or item.get("type") != "gres":
            continue
        name = item.get("name")
        count = unwrap(item.get("count"), "tres.allocated.count")
        if count is None:
            continue
        if name == "gpu":
            untyped = int(count)
        elif isinstance(name, str) and name.startswith("gpu:"):
            typed = (typed or 0) + int(count)
    return untyped if untyped is not None else typed


def _licenses(value: Any) -> list[str]:
    if isinstance(value, str) and value:
        return [item.split(":", 1)[0] for item in value.split(",") if item]
    if isinstance(value, list):
        return [str(x.get("name")) if isinstance(x, dict) else str(x) for x in value if x]
    return []


def _mapping(value: Any, field: str) -> dict[str, Any]:
    """An optional nested object (``array``, ``het``, ``time``): absent is empty, another type is bad."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"{field} is {type(value).__name__}, not an object")
    return value


def _job_id(job: dict[str, Any]) -> str:
    raw = job.get("job_id")
    if isinstance(raw, bool) or not isinstance(raw, int | str) or raw == "":
        raise _Bad("job_id is missing")
    array = _mapping(job.get("array"), "array")
    array_id = unwrap(job.get("array_job_id", array.get("job_id")), "array_job_id")
    task_id = unwrap(job.get("array_task_id", array.get("task_id")), "array_task_id")
    if array_id and task_id is not None:
        return f"{int(array_id)}_{int(task_id)}"
    het = _mapping(job.get("het"), "het")
    het_id = unwrap(job.get("het_job_id", het.get("job_id")), "het_job_id")
    het_offset = unwrap(job.get("het_job_offset", het.get("job_offset")), "het_job_offset")
    if het_id and het_offset is not None:
        return f"{int(het_id)}+{int(het_offset)}"
    return str(raw)


def _time(job: dict[str, Any], names: tuple[str, ...]) -> float | None:
    times = _mapping(job.get("time"), "time")
    for name in names:
        for holder, key in ((job, f"{name}_time"), (times, name)):
            if key in holder:
                value = unwrap(holder[key], key)
                if value:  # 0 means "not yet" in Slurm
                    return infer_epoch(value, key)
    return None


def _job_event(job: Any, sacct: bool, ctx: Context) -> dict[str, Any]:
    if not isinstance(job, dict):
        raise _Bad(f"job is {type(job).__name__}, not an object")
    job_id = _job_id(job)
    state = _state(job.get("state") if sacct else job.get("job_state", job.get("state")),
                   "state" if sacct else "job_state")
    nodes = _nodes(job.get("nodes"))
    if sacct:
        tres = job.get("tres")
        if tres is not None and not isinstance(tres, dict):
            raise _Bad("tres is not an object")
        gpus = _gpus_from_tres_list((tres or {}).get("allocated"))
    else:
        gpus = _gpus_from_tres_str(job.get("tres_alloc_str"))
    if gpus is None:
        gpus = _gpus_from_tres_str(job.get("tres_alloc_str") or job.get("tres_req_str")) if sacct else None
    gpus = gpus or 0
    if gpus and not nodes:
        raise _Bad(f"{gpus} GPUs allocated but no nodes")
    if nodes and gpus % len(nodes):
        raise _Bad(f"{gpus} GPUs over {len(nodes)} nodes is not a whole number per node")
    which = ("end",) if state in _ENDED else ("submit", "submission", "eligible") if state == "PENDING" else ("start",)
    try:
        ts = _time(job, which)
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    if ts is None:
        ts = ctx.collection_ts()
        if ts is None:
            raise _Bad(f"no {which[0]} time for a {state} job and no collection time given")
    user = job.get("user_name", job.get("user"))
    name = job.get("name")
    event: dict[str, Any] = {"kind": "job", "ts": ts, "job_id": job_id, "state": state, "nodes": nodes,
                             "gpus_per_node": gpus // len(nodes) if nodes else 0,
                             "storage": _licenses(job.get("licenses"))}
    if isinstance(name, str) and name:
        event["name"] = name
    if isinstance(user, str) and user:
        event["user"] = user
    return event


def _convert(raw: bytes, ctx: Context, sacct: bool) -> None:
    for record, doc in json_documents(raw, ctx, split_arrays=False):
        base = record or "message"
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
            ctx.reject(base, 'expected an object with a "jobs" array')
            continue
        for i, job in enumerate(doc["jobs"]):
            rec = f"jobs[{i}]" if record is None else f"{record}.jobs[{i}]"
            try:
                event = _job_event(job, sacct, ctx)
            except _Bad as exc:
                label = job.get("job_id") if isinstance(job, dict) else None
                ctx.reject(rec, f"job {label}: {exc}" if label is not None else str(exc))
                continue
            ctx.event(rec, event)


def convert_squeue(raw: bytes, ctx: Context) -> None:
    """``squeue --json``."""
    _convert(raw, ctx, sacct=False)


def convert_sacct(raw: bytes, ctx: Context) -> None:
    """``sacct --json``."""
    _convert(raw, ctx, sacct=True)
