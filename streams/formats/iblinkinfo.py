"""``iblinkinfo`` (default output) -> link and switch events, with tiers.

Reference: infiniband-diags ``iblinkinfo(8)`` (rdma-core). The default output has one section per
node, headed ``CA: <node description>:`` or ``Switch: <node GUID> <node description>:``, and one
line per port::

    CA: teaker-4 HCA-1:
          0xf45214030091b9f1  1  1[  ] ==( 4X 10.0 Gbps Active/  LinkUp)==>  2  9[  ] "Infiniscale-IV Mellanox..." ( )
    Switch: 0x0002c902004b2678 Infiniscale-IV Mellanox Technologies:
               2    9[  ] ==( 4X 10.0 Gbps Active/  LinkUp)==>       1    1[  ] "teaker-4 HCA-1" ( )
               2    8[  ] ==(                Down/ Polling)==>             [  ] "" ( )

(columns narrowed here; the tool pads them with spaces, which the parser ignores).

A CA port line starts with the port GUID; then the port's LID and number, the link, and the peer's
LID, port number and node description. A switch port line has no GUID (the LID is the switch's).
A port with no peer (``Down/ Polling``) is skipped and counted, as is a host port cabled straight to
another host. ``-l`` output (one line per port, each led by its node's GUID and description, with no
section headers) is rejected line by line: a line there does not say whether its node is a switch.

The mapping is :mod:`streams.formats.ibnetdiscover`'s (the same fabric, another tool):

- **Hosts**: a CA's description is ``<host> <device>``; one ``link`` per host port (``port`` the CA
  port, ``switch_port`` the leaf port), fabric ``infiniband``, from the CA's section or, for a CA
  with no section, from the switch side. Each cable is printed from both ends and used once.
- **Switches** are named by their description (``MF0;<name>:<model>/U1`` gives ``<name>``), qualified
  by GUID when several share it. The peer of a port is a switch when its LID is a switch's LID (every
  switch has a section in a full ``iblinkinfo``); otherwise it is a host.
- **Tiers** follow from the cabling, as for ``ibnetdiscover``: switches with hosts are leaves, their
  other switch neighbours spines, theirs cores.
- **Line rates**: the link column gives the width and the per-lane signalling rate (``4X 53.125
  Gbps`` is HDR); :func:`line_rate_gbps` names the speed and gives the nominal rate as
  ``ibnetdiscover`` does (``4X 53.125 Gbps`` = 200, ``4X 10.0 Gbps`` QDR = 40): a host's ``link``
  gets ``speed_gbps``, a switch's ``ports`` (its switch-to-switch ports, with their ``peer``) each
  its ``speed_gbps``. A rate that is no InfiniBand speed gives none.
- Time: the ``ts`` argument or header (the output carries none).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from streams.formats.base import Context, timed_text
from streams.formats.ibnetdiscover import (
    LANE_GBPS,
    host_and_device,
    switch_label,
    switch_names,
    tiered_switch_events,
)

SKIP_DOWN = "port with no peer (Down)"
SKIP_HOST_TO_HOST = "host port cabled to another host (no switch)"

_CA_HEAD = re.compile(r"^CA:\s+(.*?):\s*$")
_SW_HEAD = re.compile(r"^Switch:\s+(0x[0-9a-fA-F]+)\s+(.*?):\s*$")
# [0xGUID ["desc"]] LID PORT[..] ==( link )==> [0xGUID] [LID PORT][..] "peer desc" ( comment )
_WIDTH_RATE = re.compile(r"(\d+)X\s+([\d.]+)\s+Gbps")
#: Per-lane signalling rate iblinkinfo prints (Gb/s) -> the speed's name (IBTA; 64b/66b from FDR on).
SIGNALLING = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 10.3125: "FDR10", 14.0625: "FDR", 25.78125: "EDR",
              53.125: "HDR", 106.25: "NDR", 212.5: "XDR"}
_PORT = re.compile(r'^(?:(0x[0-9a-fA-F]+)\s+(?:"([^"]*)"\s+)?)?(\d+)\s+(\d+)\[[^\]]*\]\s+==\((.*?)\)==>\s+'
                   r'(?:0x[0-9a-fA-F]+\s+)?(?:(\d+)\s+(\d+))?\s*\[[^\]]*\]\s+"([^"]*)"\s+\(.*\)\s*$')


def line_rate_gbps(link: str) -> float | None:
    """A port's nominal line rate from iblinkinfo's link column (None when it gives no known speed).

    >>> [line_rate_gbps(f" 4X {r} Gbps Active/  LinkUp") for r in ("10.0", "25.78125", "53.125", "106.25")]
    [40.0, 100.0, 200.0, 400.0]
    >>> line_rate_gbps("1X 53.125 Gbps Active"), line_rate_gbps("4X 12.5 Gbps"), line_rate_gbps("Down/ Polling")
    (50.0, None, None)
    """
    m = _WIDTH_RATE.search(link)
    if m is None:
        return None
    name = SIGNALLING.get(float(m.group(2)))
    return None if name is None else int(m.group(1)) * LANE_GBPS[name]


@dataclass
class _Port:
    line: int
    kind: str  # "CA" or "SW"
    node: str  # the CA's description, or the switch's GUID
    lid: str
    port: str
    peer_lid: str
    peer_port: str
    peer_desc: str
    speed: float | None = None


def convert(raw: bytes, ctx: Context) -> None:
    opened = timed_text(raw, ctx, "iblinkinfo output carries")
    if opened is None:
        return
    text, ts = opened
    ports: list[_Port] = []
    switch_desc: dict[str, str] = {}  # switch GUID -> description
    section: tuple[str, str] | None = None  # ("CA", desc) or ("SW", guid)
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        record = f"line {lineno}"
        if (m := _SW_HEAD.match(stripped)) is not None:
            guid = m.group(1).lower()
            switch_desc.setdefault(guid, m.group(2))
            section = ("SW", guid)
            continue
        if (m := _CA_HEAD.match(stripped)) is not None:
            section = ("CA", m.group(1))
            continue
        p = _PORT.match(stripped)
        if p is None:
            ctx.reject(record, f"not an iblinkinfo line: {stripped[:60]!r}")
            continue
        _guid, _desc, lid, port, link, peer_lid, peer_port, peer_desc = p.groups()
        if section is None:
            ctx.reject(record, "port line outside a CA: or Switch: section (iblinkinfo -l output is not read)")
            continue
        if not peer_lid or not peer_port:
            ctx.skip(SKIP_DOWN)
            continue
        kind, node = section
        ports.append(_Port(lineno, kind, node, lid, port, peer_lid, peer_port, peer_desc, line_rate_gbps(link)))
    _emit(ports, switch_desc, ts, ctx)


def _emit(ports: list[_Port], switch_desc: dict[str, str], ts: float, ctx: Context) -> None:
    switch_lid = {p.lid: p.node for p in ports if p.kind == "SW"}  # LID -> switch GUID
    names = switch_names(switch_desc)
    # (host description, CA port) -> (line, switch GUID or label, switch port, line rate)
    host_ports: dict[tuple[str, str], tuple[int, str, str, float | None]] = {}
    switch_peers: dict[str, set[str]] = defaultdict(set)
    #: switch GUID -> its switch-to-switch ports: port -> (the peer's GUID, line rate)
    switch_ports: dict[str, dict[str, tuple[str, float | None]]] = defaultdict(dict)
    ca_descs = {p.node for p in ports if p.kind == "CA"}
    for p in ports:
        if p.kind == "CA":
            sw = switch_lid.get(p.peer_lid)
            if sw is None:
                if p.peer_desc in ca_descs:  # two hosts cabled back to back: no switch port to name
                    ctx.skip(SKIP_HOST_TO_HOST)
                    continue
                sw = _unlisted(p.peer_desc, names)  # a switch with no section of its own
            host_ports.setdefault((p.node, p.port), (p.line, sw, p.peer_port, p.speed))
        elif (peer := switch_lid.get(p.peer_lid)) is not None:
            switch_peers[p.node].add(peer)
            switch_peers[peer].add(p.node)
            switch_ports[p.node].setdefault(p.port, (peer, p.speed))
            switch_ports[peer].setdefault(p.peer_port, (p.node, p.speed))
        else:
            host_ports.setdefault((p.peer_desc, p.peer_port), (p.line, p.node, p.port, p.speed))
    leaves: set[str] = set()
    for (desc, ca_port), (line, sw, sw_port, speed) in sorted(host_ports.items(), key=lambda kv: kv[1][0]):
        record = f"line {line}"
        node, device = host_and_device(desc)
        if not node:
            ctx.reject(record, "host port without a node description")
            continue
        leaves.add(sw)
        link = {"kind": "link", "ts": ts, "node": node, "device": device, "port": ca_port,
                "switch": names.get(sw, sw), "switch_port": sw_port, "fabric": "infiniband"}
        if speed is not None:
            link["speed_gbps"] = speed
        ctx.event(record, link)
    tiered_switch_events(ctx, ts, leaves, switch_peers, switch_ports, names)


def _unlisted(desc: str, names: dict[str, str]) -> str:
    """A peer switch known only by the description a CA line prints: its label, kept in ``names``."""
    label = switch_label(desc) or desc
    names.setdefault(label, label)
    return label
