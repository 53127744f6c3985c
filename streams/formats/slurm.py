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
- GPUs, from the first field that names them: ``tres.allocated`` (sacct; ``type: gres``, ``name:
  gpu`` or ``gpu:<model>``; the untyped entry wins), ``gres/gpu=N`` in ``tres_alloc_str``,
  ``gres_detail`` (one entry per allocated node, ``gpu:h100:1(IDX:0),gpu:a100:2(IDX:1-2)``: types
  mixed on a node are summed), ``tres_per_node`` (``gres/gpu:1``, ``gres/gpu:h100:1``: a count per
  node; as data_parser v0.0.42+ report ``--gpus-per-node``), ``gpus_per_node``, ``tres_per_job``
  (a total), ``tres_per_task`` (per task, times ``tasks``); then, for sacct, ``tres_req_str``. A
  total is divided by the node count; one that does not divide evenly is rejected (the job contract
  has one GPU count per node). When none of these fields is in the record at all, the count is
  **unknown**: ``gpus_per_node: null`` (not 0; a record that has the fields but names no GPU is a
  CPU job, 0).
- Storage pools: Slurm has no storage field. Sites that gate file systems with licenses
  (``#SBATCH -L scratch``) say which licences are pools in the ``license-pools`` header:
  ``scratch,cfs`` (a licence named as its pool) or ``scratch=lustre-a,cfs=cfs`` (licence=pool).
  Without the header no licence becomes a pool (software licences are not storage).
- Time: the start time for running states, the end time for ended ones, the submit time for
  pending ones; when Slurm has none, the ``ts`` argument or header.
- Job arrays: ``array_job_id``/``array_task_id`` set -> ``job_id`` is ``<array>_<task>`` as Slurm
  prints it; heterogeneous job components likewise ``<het_job_id>+<offset>``.
"""

from __future__ import annotations

import re
from typing import Any

import hostlist

from models.inventory import JobState
from streams.formats.base import Context, infer_epoch, timed_text
from streams.formats.jsonrecords import json_documents

_STATES = frozenset(s.value for s in JobState)
_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                    "BOOT_FAIL", "DEADLINE"})


#: Header naming which Slurm licences are storage pools (see the module docstring).
HEADER_LICENSE_POOLS = "license-pools"


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


def _gres_items(text: str) -> tuple[int | None, int | None]:
    """``(untyped, typed sum)`` GPU counts of a TRES or GRES string; None where absent.

    Accepts ``gres/gpu=2``, ``gres/gpu:2``, ``gres/gpu:h100=2``, ``gres/gpu:h100:2``, ``gpu:h100:1(IDX:0)``
    and comma lists of them. A typed item without a count (``gres/gpu:h100``) counts 1, as in Slurm.

    >>> _gres_items("cpu=2,gres/gpu=4,gres/gpu:a100=4"), _gres_items("gpu:h100:1(IDX:0),gpu:a100:2(IDX:1-2)")
    ((4, 4), (None, 3))
    """
    untyped: int | None = None
    typed: int | None = None
    # Commas also separate the IDX list inside parentheses: drop those first.
    depth = 0
    clean = []
    for ch in text:
        depth += ch == "("
        if depth == 0:
            clean.append(ch)
        depth -= ch == ")" and depth > 0
    for item in "".join(clean).split(","):
        item = item.strip().removeprefix("gres/")
        if item != "gpu" and not item.startswith(("gpu:", "gpu=")):
            continue
        key, sep, value = item.partition("=")
        parts = key.split(":")
        if sep:
            count_text, model = value, parts[1:]
        elif len(parts) >= 2 and parts[-1].isdigit():
            count_text, model = parts[-1], parts[1:-1]
        else:
            count_text, model = "1", parts[1:]
        if not count_text.isdigit():
            raise _Bad(f"GPU count {item[:30]!r} is not a count")
        count = int(count_text)
        if model:
            typed = (typed or 0) + count
        else:
            untyped = count
    return untyped, typed


def _gres_count(text: Any, field: str) -> int | None:
    """The GPU count a TRES/GRES string names (untyped wins over the typed sum); None: none named."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise _Bad(f"{field} is not a string")
    untyped, typed = _gres_items(text)
    return untyped if untyped is not None else typed


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


#: The fields that can carry a GPU count; a record with none of them says nothing about GPUs.
_GPU_FIELDS = ("tres", "tres_alloc_str", "gres_detail", "tres_per_node", "gpus_per_node", "tres_per_job",
               "tres_per_task", "tres_req_str")


def _gpus_per_node(job: dict[str, Any], nodes: list[str], sacct: bool) -> int | None:
    """GPUs per allocated node from the first field that names them (module docstring); None: unknown."""
    n = len(nodes)

    def per_node_of_total(total: int, field: str) -> int:
        if not n:
            raise _Bad(f"{total} GPUs ({field}) but no nodes")
        if total % n:
            raise _Bad(f"{total} GPUs ({field}) over {n} nodes is not a whole number per node")
        return total // n

    if sacct:
        tres = job.get("tres")
        if tres is not None and not isinstance(tres, dict):
            raise _Bad("tres is not an object")
        total = _gpus_from_tres_list((tres or {}).get("allocated"))
        if total is not None:
            return per_node_of_total(total, "tres.allocated") if total else 0
    total = _gres_count(job.get("tres_alloc_str"), "tres_alloc_str")
    if total:
        return per_node_of_total(total, "tres_alloc_str")
    detail = job.get("gres_detail")
    if detail:
        if not isinstance(detail, list) or not all(isinstance(d, str) for d in detail):
            raise _Bad("gres_detail is not a list of strings")
        counts = [_gres_count(d, "gres_detail") or 0 for d in detail]
        if sum(counts):
            return per_node_of_total(sum(counts), "gres_detail")
    if not n:
        return 0  # nothing allocated yet (pending): no GPUs held
    per_node = _gres_count(job.get("tres_per_node"), "tres_per_node")
    if per_node:
        return per_node
    raw = job.get("gpus_per_node")
    if raw not in (None, ""):
        value = _gres_count(raw, "gpus_per_node") if isinstance(raw, str) else unwrap(raw, "gpus_per_node")
        if value:
            return int(value)
    total = _gres_count(job.get("tres_per_job"), "tres_per_job")
    if total:
        return per_node_of_total(total, "tres_per_job")
    per_task = _gres_count(job.get("tres_per_task"), "tres_per_task")
    if per_task:
        tasks = unwrap(job.get("tasks", job.get("num_tasks")), "tasks")
        if tasks is None:
            return None  # GPUs per task known, the task count not: the total is unknown
        return per_node_of_total(per_task * int(tasks), "tres_per_task x tasks")
    if sacct:
        total = _gres_count(job.get("tres_req_str"), "tres_req_str")
        if total:
            return per_node_of_total(total, "tres_req_str")
    if not any(job.get(f) not in (None, "") for f in _GPU_FIELDS if f != "tres") and not (
            sacct and isinstance(job.get("tres"), dict)):
        return None
    return 0


def license_pools(header: str | None) -> dict[str, str]:
    """Parse the ``license-pools`` header: licence -> pool.

    >>> license_pools("scratch, cfs=lustre-a"), license_pools(None)
    ({'scratch': 'scratch', 'cfs': 'lustre-a'}, {})
    """
    out: dict[str, str] = {}
    for item in (header or "").split(","):
        name, sep, pool = item.strip().partition("=")
        if name.strip():
            out[name.strip()] = pool.strip() if sep and pool.strip() else name.strip()
    return out


def _licenses(value: Any, pools: dict[str, str]) -> list[str]:
    """The pools of the job's licences named in ``pools`` (others are software licences)."""
    if isinstance(value, str) and value:
        names = [item.split(":", 1)[0] for item in value.split(",") if item]
    elif isinstance(value, list):
        names = [str(x.get("name")) if isinstance(x, dict) else str(x) for x in value if x]
    else:
        names = []
    return sorted({pools[n] for n in names if n in pools})


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
    gpus_per_node = _gpus_per_node(job, nodes, sacct)
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
                             "gpus_per_node": gpus_per_node,
                             "storage": _licenses(job.get("licenses"), license_pools(ctx.header(HEADER_LICENSE_POOLS)))}
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


