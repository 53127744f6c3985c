"""Fabric health: which links, ports and switches are degraded, on what evidence, what they cost and
what to drain; and the placement answer over the live inventory (issue 22, docs/capacity.md).

Everything is derived from two things the read model already holds: the GPU-time lost ledger
(:class:`~streams.ledger.Ledger`: each costed incident with its root-cause entities) and the alerts
(the evidence: type, status, root cause, first mover). An entity of a fabric kind
(:data:`FABRIC_KINDS`) is listed when one of its incidents overlaps the window:

- ``state`` is ``degraded`` while one of its incidents still fires, else ``recovered``;
- ``gpu_hours`` are the GPU-hours it lost in the window (the ledger's roll-up ``by=entity``);
- ``at_stake_gpus`` is what its open incidents are costing now, in GPU-seconds per second (so
  GPU-hours per hour): the sum over them of GPUs x fraction of step time lost;
- ``nodes`` are the nodes behind it in the inventory (a port: the NIC cabled to it; a NIC: its node;
  a leaf: every node cabled to it; a spine or core: none, its traffic has other paths).

Drain suggestions (:func:`drain_suggestions`): a degraded port, NIC or leaf -> drain the nodes behind
it (jobs placed there wait on it); an entity that recovered but had :data:`FLAP_INCIDENTS` or more
incidents in the window -> drain for inspection (it flaps); a degraded spine or core names no nodes:
inspect it. Each comes with the Slurm command and the reason. Advisory only: nothing here drains.

Records of the ``fabric-health`` topic (:func:`health_records`) are one per root-cause entity of a
fabric kind per version of a costed incident, computed from that incident alone (so the correlate
agent can write them beside the ``capacity`` record, with no state of its own).

Pure: no clock (``now`` is an argument), no I/O.

>>> from streams.ledger import Ledger, entry_of
>>> alert = {"alert_id": "a1", "type": "job_slowdown", "status": "firing", "job_id": "llm", "gpus": 256,
...          "started_at": "2025-11-30T11:42:18Z", "detected_at": "2025-11-30T11:42:48Z",
...          "symptom": {"baseline": 1.0, "value": 2.0, "ratio": 2.0, "onset": "2025-11-30T11:42:18Z"},
...          "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"}}}
>>> led = Ledger([entry_of(alert, {"leaf03": "leaf"})])
>>> h = health(led, {"a1": alert}, None, now=led.latest + 3600, window_s=86400)
>>> [(e["kind"], e["id"], e["state"], e["gpu_hours"], e["at_stake_gpus"]) for e in h["entities"]]
[('port', 'leaf03:17', 'degraded', 128.0, 128.0), ('leaf', 'leaf03', 'degraded', 128.0, 128.0)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import hostlist

from models.timeutil import format_ts
from streams.inventory import InventoryIndex
from streams.ledger import Entity, Ledger, LedgerEntry
from streams.placement import Fabric, Request, avoid_from, exclude_hostlist, place

#: Entity kinds that are part of the fabric (links and switches).
FABRIC_KINDS = ("port", "nic", "leaf", "spine", "core", "switch")
#: Incidents in the window from which a recovered entity is called flapping (and a drain suggested).
FLAP_INCIDENTS = 2
#: Incidents given as an entity's evidence (its latest; ``incidents`` counts them all).
MAX_EVIDENCE = 5
#: Record type on the ``fabric-health`` topic.
RECORD_TYPE = "entity_health"


def nodes_behind(entity: Entity, inv: InventoryIndex | None) -> list[str]:
    """The nodes whose traffic goes through ``entity`` alone (by name; none for a spine or core)."""
    if entity.kind == "nic":
        return [entity.id.partition(":")[0]]
    if inv is None:
        return []
    if entity.kind == "port":
        switch, _, port = entity.id.rpartition(":")
        return sorted(inv.nodes_behind_port(switch, port))
    if entity.kind == "leaf":
        return sorted(inv.nodes_behind_switch(entity.id))
    return []


def _evidence(entry: LedgerEntry, alert: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    """One incident as the evidence for an entity: the alert's facts and its first mover."""
    first = None
    if alert is not None and alert.get("timeline"):
        t = alert["timeline"][0]
        first = {k: t.get(k) for k in ("ts", "layer", "source", "labels", "metric", "value", "meaning")}
    return {
        "alert_id": entry.alert_id, "alert_type": entry.alert_type, "status": entry.status, "job_id": entry.job_id,
        "gpus": entry.gpus, "ratio": entry.ratio, "onset_iso": format_ts(entry.onset),
        "end_iso": format_ts(entry.end) if entry.end is not None else None,
        "gpu_seconds": round(entry.gpu_seconds(now), 3), "root_cause": entry.root,
        "first_mover": first, "summary": (alert or {}).get("summary"),
    }


