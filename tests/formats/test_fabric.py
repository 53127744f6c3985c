"""InfiniBand (perfquery, sysfs, node_exporter, UFM) and RoCE (mlx5 hw_counters, ethtool) adapters."""

from __future__ import annotations

import pytest

from streams.catalogue import lookup
from streams.formats import AdapterState

from .helpers import T0, one, run


def test_perfquery_counters_take_lid_port_labels_and_extended_values_win():
    out = run("perfquery", "perfquery.txt", headers={"source": "gpu001", "device": "mlx5_0"})
    assert out.rejections == []
    sym = one(out, "SymbolErrorCounter")
    assert sym == {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "SymbolErrorCounter", "value": 4211.0,
                   "labels": {"lid": "12", "port": "1", "device": "mlx5_0"}, "kind": "counter"}
    # The standard PortXmitData saturated at 2**32-1; the extended 64-bit value is the one sent.
    assert one(out, "PortXmitData")["value"] == 96208829952.0
    assert one(out, "PortXmitWait")["value"] == 700912.0
    assert not [s for s in out.samples if s["metric"].startswith(("PortSelect", "CounterSelect"))]
    assert out.skipped == {"standard counter superseded by its extended 64-bit value": 4}
    assert out.unknown_metrics == 0


def test_perfquery_on_a_switch_port_goes_to_the_switch_layer():
    out = run("perfquery", b"# Port counters: Lid 3 port 17 (CapMask: 0x5A00)\nSymbolErrorCounter:......0x10\n",
              headers={"source": "leaf03", "layer": "switch"})
    s = one(out, "SymbolErrorCounter")
    assert (s["layer"], s["source"], s["labels"]["port"], s["value"]) == ("switch", "leaf03", "17", 16.0)


def test_perfquery_without_host_or_time_is_rejected_whole():
    out = run("perfquery", "perfquery.txt", ts=None)
    assert out.samples == [] and len(out.rejections) == 1
    assert "collection time (ts) and source" in out.rejections[0].reason


def test_perfquery_bad_lines_are_rejected_and_the_rest_converts():
    raw = (b"SymbolErrorCounter:......1\n"
           b"# Port counters: Lid 3 port 1\n"
           b"SymbolErrorCounter:......1\n"
           b"LinkDownedCounter:.......lots\n"
           b"this is not perfquery\n")
    out = run("perfquery", raw, headers={"source": "n"})
    assert [s["metric"] for s in out.samples] == ["SymbolErrorCounter"]
    assert [r.record for r in out.rejections] == ["line 1", "line 4", "line 5"]
    assert "before any" in out.rejections[0].reason
    assert "'lots' is not an integer" in out.rejections[1].reason


def test_sysfs_counters_and_hw_counters_with_no_pma_skipped():
    out = run("sysfs-infiniband", "sysfs_infiniband.txt", headers={"source": "gpu001"})
    assert out.rejections == []
    s = one(out, "symbol_error")
    assert s == {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "symbol_error", "value": 12.0,
                 "labels": {"device": "mlx5_0", "port": "1"}, "kind": "counter"}
    oos = one(out, "out_of_sequence")
    assert oos["labels"] == {"device": "mlx5_2", "port": "1"}
    assert not [x for x in out.samples if x["metric"] in ("VL15_dropped", "lifespan")]
    assert out.skipped == {"N/A (no PMA): port without a performance-management agent": 1,
                           "hw_counters lifespan (cache age, not a counter)": 1}
    assert out.unknown_metrics == 0


@pytest.mark.parametrize("names, meaning", [
    (("SymbolErrorCounter", "SymbolErrorCounterExtended", "symbol_error", "node_infiniband_symbol_error_total",
      "infiniband_symbol_error", "rx_pcs_symbol_err_phy", "ethtool_rx_symbol_err_phy"), "link_errors"),
    (("LinkDownedCounter", "link_downed", "node_infiniband_link_downed_total", "link_down_events_phy"), "link_down"),
    (("PortXmitDiscards", "port_xmit_discards", "node_infiniband_port_discards_transmitted_total",
      "rx_discards_phy", "out_of_buffer", "rx_prio3_discards"), "drops"),
    (("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "infiniband_out_of_sequence"), "retransmits"),
    (("PortXmitWait", "port_xmit_wait", "node_infiniband_port_transmit_wait_total", "np_cnp_sent", "rp_cnp_handled",
      "np_ecn_marked_roce_packets", "rx_prio3_pause", "rx_prio3_pause_duration", "tx_prio0_pause"), "congestion"),
])
def test_infiniband_and_roce_spellings_share_operational_meanings(names, meaning):
    assert {lookup(n).meaning.value for n in names} == {meaning}


def test_ib_data_words_are_scaled_to_bytes_where_the_source_counts_words():
    assert lookup("PortXmitData").scale == 4.0 and lookup("port_xmit_data").scale == 4.0
    assert lookup("infiniband_port_rcv_data").scale == 4.0
    assert lookup("node_infiniband_port_data_transmitted_bytes_total").scale == 1.0  # node_exporter did it


def test_ethtool_port_and_priority_counters_keep_raw_names_and_skip_per_ring():
    out = run("ethtool", "ethtool.txt", headers={"source": "gpu041", "device": "ens1f0np0"})
    assert out.rejections == []
    pause = one(out, "rx_prio3_pause_duration")
    assert pause == {"ts": T0, "layer": "nic", "source": "gpu041", "metric": "rx_prio3_pause_duration",
                     "value": 9201.0, "labels": {"interface": "ens1f0np0"}, "kind": "counter"}
    assert not [s for s in out.samples if s["metric"].startswith(("rx0_", "tx3_", "ch0_"))]
    assert out.skipped == {"per-ring software counter (not a port counter)": 4}
    assert out.unknown_metrics == 0


def test_ethtool_ber_is_derived_from_symbol_and_bit_counters_across_two_readings():
    state = AdapterState()
    first = run("ethtool", "ethtool.txt", headers={"source": "gpu041", "device": "ens1f0np0"}, state=state)
    assert not [s for s in first.samples if s["metric"].endswith("_ber")]
    second = run("ethtool", "ethtool_next.txt", headers={"source": "gpu041", "device": "ens1f0np0"}, ts=T0 + 10,
                 state=state)
    eff = one(second, "effective_ber")
    raw = one(second, "raw_ber")
    assert eff["value"] == pytest.approx(2 / 1e9) and raw["value"] == pytest.approx(1000 / 1e9)
    assert (eff["kind"], eff["labels"], eff["ts"]) == ("gauge", {"interface": "ens1f0np0"}, T0 + 10)
    assert lookup("effective_ber").meaning.value == "link_errors"


def test_ethtool_garbage_lines_and_repeats_are_rejected():
    out = run("ethtool", b"NIC statistics:\n rx_discards_phy: 1\n rx_discards_phy: 2\n whatever\n tx: -\n",
              headers={"source": "h"})
    assert [s["value"] for s in out.samples] == [1.0]
    assert [r.record for r in out.rejections] == ["line 3", "line 4", "line 5"]
    assert "repeated" in out.rejections[0].reason