# -- node state ------------------------------------------------------------------------------------
#: Slurm node-state flags (``IDLE+DRAIN``, ``["MIXED", "DRAIN"]``); the other word is the base state.
_NODE_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "COMPLETING",
                         "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP",
                         "CLOUD", "PLANNED", "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "DYNAMIC_NORM",
                         "DYNAMIC_FUTURE", "INVALID_REG", "NO_RESPOND", "RESUME", "UNDRAIN", "BLOCKED"})
_BUSY = frozenset({"ALLOCATED", "ALLOC", "MIXED", "COMPLETING"})
#: Suffixes ``sinfo``/``scontrol`` append to a state (``down*``: not responding, ``idle~``: powered off...).
_STATE_SUFFIXES = "*~#!%$@^-"


def node_state(words: list[str]) -> str:
    """Fold Slurm's node state words into one :data:`models.inventory.NodeStateName`.

    >>> node_state(["IDLE", "DRAIN"]), node_state(["MIXED", "DRAIN"]), node_state(["DOWN", "DRAIN"])
    ('drained', 'draining', 'down')
    >>> node_state(["ALLOCATED"]), node_state(["IDLE", "FAIL"]), node_state(["FUTURE"])
    ('alloc', 'fail', 'unknown')
    """
    upper = [w.strip().upper().rstrip(_STATE_SUFFIXES) for w in words if w and w.strip()]
    base = next((w for w in upper if w not in _NODE_FLAGS), "")
    flags = set(upper) - {base}
    if base == "DOWN":
        return "down"
    if flags & {"FAIL", "FAILING"}:
        return "failing" if base in _BUSY or "FAILING" in flags else "fail"
    if flags & {"DRAIN", "DRAINED", "DRAINING"} or base in ("DRAINED", "DRAINING", "DRAIN"):
        return "draining" if base in _BUSY or "DRAINING" in flags | {base} else "drained"
    return {"ALLOCATED": "alloc", "ALLOC": "alloc", "MIXED": "mixed", "IDLE": "idle",
            "COMPLETING": "alloc"}.get(base, "unknown")


