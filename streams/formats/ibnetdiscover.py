"""``ibnetdiscover -p`` (ports report) -> link and switch events, with tiers.

Reference: infiniband-diags ``ibnetdiscover(8)`` (rdma-core), ``-p, --ports``: one line per port::

    CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' )
    SW  1719  1 0x7cfe9003009ce5b0 4x EDR - SW  1516  1 0x7cfe900300b07320 ( 'ib-i1l1s01' - 'ib-i1l2s01' )
    SW  2052 37 0x506b4b03005c2740 4x ???                                    'ib-i4l1s01'

Fields: node type (``CA``, ``SW``, ``RT``), LID, port, port GUID, width and speed, ``-``, the peer's
type, LID, port and GUID, then both node descriptions. A line with ``???`` is a port with no peer
(skipped and counted). Every cable appears twice (once from each end); each is used once.

- **Hosts**: a CA's node description is ``<host> <device>`` (``o0001 HCA-1``, ``gpu01 mlx5_0``): the
  first word is the node, the rest the device (``unknown`` when there is none).
- **Switches** are named by their description; a managed NVIDIA switch's ``MF0;<name>:<model>/U1``
  gives ``<name>``. Two switches with the same description are told apart by GUID (``<desc>/<guid>``).
- **Tiers** follow from the cabling: a switch with hosts is a ``leaf``; its switch neighbours that
  are not leaves are ``spine``s (its uplinks); a spine's switch neighbours that are neither are
  ``core``. A switch reached by none of these rules gets no switch event.
- One ``link`` event per host port (``port`` the CA port number, ``switch_port`` the leaf port),
  fabric ``infiniband``, ``speed_gbps`` from the width and speed (:func:`line_rate_gbps`: ``4x EDR``
  is 100) when both are known; one ``switch`` event per tiered switch, with ``ports``: each of its
  ports cabled to another switch, with that switch (``peer``) and the line rate where known.
- Time: the ``ts`` argument or header (the report carries none).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from streams.formats.base import Context, timed_text

UNKNOWN = "unknown"
SKIP_UNCONNECTED = "port with no peer (???)"

_END = r"(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+)"
_LINKED = re.compile(rf"^{_END}\s+(.*?)\s+-\s+{_END}\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)\s*$")
_UNCONNECTED = re.compile(rf"^{_END}\s+\S+\s+\?\?\?(?:\s+'(.*)')?\s*$")
_MANAGED = re.compile(r"^MF0;([^:]+):")
_WIDTH_SPEED = re.compile(r"^(\d+)x\s*([A-Z0-9]+)$")
#: Nominal data rate per lane, Gb/s, by InfiniBand speed name (IBTA: 4x EDR is sold as 100 Gb/s).
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0, "HDR": 50.0,
             "NDR": 100.0, "XDR": 200.0}


def line_rate_gbps(width_speed: str) -> float | None:
    """A port's line rate from ibnetdiscover's width and speed column (None when either is unknown).

    >>> line_rate_gbps("4x EDR"), line_rate_gbps("4x HDR"), line_rate_gbps("1x NDR"), line_rate_gbps("4x ???")
    (100.0, 200.0, 100.0, None)
    """
    m = _WIDTH_SPEED.match(width_speed.strip())
    if m is None or m.group(2) not in LANE_GBPS:
        return None
    return int(m.group(1)) * LANE_GBPS[m.group(2)]


def host_and_device(desc: str) -> tuple[str, str]:
    """``'gpu01 mlx5_0'`` -> ``('gpu01', 'mlx5_0')``; a single word is the host.

    >>> host_and_device("o0001 HCA-1"), host_and_device("lonely")
    (('o0001', 'HCA-1'), ('lonely', 'unknown'))
    """
    parts = desc.split(None, 1)
    if not parts:
        return "", UNKNOWN
    return parts[0], (parts[1].strip() if len(parts) > 1 else UNKNOWN)


def switch_label(desc: str) -> str:
    """A switch's name from its node description.

    >>> switch_label("MF0;ib-leaf01:MQM8700/U1"), switch_label("ib-i1l1s01")
    ('ib-leaf01', 'ib-i1l1s01')
    """
    m = _MANAGED.match(desc)
    return m.group(1) if m else desc.strip()


def convert(raw: bytes, ctx: Context) -> None:
    opened = timed_text(raw, ctx, "the ports report carries")
    if opened is None:
        return
    text, ts = opened
    # (ca guid, ca port) -> (record, host desc, switch guid, switch port, line rate); switch guid -> descs
    host_ports: dict[tuple[str, str], tuple[str, str, str, str, float | None]] = {}
    switch_desc: dict[str, str] = {}
    switch_peers: dict[str, set[str]] = defaultdict(set)
    #: switch GUID -> its switch-to-switch ports: port -> (the peer's GUID, line rate)
    switch_ports: dict[str, dict[str, tuple[str, float | None]]] = defaultdict(dict)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        record = f"line {lineno}"
        m = _LINKED.match(line.strip())
        if m is None:
            u = _UNCONNECTED.match(line.strip())
            if u is not None:
                if u.group(1) == "SW" and u.group(5):
                    switch_desc.setdefault(u.group(4).lower(), u.group(5))
                ctx.skip(SKIP_UNCONNECTED)
            else:
                ctx.reject(record, f"not an ibnetdiscover -p line: {line.strip()[:60]!r}")
            continue
        a_type, _, a_port, a_guid, width_speed, b_type, _, b_port, b_guid, a_desc, b_desc = m.groups()
        speed = line_rate_gbps(width_speed)
        a_guid, b_guid = a_guid.lower(), b_guid.lower()
        for t, guid, desc in ((a_type, a_guid, a_desc), (b_type, b_guid, b_desc)):
            if t == "SW":
                switch_desc.setdefault(guid, desc)
        if a_type == "SW" and b_type == "SW":
            switch_peers[a_guid].add(b_guid)
            switch_peers[b_guid].add(a_guid)
            switch_ports[a_guid].setdefault(a_port, (b_guid, speed))
            switch_ports[b_guid].setdefault(b_port, (a_guid, speed))
        elif {a_type, b_type} == {"CA", "SW"}:
            if a_type == "CA":
                host_ports.setdefault((a_guid, a_port), (record, a_desc, b_guid, b_port, speed))
            else:
                host_ports.setdefault((b_guid, b_port), (record, b_desc, a_guid, a_port, speed))
    names = switch_names(switch_desc)
    leaves = {sw for (_, _, sw, _, _) in host_ports.values()}
    for (_, ca_port), (record, desc, sw, sw_port, speed) in sorted(host_ports.items(), key=lambda kv: kv[1][0]):
        node, device = host_and_device(desc)
        if not node:
            ctx.reject(record, "host port without a node description")
            continue
        link: dict[str, Any] = {"kind": "link", "ts": ts, "node": node, "device": device, "port": ca_port,
                                "switch": names[sw], "switch_port": sw_port, "fabric": "infiniband"}
        if speed is not None:
            link["speed_gbps"] = speed
        ctx.event(record, link)
    tiered_switch_events(ctx, ts, leaves, switch_peers, switch_ports, names)


def tiered_switch_events(ctx: Context, ts: float, leaves: set[str], switch_peers: dict[str, set[str]],
                         switch_ports: dict[str, dict[str, tuple[str, float | None]]], names: dict[str, str]) -> None:
    """One ``switch`` event per switch the cabling tiers (shared with :mod:`streams.formats.iblinkinfo`):
    ``leaves`` (switches with hosts), their other switch neighbours as spines, theirs as cores; each
    with its uplinks and its switch-to-switch ``ports``. Switches are GUIDs (or labels), named by ``names``."""
    spines = {p for leaf in leaves for p in switch_peers.get(leaf, ()) if p not in leaves}
    cores = {p for spine in spines for p in switch_peers.get(spine, ()) if p not in leaves and p not in spines}
    for tier, members, ups in (("leaf", leaves, spines), ("spine", spines, cores), ("core", cores, set())):
        for sw in sorted(members, key=lambda g: names.get(g, g)):
            name = names.get(sw, sw)
            uplinks = sorted(names.get(p, p) for p in switch_peers.get(sw, ()) if p in ups)
            event: dict[str, Any] = {"kind": "switch", "ts": ts, "switch": name, "tier": tier, "uplinks": uplinks}
            if switch_ports.get(sw):
                event["ports"] = switch_port_list(switch_ports[sw], names)
            ctx.event(f"switch {name}", event)


def switch_port_list(ports: dict[str, tuple[str, float | None]], names: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A switch event's ``ports`` from ``port -> (peer GUID, line rate)``, in port order.

    >>> switch_port_list({"10": ("0xb", None), "9": ("0xa", 100.0)}, {"0xa": "spine-1", "0xb": "spine-2"})
    {'9': {'peer': 'spine-1', 'speed_gbps': 100.0}, '10': {'peer': 'spine-2'}}
    """
    out: dict[str, dict[str, Any]] = {}
    for port, (peer, speed) in sorted(ports.items(), key=lambda kv: int(kv[0])):
        out[port] = {"peer": names.get(peer, peer)} | ({"speed_gbps": speed} if speed is not None else {})
    return out


def switch_names(descs: dict[str, str]) -> dict[str, str]:
    """GUID -> switch name; a description shared by several switches is qualified by GUID."""
    labels = {guid: switch_label(desc) or guid for guid, desc in descs.items()}
    count: dict[str, int] = defaultdict(int)
    for label in labels.values():
        count[label] += 1
    return {guid: (label if count[label] == 1 else f"{label}/{guid}") for guid, label in labels.items()}
