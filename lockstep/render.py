"""Readable renderings of alerts for terminals (``lockstep run``, ``lockstep tail alerts``)."""

from __future__ import annotations

from typing import Any

from lockstep.safetext import safe_data


def _num(v: Any) -> str:
    if v is None:
        return "-"
    f = float(v)
    if f == 0:
        return "0"
    if abs(f) >= 1000:
        return f"{f:,.0f}"
    if abs(f) >= 10:
        return f"{f:.1f}"
    if abs(f) >= 0.01:
        return f"{f:.3f}".rstrip("0").rstrip(".")
    return f"{f:.2e}"


def _labels(labels: dict[str, str], keep: tuple[str, ...] = ("port", "device", "gpu", "coll", "rank")) -> str:
    parts = [f"{k}={labels[k]}" for k in keep if k in labels]
    return " ".join(parts)


def render_alert(alert: dict[str, Any], width: int = 100) -> str:
    """A multi-line block: headline, symptom, cause, other jobs, timeline table.

    Every string of ``alert`` is escaped first (:func:`lockstep.safetext.safe_data`): label values
    and names come from the cluster and must not drive the terminal.

    >>> print(render_alert({"status": "firing", "severity": "critical", "type": "job_slowdown",
    ...     "job_id": "j", "gpus": 16, "nodes": ["a", "b"], "summary": "s", "started_at": "2025-11-30T11:42:18.000Z",
    ...     "symptom": None, "root_cause": {"domain": "unknown", "source": None}, "timeline": [],
    ...     "other_jobs": []}).splitlines()[0][:60])
    ━━ FIRING critical · job_slowdown · j (16 GPUs, 2 nodes) ━━━
    """
    alert = safe_data(alert)
    status = alert["status"].upper()
    head = (f"━━ {status} {alert['severity']} · {alert['type']} · {alert.get('job_id') or '-'} "
            f"({alert.get('gpus', 0)} GPUs, {len(alert.get('nodes') or [])} nodes) ")
    lines = [head + "━" * max(3, width - len(head))]
    sym = alert.get("symptom")
    if sym:
        change = f"({_num(sym['baseline'])} -> {_num(sym['value'])})"
        lines.append(f"  slowed   {sym['metric']} x{sym['ratio']:.1f} {change} "
                     f"since {sym['onset'][11:23]}")
    rc = alert.get("root_cause") or {}
    if rc.get("source"):
        where = f"{rc['layer']} {rc['source']}" + (f" {_labels(rc.get('labels') or {})}" if rc.get("labels") else "")
        lines.append(f"  cause    {rc['domain']}: {where.strip()} moved first at {rc['first_seen'][11:23]} "
                     f"({rc['metric']}, {rc.get('meaning') or '?'})")
    else:
        lines.append(f"  cause    {rc.get('domain', 'unknown')}: {rc.get('reason') or 'no first mover'}")
    if alert["status"] == "resolved" and alert.get("resolved_at"):
        lines.append(f"  resolved {alert['resolved_at'][11:23]}")
    others = alert.get("other_jobs") or []
    if others:
        lines.append("  also at risk  " + ", ".join(f"{o['job_id']} ({o['gpus']} GPUs, {o.get('relation', '')})"
                                                   for o in others[:6]))
    timeline = alert.get("timeline") or []
    if timeline and alert["status"] == "firing":
        lines.append("  timeline")
        for e in timeline[:12]:
            who = e["source"] + (f" {_labels(e['labels'])}" if e.get("labels") else "")
            if e.get("entities", 1) > 1:
                who += f" (+{e['entities'] - 1})"
            lines.append(f"    {e['ts'][11:23]}  {e['layer']:<7} {who[:30]:<30} {e['metric'][:26]:<26} "
                         f"{_num(e['value']):>9} (p50 {_num(e.get('p50'))})")
    lines.append(f"  {alert.get('summary', '')}")
    return "\n".join(lines)
