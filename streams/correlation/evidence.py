"""Ordering evidence on the time line: the first mover, and the timeline an alert shows.

Timeline of the textbook incident (one job, 1 s per column)::

    switch leaf03:17  SymbolErrorCounter  ....X#########     <- first mover (11:42:10)
    nccl   gpu007     coll_exec_time_us   ......X#######
    gpu    gpu0*      DCGM_FI_DEV_GPU_UTIL.........X####
    step   llm-70b    step_time_seconds   ............X#     <- onset O (11:42:18)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.alerts import TimelineEntry
from models.timeutil import format_ts
from streams.correlation.timeline import Episode

#: Tie-break order among anomalies with the same onset: cause before effect.
CAUSAL_RANK = {
    ("switch", None): 0,
    ("nic", None): 1,
    ("gpu", "gpu_fault"): 2,
    ("gpu", "throttle"): 2,
    ("gpu", "temperature"): 2,
    ("storage", None): 2,
    ("host", None): 3,
    ("step", "loader_wait"): 3,
    ("nccl", None): 4,
    ("gpu", None): 5,
    ("step", None): 6,
}

NETWORK_MEANINGS = frozenset({"link_down", "link_errors", "drops", "retransmits", "congestion"})

#: Among anomalies of one entity at the same instant, the more physical signal is named first: a
#: symbol error explains the receive errors it causes, not the other way round.
MEANING_RANK = {"link_down": 0, "link_errors": 1, "drops": 2, "retransmits": 3, "congestion": 4, "gpu_fault": 0,
                "throttle": 1, "temperature": 2}
PHYSICAL_FIRST = ("SymbolErrorCounter", "LinkDownedCounter", "LinkErrorRecoveryCounter", "LocalLinkIntegrityErrors",
                  "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy", "link_down_events_phy")


def evidence_order(rec: dict[str, Any], key: str = "") -> tuple[float, int, int, int, str]:
    """Sort key of evidence: onset, then causal rank, then the more physical signal, then name.

    >>> a = {"ts": 10.0, "layer": "switch", "meaning": "link_errors", "metric": "PortRcvErrors"}
    >>> b = {"ts": 10.0, "layer": "switch", "meaning": "link_errors", "metric": "SymbolErrorCounter"}
    >>> sorted([a, b], key=evidence_order)[0]["metric"]
    'SymbolErrorCounter'
    """
    metric = rec["metric"]
    physical = PHYSICAL_FIRST.index(metric) if metric in PHYSICAL_FIRST else len(PHYSICAL_FIRST)
    return (float(rec["ts"]), causal_rank(rec["layer"], rec["meaning"]), MEANING_RANK.get(rec["meaning"], 9),
            physical, key)


def timing_uncertainty(rec: dict[str, Any]) -> float:
    """How well the onset time of an anomaly is known: half its sampling interval plus its clock's spread."""
    return 0.5 * float(rec.get("interval") or 0.0) + float(rec.get("clock_uncertainty") or 0.0)


def first_mover(causes: Sequence[Episode]) -> Episode | None:
    """The earliest cause, never decided on a time difference smaller than the timing uncertainty.

    Causes whose onsets lie within their combined uncertainty of the earliest are simultaneous as
    far as the clocks can tell; among those the causal order (switch/NIC -> collective -> GPU -> step)
    decides, then the more physical signal, then the name.
    """
    if not causes:
        return None
    ordered = sorted(causes, key=lambda e: evidence_order(e.start, e.key))
    earliest = ordered[0]
    u0 = timing_uncertainty(earliest.start)
    tied = [e for e in ordered if e.ts - earliest.ts <= u0 + timing_uncertainty(e.start) + 1e-9]
    return min(tied, key=lambda e: (causal_rank(e.start["layer"], e.start["meaning"]),
                                    MEANING_RANK.get(e.start["meaning"], 9), *evidence_order(e.start, e.key)[3:],
                                    e.ts))


def causal_rank(layer: str, meaning: str) -> int:
    """Rank of a layer/meaning in the causal order switch/NIC -> collective -> GPU -> step.

    >>> causal_rank("switch", "link_errors") < causal_rank("nccl", "latency") < causal_rank("step", "step_time")
    True
    """
    return CAUSAL_RANK.get((layer, meaning), CAUSAL_RANK.get((layer, None), 7))


def timeline(window: Sequence[Episode], limit: int, root: Episode | None = None) -> list[TimelineEntry]:
    """The evidence in event-time order, one entry per (layer, metric) with how many entities it
    covers; the root cause first (it can only differ from the earliest within timing uncertainty)."""
    groups: dict[tuple[str, str], list[Episode]] = {}
    for e in window:
        groups.setdefault((e.start["layer"], e.start["metric"]), []).append(e)
    entries = []
    for eps in groups.values():
        eps.sort(key=lambda e: evidence_order(e.start, e.key))
        e = root if root is not None and root in eps else eps[0]
        r = e.start
        entries.append((evidence_order(r, e.key), TimelineEntry(
            ts=format_ts(r["ts"]), layer=r["layer"], source=r["source"], labels=dict(r["labels"]),
            metric=r["metric"], value=r["value"], p50=r.get("p50"), p99=r.get("p99"), score=r["score"],
            meaning=r["meaning"], entities=len({x.key for x in eps}), clock_offset=r.get("clock_offset") or None)))
    entries.sort(key=lambda t: (root is None or t[1].metric != root.start["metric"]
                                or t[1].layer != root.start["layer"], t[0]))
    return [t[1] for t in entries[:limit]]


def labels_text(labels: dict[str, str]) -> str:
    """Labels as the reasons and summaries name them (``port 17`` for a lone port)."""
    if "port" in labels and len(labels) == 1:
        return f"port {labels['port']}"
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
