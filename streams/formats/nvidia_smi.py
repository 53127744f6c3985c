"""``nvidia-smi -q -x`` (XML) and ``nvidia-smi --query-gpu=... --format=csv`` output, GPU layer.

References: the DTDs nvidia-smi names (``nvsmi_device_v11.dtd`` .. ``v13``) and ``nvidia-smi
--help-query-gpu``. Both become samples named like Telegraf's ``nvidia_smi`` input, which reads the
same XML (``nvidia_smi_<field>``: ``utilization_gpu``, ``memory_used``, ``temperature_gpu``,
``clocks_current_sm``...), so one catalogue serves Telegraf and the raw tool.

**XML**: one ``<nvidia_smi_log>`` per message, one ``<gpu>`` per device. The fields read, when
present (``N/A`` and absent fields are skipped and counted): utilisation (gpu, memory, encoder,
decoder), framebuffer memory (total, used, free, reserved; MiB), temperatures (gpu, memory), power
draw and limit (W; ``gpu_power_readings`` in schema v12+, ``power_readings`` before), clocks
(graphics, sm, memory, video; MHz), fan speed, PCIe link generation/width and replay counter,
volatile uncorrectable ECC counts (``dram_``/``sram_uncorrectable``, or ``double_bit/total`` in
older schemas), and ``clocks_event_reasons_active``: how many clock event (throttle) reasons other
than idle and the application clock setting are ``Active`` (``clocks_throttle_reasons`` in older
drivers). Labels: ``gpu`` (the device's position, nvidia-smi's index order), ``uuid``,
``pci_bus_id``, ``name``. The XML carries no host name: the source is the ``source`` header or the
default. Time: the collection time when given, else ``<timestamp>`` read as UTC (run nvidia-smi
with ``TZ=UTC``; it prints local time without a zone).

**CSV**: a header line naming the queried properties (``utilization.gpu [%]``...), then one line
per GPU (or many, with ``--loop``). ``timestamp`` (``2020/11/12 13:48:11.412``, UTC as above) is
each row's time, the collection time when there is no such column; ``index``, ``uuid``,
``pci.bus_id``, ``name`` become labels; every other column whose
value is a number (units such as ``%``, ``MiB``, ``W``, ``MHz`` stripped) becomes
``nvidia_smi_<property with dots as underscores>``; ``[N/A]``, ``[Not Supported]`` and text values
(``P0``, driver versions) are skipped and counted. Without an ``index`` column the row's position
among the rows of its timestamp is the ``gpu`` label (nvidia-smi lists GPUs in index order).
``--format=csv,noheader`` output cannot be read (the columns are unnamed): it is
rejected with that reason.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from xml.etree import ElementTree

from streams.formats.base import Context, decode_text, parse_number
from streams.formats.metrics import MetricEmitter

SKIP_NA = "nvidia-smi value N/A or not supported"
SKIP_TEXT = "nvidia-smi text property (not a measurement)"

#: metric suffix -> paths under <gpu>, first present wins.
XML_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilization_gpu", ("utilization/gpu_util",)),
    ("utilization_memory", ("utilization/memory_util",)),
    ("utilization_encoder", ("utilization/encoder_util",)),
    ("utilization_decoder", ("utilization/decoder_util",)),
    ("memory_total", ("fb_memory_usage/total",)),
    ("memory_used", ("fb_memory_usage/used",)),
    ("memory_free", ("fb_memory_usage/free",)),
    ("memory_reserved", ("fb_memory_usage/reserved",)),
    ("temperature_gpu", ("temperature/gpu_temp",)),
    ("temperature_memory", ("temperature/memory_temp",)),
    ("power_draw", ("gpu_power_readings/power_draw", "power_readings/power_draw")),
    ("power_limit", ("gpu_power_readings/current_power_limit", "power_readings/power_limit")),
    ("clocks_current_graphics", ("clocks/graphics_clock",)),
    ("clocks_current_sm", ("clocks/sm_clock",)),
    ("clocks_current_memory", ("clocks/mem_clock",)),
    ("clocks_current_video", ("clocks/video_clock",)),
    ("fan_speed", ("fan_speed",)),
    ("pcie_link_gen_current", ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",)),
    ("pcie_link_width_current", ("pci/pci_gpu_link_info/link_widths/current_link_width",)),
    ("pcie_replay_counter", ("pci/replay_counter",)),
    ("ecc_errors_volatile_dram_uncorrectable", ("ecc_errors/volatile/dram_uncorrectable",)),
    ("ecc_errors_volatile_sram_uncorrectable", ("ecc_errors/volatile/sram_uncorrectable",)),
    ("ecc_errors_volatile_double_bit", ("ecc_errors/volatile/double_bit/total",)),
)
#: Clock event reasons that are not a fault (the GPU is idle, or the operator set the clocks).
_BENIGN_REASONS = ("gpu_idle", "applications_clocks_setting")
_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*(?:x|%|[A-Za-z/]+)?\s*$")
_NA = frozenset({"N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", "Unknown Error",
                 "[Insufficient Permissions]", "Requested functionality has been deprecated"})
#: A --query-gpu property as the header prints it (``utilization.gpu``, ``clocks_event_reasons.active``).
_PROPERTY = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
_CSV_LABELS = {"index": "gpu", "uuid": "uuid", "gpu_uuid": "uuid", "pci.bus_id": "pci_bus_id",
               "gpu_bus_id": "pci_bus_id", "name": "name", "gpu_name": "name"}


def value_of(text: str | None) -> float | None:
    """A number with its unit stripped (``"67.03 W"`` -> 67.03, ``"16x"`` -> 16); None for anything else.

    >>> value_of("67.03 W"), value_of("16x"), value_of(" 99 %"), value_of("N/A"), value_of("P0")
    (67.03, 16.0, 99.0, None, None)
    """
    if text is None:
        return None
    m = _NUMBER.match(text)
    return parse_number(m.group(1)) if m else None


def _local_time(text: str, fmts: tuple[str, ...]) -> float | None:
    cleaned = " ".join(text.split())
    for fmt in fmts:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def convert_xml(raw: bytes, ctx: Context) -> None:
    try:
        root = ElementTree.fromstring(raw)  # expat: no external DTD fetch, entity expansion bounded
    except ElementTree.ParseError as exc:
        ctx.reject(None, f"not XML: {exc}", "DecodeFailed")
        return
    if root.tag != "nvidia_smi_log":
        ctx.reject(None, f"expected <nvidia_smi_log>, got <{root.tag[:40]}>")
        return
    ts = ctx.collection_ts()
    if ts is None:
        stamp = root.findtext("timestamp")
        ts = _local_time(stamp, ("%a %b %d %H:%M:%S %Y",)) if stamp else None
    if ts is None:
        ctx.reject(None, "no collection time given and no readable <timestamp>")
        return
    emitter = MetricEmitter(ctx)
    for i, gpu in enumerate(root.findall("gpu")):
        rec = f"gpu[{i}]"
        labels = {"gpu": str(i)}
        for label, path in (("uuid", "uuid"), ("pci_bus_id", "pci/pci_bus_id"), ("name", "product_name")):
            text = (gpu.findtext(path) or "").strip()
            if text and text not in _NA:
                labels[label] = text
        if "pci_bus_id" not in labels and gpu.get("id"):
            labels["pci_bus_id"] = gpu.get("id", "")
        for suffix, paths in XML_FIELDS:
            found = next((t for t in (gpu.findtext(p) for p in paths) if t is not None), None)
            if found is None:
                continue
            value = value_of(found)
            if value is None:
                ctx.skip(SKIP_NA)
                continue
            emitter.emit(rec, ts, f"nvidia_smi_{suffix}", labels, value, None)
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        if reasons is not None:
            active = sum(1 for child in reasons
                         if (child.text or "").strip() == "Active" and not child.tag.endswith(_BENIGN_REASONS))
            emitter.emit(rec, ts, "nvidia_smi_clocks_event_reasons_active", labels, float(active), None)


def convert_csv(raw: bytes, ctx: Context) -> None:
    text = decode_text(raw, ctx)
    if text is None:
        return
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        return
    header_no, header_line = lines[0]
    columns = [c.strip() for c in header_line.split(",")]
    names = [c.split(" [", 1)[0].strip() for c in columns]
    if all(value_of(c) is not None or c in _NA for c in columns):
        ctx.reject(f"line {header_no}", "no header line (--format=csv,noheader output has no column names)")
        return
    if not all(_PROPERTY.match(n) for n in names):
        bad = next(n for n in names if not _PROPERTY.match(n))
        ctx.reject(f"line {header_no}", f"not an nvidia-smi --query-gpu header: {bad[:40]!r} is not a property name")
        return
    emitter = MetricEmitter(ctx)
    collected = ctx.collection_ts()
    positions: dict[str, int] = {}
    for lineno, line in lines[1:]:
        rec = f"line {lineno}"
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(names):
            ctx.reject(rec, f"{len(values)} values for {len(names)} columns")
            continue
        row = dict(zip(names, values, strict=True))
        # A --loop output holds many rows per GPU: each row's own time, else the collection time.
        ts = _local_time(row["timestamp"], ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")) \
            if "timestamp" in row else None
        ts = ts if ts is not None else collected
        if ts is None:
            ctx.reject(rec, "no collection time given and no readable timestamp column")
            continue
        position = positions.get(row.get("timestamp", ""), 0)
        positions[row.get("timestamp", "")] = position + 1
        labels = {"gpu": str(position)}
        for column, label in _CSV_LABELS.items():
            if row.get(column):
                labels[label] = row[column]
        for name, value_text in row.items():
            if name == "timestamp" or name in _CSV_LABELS:
                continue
            value = value_of(value_text)
            if value is None:
                ctx.skip(SKIP_NA if value_text in _NA else SKIP_TEXT)
                continue
            emitter.emit(rec, ts, "nvidia_smi_" + name.replace(".", "_"), labels, value, None)
