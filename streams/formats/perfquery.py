"""``perfquery`` (infiniband-diags) text: IB PMA port counters of one or more ports.

Reference: rdma-core ``infiniband-diags/perfquery.c`` and ``libibmad`` dump functions::

    # Port counters: Lid 1 port 1 (CapMask: 0x5A00)
    PortSelect:......................1
    SymbolErrorCounter:..............0
    PortXmitData:....................4294967295
    # Port extended counters: Lid 1 port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)
    PortXmitData:....................96208829952

Each ``Name:....value`` line under a ``# ... counters: Lid N port M`` header becomes one counter
sample with the raw name and labels ``lid`` and ``port`` (``port`` is ``255`` for ``-a``
all-ports aggregates, as perfquery prints it). ``PortSelect``/``CounterSelect*`` are selectors,
not counters (skipped, not counted). When a port has both standard and extended counters in one
message, the extended (64-bit) value wins and the standard one is skipped (the standard PMA
counters saturate at 32 bits). Values may be decimal or ``0x`` hex. ``PortXmitData``/``PortRcvData``
stay in 4-byte words (the catalogue scales them).

perfquery prints no host and no time: the source comes from the ``source`` header or the default
source, the time from the ``ts`` argument or header; the layer is ``nic`` unless the ``layer``
header says ``switch`` (a switch port queried by LID). A ``device`` header adds a ``device`` label.
"""

from __future__ import annotations

import re

from streams.formats.base import HEADER_DEVICE, Context, host_text

_HEADER = re.compile(r"#\s*(.+?)\s+counters:\s*(?:Lid\s+(\d+)|(.+?))\s+port\s+(\d+)", re.IGNORECASE)
_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_]*):\.*\s*(\S+)\s*$")
_SELECTORS = frozenset({"PortSelect", "CounterSelect", "CounterSelect2"})
SKIP_SUPERSEDED = "standard counter superseded by its extended 64-bit value"


def convert(raw: bytes, ctx: Context) -> None:
    opened = host_text(raw, ctx, "perfquery output carries")
    if opened is None:
        return
    text, ts, source = opened
    layer = ctx.layer("nic")
    device = ctx.header(HEADER_DEVICE)
    # (lid/path, port) -> name -> (value, extended?, line)
    ports: dict[tuple[str, str], dict[str, tuple[float, bool, int]]] = {}
    current: tuple[str, str] | None = None
    extended = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            m = _HEADER.match(stripped)
            if m is None:
                ctx.reject(f"line {lineno}", f"not a perfquery counters header: {stripped[:60]!r}")
                current = None
                continue
            kind, lid, path, port = m.groups()
            current = (lid if lid is not None else path.strip(), port)
            extended = "extended" in kind.lower()
            ports.setdefault(current, {})
            continue
        m2 = _LINE.match(stripped)
        if m2 is None:
            ctx.reject(f"line {lineno}", f"not a 'Name:....value' counter line: {stripped[:60]!r}")
            continue
        if current is None:
            ctx.reject(f"line {lineno}", "counter line before any '# ... counters: Lid N port M' header")
            continue
        name, text_value = m2.groups()
        if name in _SELECTORS:
            continue
        try:
            value = float(int(text_value, 0))
        except ValueError:
            ctx.reject(f"line {lineno}", f"{name}: value {text_value[:40]!r} is not an integer")
            continue
        have = ports[current].get(name)
        if have is not None and have[1] and not extended:
            ctx.skip(SKIP_SUPERSEDED)
            continue
        if have is not None and extended and not have[1]:
            ctx.skip(SKIP_SUPERSEDED)
        ports[current][name] = (value, extended, lineno)
    for (lid, port), counters in ports.items():
        labels = {"lid": lid, "port": port} if lid.isdigit() else {"path": lid, "port": port}
        if device:
            labels["device"] = device
        for name, (value, _ext, lineno) in counters.items():
            ctx.sample(f"line {lineno}", ts, layer, source, name, value, dict(labels), "counter")