def _node_json(node: Any, ts: float) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise _Bad(f"node is {type(node).__name__}, not an object")
    name = node.get("name") or node.get("hostname")
    if not isinstance(name, str) or not name:
        raise _Bad("node without a name")
    raw_state = node.get("state")
    words = raw_state if isinstance(raw_state, list) else str(raw_state or "").split("+")
    if not words or not all(isinstance(w, str) for w in words):
        raise _Bad(f"node {name}: state is not a list of words")
    event: dict[str, Any] = {"kind": "node", "ts": ts, "node": name, "state": node_state(words),
                             "flags": [w.upper() for w in words]}
    reason = node.get("reason")
    if isinstance(reason, str) and reason:
        event["reason"] = reason[:256]
    since = unwrap(node.get("reason_changed_at"), "reason_changed_at")
    if since:
        event["since"] = infer_epoch(since, "reason_changed_at")
    return event


def convert_nodes(raw: bytes, ctx: Context) -> None:
    """``scontrol show node --json`` / slurmrestd ``/nodes``: ``{"nodes": [...]}`` -> node events.

    Time: the ``ts`` argument or header, else the document's ``last_update``.
    """
    for record, doc in json_documents(raw, ctx, split_arrays=False):
        base = record or "message"
        if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
            ctx.reject(base, 'expected an object with a "nodes" array')
            continue
        ts = ctx.collection_ts()
        if ts is None:
            try:
                last = unwrap(doc.get("last_update"), "last_update")
            except _Bad as exc:
                ctx.reject(base, str(exc))
                continue
            ts = infer_epoch(last, "last_update") if last else None
        if ts is None:
            ctx.reject(base, "no collection time (ts) and no last_update")
            continue
        for i, node in enumerate(doc["nodes"]):
            rec = f"nodes[{i}]" if record is None else f"{record}.nodes[{i}]"
            try:
                ctx.event(rec, _node_json(node, ts))
            except (_Bad, ValueError) as exc:
                ctx.reject(rec, str(exc))


