"""``ethtool -S <netdev>`` output of mlx5 NICs (RoCE): physical-port and per-priority counters.

Reference: Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst::

    NIC statistics:
         rx_packets_phy: 1187255
         rx_discards_phy: 0
         rx_pcs_symbol_err_phy: 0
         rx_corrected_bits_phy: 12
         rx_bits_phy: 97355000000
         rx_prio3_pause: 0
         rx_prio3_pause_duration: 0
         rx_prio3_discards: 0

Every ``name: value`` line becomes a counter sample with the raw name and an ``interface`` label
(the ``device`` header, e.g. ``ens1f0np0``). Per-ring software counters (``rx3_packets``,
``tx0_bytes``, ``ch5_events``, ``rx_xsk_*``...) are not port counters: skipped and counted. BER is
derived from ``rx_pcs_symbol_err_phy`` / ``rx_corrected_bits_phy`` over ``rx_bits_phy`` (see
:mod:`streams.formats.derive`) when the adapter state is carried between messages.

One message is the output for one interface (a name repeated within a message is rejected).
No host and no time in the output: ``source`` header or default source, ``ts`` argument or header.
"""

from __future__ import annotations

import re

from streams.formats.base import HEADER_DEVICE, Context, host_text

_LINE = re.compile(r"\s*([A-Za-z0-9_.\-\[\]]+):\s*(-?\d+)\s*$")
_PER_RING = re.compile(r"(?:rx|tx|ch|ptp|qos_tx|rx_xsk|tx_xsk)\d+_|(?:rx|tx)_xsk_|ptp_(?:cq|rx|tx)\d*_")
SKIP_PER_RING = "per-ring software counter (not a port counter)"


def convert(raw: bytes, ctx: Context) -> None:
    opened = host_text(raw, ctx, "ethtool output carries")
    if opened is None:
        return
    text, ts, source = opened
    layer = ctx.layer("nic")
    interface = ctx.header(HEADER_DEVICE)
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped == "NIC statistics:":
            continue
        record = f"line {lineno}"
        m = _LINE.match(line)
        if m is None:
            ctx.reject(record, f"not a 'name: integer' statistics line: {stripped[:60]!r}")
            continue
        name, value_text = m.groups()
        if _PER_RING.match(name):
            ctx.skip(SKIP_PER_RING)
            continue
        if name in seen:
            ctx.reject(record, f"{name}: repeated in one ethtool output")
            continue
        seen.add(name)
        labels = {"interface": interface} if interface else {}
        ctx.sample(record, ts, layer, source, name, float(int(value_text)), labels, "counter")
