"""Render docs/vocabulary.md from the catalogue, the profiles and the derivation rules.

The document is generated so it cannot drift from the tables it describes (a test compares the file
with :func:`render`). Regenerate with ``python -m streams.formats.vocabulary > docs/vocabulary.md``.
"""

from __future__ import annotations

import re
from collections import defaultdict

from streams.catalogue import CATALOGUE, FABRICS, Meaning, MetricInfo
from streams.formats.derive import RATIO_RULES, SHARE_RULES
from streams.formats.profiles import DEFAULT_LAYER, FORCED, GENERIC_SOURCE_LABELS, NAMES, PREFIXES

MEANINGS: dict[Meaning, str] = {
    Meaning.LINK_DOWN: "the link went down or lost its state (link downed, link down events, port state)",
    Meaning.LINK_ERRORS: "errors on the wire: symbol / PCS / CRC / integrity errors, FEC corrections, BER, "
                         "NVLink and PCIe replays",
    Meaning.DROPS: "packets discarded: discards, buffer overruns, out-of-buffer, constraint and relay errors",
    Meaning.RETRANSMITS: "transport recovery: out-of-sequence, sequence errors, ACK timeouts, RNR retries, NFS "
                         "retransmissions",
    Meaning.CONGESTION: "back-pressure: transmit wait, CNPs, ECN marks, pause frames and pause duration, FECN/BECN",
    Meaning.THROUGHPUT: "bytes / packets / operations moved, and bus bandwidth",
    Meaning.LATENCY: "time per operation: collectives, disk and NFS requests, Lustre operations",
    Meaning.UTILISATION: "how busy a resource is: GPU engines, CPU, disks",
    Meaning.GPU_FAULT: "the GPU itself failed: XID errors, ECC, retired pages, row remapping, wrong results",
    Meaning.THROTTLE: "clocks held down: power / thermal / reliability violations, throttle reasons, SM clock",
    Meaning.TEMPERATURE: "temperatures",
    Meaning.STEP_TIME: "the training job's step time (a symptom, never a cause)",
    Meaning.LOADER_WAIT: "the training job's data-loader wait",
}

FABRIC_ORDER = ("InfiniBand", "RoCE (Ethernet)", "GPU", "NCCL", "Storage", "Host", "Training job")
FABRIC_NOTES = {
    "InfiniBand": "perfquery (`perfquery`), UFM Telemetry (`ufm`), sysfs counters (`sysfs-infiniband`), "
                  "node_exporter (`node-exporter`), Telegraf `infiniband`. NIC ports on layer `nic`, switch ports "
                  "on layer `switch`.",
    "RoCE (Ethernet)": "mlx5 `hw_counters` (`sysfs-infiniband`, Telegraf `infiniband`), `ethtool -S` physical-port "
                       "and per-priority counters (`ethtool`, Telegraf `ethtool`), BER derived from them.",
    "GPU": "dcgm-exporter (`dcgm-exporter`, or any carrier), Telegraf `nvidia_smi`, `nvidia-smi -q -x` and "
           "`--query-gpu` CSV (`nvidia-smi-xml`, `nvidia-smi-csv`: the same `nvidia_smi_*` names), kernel Xid "
           "lines (`kernel-xid`: `nvrm_xid` events); NVLink and the GPU's PCIe link count as `link_errors` of the "
           "GPU.",
    "NCCL": "NCCL Inspector JSON (`nccl-inspector`) and Prometheus textfile (`nccl-prometheus`), nccl-tests "
            "tables (`nccl-tests`), NCCL `WARN` log lines (`nccl-warn`: events; `nccl_warn_net` is the "
            "transport failing, InfiniBand verbs or RoCE alike).",
    "Storage": "node_exporter diskstats and NFS mountstats (measured on the compute node: layer `host`), "
               "Telegraf `diskio`, Lustre job_stats (`lustre-jobstats`: layer `storage`, source the pool).",
    "Host": "node_exporter / Vector host_metrics CPU seconds (utilisation derived), OpenTelemetry hostmetrics, "
            "Telegraf `cpu`, host network counters.",
    "Training job": "the job's own step metrics, any carrier (layer `step`).",
}