# Keys may hold ``/`` and ``:`` (``CPUs/Task=1``, ``AllocNode:Sid=...``, ``ReqB:S:C:T=...``).
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")
# A lone ``Key:value`` line (``NtasksPerTRES:0``) is scontrol output too, with nothing we read.
_COLON_LINE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9_/]*:\S*\s*$")


def _key_values(line: str) -> list[tuple[str, str]]:
    """``Key=value`` pairs of one ``scontrol show`` line; a value runs to the next `` Key=``.

    >>> _key_values("   OS=Linux 4.14 #1 SMP  RealMemory=7907")
    [('OS', 'Linux 4.14 #1 SMP'), ('RealMemory', '7907')]
    """
    marks = list(_KEY.finditer(line))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out.append((m.group(1), line[m.end():end].strip()))
    return out


def scontrol_records(text: str, first_key: str) -> tuple[list[tuple[int, dict[str, str]]], list[int]]:
    """``scontrol show node|job`` text (multi-line or ``-o`` one-line) -> ``(line, fields)`` records,
    and the numbers of non-blank lines that hold no ``Key=value`` (not scontrol output).

    A record starts at each ``first_key=`` (``NodeName``, ``JobId``).
    """
    records: list[tuple[int, dict[str, str]]] = []
    bad: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        pairs = _key_values(line)
        if not pairs and line.strip() and not _COLON_LINE.match(line):
            bad.append(lineno)
        for key, value in pairs:
            if key == first_key:
                records.append((lineno, {}))
            if records:
                records[-1][1].setdefault(key, value)
    return records, bad


def convert_scontrol_nodes(raw: bytes, ctx: Context) -> None:
    """``scontrol show node`` text -> node events.

    ``State=IDLE+DRAIN`` gives the state; ``Reason=`` the reason as printed (with its
    ``[user@time]`` suffix: that time is the controller's local time, so ``since`` is left unset).
    Time: the ``ts`` argument or header (the text carries none).
    """
    opened = timed_text(raw, ctx, "scontrol text carries")
    if opened is None:
        return
    text, ts = opened
    records, bad = scontrol_records(text, "NodeName")
    for lineno in bad:
        ctx.reject(f"line {lineno}", "not a Key=value line of `scontrol show node` output")
    if not records and text.strip() and not bad:
        ctx.reject(None, "no NodeName= record (expected `scontrol show node` output)")
    for lineno, fields in records:
        name, state = fields.get("NodeName", ""), fields.get("State", "")
        if not name or not state:
            ctx.reject(f"line {lineno}", f"node {name[:40]!r}: no State=")
            continue
        words = state.split("+")
        event: dict[str, Any] = {"kind": "node", "ts": ts, "node": name, "state": node_state(words),
                                 "flags": [w.upper() for w in words]}
        reason = fields.get("Reason")
        if reason and reason != "(null)":
            event["reason"] = reason[:256]
        ctx.event(f"line {lineno}", event)


# -- scontrol show job -d text ---------------------------------------------------------------------
def _idx_count(spec: str) -> int:
    """GPUs named by an index list: ``0,2-3,5`` -> 4.

    >>> _idx_count("0,2-3,5"), _idx_count("5")
    (4, 1)
    """
    total = 0
    for part in spec.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise _Bad(f"GRES index list {spec[:30]!r} is not a list of indices")
        total += int(hi) - int(lo) + 1 if sep else 1
    return total


def _detail_gpus(gres: str) -> int:
    """GPUs of one ``-d`` detail line's ``GRES=``/``GRES_IDX=``: ``gpu:rtx2080:1(IDX:1),gg:g0(CNT:1)`` -> 1,
    ``gpu(IDX:0,2-3,5)`` -> 4 (no count: the index list says how many)."""
    total = 0
    for item in re.findall(r"([^,(]+)(?:\(([^)]*)\))?", gres):
        name, paren = item[0].strip(), item[1]
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        parts = name.split(":")
        if len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
        elif paren.startswith("IDX:") and paren[4:] not in ("", "N/A"):
            total += _idx_count(paren[4:])
        else:
            total += 1
    return total


