"""Derived gauges that need two counters' deltas: latency per op, bit error ratio, CPU utilisation.

Rules are data (:data:`RATIO_RULES`, :data:`SHARE_RULES`). They run on the native samples an adapter
produced, whatever the carrier, and need an :class:`AdapterState` to remember the previous values:

- a **ratio** rule pairs a numerator counter and a denominator counter with the *same* source and
  labels at the *same* timestamp (one scrape), and emits ``scale * delta(num) / delta(den)``;
- a **share** rule sums one counter over a label (CPU ``mode``) per source and timestamp, and emits
  ``scale * delta(sum of busy) / delta(sum of all)``.

No value is emitted for the first observation of a group, when the denominator did not move (no
ops: latency is undefined, not zero), when either counter went down (a reset starts a new
baseline, never a negative ratio) or when time did not advance. A scrape must carry the whole group
(all CPU modes, both counters of a pair); a partial group is simply not paired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.formats.base import Context
from streams.formats.state import SEP


@dataclass(frozen=True, slots=True)
class RatioRule:
    numerator: str
    denominator: str
    output: str
    scale: float = 1.0
    #: Only pair samples whose labels include these values (e.g. Lustre ``unit: usecs``).
    where: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ShareRule:
    metric: str
    #: The label that splits the counter (``mode``) and the values that are *not* busy.
    split_label: str
    idle_values: frozenset[str]
    output: str
    scale: float = 100.0
    #: Labels dropped from the group key besides ``split_label`` (``cpu``: one value per host).
    drop_labels: frozenset[str] = frozenset()
    #: Which values to count as the numerator instead of "all but idle" (iowait share).
    only_values: frozenset[str] | None = None


#: Lustre job_stats operations (OST and MDT). Ops in ``usecs`` get a latency (Lustre >= 2.12).
LUSTRE_OPS: tuple[str, ...] = (
    "read", "write", "read_bytes", "write_bytes", "getattr", "setattr", "punch", "sync", "destroy", "create",
    "statfs", "get_info", "set_info", "quotactl", "prealloc", "open", "close", "mknod", "link", "unlink", "mkdir",
    "rmdir", "rename", "getxattr", "setxattr", "samedir_rename", "parallel_rename_file", "parallel_rename_dir",
    "crossdir_rename", "migrate", "fallocate",
)
LUSTRE_LATENCY_OPS: tuple[str, ...] = tuple(op for op in LUSTRE_OPS if not op.endswith("_bytes"))

RATIO_RULES: tuple[RatioRule, ...] = (
    # node_exporter diskstats: seconds spent / operations completed.
    RatioRule("node_disk_read_time_seconds_total", "node_disk_reads_completed_total", "disk_read_latency_seconds"),
    RatioRule("node_disk_write_time_seconds_total", "node_disk_writes_completed_total",
              "disk_write_latency_seconds"),
    # Telegraf diskio: read_time/write_time are milliseconds.
    RatioRule("diskio_read_time", "diskio_reads", "disk_read_latency_seconds", 1e-3),
    RatioRule("diskio_write_time", "diskio_writes", "disk_write_latency_seconds", 1e-3),
    # node_exporter mountstats (NFS client), per operation: enqueue-to-done and RTT per request.
    RatioRule("node_mountstats_nfs_operations_request_time_seconds_total",
              "node_mountstats_nfs_operations_requests_total", "nfs_request_latency_seconds"),
    RatioRule("node_mountstats_nfs_operations_response_time_seconds_total",
              "node_mountstats_nfs_operations_requests_total", "nfs_response_latency_seconds"),
    # mlx5 / ethtool physical counters: post-FEC (effective) and pre-FEC (raw) bit error ratios.
    RatioRule("rx_pcs_symbol_err_phy", "rx_bits_phy", "effective_ber"),
    RatioRule("rx_corrected_bits_phy", "rx_bits_phy", "raw_ber"),
    RatioRule("ethtool_rx_pcs_symbol_err_phy", "ethtool_rx_bits_phy", "effective_ber"),
    RatioRule("ethtool_rx_corrected_bits_phy", "ethtool_rx_bits_phy", "raw_ber"),
    # Lustre job_stats: microseconds summed / samples, per job and target.
    *(RatioRule(f"jobstats_{op}_sum", f"jobstats_{op}_samples", f"jobstats_{op}_latency_seconds", 1e-6,
                (("unit", "usecs"),)) for op in LUSTRE_LATENCY_OPS),
)

SHARE_RULES: tuple[ShareRule, ...] = (
    ShareRule("node_cpu_seconds_total", "mode", frozenset({"idle"}), "cpu_utilization",
              drop_labels=frozenset({"cpu"})),
    ShareRule("node_cpu_seconds_total", "mode", frozenset(), "cpu_iowait_percent",
              drop_labels=frozenset({"cpu"}), only_values=frozenset({"iowait"})),
    # Vector host_metrics (namespace host) uses the same names and labels.
    ShareRule("host_cpu_seconds_total", "mode", frozenset({"idle"}), "cpu_utilization",
              drop_labels=frozenset({"cpu", "collector"})),
    # OpenTelemetry hostmetrics: system.cpu.time{cpu, state}.
    ShareRule("system.cpu.time", "state", frozenset({"idle"}), "cpu_utilization", drop_labels=frozenset({"cpu"})),
)

_RATIO_BY_NAME: dict[str, list[tuple[RatioRule, bool]]] = {}
for _rule in RATIO_RULES:
    _RATIO_BY_NAME.setdefault(_rule.numerator, []).append((_rule, True))
    _RATIO_BY_NAME.setdefault(_rule.denominator, []).append((_rule, False))
_SHARE_BY_NAME: dict[str, list[ShareRule]] = {}
for _share in SHARE_RULES:
    _SHARE_BY_NAME.setdefault(_share.metric, []).append(_share)

#: Every metric name a rule can emit (the catalogue knows each).
DERIVED_NAMES: frozenset[str] = frozenset(
    [r.output for r in RATIO_RULES] + [s.output for s in SHARE_RULES])


def _label_key(labels: dict[str, str], drop: frozenset[str] = frozenset()) -> str:
    return SEP.join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in drop)


def derive(ctx: Context, first: int = 0) -> None:
    """Append derived gauges for the samples ``ctx.out.samples[first:]`` (needs ``ctx.state``)."""
    samples = ctx.out.samples[first:]
    if not samples:
        return
    # Gather pairs and sums per group: (layer, source, ts, labels without the split labels).
    pairs: dict[tuple[RatioRule, str, str, float, str], dict[str, Any]] = {}
    shares: dict[tuple[ShareRule, str, str, float, str], dict[str, Any]] = {}
    for s in samples:
        name = s["metric"]
        ratio_rules = _RATIO_BY_NAME.get(name)
        share_rules = _SHARE_BY_NAME.get(name)
        if ratio_rules is None and share_rules is None:
            continue
        labels = s["labels"]
        for rule, is_num in ratio_rules or ():
            if any(labels.get(k) != v for k, v in rule.where):
                continue
            slot = pairs.setdefault((rule, s["layer"], s["source"], s["ts"], _label_key(labels)), {"s": s})
            slot["num" if is_num else "den"] = float(s["value"])
        for share in share_rules or ():
            split = labels.get(share.split_label)
            if split is None:
                continue
            drop = share.drop_labels | {share.split_label}
            slot = shares.setdefault((share, s["layer"], s["source"], s["ts"], _label_key(labels, drop)),
                                     {"s": s, "busy": 0.0, "total": 0.0, "drop": drop})
            value = float(s["value"])
            slot["total"] += value
            busy = split in share.only_values if share.only_values is not None else split not in share.idle_values
            if busy:
                slot["busy"] += value
    table = ctx.state.ratios
    for (rule, layer, source, ts, lkey), slot in pairs.items():
        if "num" not in slot or "den" not in slot:
            continue
        key = SEP.join(("ratio", rule.output, rule.numerator, layer, source, lkey))
        ratio = _step(table, key, ts, slot["num"], slot["den"])
        if ratio is not None:
            s = slot["s"]
            ctx.sample(f"derived {rule.output}", ts, layer, source, rule.output, ratio * rule.scale,
                       dict(s["labels"]), "gauge")
    for (share, layer, source, ts, lkey), slot in shares.items():
        key = SEP.join(("share", share.output, share.metric, layer, source, lkey))
        ratio = _step(table, key, ts, slot["busy"], slot["total"])
        if ratio is not None:
            labels = {k: v for k, v in slot["s"]["labels"].items() if k not in slot["drop"]}
            ctx.sample(f"derived {share.output}", ts, layer, source, share.output, ratio * share.scale, labels,
                       "gauge")


def _step(table: dict[str, list[float]], key: str, ts: float, num: float, den: float) -> float | None:
    """Advance one group; the ratio of deltas, or None (first, reset, no movement, not later)."""
    prev = table.get(key)
    if prev is None:
        table[key] = [ts, num, den]
        return None
    if ts <= prev[0]:
        return None
    d_num = num - prev[1]
    d_den = den - prev[2]
    prev[0], prev[1], prev[2] = ts, num, den
    if d_num < 0 or d_den <= 0:
        return None
    return d_num / d_den
