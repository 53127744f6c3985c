"""Series identity: one integer id per (layer, source, metric, labels), with its metadata.

Per-series numeric state lives in numpy arrays indexed by these ids (see :mod:`streams.rates` and
:mod:`streams.detect`), so a batch is processed with array operations instead of a loop of objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.catalogue import MetricInfo, lookup

SeriesKey = tuple[str, str, str, tuple[tuple[str, str], ...]]


def series_key(layer: str, source: str, metric: str, labels: dict[str, str]) -> SeriesKey:
    """The deterministic identity of a series: label order never matters.

    >>> series_key("switch", "leaf03", "SymbolErrorCounter", {"port": "17"})
    ('switch', 'leaf03', 'SymbolErrorCounter', (('port', '17'),))
    >>> series_key("x", "s", "m", {"b": "2", "a": "1"}) == series_key("x", "s", "m", {"a": "1", "b": "2"})
    True
    """
    if not labels:
        return (layer, source, metric, ())
    if len(labels) == 1:
        return (layer, source, metric, tuple(labels.items()))
    return (layer, source, metric, tuple(sorted(labels.items())))


def series_name(key: SeriesKey) -> str:
    """A readable, stable name: ``switch/leaf03/SymbolErrorCounter{port=17}``."""
    layer, source, metric, labels = key
    inner = ",".join(f"{k}={v}" for k, v in labels)
    return f"{layer}/{source}/{metric}" + (f"{{{inner}}}" if inner else "")


@dataclass(slots=True)
class SeriesMeta:
    key: SeriesKey
    layer: str
    source: str
    metric: str
    labels: dict[str, str]
    info: MetricInfo


class SeriesRegistry:
    """Assigns dense integer ids to series in first-seen order."""

    def __init__(self) -> None:
        self._ids: dict[SeriesKey, int] = {}
        self.meta: list[SeriesMeta] = []

    def __len__(self) -> int:
        return len(self.meta)

    def id_for(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None) -> int:
        key = series_key(layer, source, metric, labels)
        sid = self._ids.get(key)
        if sid is None:
            sid = len(self.meta)
            self._ids[key] = sid
            self.meta.append(SeriesMeta(key, layer, source, metric, dict(labels), lookup(metric, kind)))
        return sid

    def get(self, key: SeriesKey) -> int | None:
        return self._ids.get(key)

    def snapshot(self) -> list[Any]:
        """Plain data: the keys in id order (metadata is rebuilt from the catalogue)."""
        return [[m.layer, m.source, m.metric, dict(m.labels), "counter" if m.info.counter else "gauge"]
                for m in self.meta]

    @classmethod
    def restore(cls, data: list[Any]) -> SeriesRegistry:
        reg = cls()
        for layer, source, metric, labels, kind in data:
            reg.id_for(layer, source, metric, labels, kind)
        return reg


def grow(array: np.ndarray, size: int, fill: float | int | bool = 0) -> np.ndarray:
    """Return ``array`` with at least ``size`` rows, doubling capacity (amortised O(1) per row)."""
    if size <= array.shape[0]:
        return array
    cap = max(1024, array.shape[0])
    while cap < size:
        cap *= 2
    out = np.full((cap, *array.shape[1:]), fill, dtype=array.dtype)
    out[: array.shape[0]] = array
    return out


def occurrence_rounds(ids: np.ndarray) -> list[np.ndarray]:
    """Split batch positions into rounds where each id appears at most once, keeping batch order.

    >>> [r.tolist() for r in occurrence_rounds(np.array([3, 1, 3, 2, 3]))]
    [[0, 1, 3], [2], [4]]
    """
    n = ids.shape[0]
    if n == 0:
        return []
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.r_[True, sorted_ids[1:] != sorted_ids[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - group_start
    top = int(occurrence.max())
    if top == 0:
        return [np.arange(n)]
    return [np.flatnonzero(occurrence == r) for r in range(top + 1)]