def _job_text_records(text: str) -> tuple[list[tuple[int, dict[str, str], list[tuple[str, str]]]], list[int]]:
    """``(line, fields, [(detail Nodes, detail GRES)...])`` per ``JobId=`` record, and bad lines."""
    records: list[tuple[int, dict[str, str], list[tuple[str, str]]]] = []
    bad: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        pairs = _key_values(line)
        if not pairs and line.strip() and not _COLON_LINE.match(line):
            bad.append(lineno)
        keys = dict(pairs)
        if "JobId" in keys:
            records.append((lineno, {}, []))
        if not records:
            continue
        if "Nodes" in keys and "CPU_IDs" in keys:  # a -d detail line, one per group of nodes
            records[-1][2].append((keys["Nodes"], keys.get("GRES", keys.get("GRES_IDX", ""))))
            continue
        for key, value in pairs:
            records[-1][1].setdefault(key, value)
    return records, bad


def _job_text_gpus(fields: dict[str, str], details: list[tuple[str, str]], nodes: list[str]) -> int:
    n = len(nodes)
    total = _gres_count(fields.get("TRES"), "TRES")
    if not total and details:
        total = sum(_detail_gpus(gres) * len(_nodes(spec)) for spec, gres in details)
    if not total:
        job_gres = fields.get("JOB_GRES")
        total = _gres_count(job_gres, "JOB_GRES") if job_gres not in (None, "(null)") else None
    if not total and n:
        per_node = fields.get("TresPerNode")
        count = _gres_count(per_node, "TresPerNode") if per_node not in (None, "(null)") else None
        if count:
            return count
    if not total:
        return 0
    if not n:
        raise _Bad(f"{total} GPUs but no nodes")
    if total % n:
        raise _Bad(f"{total} GPUs over {n} nodes is not a whole number per node")
    return total // n


def convert_scontrol_jobs(raw: bytes, ctx: Context) -> None:
    """``scontrol show job -d`` text -> job events.

    GPUs from ``TRES=`` (``gres/gpu=N``), else the ``-d`` detail lines (``Nodes=... GRES=gpu:1(IDX:3)``
    or ``GRES_IDX=gpu(IDX:0,2-3,5)``), else ``JOB_GRES=``, else ``TresPerNode=``; a record whose
    fields name no GPU is a CPU job (0). Array tasks are ``<ArrayJobId>_<ArrayTaskId>``. Licences as
    in ``squeue --json`` (``license-pools`` header). Time: the ``ts`` argument or header: the text's
    times are the controller's local time without an offset, so they are not used.
    """
    opened = timed_text(raw, ctx, "scontrol text carries")
    if opened is None:
        return
    text, ts = opened
    records, bad = _job_text_records(text)
    for lineno in bad:
        ctx.reject(f"line {lineno}", "not a Key=value line of `scontrol show job` output")
    if not records and text.strip() and not bad:
        ctx.reject(None, "no JobId= record (expected `scontrol show job -d` output)")
    pools = license_pools(ctx.header(HEADER_LICENSE_POOLS))
    for lineno, fields, details in records:
        record = f"line {lineno}"
        label = fields.get("JobId", "")
        try:
            job_id = label
            if fields.get("ArrayJobId") and fields.get("ArrayTaskId"):
                job_id = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
            elif fields.get("HetJobId") and fields.get("HetJobOffset"):
                job_id = f"{fields['HetJobId']}+{fields['HetJobOffset']}"
            if not job_id:
                raise _Bad("JobId is empty")
            state = _state(fields.get("JobState"), "JobState")
            nodes = _nodes(fields.get("NodeList"))
            gpus = _job_text_gpus(fields, details, nodes)
        except _Bad as exc:
            ctx.reject(record, f"job {label}: {exc}" if label else str(exc))
            continue
        licenses = fields.get("Licenses")
        event: dict[str, Any] = {"kind": "job", "ts": ts, "job_id": job_id, "state": state, "nodes": nodes,
                                 "gpus_per_node": gpus,
                                 "storage": _licenses(licenses if licenses != "(null)" else None, pools)}
        name = fields.get("JobName")
        if name:
            event["name"] = name
        user = fields.get("UserId", "").split("(", 1)[0]
        if user:
            event["user"] = user
        ctx.event(record, event)
