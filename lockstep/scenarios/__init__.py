"""Scenarios built on :class:`lockstep.simulate.Simulator` that need more than its fault table: extra
inventory (storage servers and their links), extra telemetry (a storage leaf's ports, RoCE pause
counters) or telemetry in a real exporter's format carried as an envelope
(:mod:`lockstep.scenarios.storage`, :mod:`lockstep.scenarios.fabric`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson


def write_messages(path: Path, messages: Iterable[Any]) -> int:
    """Write :class:`lockstep.simulate.Message` objects as a ``lockstep replay`` file (one JSON line per
    sample, inventory event or envelope); returns the line count."""
    n = 0
    with open(path, "wb") as fh:
        for msg in messages:
            items = msg.value if isinstance(msg.value, list) else [msg.value]
            for item in items:
                fh.write(orjson.dumps(item) + b"\n")
                n += 1
    return n


def extra_scenarios() -> dict[str, tuple[str, str, Any]]:
    """The scenarios of this package by name: (description, what it should yield, ``write_replay(path,
    name, seed)``), for ``lockstep simulate`` beside :data:`lockstep.simulate.SCENARIOS`."""
    from lockstep.scenarios import fabric, storage

    out: dict[str, tuple[str, str, Any]] = {}
    for name, f in fabric.FABRIC_SCENARIOS.items():
        out[name] = (f.description, f.expect, fabric.write_replay)
    for name, st in storage.STORAGE_SCENARIOS.items():
        out[name] = (st.description, st.expect, storage.write_replay)
    return out
