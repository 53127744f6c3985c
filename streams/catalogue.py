"""The metric catalogue: what each metric name means operationally and how to judge it.

Samples keep their raw metric names and labels; the catalogue tags each with one operational
*meaning* shared across fabrics (a symbol error on InfiniBand and a PCS error on RoCE are both
``link_errors``), its kind (gauge or counter), how it is scored, and which direction is bad.

A name the catalogue does not know is still processed, with meaning ``unknown`` and mode
``level`` (both directions scored), and counted in ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Meaning(StrEnum):
    """Operational meanings (docs/vocabulary.md lists every raw name behind each)."""

    LINK_DOWN = "link_down"
    LINK_ERRORS = "link_errors"
    DROPS = "drops"
    RETRANSMITS = "retransmits"
    CONGESTION = "congestion"
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    UTILISATION = "utilisation"
    GPU_FAULT = "gpu_fault"
    THROTTLE = "throttle"
    TEMPERATURE = "temperature"
    STEP_TIME = "step_time"
    LOADER_WAIT = "loader_wait"
    UNKNOWN = "unknown"


class Mode(StrEnum):
    """How a series is scored.

    - ``level``: a gauge judged against its own rolling baseline (robust z-score).
    - ``rate``: a counter turned into a per-second rate, judged against its own baseline.
    - ``errors``: a counter of faults: on a clean series any increase is anomalous from the first
      increment (scored by rate); on a series that always errs, judged against its baseline.
    - ``event``: a gauge whose non-zero value is an event (DCGM's last-XID field).
    - ``context``: tracked for percentiles and timelines, never raises an anomaly on its own.
    """

    LEVEL = "level"
    RATE = "rate"
    ERRORS = "errors"
    EVENT = "event"
    CONTEXT = "context"


class Direction(StrEnum):
    UP = "up"
    DOWN = "down"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """What the catalogue knows about one raw metric name."""

    meaning: Meaning
    counter: bool
    mode: Mode
    bad: Direction
    #: Multiplier applied after rate conversion (e.g. 4 for PortXmitData, counted in 4-byte words).
    scale: float = 1.0


def _m(meaning: Meaning, counter: bool, mode: Mode, bad: Direction, scale: float = 1.0) -> MetricInfo:
    return MetricInfo(meaning, counter, mode, bad, scale)


_ERR = (True, Mode.ERRORS, Direction.UP)

#: The mapping table, raw name -> info. Names are exactly as their exporters spell them.
CATALOGUE: dict[str, MetricInfo] = {
    # --- GPU (dcgm-exporter) ---
    "DCGM_FI_DEV_GPU_UTIL": _m(Meaning.UTILISATION, False, Mode.LEVEL, Direction.DOWN),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": _m(Meaning.UTILISATION, False, Mode.LEVEL, Direction.DOWN),
    "DCGM_FI_PROF_SM_ACTIVE": _m(Meaning.UTILISATION, False, Mode.LEVEL, Direction.DOWN),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": _m(Meaning.UTILISATION, False, Mode.LEVEL, Direction.DOWN),
    "DCGM_FI_DEV_GPU_TEMP": _m(Meaning.TEMPERATURE, False, Mode.LEVEL, Direction.UP),
    "DCGM_FI_DEV_XID_ERRORS": _m(Meaning.GPU_FAULT, False, Mode.EVENT, Direction.UP),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": _m(Meaning.GPU_FAULT, *_ERR),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": _m(Meaning.GPU_FAULT, *_ERR),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": _m(Meaning.GPU_FAULT, False, Mode.EVENT, Direction.UP),
    "DCGM_FI_DEV_THERMAL_VIOLATION": _m(Meaning.THROTTLE, True, Mode.ERRORS, Direction.UP),
    "DCGM_FI_DEV_POWER_VIOLATION": _m(Meaning.THROTTLE, True, Mode.ERRORS, Direction.UP),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": _m(Meaning.THROTTLE, False, Mode.EVENT, Direction.UP),
    # --- InfiniBand (perfquery names; NICs and switch ports alike) ---
    "SymbolErrorCounter": _m(Meaning.LINK_ERRORS, *_ERR),
    "LinkErrorRecoveryCounter": _m(Meaning.LINK_ERRORS, *_ERR),
    "LinkDownedCounter": _m(Meaning.LINK_DOWN, *_ERR),
    "PortRcvErrors": _m(Meaning.LINK_ERRORS, *_ERR),
    "PortRcvRemotePhysicalErrors": _m(Meaning.LINK_ERRORS, *_ERR),
    "LocalLinkIntegrityErrors": _m(Meaning.LINK_ERRORS, *_ERR),
    "ExcessiveBufferOverrunErrors": _m(Meaning.DROPS, *_ERR),
    "PortXmitDiscards": _m(Meaning.DROPS, *_ERR),
    "PortRcvSwitchRelayErrors": _m(Meaning.DROPS, *_ERR),
    "PortXmitWait": _m(Meaning.CONGESTION, True, Mode.RATE, Direction.UP),
    "PortXmitData": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN, 4.0),
    "PortRcvData": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN, 4.0),
    "PortXmitPkts": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    "PortRcvPkts": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    # --- RoCE (mlx5 hw_counters and ethtool -S) ---
    "out_of_sequence": _m(Meaning.RETRANSMITS, *_ERR),
    "packet_seq_err": _m(Meaning.RETRANSMITS, *_ERR),
    "local_ack_timeout_err": _m(Meaning.RETRANSMITS, *_ERR),
    "rnr_nak_retry_err": _m(Meaning.RETRANSMITS, *_ERR),
    "np_cnp_sent": _m(Meaning.CONGESTION, True, Mode.RATE, Direction.UP),
    "rp_cnp_handled": _m(Meaning.CONGESTION, True, Mode.RATE, Direction.UP),
    "np_ecn_marked_roce_packets": _m(Meaning.CONGESTION, True, Mode.RATE, Direction.UP),
    "rx_discards_phy": _m(Meaning.DROPS, *_ERR),
    "tx_discards_phy": _m(Meaning.DROPS, *_ERR),
    "rx_out_of_buffer": _m(Meaning.DROPS, *_ERR),
    "rx_symbol_err_phy": _m(Meaning.LINK_ERRORS, *_ERR),
    "rx_pcs_symbol_err_phy": _m(Meaning.LINK_ERRORS, *_ERR),
    "rx_crc_errors_phy": _m(Meaning.LINK_ERRORS, *_ERR),
    "link_down_events_phy": _m(Meaning.LINK_DOWN, *_ERR),
    # --- NCCL ---
    "coll_exec_time_us": _m(Meaning.LATENCY, False, Mode.LEVEL, Direction.UP),
    "nccl_collective_exec_time_microseconds": _m(Meaning.LATENCY, False, Mode.LEVEL, Direction.UP),
    "coll_busbw_gbs": _m(Meaning.THROUGHPUT, False, Mode.LEVEL, Direction.DOWN),
    # --- Storage (source = pool) ---
    "read_latency_seconds": _m(Meaning.LATENCY, False, Mode.LEVEL, Direction.UP),
    "write_latency_seconds": _m(Meaning.LATENCY, False, Mode.LEVEL, Direction.UP),
    "read_bytes_total": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    "write_bytes_total": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    "read_ops_total": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    "write_ops_total": _m(Meaning.THROUGHPUT, True, Mode.CONTEXT, Direction.DOWN),
    # --- Host ---
    "cpu_utilization": _m(Meaning.UTILISATION, False, Mode.LEVEL, Direction.UP),
    # --- Training step ---
    "step_time_seconds": _m(Meaning.STEP_TIME, False, Mode.LEVEL, Direction.UP),
    "dataloader_wait_seconds": _m(Meaning.LOADER_WAIT, False, Mode.LEVEL, Direction.UP),
}

UNKNOWN = MetricInfo(Meaning.UNKNOWN, False, Mode.LEVEL, Direction.BOTH)


def lookup(metric: str, kind: str | None = None) -> MetricInfo:
    """Return the catalogue entry for ``metric``; an explicit ``kind`` on the sample wins.

    >>> lookup("SymbolErrorCounter").meaning
    <Meaning.LINK_ERRORS: 'link_errors'>
    >>> lookup("my_custom_total", "counter").counter
    True
    """
    info = CATALOGUE.get(metric, UNKNOWN)
    if kind is None or (kind == "counter") == info.counter:
        return info
    if kind == "counter":
        return MetricInfo(info.meaning, True, Mode.RATE if info.mode is not Mode.ERRORS else Mode.ERRORS,
                          info.bad, info.scale)
    return MetricInfo(info.meaning, False, Mode.LEVEL if info.mode is not Mode.EVENT else Mode.EVENT,
                      info.bad, info.scale)