_INTRO = """\
# Operational vocabulary

Lockstep reads the formats operators already ship (`lockstep convert --list`; `streams/formats`) and
keeps every sample's **raw metric name and labels**. The catalogue (`streams/catalogue.py`) then gives
each raw name one **operational meaning**, shared across fabrics: a symbol error on InfiniBand
(`SymbolErrorCounter`), on RoCE (`rx_pcs_symbol_err_phy`) and on NVLink
(`DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL`) are all `link_errors`. The detail stays in the sample;
the meaning is what detection, correlation and alerts reason about.

This file is generated from the tables (`python -m streams.formats.vocabulary > docs/vocabulary.md`);
a test fails when it is out of date.

## Meanings

| meaning | what it covers |
|---|---|
{meanings}

## How a name is judged

- **kind**: `counter` names are cumulative; the pipeline turns them into per-second rates (a drop is
  a reset: a new baseline, never a negative rate; the first sample gives no rate). A `kind` on the
  sample (from Prometheus `# TYPE`, OTLP, Vector) wins over the catalogue.
- **mode**: `level` (a gauge against its own baseline), `rate` (a counter's rate against its
  baseline), `errors` (a fault counter: any increase on a clean series is anomalous), `event` (a
  gauge whose non-zero value is an event, e.g. the last XID), `context` (kept for timelines and
  percentiles, never raises an anomaly alone).
- **bad**: which direction is bad (`up`, `down`, `both`).
- **scale**: applied after the rate (IB `PortXmitData`/`PortRcvData` and sysfs `port_*_data` count
  4-byte words: x4 gives bytes; node_exporter already multiplied).

## Unknown names

A name the catalogue does not know is **never dropped**: the sample is converted and processed with
meaning `unknown`, mode `level`, both directions scored, its kind taken from the sample when the
format gives one. Every adapter counts them (`Converted.unknown_metrics` and `unknown_names`,
printed by `lockstep convert`), and the pipeline counts new unknown series in `/metrics`
(`lockstep_unknown_metric_series_total`). Add a name here (in `streams/catalogue.py`) to give it a
meaning.

One exception, by name and not by meaning: Prometheus scrapes' own runtime and scrape bookkeeping
(`go_*`, `process_*`, `promhttp_*`, `scrape_*`) is skipped by the Prometheus-text adapters and
counted as skipped ("scrape noise"; the `keep-noise: true` header keeps it).

What *is* left out is documented per format and counted in `Converted.skipped`, by reason: values
that are not measurements (`NaN`, DCGM blank sentinels, `N/A (no PMA)`, OpenMetrics `_created`,
per-ring software counters of `ethtool -S`, histogram/summary/distribution aggregates, NCCL
Inspector bookkeeping records). Bad input is neither: it is a rejection with a reason.

## Layer and source of carried metrics

Prometheus scrapes, prometheus-kafka-adapter, Telegraf (`<measurement>_<field>`), Vector
(`<namespace>_<name>`) and OTLP carry metrics from many exporters. The layer and source follow the
metric name (exact names first, then the longest prefix); the `layer` header overrides the layer.
The source is the first present of the profile's labels, then {generic}, then the `source` header,
then the caller's default source. Labels with an empty value are dropped (Prometheus semantics).
Aliases add a label (never overwrite, never copy a placeholder such as `unknown`).

| name | profile | layer | source labels | aliases |
|---|---|---|---|---|
{profiles}
| anything else | generic | `{default_layer}` | | |

Formats that force one profile on every sample:

| format | profile | layer | source labels | aliases |
|---|---|---|---|---|
{forced}

## Derived gauges

Some signals are ratios of two counters' deltas, which the per-series rate stage cannot form. The
adapters keep the previous values in an explicit `AdapterState` (pass the same state for one input
stream; snapshot/restore it with the partition) and emit the ratio as a gauge next to the raw
counters. No value on a group's first observation, when the denominator did not move (latency is
undefined, not zero), after a reset (a drop starts a new baseline) or when time did not advance.

| output | = scale x delta(numerator) / delta(denominator) | scale | only where |
|---|---|---|---|
{ratios}
{shares}

## Names by fabric

Every raw name the catalogue knows, grouped by fabric, then by how it is judged. Notation:
`{{0..7}}` and `{{a,b}}` expand to one name each; `[infiniband_]x` is both `x` and Telegraf's spelling
`infiniband_x` (likewise `[ethtool_]`); `X[Extended]` is both perfquery's `X` and UFM's `XExtended`.
"""


_CARRIER_PREFIXES = ("infiniband_", "ethtool_")
_JOBSTATS = re.compile(r"jobstats_(.+)_(samples|sum|latency_seconds)$")


