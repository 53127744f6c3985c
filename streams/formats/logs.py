"""Event lines from logs: kernel ``NVRM: Xid`` lines (dmesg / journal / syslog) and NCCL ``WARN`` lines.

Logs are not metrics, but the correlator's evidence is samples on a job's timeline. Both become
**event samples** the way the pipeline already carries DCGM's last-XID field
(``DCGM_FI_DEV_XID_ERRORS``, mode ``event`` in :mod:`streams.catalogue`): a gauge whose change to
a new non-zero value is an anomaly by itself (score 0.99, confirmed on one sample), at the line's
time, on the node's source -- so an Xid or a NCCL transport failure on a job's node is named on that
job's timeline with its cause rank (``gpu``/``gpu_fault`` before ``nccl``), like any other signal.

**Kernel Xid** (``kernel-xid``): ``NVRM: Xid (PCI:0000:cb:00): 13, pid=..., name=..., <text>``
becomes ``nvrm_xid`` on layer ``gpu`` with the Xid code as its value (as DCGM reports it) and the
GPU's ``pci_bus_id`` as its label (one series per GPU, so a second, different Xid on the same GPU
is a new event; the same code repeated is not). Lines of one GPU at one instant (dmesg prints one
fault as several lines) are one event, the last code; the others are counted in ``skipped``.
Accepted prefixes and where the time comes from:

- ``journalctl -o short-iso`` / RFC 3339 (``2024-08-30T11:43:09+0000 host kernel: ...``): that time;
- ``dmesg --time-format iso`` (``2024-08-30T11:43:09,500000+00:00 NVRM: ...``): that time;
- ``dmesg --ctime`` / ``-T`` (``[Fri Aug 30 11:43:09 2024] ...``): that time, read as UTC (the kernel
  prints local time without a zone: collect with ``TZ=UTC``);
- syslog / journal short format (``Jul 06 20:02:59 host kernel: ...``, ``short-precise`` too): that
  time, UTC, in the year of the collection time (the previous year when that would put it in the
  future);
- plain ``dmesg`` (``[93297.027938]`` seconds since boot) or no prefix: the collection time.

The syslog/journal host name is the source (then the ``source`` header, the default). Other lines
(the rest of the kernel log, continuation lines) are skipped and counted.

**NCCL WARN** (``nccl-warn``): NCCL's debug lines ``host:pid:tid [cudaDev] file.cc:line NCCL WARN
message`` (anywhere in the line, so ``srun --label`` and timestamp prefixes are fine). Each becomes
an event on layer ``nccl``, source the line's host, labels ``cuda_dev`` and ``job_id`` (from the
``job_id`` header: job logs carry none), named by what failed:

- ``nccl_warn_net``: the network transport (``NET/...`` messages, ``transport/net*``, ``misc/socket``,
  ``misc/ibvwrap`` files): QP fatal events, completion errors, socket failures;
- ``nccl_warn_cuda``: CUDA failures (``Cuda failure``, ``CUDA error``, ``cudaErrorXxx``);
- ``nccl_warn``: anything else (bootstrap, proxy, init).

The value is the running count of WARN lines of that series in the stream (kept in the adapter
state), so every new warning is a new value, hence a new event; several warnings of one series at
one time are one sample with the count (the rest counted in ``skipped``). NCCL lines carry no time:
the collection time is used (the Kafka record time or the ``ts`` header), and a message without one
is rejected. Other NCCL lines (``INFO``, ``TRACE``) and non-NCCL lines are skipped and counted.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from streams.formats.base import HEADER_JOB_ID, Context, decode_text, parse_time_value
from streams.formats.state import SEP

SKIP_NOT_XID = "kernel log line that is not an NVRM Xid"
SKIP_NOT_WARN = "log line that is not an NCCL WARN"
SKIP_XID_REPEAT = "Xid on the same GPU at the same time as the previous line (one event: the last code)"
SKIP_SAME_TIME = "NCCL WARN at the same time as the series' previous one (counted in the next value)"

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:,|$)")
_ISO_PREFIX = re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s+"
                         r"(?P<host>\S+)\s+kernel:")
_DMESG_ISO_PREFIX = re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")
_CTIME_PREFIX = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_SYSLOG_PREFIX = re.compile(r"^(?P<ts>[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+(?P<host>\S+)\s+kernel:")
_NCCL_WARN = re.compile(r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                        r"(?:(?P<file>\S+):\d+ )?NCCL WARN (?P<msg>.*)$")
_NET_FILES = ("transport/net", "misc/socket", "misc/ibvwrap", "net_ib", "net_socket", "plugin/net")
_CUDA_WORDS = ("Cuda failure", "CUDA error", "cudaError", "CUDA failure")


def _iso(text: str) -> float:
    if re.search(r"[+-]\d{4}$", text):  # journalctl's +0000: RFC 3339 wants +00:00
        text = f"{text[:-2]}:{text[-2:]}"
    return parse_time_value(text, "journal time")


def _syslog_year(text: str, collected: float | None) -> float | None:
    if collected is None:
        return None
    year = datetime.fromtimestamp(collected, UTC).year
    for y in (year, year - 1):
        try:
            fmt = "%Y %b %d %H:%M:%S.%f" if "." in text else "%Y %b %d %H:%M:%S"
            ts = datetime.strptime(f"{y} {' '.join(text.split())}", fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            return None
        if ts <= collected + 86400:
            return ts
    return None


def xid_time_and_host(line: str, collected: float | None) -> tuple[float | None, str | None]:
    """The time and host a kernel log line's prefix gives (``collected`` where it gives none).

    >>> xid_time_and_host("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, x", None)
    (1725018189.0, None)
    >>> xid_time_and_host("Jul 06 20:02:59 gaming kernel: NVRM: Xid (PCI:0000:01:00): 13,", 1751850000.0)
    (1751832179.0, 'gaming')
    >>> xid_time_and_host("Jul 06 20:02:59.250000 gaming kernel: NVRM: Xid", 1751850000.0)
    (1751832179.25, 'gaming')
    >>> xid_time_and_host("2024-08-30T11:43:09,500000+00:00 NVRM: Xid (PCI:0000:cb:00): 13,", None)
    (1725018189.5, None)
    """
    m = _ISO_PREFIX.match(line)
    if m:
        return _iso(m.group("ts")), m.group("host")
    m = _DMESG_ISO_PREFIX.match(line)
    if m:
        return _iso(m.group("ts").replace(",", ".")), None
    m = _CTIME_PREFIX.match(line)
    if m:
        stamp = datetime.strptime(" ".join(m.group("ts").split()), "%a %b %d %H:%M:%S %Y")
        return stamp.replace(tzinfo=UTC).timestamp(), None
    m = _SYSLOG_PREFIX.match(line)
    if m:
        return _syslog_year(m.group("ts"), collected), m.group("host")
    return collected, None


def convert_xid(raw: bytes, ctx: Context) -> None:
    text = decode_text(raw, ctx)
    if text is None:
        return
    collected = ctx.collection_ts()
    # (source, bus, ts) -> (record, code): one event per GPU and instant (dmesg prints one fault as
    # several lines with the same code and time)
    events: dict[tuple[str, str, float], tuple[str, int]] = {}
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        m = _XID.search(line)
        if m is None:
            ctx.skip(SKIP_NOT_XID)
            continue
        rec = f"line {lineno}"
        try:
            ts, host = xid_time_and_host(line.strip(), collected)
        except ValueError as exc:
            ctx.reject(rec, str(exc))
            continue
        if ts is None:
            ctx.reject(rec, "Xid line without an absolute time and no collection time given")
            continue
        source = ctx.source(host)
        if source is None:
            ctx.reject(rec, "Xid line without a host name, no source header and no default source")
            continue
        slot = (source, m.group("bus").lower(), ts)
        if slot in events:
            ctx.skip(SKIP_XID_REPEAT)
        events[slot] = (rec, int(m.group("code")))
    for (source, bus, ts), (rec, code) in events.items():
        ctx.sample(rec, ts, ctx.layer("gpu"), source, "nvrm_xid", float(code), {"pci_bus_id": bus}, "gauge")


def warn_metric(file: str | None, message: str) -> str:
    """The event name a NCCL WARN line becomes.

    >>> warn_metric("transport/net_ib.cc", "NET/IB : mlx5_3:1 async fatal event on QP")
    'nccl_warn_net'
    >>> warn_metric("enqueue.cc", "Cuda failure 'an illegal memory access was encountered'")
    'nccl_warn_cuda'
    >>> warn_metric("bootstrap.cc", "Bootstrap : no socket interface found")
    'nccl_warn'
    """
    if message.startswith("NET/") or (file is not None and any(f in file for f in _NET_FILES)):
        return "nccl_warn_net"
    if any(w in message for w in _CUDA_WORDS):
        return "nccl_warn_cuda"
    return "nccl_warn"


def convert_nccl_warn(raw: bytes, ctx: Context) -> None:
    text = decode_text(raw, ctx)
    if text is None:
        return
    job_id = ctx.header(HEADER_JOB_ID)
    ts = ctx.collection_ts()
    # (source, metric, cuda_dev) -> (record, labels) of the series' last warning in this message
    last: dict[tuple[str, str, str], tuple[str, dict[str, str], float]] = {}
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        m = _NCCL_WARN.search(line.rstrip())
        if m is None:
            ctx.skip(SKIP_NOT_WARN)
            continue
        rec = f"line {lineno}"
        if ts is None:
            ctx.reject(rec, "NCCL log lines carry no time and no collection time was given")
            continue
        source = ctx.source(m.group("host"))
        if source is None:  # the regex requires a host: unreachable, kept for the type checker
            continue
        metric = warn_metric(m.group("file"), m.group("msg"))
        labels = {"cuda_dev": m.group("dev")}
        if job_id:
            labels["job_id"] = job_id
        key = SEP.join(("nccl-warn", source, metric, *(f"{k}={v}" for k, v in sorted(labels.items()))))
        total, advanced = ctx.state.accumulate(key, ts, 1.0)
        slot = (source, metric, m.group("dev"))
        if not advanced and slot not in last:
            ctx.skip(SKIP_SAME_TIME)  # an earlier message already sent this series at this time
            continue
        if slot in last:
            ctx.skip(SKIP_SAME_TIME)
        last[slot] = (rec, labels, total)
    for (source, metric, _dev), (rec, labels, total) in last.items():
        ctx.sample(rec, ts or 0.0, ctx.layer("nccl"), source, metric, total, labels, "gauge")
