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
    - ``context``: tracked for percentiles, never raises an anomaly on its own and never feeds a
      job's lanes (streams.stages.points.lane_code).
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

# --- Additions for the real-format adapters (streams/formats; docs/vocabulary.md lists them) -----
# Built from explicit tables. ``_add`` refuses to change an entry that already exists, so the table
# above stays authoritative and a name can never silently get two meanings.

_CTX_COUNTER = (True, Mode.CONTEXT, Direction.DOWN)
_CTX_GAUGE = (False, Mode.CONTEXT, Direction.DOWN)
_RATE_UP = (True, Mode.RATE, Direction.UP)
_LEVEL_UP = (False, Mode.LEVEL, Direction.UP)
_LEVEL_DOWN = (False, Mode.LEVEL, Direction.DOWN)
_EVENT = (False, Mode.EVENT, Direction.UP)


def _add(name: str, info: MetricInfo) -> None:
    old = CATALOGUE.get(name)
    if old is not None and old != info:
        raise ValueError(f"catalogue entry {name!r} defined twice with different meanings")
    CATALOGUE[name] = info


def _table(meaning: Meaning, shape: tuple[bool, Mode, Direction], names: tuple[str, ...] | list[str],
           scale: float = 1.0, prefixes: tuple[str, ...] = ("",), suffix: str = "", *, fabric: str) -> None:
    for prefix in prefixes:
        for name in names:
            _add(f"{prefix}{name}{suffix}", _m(meaning, *shape, scale))
            FABRICS[f"{prefix}{name}{suffix}"] = fabric


_ROCE = "RoCE (Ethernet)"
#: Which fabric / layer family each name belongs to (docs/vocabulary.md is grouped by it).
FABRICS: dict[str, str] = {}
for _fabric, _names in (
    ("GPU", [n for n in CATALOGUE if n.startswith("DCGM_")]),
    ("InfiniBand", ["SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
                    "PortRcvRemotePhysicalErrors", "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors",
                    "PortXmitDiscards", "PortRcvSwitchRelayErrors", "PortXmitWait", "PortXmitData", "PortRcvData",
                    "PortXmitPkts", "PortRcvPkts"]),
    (_ROCE, ["out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "np_cnp_sent",
             "rp_cnp_handled", "np_ecn_marked_roce_packets", "rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer",
             "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy", "link_down_events_phy"]),
    ("NCCL", ["coll_exec_time_us", "nccl_collective_exec_time_microseconds", "coll_busbw_gbs"]),
    ("Storage", ["read_latency_seconds", "write_latency_seconds", "read_bytes_total", "write_bytes_total",
                 "read_ops_total", "write_ops_total"]),
    ("Host", ["cpu_utilization"]),
    ("Training job", ["step_time_seconds", "dataloader_wait_seconds"]),
):
    for _name in _names:
        FABRICS[_name] = _fabric


# GPU: dcgm-exporter field names (DCGM_FI_*) and its own DCGM_EXP_* metrics.
_table(Meaning.UTILISATION, _LEVEL_DOWN, (
    "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"), fabric="GPU")