def _compress(names: list[str]) -> list[str]:
    """Collapse families: ``[ethtool_]rx_prio{0..7}_pause``, ``X[Extended]``, ``jobstats_{read,write}_sum``."""
    pool = set(names)
    out: list[str] = []
    # A Telegraf spelling next to the raw one, and UFM's Extended next to perfquery's.
    for name in sorted(pool):
        if name not in pool:
            continue
        for prefix in _CARRIER_PREFIXES:
            if name.startswith(prefix) and name[len(prefix):] in pool:
                pool.discard(name)
                pool.discard(name[len(prefix):])
                pool.add(f"[{prefix}]{name[len(prefix):]}")
        if name.endswith("Extended") and name[: -len("Extended")] in pool:
            pool.discard(name)
            pool.discard(name[: -len("Extended")])
            pool.add(f"{name[: -len('Extended')]}[Extended]")
    # Lustre operations.
    ops: dict[str, list[str]] = defaultdict(list)
    for name in list(pool):
        m = _JOBSTATS.match(name)
        if m is not None:
            ops[m.group(2)].append(m.group(1))
            pool.discard(name)
    for field, op_names in ops.items():
        pool.add(f"jobstats_{{{','.join(sorted(op_names))}}}_{field}" if len(op_names) > 1 else
                 f"jobstats_{op_names[0]}_{field}")
    # Families that differ in one number.
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for name in pool:
        runs = re.findall(r"\d+", name) if "{" not in name else []
        if len(runs) != 1:
            out.append(name)
            continue
        groups[re.sub(r"\d+", "{}", name)].append((int(runs[0]), name))
    for pattern, members in groups.items():
        if len(members) == 1:
            out.append(members[0][1])
            continue
        numbers = sorted(n for n, _ in members)
        if len(numbers) >= 3 and numbers == list(range(numbers[0], numbers[-1] + 1)):
            text = f"{{{numbers[0]}..{numbers[-1]}}}"
        else:
            text = "{" + ",".join(str(n) for n in numbers) + "}"
        out.append(pattern.replace("{}", text))
    return sorted(out, key=lambda n: n.lower().lstrip("["))


def _info_key(info: MetricInfo) -> tuple[str, str, str, str, float]:
    return (info.meaning.value, "counter" if info.counter else "gauge", info.mode.value, info.bad.value, info.scale)


def render() -> str:
    """The whole of docs/vocabulary.md."""
    meanings = "\n".join(f"| `{m.value}` | {text} |" for m, text in MEANINGS.items())
    rows = [(name, profile) for name, profile in NAMES.items()] + [(f"{p}*", prof) for p, prof in PREFIXES]
    profiles = "\n".join(
        f"| `{name}` | {p.name} | `{p.layer}` | {', '.join(f'`{x}`' for x in p.source_labels)} | "
        f"{', '.join(f'`{a}` -> `{b}`' for a, b in p.aliases)} |" for name, p in rows)
    plain = [r for r in RATIO_RULES if not r.output.startswith("jobstats_")]
    lustre = [r.output[len("jobstats_"):-len("_latency_seconds")] for r in RATIO_RULES
              if r.output.startswith("jobstats_")]
    ratios = "\n".join(
        f"| `{r.output}` | `{r.numerator}` / `{r.denominator}` | {r.scale:g} | "
        f"{', '.join(f'{k}={v}' for k, v in r.where)} |" for r in plain)
    if lustre:
        ratios += (f"\n| `jobstats_<op>_latency_seconds` | `jobstats_<op>_sum` / `jobstats_<op>_samples`, "
                   f"op in {', '.join(lustre)} | 1e-06 | unit=usecs |")
    shares = "\n".join(
        f"| `{s.output}` | sum of `{s.metric}` over `{s.split_label}` "
        + (f"in {sorted(s.only_values)}" if s.only_values is not None else f"not in {sorted(s.idle_values)}")
        + f" / sum over all, per source (dropping {sorted(s.drop_labels)}) | {s.scale:g} | |" for s in SHARE_RULES)
    text = _INTRO.format(meanings=meanings, profiles=profiles, ratios=ratios, shares=shares,
                         generic=", ".join(f"`{x}`" for x in GENERIC_SOURCE_LABELS), default_layer=DEFAULT_LAYER,
                         forced="\n".join(
                             f"| `{k}` | {p.name} | `{p.layer}` | {', '.join(f'`{x}`' for x in p.source_labels)} | "
                             f"{', '.join(f'`{a}` -> `{b}`' for a, b in p.aliases)} |" for k, p in FORCED.items()))
    by_fabric: dict[str, dict[tuple[str, str, str, str, float], list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, info in CATALOGUE.items():
        by_fabric[FABRICS.get(name, "Other")][_info_key(info)].append(name)
    parts = [text]
    for fabric in (*FABRIC_ORDER, *sorted(set(by_fabric) - set(FABRIC_ORDER))):
        groups = by_fabric.get(fabric)
        if not groups:
            continue
        count = sum(len(v) for v in groups.values())
        note = FABRIC_NOTES.get(fabric, "")
        parts.append(f"\n### {fabric} ({count} names)\n\n{note}\n\n"
                     "| meaning | kind | mode | bad | scale | raw names |\n|---|---|---|---|---|---|\n")
        order = [m.value for m in Meaning]
        for key in sorted(groups, key=lambda k: (order.index(k[0]), k[1], k[2], k[3], k[4])):
            meaning, kind, mode, bad, scale = key
            names = ", ".join(f"`{n}`" for n in _compress(groups[key]))
            parts.append(f"| `{meaning}` | {kind} | {mode} | {bad} | {scale:g} | {names} |\n")
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