def health(ledger: Ledger, alerts: Mapping[str, Mapping[str, Any]], inv: InventoryIndex | None, now: float,
           window_s: float, limit: int | None = None) -> dict[str, Any]:
    """The degraded and recently recovered fabric entities in ``[now - window_s, now)``, degraded first,
    then by GPU-hours lost, at most ``limit``: ``{"from", "to", "degraded", "entities": [...], "drain": [...],
    "exclude"}``; ``degraded`` counts every degraded entity, ``drain`` and ``exclude`` cover the listed ones;
    each entity's evidence is its latest :data:`MAX_EVIDENCE` incidents. ``alerts``: alert_id -> the
    latest alert record. See the module docstring."""
    start = now - window_s
    by_entity: dict[Entity, list[LedgerEntry]] = {}
    for e in ledger.entries.values():
        if e.onset < now and e.until(now) > start:
            for ent in e.entities:
                if ent.kind in FABRIC_KINDS:
                    by_entity.setdefault(ent, []).append(e)
    lost = ledger.costs("entity", now, window_s)
    rows: list[tuple[Entity, list[LedgerEntry], list[LedgerEntry], float]] = []
    for ent, entries in by_entity.items():
        open_ = [x for x in entries if x.end is None]
        rows.append((ent, entries, open_, lost.get((ent.kind, ent.id), 0.0)))
    rows.sort(key=lambda r: (not r[2], -round(r[3], 3), FABRIC_KINDS.index(r[0].kind), r[0].id))
    degraded = sum(1 for r in rows if r[2])
    if limit is not None:
        rows = rows[:limit]
    out: list[dict[str, Any]] = []
    # the evidence, the nodes and the times only for the entities listed (a week may hold thousands)
    for ent, entries, open_, cost in rows:
        entries.sort(key=lambda x: (x.onset, x.key))
        out.append({
            "kind": ent.kind, "id": ent.id, "state": "degraded" if open_ else "recovered",
            "gpu_seconds": round(cost, 3), "gpu_hours": round(cost / 3600.0, 4),
            "at_stake_gpus": round(sum(x.gpus_lost for x in open_), 3),
            "incidents": len(entries), "open": len(open_), "jobs": sorted({x.job_id for x in entries}),
            "since_iso": format_ts(entries[0].onset),
            "last_seen_iso": format_ts(max(x.until(now) for x in entries)),
            "nodes": nodes_behind(ent, inv),
            "evidence": [_evidence(x, alerts.get(x.alert_id), now) for x in entries[-MAX_EVIDENCE:]],
        })
    drain = drain_suggestions(out)
    nodes = sorted({n for d in drain for n in d["nodes"]})
    return {"from": start, "to": now, "from_iso": format_ts(start), "to_iso": format_ts(now),
            "degraded": degraded, "entities": out, "drain": drain,
            "exclude": str(hostlist.collect_hostlist(nodes)) if nodes else ""}


