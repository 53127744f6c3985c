"""``lldpctl -f json`` / ``-f json0`` (lldpd) run on a host -> link events (RoCE fabrics).

Reference: lldpd's ``lldpcli(8)`` and its JSON writers (``src/client/json_writer.c``,
``jansson_writer.c``). ``show neighbors`` prints, per local interface, the neighbour's chassis
(``SysName``) and port. Two shapes:

- ``-f json`` collapses single-element lists: ``{"lldp": {"interface": {"eth0": {"chassis":
  {"leaf01": {...}}, "port": {"id": {"type": "ifname", "value": "swp1"}}}}}}``; several
  interfaces are a list of one-key objects.
- ``-f json0`` keeps every list: ``{"lldp": [{"interface": [{"name": "eth0", "chassis": [{"name":
  [{"value": "leaf01"}]}], "port": [{"id": [{"type": "ifname", "value": "swp1"}]}]}]}]}``.

Each local interface with a neighbour gives one **link**: node = the ``source`` header or default
source (lldpctl does not print the local host name), device = the local interface (the netdev),
port ``1``, switch = the neighbour's system name, switch_port = the neighbour's port id when its
type is ``ifname``/``local``/``ifalias`` (else its description), fabric ``roce`` (override with the
``fabric`` header). A neighbour whose port id is a MAC address and that has no port description is
another host's NIC, not a switch port: skipped and counted. LLDP seen from a host names no tiers:
no switch events (the switches take tier ``leaf`` by default in the inventory).
Time: the ``ts`` argument or header.
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context
from streams.formats.jsonrecords import json_documents

SKIP_NO_NEIGHBOUR = "interface without an LLDP neighbour"
SKIP_HOST_PEER = "neighbour port is a MAC address (a host NIC, not a switch port)"
_PORT_ID_TYPES = frozenset({"ifname", "local", "ifalias"})


def _first(value: Any) -> Any:
    """json0 wraps every value in a list: its first element (a non-list is itself)."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _text(value: Any) -> str | None:
    """A json0 ``[{"value": x}]`` or a plain string."""
    value = _first(value)
    if isinstance(value, dict):
        value = value.get("value")
    return value if isinstance(value, str) and value.strip() else None


def _interfaces(doc: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """``(local interface, entry)`` pairs of either shape; None when the shape is not lldpctl's."""
    if not isinstance(doc, dict) or "lldp" not in doc:
        return None
    lldp = _first(doc["lldp"])
    if not isinstance(lldp, dict):
        return [] if lldp in (None, {}) else None
    raw = lldp.get("interface")
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("name"), str):  # json0 (or -f json with one interface in a list)
            out.append((item["name"], item))
            continue
        for name, entry in item.items():  # -f json: {"eth0": {...}, "eth1": {...}}
            if isinstance(entry, dict):
                out.append((name, entry))
    return out


def _chassis_name(chassis: Any) -> str | None:
    chassis = _first(chassis)
    if not isinstance(chassis, dict):
        return None
    name = _text(chassis.get("name"))
    if name:
        return name
    # -f json keys the chassis by its system name: {"leaf01": {...}}
    keys = [k for k, v in chassis.items() if isinstance(v, dict) and k not in ("id", "descr", "capability")]
    return keys[0] if len(keys) == 1 else None


def _switch_port(port: Any) -> tuple[str | None, bool]:
    """The neighbour's port name and whether it is a host NIC (a MAC port id without description)."""
    port = _first(port)
    if not isinstance(port, dict):
        return None, False
    pid = _first(port.get("id"))
    descr = _text(port.get("descr"))
    if isinstance(pid, dict) and isinstance(pid.get("value"), str):
        if pid.get("type") in _PORT_ID_TYPES:
            return pid["value"], False
        if pid.get("type") == "mac":
            return None, True
    return descr, False


def convert(raw: bytes, ctx: Context) -> None:
    ts = ctx.collection_ts()
    node = ctx.source()
    fabric = (ctx.header("fabric") or "roce").lower()
    for record, doc in json_documents(raw, ctx, split_arrays=False):
        base = record or "message"
        interfaces = _interfaces(doc)
        if interfaces is None:
            ctx.reject(base, 'expected lldpctl JSON ({"lldp": {"interface": ...}})')
            continue
        if interfaces and ts is None:
            ctx.reject(base, "lldpctl output carries no time: give the collection time (ts)")
            return
        if interfaces and not node:
            ctx.reject(base, "lldpctl output does not name its host: give the source header or default source")
            return
        for name, entry in interfaces:
            rec = f"{base} interface {name}"
            switch = _chassis_name(entry.get("chassis"))
            switch_port, host_peer = _switch_port(entry.get("port"))
            if host_peer:
                ctx.skip(SKIP_HOST_PEER)
                continue
            if not switch or not switch_port:
                if switch is None and switch_port is None:
                    ctx.skip(SKIP_NO_NEIGHBOUR)
                else:
                    ctx.reject(rec, "neighbour without a system name or port")
                continue
            ctx.event(rec, {"kind": "link", "ts": ts, "node": node, "device": name, "port": "1",
                            "switch": switch, "switch_port": switch_port, "fabric": fabric})
