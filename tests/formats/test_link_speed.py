"""The link event's optional line rate: validated, kept by the index, read from ``ibnetdiscover -p``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.inventory import LinkEvent, inventory_adapter
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
