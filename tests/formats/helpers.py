"""Helpers for the format tests: fixture files written from each format's public documentation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.formats import AdapterState, Converted, convert

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "formats"
#: 2025-11-30T11:42:10Z, the collection time given to formats that carry none.
T0 = 1764502930.0


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def run(fmt: str, name_or_raw: str | bytes, *, headers: dict[str, str] | None = None, ts: float | None = T0,
        state: AdapterState | None = None, default_source: str | None = None) -> Converted:
    raw = load(name_or_raw) if isinstance(name_or_raw, str) else name_or_raw
    return convert(fmt, raw, headers=headers, ts=ts, state=state, default_source=default_source)


def one(out: Converted, metric: str, **labels: str) -> dict[str, Any]:
    """The single sample of ``metric`` whose labels include ``labels``."""
    found = [s for s in out.samples
             if s["metric"] == metric and all(s["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{len(found)} samples of {metric} {labels}: {found}"
    return found[0]
