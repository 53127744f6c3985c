"""3-tier training-cluster topology CSV in the shape of the Crux (SIGCOMM'24) dataset.

Reference: alibaba/alibaba-lingjun-dataset-2023 (``topo``), header ``ip,DSW,PSW,ASW``: one row per
host and the switch it hangs off at each tier (ASW access/leaf, PSW pod/spine, DSW core).

- Each row gives a **link** event: node ``ip`` cabled to its leaf. The CSV names no NIC, host port or
  switch port; optional columns ``device``, ``port``, ``switch_port``, ``fabric`` fill them when
  present, else they are ``unknown`` (so a leaf's hosts all sit behind one unknown port, and a
  question about a specific switch port is answered at switch level).
- Each distinct switch gives a **switch** event once per message: leaves with their PSWs as uplinks,
  spines with their DSWs, cores with none.
- **Leaf names are qualified by their spine** (``P10/S14``): in this format ASW ids are local to a
  PSW (the published topology reuses ``S1``.. under every PSW, at most 8 hosts each). Set the header
  ``leaf-names: global`` when a file's ASW ids are unique across the fabric.
- Fabric ``infiniband`` unless the ``fabric`` column or header says ``roce``. Time: ``ts`` argument
  or header (the CSV has none).
"""

from __future__ import annotations

import csv
from typing import Any

from streams.formats.base import Context, timed_text

UNKNOWN = "unknown"


def _row(line: str) -> list[str]:
    """One CSV line (a row never spans lines in this format); raises ``csv.Error``."""
    return next(csv.reader([line]), [])
_REQUIRED = ("ip", "ASW")


def convert(raw: bytes, ctx: Context) -> None:
    opened = timed_text(raw, ctx, "the topology CSV carries")
    if opened is None:
        return
    text, ts = opened
    qualify = (ctx.header("leaf-names") or "qualified").lower() != "global"
    default_fabric = (ctx.header("fabric") or "infiniband").lower()
    lines = text.splitlines()
    if not lines:
        return
    try:
        header = [h.strip() for h in _row(lines[0])]
    except csv.Error as exc:
        ctx.reject("line 1", f"header is not CSV: {exc}")
        return
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        ctx.reject("line 1", f"header {','.join(header)[:80]!r} lacks {', '.join(missing)} (expected ip,DSW,PSW,ASW)")
        return
    col = {name: i for i, name in enumerate(header)}
    leaves: dict[str, set[str]] = {}
    spines: dict[str, set[str]] = {}
    cores: set[str] = set()
    seen_nodes: set[str] = set()
    for lineno, line in enumerate(lines[1:], start=2):
        record = f"line {lineno}"
        try:
            row = _row(line)
        except csv.Error as exc:
            ctx.reject(record, f"not CSV: {exc}")
            continue
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            ctx.reject(record, f"{len(row)} fields, the header has {len(header)}")
            continue

        def cell(name: str, row: list[str] = row) -> str:
            return row[col[name]].strip() if name in col else ""

        node, asw, psw, dsw = cell("ip"), cell("ASW"), cell("PSW"), cell("DSW")
        if not node or not asw:
            ctx.reject(record, "empty ip or ASW")
            continue
        if node in seen_nodes:
            ctx.reject(record, f"host {node[:40]!r} listed twice")
            continue
        seen_nodes.add(node)
        leaf = f"{psw}/{asw}" if qualify and psw else asw
        leaves.setdefault(leaf, set())
        if psw:
            leaves[leaf].add(psw)
            spines.setdefault(psw, set())
            if dsw:
                spines[psw].add(dsw)
                cores.add(dsw)
        fabric = (cell("fabric") or default_fabric).lower()
        link: dict[str, Any] = {"kind": "link", "ts": ts, "node": node, "device": cell("device") or UNKNOWN,
                                "port": cell("port") or UNKNOWN, "switch": leaf,
                                "switch_port": cell("switch_port") or UNKNOWN, "fabric": fabric}
        ctx.event(record, link)
    for leaf, ups in sorted(leaves.items()):
        ctx.event(f"switch {leaf}", {"kind": "switch", "ts": ts, "switch": leaf, "tier": "leaf",
                                     "uplinks": sorted(ups)})
    for spine, ups in sorted(spines.items()):
        ctx.event(f"switch {spine}", {"kind": "switch", "ts": ts, "switch": spine, "tier": "spine",
                                      "uplinks": sorted(ups)})
    for core in sorted(cores):
        ctx.event(f"switch {core}", {"kind": "switch", "ts": ts, "switch": core, "tier": "core", "uplinks": []})