_table(Meaning.UTILISATION, _CTX_GAUGE, (
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"), fabric="GPU")
_table(Meaning.UTILISATION, _CTX_COUNTER, ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), fabric="GPU")
_table(Meaning.THROUGHPUT, _CTX_GAUGE, (
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES"), fabric="GPU")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",), fabric="GPU")
_table(Meaning.TEMPERATURE, _LEVEL_UP, ("DCGM_FI_DEV_MEMORY_TEMP",), fabric="GPU")
_table(Meaning.THROTTLE, _LEVEL_DOWN, ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"), fabric="GPU")
_table(Meaning.THROTTLE, _EVENT, ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",), fabric="GPU")
_table(Meaning.THROTTLE, _LEVEL_UP, ("DCGM_EXP_CLOCK_EVENTS_COUNT",), fabric="GPU")
_table(Meaning.THROTTLE, _ERR, (
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION", "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION"), fabric="GPU")
_table(Meaning.THROTTLE, _CTX_COUNTER, ("DCGM_FI_DEV_LOW_UTIL_VIOLATION",), fabric="GPU")
_table(Meaning.GPU_FAULT, _EVENT, ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_ROW_REMAP_PENDING"), fabric="GPU")
_table(Meaning.GPU_FAULT, _ERR, (
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"), fabric="GPU")
# NVLink and the GPU's PCIe link: errors on the GPU's own links.
_table(Meaning.LINK_ERRORS, _ERR, (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"), fabric="GPU")
# Telegraf nvidia_smi input (measurement_field).
_table(Meaning.UTILISATION, _LEVEL_DOWN, ("nvidia_smi_utilization_gpu",), fabric="GPU")
_table(Meaning.UTILISATION, _CTX_GAUGE, ("nvidia_smi_utilization_memory", "nvidia_smi_power_draw"), fabric="GPU")
_table(Meaning.TEMPERATURE, _LEVEL_UP, ("nvidia_smi_temperature_gpu",), fabric="GPU")
_table(Meaning.THROTTLE, _LEVEL_DOWN, ("nvidia_smi_clocks_current_sm",), fabric="GPU")

# InfiniBand: perfquery / IB PMA names; UFM Telemetry adds "Extended" to the same names.
_IB_LINK_ERRORS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "PortRcvErrors", "PortRcvRemotePhysicalErrors",
                   "LocalLinkIntegrityErrors", "PortLocalPhysicalErrors", "PortMalformedPktErrors")
_IB_DROPS = ("ExcessiveBufferOverrunErrors", "PortXmitDiscards", "PortRcvSwitchRelayErrors", "PortXmitConstraintErrors",
             "PortRcvConstraintErrors", "VL15Dropped", "QP1Dropped", "PortBufferOverrunErrors", "PortDLIDMappingErrors",
             "PortVLMappingErrors", "PortLoopingErrors", "PortInactiveDiscards", "PortNeighborMTUDiscards",
             "PortSwLifetimeLimitDiscards", "PortSwHOQLifetimeLimitDiscards")
_IB_PACKETS = ("PortXmitPkts", "PortRcvPkts", "PortUnicastXmitPkts", "PortUnicastRcvPkts", "PortMulticastXmitPkts",
               "PortMulticastRcvPkts")
_table(Meaning.LINK_ERRORS, _ERR, _IB_LINK_ERRORS, fabric="InfiniBand")
_table(Meaning.DROPS, _ERR, _IB_DROPS, fabric="InfiniBand")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, _IB_PACKETS, fabric="InfiniBand")
# Congestion control counters (perfquery --xmtcc/--rcvcc/--slrcvfecn/--slrcvbecn/--swportvlcong...).
_table(Meaning.CONGESTION, _RATE_UP, [f"{n}{i}" for n in ("PortSLRcvFECN", "PortSLRcvBECN", "SWPortVLCongestion",
                                                          "PortVLXmitTimeCong") for i in range(16)],
       fabric="InfiniBand")
_table(Meaning.CONGESTION, _RATE_UP, ("PortXmitTimeCong", "PortRcvFECN", "PortRcvBECN"), fabric="InfiniBand")
_table(Meaning.LINK_ERRORS, _ERR, _IB_LINK_ERRORS, suffix="Extended", fabric="InfiniBand")
_table(Meaning.LINK_DOWN, _ERR, ("LinkDownedCounter",), suffix="Extended", fabric="InfiniBand")
_table(Meaning.DROPS, _ERR, _IB_DROPS, suffix="Extended", fabric="InfiniBand")
_table(Meaning.CONGESTION, _RATE_UP, ("PortXmitWait",), suffix="Extended", fabric="InfiniBand")
_table(Meaning.THROUGHPUT, (True, Mode.CONTEXT, Direction.DOWN), ("PortXmitData", "PortRcvData"), 4.0,
       suffix="Extended", fabric="InfiniBand")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, _IB_PACKETS, suffix="Extended", fabric="InfiniBand")

# InfiniBand: sysfs counter files (/sys/class/infiniband/<dev>/ports/<n>/counters), also read by the
# Telegraf infiniband input (measurement "infiniband", field = file name).
_SYSFS_LINK_ERRORS = ("symbol_error", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
                      "local_link_integrity_errors")
_SYSFS_DROPS = ("excessive_buffer_overrun_errors", "port_xmit_discards", "port_rcv_switch_relay_errors",
                "port_xmit_constraint_errors", "port_rcv_constraint_errors", "VL15_dropped")
_SYSFS_PACKETS = ("port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets", "unicast_rcv_packets",
                  "multicast_xmit_packets", "multicast_rcv_packets", "port_xmit_packets_64", "port_rcv_packets_64",
                  "port_unicast_xmit_packets", "port_unicast_rcv_packets", "port_multicast_xmit_packets",
                  "port_multicast_rcv_packets")
for _p in ("", "infiniband_"):
    _table(Meaning.LINK_ERRORS, _ERR, _SYSFS_LINK_ERRORS, prefixes=(_p,), fabric="InfiniBand")
    _table(Meaning.LINK_DOWN, _ERR, ("link_downed",), prefixes=(_p,), fabric="InfiniBand")
    _table(Meaning.DROPS, _ERR, _SYSFS_DROPS, prefixes=(_p,), fabric="InfiniBand")
    _table(Meaning.CONGESTION, _RATE_UP, ("port_xmit_wait",), prefixes=(_p,), fabric="InfiniBand")
    _table(Meaning.THROUGHPUT, _CTX_COUNTER, ("port_xmit_data", "port_rcv_data", "port_xmit_data_64",
                                              "port_rcv_data_64"), 4.0, prefixes=(_p,), fabric="InfiniBand")
    _table(Meaning.THROUGHPUT, _CTX_COUNTER, _SYSFS_PACKETS, prefixes=(_p,), fabric="InfiniBand")

# InfiniBand: node_exporter infiniband collector (bytes already multiplied by 4).
_NE = "node_infiniband_"
_table(Meaning.LINK_ERRORS, _ERR, ("symbol_error_total", "link_error_recovery_total", "port_errors_received_total",
                                   "port_receive_remote_physical_errors_total", "local_link_integrity_errors_total"),
       prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.LINK_DOWN, _ERR, ("link_downed_total",), prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.LINK_DOWN, _LEVEL_DOWN, ("state_id", "physical_state_id"), prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.LINK_ERRORS, _LEVEL_DOWN, ("rate_bytes_per_second",), prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.DROPS, _ERR, ("excessive_buffer_overrun_errors_total", "port_receive_switch_relay_errors_total",
                             "port_discards_received_total", "port_discards_transmitted_total",
                             "port_constraint_errors_received_total", "port_constraint_errors_transmitted_total",
                             "vl15_dropped_total"), prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.CONGESTION, _RATE_UP, ("port_transmit_wait_total",), prefixes=(_NE,), fabric="InfiniBand")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, (
    "port_data_received_bytes_total", "port_data_transmitted_bytes_total", "port_packets_received_total",
    "port_packets_transmitted_total", "unicast_packets_received_total", "unicast_packets_transmitted_total",
    "multicast_packets_received_total", "multicast_packets_transmitted_total", "legacy_data_received_bytes_total",
    "legacy_data_transmitted_bytes_total", "legacy_packets_received_total", "legacy_packets_transmitted_total",
    "legacy_unicast_packets_received_total", "legacy_unicast_packets_transmitted_total",
    "legacy_multicast_packets_received_total", "legacy_multicast_packets_transmitted_total"), prefixes=(_NE,),
    fabric="InfiniBand")

# RoCE: mlx5 hw_counters (/sys/class/infiniband/<dev>/ports/<n>/hw_counters; Telegraf "infiniband_").
_HW_RETRANSMITS = ("implied_nak_seq_err", "duplicate_request", "roce_adp_retrans", "roce_adp_retrans_to",
                   "roce_slow_restart", "roce_slow_restart_trans", "req_transport_retries_exceeded",
                   "req_rnr_retries_exceeded")
_HW_CONGESTION = ("rp_cnp_ignored", "roce_slow_restart_cnps")
for _p in ("", "infiniband_"):
    _table(Meaning.RETRANSMITS, _ERR, _HW_RETRANSMITS, prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.CONGESTION, _RATE_UP, _HW_CONGESTION, prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.DROPS, _ERR, ("out_of_buffer",), prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.LINK_ERRORS, _ERR, ("rx_icrc_encapsulated",), prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.THROUGHPUT, _CTX_COUNTER, ("rx_read_requests", "rx_write_requests", "rx_atomic_requests"),
           prefixes=(_p,), fabric=_ROCE)
_table(Meaning.RETRANSMITS, _ERR, ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err"),
       prefixes=("infiniband_",), fabric=_ROCE)
_table(Meaning.CONGESTION, _RATE_UP, ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets"),
       prefixes=("infiniband_",), fabric=_ROCE)

# RoCE: mlx5 `ethtool -S` physical-port and per-priority counters (Telegraf "ethtool_" too).
_ETH_LINK_ERRORS = ("rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy", "rx_corrected_bits_phy",
                    "rx_fragments_phy", "rx_jabbers_phy", "module_bus_stuck", "module_high_temp",
                    "module_bad_shorted", *(f"rx_err_lane_{i}_phy" for i in range(8)))
_ETH_DROPS = ("rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "tx_errors_phy", "rx_undersize_pkts_phy",
              "rx_oversize_pkts_phy", "rx_out_of_range_len_phy", "rx_in_range_len_errors_phy",
              "tx_pause_storm_error_events", "rx_if_down_packets",
              *(f"rx_prio{p}_{n}" for p in range(8) for n in ("discards", "buf_discard", "cong_discard")))
_ETH_CONGESTION = ("rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_global_pause", "tx_global_pause",
                   "rx_global_pause_duration", "tx_global_pause_duration", "rx_global_pause_transition",
                   "tx_pause_storm_warning_events", "rx_buffer_passed_thres_phy",
                   *(f"{d}_prio{p}_{n}" for d in ("rx", "tx") for p in range(8)
                     for n in ("pause", "pause_duration", "pause_transition")),
                   *(f"rx_prio{p}_marked" for p in range(8)))
_ETH_THROUGHPUT = ("rx_bits_phy", "rx_bytes_phy", "tx_bytes_phy", "rx_packets_phy", "tx_packets_phy",
                   *(f"{d}_prio{p}_{n}" for d in ("rx", "tx") for p in range(8) for n in ("bytes", "packets")))
for _p in ("", "ethtool_"):
    _table(Meaning.LINK_ERRORS, _ERR, _ETH_LINK_ERRORS, prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.LINK_DOWN, _ERR, ("link_down_events_phy", "module_unplug"), prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.DROPS, _ERR, _ETH_DROPS, prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.CONGESTION, _RATE_UP, _ETH_CONGESTION, prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.THROUGHPUT, _CTX_COUNTER, _ETH_THROUGHPUT, prefixes=(_p,), fabric=_ROCE)
# Bit error ratios derived from the counters above (streams.formats.derive).
_table(Meaning.LINK_ERRORS, _LEVEL_UP, ("effective_ber", "raw_ber"), fabric=_ROCE)

# NCCL: Inspector JSON fields, Inspector Prometheus metrics, nccl-tests tables.
_table(Meaning.LATENCY, _LEVEL_UP, ("p2p_exec_time_us", "nccl_p2p_exec_time_microseconds", "nccl_tests_time_us"),
       fabric="NCCL")
_table(Meaning.THROUGHPUT, _LEVEL_DOWN, (
    "coll_algobw_gbs", "p2p_busbw_gbs", "p2p_algobw_gbs", "nccl_bus_bandwidth_gbs", "nccl_algorithm_bandwidth_gbs",
    "nccl_collective_algobw_gbs", "nccl_p2p_bus_bandwidth_gbs", "nccl_tests_algbw_gbs", "nccl_tests_busbw_gbs"),
    fabric="NCCL")
_table(Meaning.GPU_FAULT, _EVENT, ("nccl_tests_wrong",), fabric="NCCL")

# Storage: node_exporter diskstats and mountstats (NFS client), nfs, Telegraf diskio, Lustre job_stats.
_table(Meaning.THROUGHPUT, _CTX_COUNTER, (
    "node_disk_reads_completed_total", "node_disk_writes_completed_total", "node_disk_read_bytes_total",
    "node_disk_written_bytes_total", "node_disk_reads_merged_total", "node_disk_writes_merged_total",
    "node_mountstats_nfs_operations_requests_total", "node_mountstats_nfs_operations_sent_bytes_total",
    "node_mountstats_nfs_operations_received_bytes_total", "node_mountstats_nfs_read_bytes_total",
    "node_mountstats_nfs_write_bytes_total", "node_mountstats_nfs_total_read_bytes_total",
    "node_mountstats_nfs_total_write_bytes_total", "diskio_reads", "diskio_writes", "diskio_read_bytes",
    "diskio_write_bytes"), fabric="Storage")
_table(Meaning.LATENCY, _CTX_COUNTER, (
    "node_disk_read_time_seconds_total", "node_disk_write_time_seconds_total",
    "node_disk_io_time_weighted_seconds_total", "node_mountstats_nfs_operations_queue_time_seconds_total",
    "node_mountstats_nfs_operations_response_time_seconds_total",
    "node_mountstats_nfs_operations_request_time_seconds_total", "diskio_read_time", "diskio_write_time",
    "diskio_weighted_io_time"), fabric="Storage")
_table(Meaning.UTILISATION, _RATE_UP, ("node_disk_io_time_seconds_total", "diskio_io_time"), fabric="Storage")
_table(Meaning.UTILISATION, _CTX_GAUGE, ("node_disk_io_now", "diskio_iops_in_progress"), fabric="Storage")
_table(Meaning.RETRANSMITS, _RATE_UP, ("node_mountstats_nfs_operations_transmissions_total",), fabric="Storage")
_table(Meaning.RETRANSMITS, _ERR, ("node_mountstats_nfs_operations_major_timeouts_total",
                                   "node_nfs_rpc_retransmissions_total"), fabric="Storage")
_table(Meaning.CONGESTION, _RATE_UP, ("node_mountstats_nfs_transport_backlog_queue_total",
                                      "node_mountstats_nfs_transport_sending_queue_total",
                                      "node_mountstats_nfs_transport_pending_queue_total"), fabric="Storage")
_table(Meaning.LATENCY, _LEVEL_UP, ("disk_read_latency_seconds", "disk_write_latency_seconds",
                                    "nfs_request_latency_seconds", "nfs_response_latency_seconds"), fabric="Storage")
_LUSTRE_OPS = ("read", "write", "getattr", "setattr", "punch", "sync", "destroy", "create", "statfs", "get_info",
               "set_info", "quotactl", "prealloc", "open", "close", "mknod", "link", "unlink", "mkdir", "rmdir",
               "rename", "getxattr", "setxattr", "samedir_rename", "parallel_rename_file", "parallel_rename_dir",
               "crossdir_rename", "migrate", "fallocate")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, [f"jobstats_{op}_samples" for op in (*_LUSTRE_OPS, "read_bytes",
                                                                               "write_bytes")], fabric="Storage")
# Per-job bytes on a pool: a burst (a checkpoint, a dataset scan) is the event that matters, so these
# are judged as rates against the job's own baseline (evidence for checkpoint contention).
_table(Meaning.THROUGHPUT, _RATE_UP, ("jobstats_read_bytes_sum", "jobstats_write_bytes_sum"), fabric="Storage")
_table(Meaning.LATENCY, _CTX_COUNTER, [f"jobstats_{op}_sum" for op in _LUSTRE_OPS], fabric="Storage")
_table(Meaning.LATENCY, _LEVEL_UP, [f"jobstats_{op}_latency_seconds" for op in _LUSTRE_OPS], fabric="Storage")

# Host: node_exporter / Vector host_metrics CPU seconds, OpenTelemetry hostmetrics, Telegraf cpu.
_table(Meaning.UTILISATION, _CTX_COUNTER, ("node_cpu_seconds_total", "host_cpu_seconds_total", "system.cpu.time"),
       fabric="Host")
_table(Meaning.UTILISATION, _LEVEL_UP, ("system.cpu.utilization", "cpu_iowait_percent", "cpu_usage_iowait"),
       fabric="Host")
_table(Meaning.LINK_ERRORS, _ERR, ("system.network.errors", "node_network_receive_errs_total",
                                   "node_network_transmit_errs_total", "host_network_receive_errs_total",
                                   "host_network_transmit_errs_total"), fabric="Host")
_table(Meaning.DROPS, _ERR, ("system.network.dropped", "node_network_receive_drop_total",
                             "node_network_transmit_drop_total", "host_network_receive_packets_drop_total",
                             "host_network_transmit_packets_drop_total"), fabric="Host")
_table(Meaning.THROUGHPUT, _CTX_COUNTER, ("system.network.io", "system.network.packets", "system.disk.io",
                                          "system.disk.operations", "node_network_receive_bytes_total",
                                          "node_network_transmit_bytes_total", "host_network_receive_bytes_total",
                                          "host_network_transmit_bytes_total"), fabric="Host")
_table(Meaning.LATENCY, _CTX_COUNTER, ("system.disk.operation_time",), fabric="Host")
_table(Meaning.UTILISATION, _CTX_GAUGE, ("cpu_usage_idle", "cpu_usage_user", "cpu_usage_system"), fabric="Host")
# Generic netdev counters that ethtool -S prints next to the mlx5 ones.
_table(Meaning.THROUGHPUT, _CTX_COUNTER, ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes"),
       prefixes=("", "ethtool_"), fabric=_ROCE)

# Names seen in real captures (issue 20). mlx5 hw_counters: completions with an error on the requester
# and on the responder side (a QP went to error, usually after its retries were exhausted), on RoCE and
# on InfiniBand alike.
for _p in ("", "infiniband_"):
    _table(Meaning.RETRANSMITS, _ERR, ("req_cqe_error", "resp_cqe_error"), prefixes=(_p,), fabric=_ROCE)
# mlx5 ethtool -S: packets dropped because no steering rule matched them; MAC control frames sent
# (pause frames are MAC control frames: back-pressure toward the switch).
_table(Meaning.DROPS, _ERR, ("rx_steer_missed_packets",), prefixes=("", "ethtool_"), fabric=_ROCE)
_table(Meaning.CONGESTION, _RATE_UP, ("tx_mac_control_phy",), prefixes=("", "ethtool_"), fabric=_ROCE)
# DCGM: the slowdown temperature is a threshold and the fan speed a consequence of heat (both context);
# the performance state rising (P0 -> P2..P8) while the GPU is busy is clocks held down.
_table(Meaning.TEMPERATURE, _CTX_GAUGE, ("DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_FAN_SPEED"), fabric="GPU")
_table(Meaning.THROTTLE, _LEVEL_UP, ("DCGM_FI_DEV_PSTATE",), fabric="GPU")
# lustre_exporter per-job families (label ``jobid``, aliased to ``job_id`` by its profile): per-job
# write bytes are what checkpoint contention reads, as with job_stats' jobstats_write_bytes_sum.
_table(Meaning.THROUGHPUT, _RATE_UP, ("lustre_job_read_bytes_total", "lustre_job_write_bytes_total"),
       fabric="Storage")
# --- issue 20 adapters: nvidia-smi XML/CSV (Telegraf's nvidia_smi names), kernel Xid and NCCL WARN
# events (streams/formats/logs.py), InfluxDB line protocol of Telegraf's infiniband input ----------
# nvrm_xid: the kernel's Xid code per GPU, an event like DCGM's last-XID field (same meaning, mode).
_table(Meaning.GPU_FAULT, _EVENT, ("nvrm_xid",), fabric="GPU")
_table(Meaning.UTILISATION, _CTX_GAUGE, ("nvidia_smi_utilization_encoder", "nvidia_smi_utilization_decoder",
                                         "nvidia_smi_memory_total", "nvidia_smi_memory_used", "nvidia_smi_memory_free",
                                         "nvidia_smi_memory_reserved"), fabric="GPU")
_table(Meaning.TEMPERATURE, _LEVEL_UP, ("nvidia_smi_temperature_memory",), fabric="GPU")
_table(Meaning.TEMPERATURE, _CTX_GAUGE, ("nvidia_smi_fan_speed",), fabric="GPU")
# Clocks and the power cap held down are throttling (as DCGM_FI_DEV_SM_CLOCK / _MEM_CLOCK).
_table(Meaning.THROTTLE, _LEVEL_DOWN, ("nvidia_smi_clocks_current_graphics", "nvidia_smi_clocks_current_memory",
                                       "nvidia_smi_power_limit"), fabric="GPU")
_table(Meaning.THROTTLE, _CTX_GAUGE, ("nvidia_smi_clocks_current_video",), fabric="GPU")
_table(Meaning.THROTTLE, _EVENT, ("nvidia_smi_clocks_event_reasons_active",), fabric="GPU")
# The GPU's PCIe link: replays are errors on it; a link that trained to a lower generation or
# width is a degraded link (as node_infiniband_rate_bytes_per_second for an HCA).
_table(Meaning.LINK_ERRORS, _ERR, ("nvidia_smi_pcie_replay_counter",), fabric="GPU")
_table(Meaning.LINK_ERRORS, _LEVEL_DOWN, ("nvidia_smi_pcie_link_gen_current", "nvidia_smi_pcie_link_width_current"),
       fabric="GPU")
_table(Meaning.GPU_FAULT, _ERR, ("nvidia_smi_ecc_errors_volatile_dram_uncorrectable",
                                 "nvidia_smi_ecc_errors_volatile_sram_uncorrectable",
                                 "nvidia_smi_ecc_errors_volatile_double_bit"), fabric="GPU")
# NCCL WARN events: the transport failed (QP fatal events, completion errors, sockets) on either fabric,
# CUDA failed under NCCL, or NCCL itself failed (bootstrap, proxy, init: the job's collectives stall).
_table(Meaning.RETRANSMITS, _EVENT, ("nccl_warn_net",), fabric="NCCL")
_table(Meaning.GPU_FAULT, _EVENT, ("nccl_warn_cuda",), fabric="NCCL")
_table(Meaning.LATENCY, _EVENT, ("nccl_warn",), fabric="NCCL")
# RoCE: mlx5 hw_counters of RDMA requests/responses that broke a QP (remote access / invalid request /
# length errors); the flush errors are the work requests flushed after it (a consequence, not a cause).
for _p in ("", "infiniband_"):
    _table(Meaning.RETRANSMITS, _ERR, ("req_remote_access_errors", "req_remote_invalid_request",
                                       "resp_local_length_error", "resp_remote_access_errors"),
           prefixes=(_p,), fabric=_ROCE)
    _table(Meaning.RETRANSMITS, _CTX_COUNTER, ("req_cqe_flush_error", "resp_cqe_flush_error"), prefixes=(_p,),
           fabric=_ROCE)

# --- Alertmanager webhook alerts as events (streams/formats/alertmanager_webhook.py: the kind is
# read from alertname). Each is an event like DCGM's last-XID field: 1 while firing, 0 once resolved.
_AM = "Alertmanager"
_table(Meaning.GPU_FAULT, _EVENT, ("alertmanager_gpu_xid", "alertmanager_gpu_fault"), fabric=_AM)
_table(Meaning.TEMPERATURE, _EVENT, ("alertmanager_gpu_temperature",), fabric=_AM)
# A link down (IB, RoCE, a NIC) and a node down (unreachable: its link to everything is gone).
_table(Meaning.LINK_DOWN, _EVENT, ("alertmanager_link_down", "alertmanager_node_down"), fabric=_AM)
_table(Meaning.LINK_ERRORS, _EVENT, ("alertmanager_link_errors",), fabric=_AM)
# A full or read-only filesystem stalls the writes of the jobs on it (checkpoints, logs); any other
# alert is named as an event too, of meaning latency (as an unclassified NCCL WARN).
_table(Meaning.LATENCY, _EVENT, ("alertmanager_filesystem", "alertmanager_alert"), fabric=_AM)

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
