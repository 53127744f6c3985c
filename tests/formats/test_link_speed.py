"""The link event's optional line rate: validated, kept by the index, read from ``ibnetdiscover -p``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.inventory import LinkEvent, SwitchEvent, inventory_adapter
from streams.inventory import InventoryIndex

from .helpers import run

LINK = {"kind": "link", "ts": 1764500000, "node": "gpu001", "device": "mlx5_0", "port": "1", "switch": "leaf01",
        "switch_port": "15"}


def test_the_real_ports_report_gives_each_host_link_its_line_rate():
    out = run("ibnetdiscover", "ibnetdiscover/ports.txt")
    links = [e for e in out.inventory if e["kind"] == "link"]
    assert [(e["node"], e["speed_gbps"]) for e in links] == [("o0001", 100.0), ("o0002", 100.0), ("p0001", 100.0)]
    index = InventoryIndex()
    for e in out.inventory:
        index.apply(inventory_adapter.validate_python(e))
    assert index.links[("o0001", "HCA-1", "1")].speed_gbps == 100.0


def test_a_port_of_unknown_speed_has_no_line_rate():
    out = run("ibnetdiscover", b"CA 134 1 0x7c 4x ZDR - SW 1719 10 0x7d ( 'o0001 HCA-1' - 'leaf' )\n")
    assert [e.get("speed_gbps") for e in out.inventory if e["kind"] == "link"] == [None]


def test_speed_is_optional_and_must_be_positive():
    assert LinkEvent.model_validate(LINK).speed_gbps is None
    assert LinkEvent.model_validate({**LINK, "speed_gbps": 400}).speed_gbps == 400.0
    for bad in (0, -1, "fast"):
        with pytest.raises(ValidationError):
            LinkEvent.model_validate({**LINK, "speed_gbps": bad})


def test_the_real_ports_report_gives_each_switch_to_switch_port_its_peer_and_line_rate():
    """``SW 1719 1 ... 4x EDR - SW 1516 1`` is the leaf ib-i1l1s01's uplink to the spine ib-i1l2s01: both
    ends get the other and 100 Gb/s; the leaf ib-i4l1s01 has no switch neighbour, so no ports."""
    out = run("ibnetdiscover", "ibnetdiscover/ports.txt")
    switches = {e["switch"]: e for e in out.inventory if e["kind"] == "switch"}
    assert switches["ib-i1l1s01"]["ports"] == {"1": {"peer": "ib-i1l2s01", "speed_gbps": 100.0}}
    assert switches["ib-i1l2s01"]["tier"] == "spine"
    assert switches["ib-i1l2s01"]["ports"] == {"1": {"peer": "ib-i1l1s01", "speed_gbps": 100.0}}
    assert "ports" not in switches["ib-i4l1s01"]
    index = InventoryIndex()
    for e in out.inventory:
        index.apply(inventory_adapter.validate_python(e))
    assert {(sw, k): (p.peer, p.speed_gbps) for sw, ports in index.switch_ports.items() for k, p in ports.items()} == {
        ("ib-i1l1s01", "1"): ("ib-i1l2s01", 100.0), ("ib-i1l2s01", "1"): ("ib-i1l1s01", 100.0)}
    # both ends of the cable serve the leaf below it, and the hosts behind that leaf
    assert index.leaf_below("ib-i1l2s01", "1") == index.leaf_below("ib-i1l1s01", "1") == "ib-i1l1s01"
    assert index.nodes_behind_link("ib-i1l2s01", "1") == ["o0001", "o0002"]


def test_a_switch_event_replaces_its_ports_and_refuses_bad_ones():
    index = InventoryIndex()
    sw = {"kind": "switch", "ts": 1764500000, "switch": "leaf01", "tier": "leaf", "uplinks": ["spine01"]}
    index.apply(SwitchEvent.model_validate({**sw, "ports": {"1": {"peer": "spine01", "speed_gbps": 400},
                                                            "2": {"speed_gbps": 400}}}))
    index.apply(SwitchEvent.model_validate({**sw, "ports": {2: {"peer": "spine02"}}}))  # an integer port is a name
    assert {(sw, k): (p.peer, p.speed_gbps) for sw, ports in index.switch_ports.items() for k, p in ports.items()} == {
        ("leaf01", "2"): ("spine02", None)}
    assert SwitchEvent.model_validate(sw).ports == {}
    for bad in ({"1": {"speed_gbps": 0}}, {"1": {"speed_gbps": -5}}, {"1": {"speed_gbps": "fast"}}, {"": {}},
                {"1": {"peer": ""}}, {"1": 400}, ["1", 100]):
        with pytest.raises(ValidationError):
            SwitchEvent.model_validate({**sw, "ports": bad})