def drain_suggestions(entities: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What to drain (or inspect) for each listed entity, with the reason (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for r in entities:
        what = f"{r['kind']} {r['id']}"
        if r["state"] == "degraded":
            reason = (f"{what} is degraded: {r['open']} open incident{'s' if r['open'] != 1 else ''}, "
                      f"{r['at_stake_gpus']:g} GPU-hours lost per hour while it stays")
        elif r["incidents"] >= FLAP_INCIDENTS:
            reason = f"{what} flaps: {r['incidents']} incidents in the window, recovered each time"
        else:
            continue
        nodes = list(r["nodes"])
        hosts = str(hostlist.collect_hostlist(nodes)) if nodes else ""
        out.append({
            "kind": r["kind"], "id": r["id"], "action": "drain" if nodes else "inspect", "nodes": nodes,
            "hostlist": hosts, "reason": reason,
            "command": (f"scontrol update NodeName={hosts} State=DRAIN Reason=\"lockstep: {what}\"" if nodes else
                        None),
        })
    return out


def health_records(entry: LedgerEntry, inv: InventoryIndex | None) -> list[tuple[str, dict[str, Any]]]:
    """The ``fabric-health`` records of one incident version: ``(key, record)`` per fabric entity of its
    root cause, keyed ``kind:id`` (every record of an entity on one partition). docs/contracts.md."""
    out = []
    for ent in entry.entities:
        if ent.kind not in FABRIC_KINDS:
            continue
        closed = entry.end is not None
        out.append((f"{ent.kind}:{ent.id}", {
            "type": RECORD_TYPE, "entity": {"kind": ent.kind, "id": ent.id},
            "state": "recovered" if closed else "degraded", "alert_id": entry.alert_id, "incident": entry.key,
            "alert_type": entry.alert_type, "job_id": entry.job_id, "gpus": entry.gpus,
            "at_stake_gpus": 0.0 if closed else round(entry.gpus_lost, 6),
            "onset_iso": format_ts(entry.onset), "end_iso": format_ts(entry.end) if entry.end is not None else None,
            "gpu_seconds": round(entry.gpu_seconds(0.0), 3) if closed else None,
            "root_cause": entry.root, "nodes": nodes_behind(ent, inv),
        }))
    return out


def open_entities(ledger: Ledger) -> list[tuple[str, str]]:
    """``(kind, id)`` of every entity with a firing incident (what placement avoids)."""
    return sorted({(x.kind, x.id) for e in ledger.entries.values() if e.end is None for x in e.entities})


def placement(inv: InventoryIndex, ledger: Ledger, gpus: int, klass: str, now: float | None,
              contended_pools: Iterable[str] = (), gpus_per_node: int = 8) -> dict[str, Any]:
    """``/placement``: candidates for ``gpus`` GPUs of ``klass`` on the inventory's fabric, away from the
    drained, down and failing nodes, the nodes of jobs running at ``now`` (busy), the entities of the
    ledger's open incidents and the contended pools' switches; with the advisory ``--exclude`` hostlist
    (every node left out except the busy ones). Raises :class:`~streams.placement.PlacementError`."""
    request = Request(gpus, klass)
    fabric = Fabric.from_inventory(inv, gpus_per_node)
    busy = sorted({n for j in inv.active_jobs(now) for n in j.nodes}) if now is not None else []
    unhealthy = avoid_from(inv, open_entities(ledger), contended_pools)
    avoid = avoid_from(inv, open_entities(ledger), contended_pools, busy)
    out = place(fabric, request, avoid).to_json()
    out["exclude"] = exclude_hostlist(unhealthy)
    out["busy"] = len([n for n in busy if n in fabric.leaf_of])
    out["degraded_switches"] = dict(sorted(avoid.degraded.items()))
    out["contended_switches"] = dict(sorted(avoid.contended.items()))
    out["as_of"] = now if now is not None and math.isfinite(now) else None
    return out
