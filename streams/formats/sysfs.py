"""sysfs InfiniBand counters and mlx5 ``hw_counters``, as ``grep -H . <files>`` prints them.

Reference: Documentation/ABI/stable/sysfs-class-infiniband; the rdma-core / node_exporter readers::

    /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0
    /sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait:1520
    /sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data:N/A (no PMA)
    /sys/class/infiniband/mlx5_2/ports/1/hw_counters/out_of_sequence:17

One line per file: ``<path>:<content>``. The device and port come from the path (labels ``device``
and ``port``), the metric name is the file name as the kernel spells it. ``N/A (no PMA)`` (a port
without a performance-management agent) is skipped and counted, never read as zero. Values are
cumulative counters; ``lifespan`` (the hw_counters cache age) is skipped and counted.
``port_xmit_data``/``port_rcv_data`` (and ``*_64``) stay in 4-byte words (the catalogue scales them).

No host and no time in the output: ``source`` header or default source, ``ts`` argument or header.
Layer ``nic`` unless the ``layer`` header says otherwise.
"""

from __future__ import annotations

import re

from streams.formats.base import Context, host_text

_PATH = re.compile(r"(?:.*/)?infiniband/([^/\s]+)/ports/(\d+)/(counters|hw_counters)/([A-Za-z0-9_]+)$")
#: hw_counters files that are not counters of the port (``lifespan``: the counter cache's age in ms).
_NOT_COUNTERS = frozenset({"lifespan"})
SKIP_NO_PMA = "N/A (no PMA): port without a performance-management agent"
SKIP_NOT_COUNTER = "hw_counters lifespan (cache age, not a counter)"


def convert(raw: bytes, ctx: Context) -> None:
    opened = host_text(raw, ctx, "sysfs counters carry")
    if opened is None:
        return
    text, ts, source = opened
    layer = ctx.layer("nic")
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        record = f"line {lineno}"
        path, sep, content = line.partition(":")
        if not sep:
            ctx.reject(record, "expected '<sysfs path>:<value>' (grep -H output)")
            continue
        m = _PATH.match(path.strip())
        if m is None:
            ctx.reject(record, f"not an infiniband counters path: {path[:80]!r}")
            continue
        device, port, _directory, name = m.groups()
        if name in _NOT_COUNTERS:
            ctx.skip(SKIP_NOT_COUNTER)
            continue
        content = content.strip()
        if content.startswith("N/A"):
            ctx.skip(SKIP_NO_PMA)
            continue
        try:
            value = float(int(content, 0))
        except ValueError:
            ctx.reject(record, f"{name}: value {content[:40]!r} is not an integer")
            continue
        ctx.sample(record, ts, layer, source, name, value, {"device": device, "port": port}, "counter")
