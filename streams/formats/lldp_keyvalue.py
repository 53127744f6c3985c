"""``lldpctl -f keyvalue`` (lldpd) run on a host -> link events (RoCE fabrics).

Reference: lldpd's ``lldpcli(8)`` and its key-value writer (``src/client/kv_writer.c``): one
``lldp.<local interface>.<path>=<value>`` line per attribute of ``show neighbors``, e.g.::

    lldp.enp7s0.via=LLDP
    lldp.enp7s0.chassis.name=padkrish-9-26
    lldp.enp7s0.port.ifname=Ethernet1/5
    lldp.enp7s0.port.descr=Ethernet1/5

The port id is printed under its type (``port.ifname``, ``port.local``, ``port.ifalias``,
``port.mac``...). A line that does not start with ``lldp.`` continues the previous value (a
multi-line system description). A ``via`` line starts a neighbour, so two neighbours on one
interface stay apart.

The mapping is :mod:`streams.formats.lldp`'s (the same ``lldpctl`` data, another writer): each
neighbour gives one **link**: node = the ``source`` header or default source (lldpctl does not print
the local host name), device = the local interface, port ``1``, switch = ``chassis.name``,
switch_port = the port id when its type is ``ifname``/``local``/``ifalias`` (else ``port.descr``),
fabric ``roce`` (``fabric`` header overrides). A neighbour whose port id is a MAC address is another
host's NIC (a hypervisor's tap, a server's lldpd), not a switch port: skipped and counted. No switch
events (LLDP seen from a host names no tiers). Time: the ``ts`` argument or header.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.formats.base import Context
from streams.formats.lldp import SKIP_HOST_PEER, SKIP_NO_NEIGHBOUR

_PORT_ID_TYPES = ("ifname", "local", "ifalias")
_PREFIX = "lldp."


@dataclass
class _Neighbour:
    interface: str
    line: int
    attrs: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> tuple[list[_Neighbour], list[int]]:
    """The neighbours of a keyvalue listing, in order, and the numbers of lines that are not ``key=value``.

    The first value of a key wins (``chassis.mgmt-ip`` and VLAN keys repeat within one neighbour).

    >>> ns, bad = parse("lldp.eth0.via=LLDP\\nlldp.eth0.chassis.name=sw1\\nlldp.eth0.port.ifname=swp1\\n")
    >>> [(n.interface, n.attrs["chassis.name"], n.attrs["port.ifname"]) for n in ns], bad
    ([('eth0', 'sw1', 'swp1')], [])
    """
    neighbours: list[_Neighbour] = []
    bad: list[int] = []
    current: _Neighbour | None = None
    last_key: str | None = None
    for number, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.rstrip("\r")
        if not line.strip():
            continue
        if not line.startswith(_PREFIX):
            # a continuation of the previous value (lldpd prints embedded newlines as they are)
            if current is not None and last_key is not None and last_key in current.attrs:
                current.attrs[last_key] += "\n" + line
            else:
                bad.append(number)
            continue
        key, sep, value = line.partition("=")
        interface, _, path = key[len(_PREFIX):].partition(".")
        if not sep or not interface or not path:
            bad.append(number)
            last_key = None
            continue
        if current is None or current.interface != interface or (path == "via" and "via" in current.attrs):
            current = _Neighbour(interface, number)
            neighbours.append(current)
        current.attrs.setdefault(path, value)
        last_key = path
    return neighbours, bad


def _switch_port(attrs: dict[str, str]) -> tuple[str | None, bool]:
    """The neighbour's port name and whether it is a host NIC (its port id is a MAC address)."""
    for kind in _PORT_ID_TYPES:
        value = attrs.get(f"port.{kind}", "").strip()
        if value:
            return value, False
    if attrs.get("port.mac", "").strip():
        return None, True
    return attrs.get("port.descr", "").strip() or None, False


def convert(raw: bytes, ctx: Context) -> None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        ctx.reject(None, f"not UTF-8 text: {exc}", "DecodeFailed")
        return
    neighbours, bad = parse(text)
    for number in bad:
        ctx.reject(f"line {number}", "expected lldpctl keyvalue (lldp.<interface>.<key>=<value>)")
    if not neighbours:
        return
    ts = ctx.collection_ts()
    if ts is None:
        ctx.reject("message", "lldpctl output carries no time: give the collection time (ts)")
        return
    node = ctx.source()
    if not node:
        ctx.reject("message", "lldpctl output does not name its host: give the source header or default source")
        return
    fabric = (ctx.header("fabric") or "roce").lower()
    for n in neighbours:
        rec = f"line {n.line} interface {n.interface}"
        switch = n.attrs.get("chassis.name", "").strip() or None
        switch_port, host_peer = _switch_port(n.attrs)
        if host_peer:
            ctx.skip(SKIP_HOST_PEER)
            continue
        if not switch or not switch_port:
            if switch is None and switch_port is None:
                ctx.skip(SKIP_NO_NEIGHBOUR)
            else:
                ctx.reject(rec, "neighbour without a system name or port")
            continue
        ctx.event(rec, {"kind": "link", "ts": ts, "node": node, "device": n.interface, "port": "1",
                        "switch": switch, "switch_port": switch_port, "fabric": fabric})
