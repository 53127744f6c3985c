"""Which layer a metric name belongs to and which label names its source, for metric carriers.

Prometheus scrapes, prometheus-kafka-adapter, Telegraf, Vector and OTLP carry metrics from many
exporters. A :class:`Profile` says, for one exporter family (matched by metric-name prefix), which
layer the samples belong to, which labels name the source (first present wins), and which label
aliases to add so the rest of Lockstep finds what it looks for (``job_id``, ``port``). Aliases only
*add* a label; the original label stays. An alias is not added when the value is a placeholder
(``unknown``) or the target label already exists.

Source resolution for a sample: the profile's source labels, then the ``source`` header, then the
caller's default source. Layer: the ``layer`` header, then the profile, then ``host`` (a scrape
target with no better description is a host).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LAYER = "host"
#: Generic source labels, after a profile's own.
GENERIC_SOURCE_LABELS: tuple[str, ...] = ("host", "hostname", "host.name", "instance")
#: Alias values that mean "not known" (never copied to the alias).
PLACEHOLDERS = frozenset({"", "unknown", "none", "None", "N/A", "n/a"})


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    layer: str
    source_labels: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    #: DCGM reports "no value" as large sentinels; these samples are skipped, not sent.
    dcgm_blanks: bool = False
    #: The source is a storage pool, not a host: the ``source`` header (the pool name the inventory
    #: uses), else the file system of the ``target`` label (``lustre`` of ``lustre-OST0000``), and only
    #: then the generic labels (``instance`` of a Lustre scrape is the OSS, which runs no job).
    pool_from_target: bool = False


DCGM = Profile("dcgm-exporter", "gpu", ("Hostname", "hostname"), (("hpc_job", "job_id"),), dcgm_blanks=True)
NCCL = Profile("nccl-prometheus", "nccl", ("node", "hostname"), (("slurm_job_id", "job_id"),))
NODE_IB = Profile("node-exporter-infiniband", "nic")
NODE = Profile("node-exporter", "host")
UFM = Profile("ufm", "switch", ("device_name", "hostname", "node_description", "source", "node_guid"),
              (("port_num", "port"),))
TELEGRAF_IB = Profile("telegraf-infiniband", "nic")
TELEGRAF_NIC = Profile("telegraf-ethtool", "nic")
TELEGRAF_GPU = Profile("telegraf-nvidia-smi", "gpu")
LUSTRE = Profile("lustre", "storage", aliases=(("jobid", "job_id"),), pool_from_target=True)
OTEL_GPU = Profile("otel-gpu", "gpu", ("host.name", "k8s.node.name"))
OTEL_HOST = Profile("otel-host", "host", ("host.name", "k8s.node.name"))
STEP = Profile("training-step", "step")
GENERIC = Profile("generic", DEFAULT_LAYER)

#: Exact names that decide the profile before any prefix (the training job's own signals).
NAMES: dict[str, Profile] = {"step_time_seconds": STEP, "dataloader_wait_seconds": STEP}

#: Metric-name prefix -> profile. Longest prefix wins (checked in this order).
PREFIXES: tuple[tuple[str, Profile], ...] = (
    ("DCGM_", DCGM),
    ("nccl_", NCCL),
    ("node_infiniband_", NODE_IB),
    ("node_", NODE),
    ("infiniband_", TELEGRAF_IB),
    ("ethtool_", TELEGRAF_NIC),
    ("nvidia_smi_", TELEGRAF_GPU),
    ("lustre", LUSTRE),
    ("hw.gpu.", OTEL_GPU),
    ("gpu.", OTEL_GPU),
    ("system.", OTEL_HOST),
    ("host_", NODE),
)

FORCED: dict[str, Profile] = {"dcgm-exporter": DCGM, "nccl-prometheus": NCCL, "ufm": UFM}


def profile_for(metric: str, forced: Profile | None = None) -> Profile:
    """The profile of ``metric`` (a forced profile wins).

    >>> profile_for("DCGM_FI_DEV_GPU_UTIL").layer, profile_for("node_infiniband_symbol_error_total").layer
    ('gpu', 'nic')
    >>> profile_for("my_app_requests_total").name
    'generic'
    """
    if forced is not None:
        return forced
    exact = NAMES.get(metric)
    if exact is not None:
        return exact
    for prefix, profile in PREFIXES:
        if metric.startswith(prefix):
            return profile
    return GENERIC


def resolve_source(labels: dict[str, str], profile: Profile) -> str | None:
    """The first source label present, in profile then generic order (``instance`` without its port)."""
    from streams.formats.base import strip_port

    for name in profile.source_labels:
        value = labels.get(name)
        if value and value not in PLACEHOLDERS:
            return value
    for name in GENERIC_SOURCE_LABELS:
        value = labels.get(name)
        if value and value not in PLACEHOLDERS:
            return strip_port(value) if name == "instance" else value
    return None


def add_aliases(labels: dict[str, str], profile: Profile) -> dict[str, str]:
    """``labels`` plus the profile's aliases (never overwriting, never copying placeholders)."""
    if not profile.aliases:
        return labels
    out = labels
    for original, alias in profile.aliases:
        value = labels.get(original)
        if value is not None and value not in PLACEHOLDERS and alias not in labels:
            if out is labels:
                out = dict(labels)
            out[alias] = value
    return out


#: DCGM's "blank" sentinels (dcgm_structs.h): int32 0x7ffffff0.., int64 0x7ffffffffffffff0.., fp64 2**47...
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0


def is_dcgm_blank(value: float) -> bool:
    """True for DCGM's no-value sentinels (blank, not found, not supported, no permission).

    >>> is_dcgm_blank(9223372036854775794.0), is_dcgm_blank(2147483632.0), is_dcgm_blank(62.0)
    (True, True, False)
    """
    return (value >= float(DCGM_INT64_BLANK)
            or DCGM_INT32_BLANK <= value <= 0x7FFFFFFF
            or DCGM_FP64_BLANK <= value < DCGM_FP64_BLANK + 16)
