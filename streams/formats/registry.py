"""``FORMATS``: every real format Lockstep reads, and :func:`convert`, the one entry point.

Agents and ``lockstep convert`` both call :func:`convert` (the same code path): pick the adapter by
name, check the message size, run the adapter, derive the ratio gauges, count unknown names.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.samples import MAX_MESSAGE_BYTES
from streams.formats import (
    alertmanager_webhook,
    crux,
    ethtool,
    iblinkinfo,
    ibnetdiscover,
    influx,
    kubernetes,
    lldp,
    lldp_keyvalue,
    logs,
    lustre,
    nccl_inspector,
    nccl_tests,
    nvidia_smi,
    otlp,
    otlp_proto,
    perfquery,
    prom_kafka,
    prometheus,
    remote_write,
    slurm,
    sysfs,
    telegraf,
    vector,
)
from streams.formats.base import Adapter, Context, Converted
from streams.formats.derive import derive
from streams.formats.state import AdapterState

_ADAPTERS: tuple[Adapter, ...] = (
    Adapter("prometheus", prometheus.convert, "samples", False,
            "Prometheus text exposition 0.0.4 or OpenMetrics 1.0, one scrape per message",
            "https://prometheus.io/docs/instrumenting/exposition_formats/"),
    Adapter("dcgm-exporter", prometheus.forced("dcgm-exporter"), "samples", False,
            "dcgm-exporter scrape (GPU layer, source from Hostname/hostname)",
            "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html"),
    Adapter("node-exporter", prometheus.convert, "samples", False,
            "node_exporter scrape: infiniband (nic), diskstats, mountstats (NFS), cpu (host)",
            "https://github.com/prometheus/node_exporter"),
    Adapter("ufm", prometheus.forced("ufm"), "samples", False,
            "UFM Telemetry Prometheus endpoint (switch layer, *Extended counters, GUID labels, ms times)",
            "https://docs.nvidia.com/networking/display/ufmtelemetryumv1220/prometheus+endpoint+support"),
    Adapter("nccl-prometheus", prometheus.forced("nccl-prometheus"), "samples", False,
            "NCCL Inspector Prometheus textfile metrics (nccl layer, source from node)",
            "https://github.com/NVIDIA/nccl/tree/master/plugins/profiler/inspector"),
    Adapter("prom-kafka-adapter", prom_kafka.convert, "samples", True,
            "Telefonica prometheus-kafka-adapter JSON, one sample per message (string value, RFC 3339 time)",
            "https://github.com/Telefonica/prometheus-kafka-adapter"),
    Adapter("prometheus-remote-write", remote_write.convert, "samples", False,
            "Prometheus remote-write 1.0 body: snappy-compressed protobuf WriteRequest (POST /api/v1/write)",
            "https://prometheus.io/docs/specs/prw/remote_write_spec/"),
    Adapter("telegraf", telegraf.convert, "samples", True,
            "Telegraf JSON serializer output, single metric or batch {\"metrics\": [...]}",
            "https://docs.influxdata.com/telegraf/v1/data_formats/output/json/"),
    Adapter("vector", vector.convert, "samples", True,
            "Vector metric events as JSON (native_json {\"metric\": {...}} or json codec)",
            "https://vector.dev/docs/architecture/data-model/metric/"),
    Adapter("otlp-json", otlp.convert, "samples", True,
            "OpenTelemetry OTLP/JSON metrics (ExportMetricsServiceRequest): gauge and sum data points",
            "https://github.com/open-telemetry/opentelemetry-proto/blob/main/examples/metrics.json"),
    Adapter("otlp-proto", otlp_proto.convert, "samples", False,
            "OpenTelemetry OTLP/protobuf metrics (binary ExportMetricsServiceRequest), mapped as OTLP/JSON",
            "https://github.com/open-telemetry/opentelemetry-proto/blob/main/opentelemetry/proto/collector/metrics/v1/"
            "metrics_service.proto"),
    Adapter("influx", influx.convert, "samples", True,
            "InfluxDB line protocol (Telegraf's default output): <measurement>_<field> samples, host tag as source",
            "https://docs.influxdata.com/influxdb/v2/reference/syntax/line-protocol/"),
    Adapter("nvidia-smi-xml", nvidia_smi.convert_xml, "samples", False,
            "`nvidia-smi -q -x` XML: utilisation, memory, temperatures, power, clocks, PCIe, ECC per GPU",
            "https://docs.nvidia.com/deploy/nvidia-smi/index.html"),
    Adapter("nvidia-smi-csv", nvidia_smi.convert_csv, "samples", False,
            "`nvidia-smi --query-gpu=... --format=csv` (with its header line): one sample per numeric column",
            "https://docs.nvidia.com/deploy/nvidia-smi/index.html"),
    Adapter("kernel-xid", logs.convert_xid, "samples", True,
            "kernel `NVRM: Xid` lines (dmesg, dmesg -T, journal, syslog) -> nvrm_xid events on the GPU layer",
            "https://docs.nvidia.com/deploy/xid-errors/index.html"),
    Adapter("nccl-warn", logs.convert_nccl_warn, "samples", True,
            "NCCL `WARN` lines of job logs (NCCL_DEBUG=WARN/INFO) -> nccl_warn_net/_cuda events on the NCCL layer",
            "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug"),
    Adapter("alertmanager-webhook", alertmanager_webhook.convert, "samples", False,
            "Alertmanager webhook (version \"4\") messages: each alert an event sample on its node, switch or pool",
            "https://prometheus.io/docs/alerting/latest/configuration/#webhook_config"),
    Adapter("perfquery", perfquery.convert, "samples", False,
            "infiniband-diags perfquery text (standard and -x extended counters)",
            "https://github.com/linux-rdma/rdma-core/blob/master/infiniband-diags/perfquery.c"),
    Adapter("sysfs-infiniband", sysfs.convert, "samples", True,
            "sysfs IB counters and mlx5 hw_counters as `grep -H . <files>` lines (path:value)",
            "https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband"),
    Adapter("ethtool", ethtool.convert, "samples", False,
            "`ethtool -S <netdev>` output of mlx5 (physical-port, per-priority pause/discard counters)",
            "https://docs.kernel.org/networking/device_drivers/ethernet/mellanox/mlx5/counters.html"),
    Adapter("nccl-inspector", nccl_inspector.convert, "samples", True,
            "NCCL Inspector JSON: v4.3 marker + records, and the older self-contained v4.0-v4.2 lines",
            "https://github.com/NVIDIA/nccl/tree/master/plugins/profiler/inspector"),
    Adapter("nccl-tests", nccl_tests.convert, "samples", False,
            "nccl-tests result table (all_reduce_perf etc.): time, algbw, busbw per size",
            "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"),
    Adapter("lustre-jobstats", lustre.convert, "samples", False,
            "`lctl get_param obdfilter.*.job_stats` / `mdt.*.job_stats` output",
            "https://doc.lustre.org/lustre_manual.xhtml#jobstats"),
    Adapter("slurm-squeue", slurm.convert_squeue, "inventory", False,
            "`squeue --json` (data_parser v0.0.37..v0.0.44): running jobs -> job events",
            "https://slurm.schedmd.com/squeue.html#OPT_json"),
    Adapter("slurm-sacct", slurm.convert_sacct, "inventory", False,
            "`sacct --json`: job states, nodes, tres.allocated GPUs -> job events",
            "https://slurm.schedmd.com/sacct.html#OPT_json"),
    Adapter("k8s-pods", kubernetes.convert, "inventory", True,
            "Kubernetes pod watch events / pods / PodList JSON -> job events (nvidia.com/gpu limits)",
            "https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/"),
    Adapter("crux-topology", crux.convert, "inventory", True,
            "3-tier topology CSV `ip,DSW,PSW,ASW` -> link and switch events",
            "https://github.com/alibaba/alibaba-lingjun-dataset-2023"),
    Adapter("ibnetdiscover", ibnetdiscover.convert, "inventory", False,
            "`ibnetdiscover -p` ports report -> link events and switch tiers (leaf/spine/core from cabling)",
            "https://github.com/linux-rdma/rdma-core/blob/master/infiniband-diags/man/ibnetdiscover.8.in.rst"),
    Adapter("iblinkinfo", iblinkinfo.convert, "inventory", False,
            "`iblinkinfo` (CA:/Switch: sections, or -l lines) -> link events and switch tiers (from cabling)",
            "https://github.com/linux-rdma/rdma-core/blob/master/infiniband-diags/man/iblinkinfo.8.in.rst"),
    Adapter("lldpctl", lldp.convert, "inventory", False,
            "`lldpctl -f json` / `-f json0` on a host (source header) -> link events (RoCE)",
            "https://lldpd.github.io/usage.html"),
    Adapter("lldpctl-keyvalue", lldp_keyvalue.convert, "inventory", False,
            "`lldpctl -f keyvalue` on a host (source header): lldp.<if>.<key>=<value> lines -> link events (RoCE)",
            "https://lldpd.github.io/usage.html"),
    Adapter("slurm-nodes", slurm.convert_nodes, "inventory", False,
            "`scontrol show node --json` / slurmrestd /nodes -> node events (drained, down, fail...)",
            "https://slurm.schedmd.com/scontrol.html#OPT_json"),
    Adapter("scontrol-nodes", slurm.convert_scontrol_nodes, "inventory", False,
            "`scontrol show node` text -> node events (State=, Reason=)",
            "https://slurm.schedmd.com/scontrol.html#OPT_show"),
    Adapter("scontrol-jobs", slurm.convert_scontrol_jobs, "inventory", False,
            "`scontrol show job -d` text -> job events (GPUs from TRES, detail GRES, JOB_GRES, TresPerNode)",
            "https://slurm.schedmd.com/scontrol.html#OPT_show"),
)

#: Every format by name.
FORMATS: dict[str, Adapter] = {a.name: a for a in _ADAPTERS}


class UnknownFormat(KeyError):
    """A format name not in :data:`FORMATS` (a usage error, not bad input)."""


def convert(format_name: str, raw: bytes, *, headers: Mapping[str, bytes | str] | None = None,
            default_source: str | None = None, state: AdapterState | None = None, ts: float | None = None,
            ingest_ts: float | None = None) -> Converted:
    """Convert one message of ``format_name`` into native samples or inventory events.

    - ``headers``: Kafka message headers (``source``, ``layer``, ``ts``, ``job_id``, ``device``,
      ``stream``, ``content-type``; see :mod:`streams.formats.base`).
    - ``default_source``: the source when neither the record nor the headers name one.
    - ``state``: carried between messages of one stream (derived ratios, delta temporality, NCCL
      Inspector v4.3 context, Kubernetes pods). ``None`` uses a fresh state for this message only,
      so derived gauges never appear and v4.3 records must follow their marker in the same message.
    - ``ts``: the collection time (e.g. the Kafka record time) for formats without in-band time.
    - ``ingest_ts``: stamped on every sample as ``ingest_ts`` when given.

    Never raises on bad input; raises :class:`UnknownFormat` for a name not in :data:`FORMATS`.

    >>> out = convert("prometheus", b'up{instance="gpu001:9100"} 1 1764502930000')
    >>> out.samples[0]["source"], out.samples[0]["ts"], out.rejections
    ('gpu001', 1764502930.0, [])
    """
    adapter = FORMATS.get(format_name)
    if adapter is None:
        raise UnknownFormat(f"unknown format {format_name!r}; known: {', '.join(sorted(FORMATS))}")
    ctx = Context(format_name, headers=headers, default_source=default_source, ts=ts, ingest_ts=ingest_ts,
                  state=state if state is not None else AdapterState())
    if len(raw) > MAX_MESSAGE_BYTES:
        ctx.reject(None, f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}", "DecodeFailed")
        return ctx.finish()
    adapter.fn(raw, ctx)
    if adapter.produces == "samples" and ctx.out.samples:
        derive(ctx)
    times = [s["ts"] for s in ctx.out.samples] + [e["ts"] for e in ctx.out.inventory]
    if times:
        ctx.state.advance(max(times))
    return ctx.finish()
