"""Series identity: one integer id per (layer, source, metric, labels), with its metadata.

Per-series numeric state lives in numpy arrays indexed by these ids (see :mod:`streams.rates` and
:mod:`streams.detect`), so a batch is processed with array operations instead of a loop of objects.
The registry also keeps the per-series facts the hot path needs as arrays (counter or gauge, rate
scale, layer, unknown metric), so a batch reads them with one gather instead of a loop.

Memory: strings are interned (a metric name, a label name, a source is stored once however many
series share it) and the labels are kept only as the key's sorted tuple; :class:`SeriesMeta` builds
the label mapping on demand (anomalies and inventory look-ups only).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from models.samples import Layer
from streams.catalogue import MetricInfo, lookup

SeriesKey = tuple[str, str, str, tuple[tuple[str, str], ...]]

#: Layer codes of :attr:`SeriesRegistry.layer_code`, in :class:`models.samples.Layer` order.
LAYER_NAMES: tuple[str, ...] = tuple(layer.value for layer in Layer)
LAYER_CODES: dict[str, int] = {name: i for i, name in enumerate(LAYER_NAMES)}


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


def raw_key(layer: str, source: str, metric: str, labels: dict[str, str]) -> tuple[str, str, str, Any]:
    """The key in the labels' own order: what the hot path looks up first (no sort)."""
    return (layer, source, metric, tuple(labels.items()) if labels else ())


def series_name(key: SeriesKey) -> str:
    """A readable, stable name: ``switch/leaf03/SymbolErrorCounter{port=17}``."""
    layer, source, metric, labels = key
    inner = ",".join(f"{k}={v}" for k, v in labels)
    return f"{layer}/{source}/{metric}" + (f"{{{inner}}}" if inner else "")


class SeriesMeta:
    """What one series is. ``labels`` is built from the key on each access (not stored twice)."""

    __slots__ = ("info", "key")

    def __init__(self, key: SeriesKey, info: MetricInfo) -> None:
        self.key = key
        self.info = info

    @property
    def layer(self) -> str:
        return self.key[0]

    @property
    def source(self) -> str:
        return self.key[1]

    @property
    def metric(self) -> str:
        return self.key[2]

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.key[3])


def _intern_labels(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    items = sorted(labels.items()) if len(labels) > 1 else list(labels.items())
    return tuple((sys.intern(k), sys.intern(v) if len(v) <= 64 else v) for k, v in items)


class SeriesRegistry:
    """Assigns dense integer ids to series in first-seen order.

    >>> reg = SeriesRegistry()
    >>> reg.id_for("nic", "n1", "PortXmitData", {"port": "1", "device": "mlx5_0"}, None)
    0
    >>> reg.lookup_raw(("nic", "n1", "PortXmitData", (("port", "1"), ("device", "mlx5_0"))))
    0
    >>> bool(reg.counter[0]), float(reg.scale[0]), reg.meta[0].labels
    (True, 4.0, {'device': 'mlx5_0', 'port': '1'})
    """

    def __init__(self) -> None:
        #: canonical keys and raw-order aliases -> id (the hot path indexes it directly)
        self._ids: dict[Any, int] = {}
        self.raw_ids = self._ids
        self.meta: list[SeriesMeta] = []
        self.counter = np.zeros(0, dtype=bool)
        self.scale = np.ones(0)
        self.layer_code = np.zeros(0, dtype=np.int8)
        self.unknown = np.zeros(0, dtype=bool)
        #: :meth:`snapshot`'s rows so far (the registry only grows: each snapshot adds the new ones)
        self._snapshot_rows: list[list[Any]] = []

    def __len__(self) -> int:
        return len(self.meta)

    def lookup_raw(self, key: Any) -> int:
        """Id of a known series by its raw-order key, or -1 (also for unhashable garbage)."""
        try:
            return self._ids.get(key, -1)
        except TypeError:
            return -1

    def id_for(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None) -> int:
        key = series_key(layer, source, metric, labels)
        sid = self._ids.get(key)
        if sid is None:
            sid = self._add(layer, source, metric, labels, kind)
        alias = raw_key(layer, source, metric, labels)
        if alias != key and alias not in self._ids:
            self._ids[alias] = sid
        return sid

    def _add(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None) -> int:
        sid = len(self.meta)
        key: SeriesKey = (sys.intern(layer), sys.intern(source), sys.intern(metric), _intern_labels(labels))
        info = lookup(metric, kind)
        self._ids[key] = sid
        self.meta.append(SeriesMeta(key, info))
        if sid >= self.counter.shape[0]:
            self.counter = grow(self.counter, sid + 1, False)
            self.scale = grow(self.scale, sid + 1, 1.0)
            self.layer_code = grow(self.layer_code, sid + 1, 0)
            self.unknown = grow(self.unknown, sid + 1, False)
        self.counter[sid] = info.counter
        self.scale[sid] = info.scale
        self.layer_code[sid] = LAYER_CODES.get(layer, 0)
        self.unknown[sid] = info.meaning.value == "unknown"
        return sid

    def get(self, key: SeriesKey) -> int | None:
        return self._ids.get(key)

    def snapshot(self) -> list[Any]:
        """Plain data: the keys in id order (metadata is rebuilt from the catalogue). Read-only: the
        list is kept and extended by later calls."""
        rows = self._snapshot_rows
        if len(rows) < len(self.meta):
            rows.extend([m.layer, m.source, m.metric, m.labels, "counter" if m.info.counter else "gauge"]
                        for m in self.meta[len(rows):])
        return rows

    @classmethod
    def restore(cls, data: list[Any]) -> SeriesRegistry:
        reg = cls()
        for layer, source, metric, labels, kind in data:
            reg.id_for(layer, source, metric, labels, kind)
        return reg

    def nbytes(self) -> int:
        """Approximate bytes held by the registry (keys, metadata, per-series arrays)."""
        arrays = self.counter.nbytes + self.scale.nbytes + self.layer_code.nbytes + self.unknown.nbytes
        objects = sys.getsizeof(self._ids) + sys.getsizeof(self.meta)
        for key, sid in self._ids.items():
            if self.meta[sid].key is key:
                objects += sys.getsizeof(key) + sys.getsizeof(key[3]) + sum(sys.getsizeof(p) for p in key[3])
                objects += sys.getsizeof(self.meta[sid])
        return arrays + objects


#: Per-series arrays grow in steps of this many rows, and by this factor.
GROW_ROWS = 256
GROW_FACTOR = 1.25


def grow(array: np.ndarray, size: int, fill: float | int | bool = 0) -> np.ndarray:
    """Return ``array`` with at least ``size`` rows, new rows set to ``fill``.

    Capacity grows by a quarter, in whole steps of :data:`GROW_ROWS` rows: amortised O(1) per row, and
    at most about 25 % of the rows unused right after a growth (doubling left up to half unused, and
    state per series is counted at allocated capacity).

    >>> a = grow(np.zeros(0), 10)
    >>> a.shape[0]
    256
    >>> [grow(np.zeros(n), n + 1).shape[0] for n in (256, 1024, 10_240)]
    [512, 1280, 12800]
    """
    if size <= array.shape[0]:
        return array
    cap = max(GROW_ROWS, array.shape[0])
    while cap < size:
        cap = -(-int(cap * GROW_FACTOR) // GROW_ROWS) * GROW_ROWS
    out = np.empty((cap, *array.shape[1:]), dtype=array.dtype)
    out[: array.shape[0]] = array
    out[array.shape[0]:] = fill
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
    if starts.all():
        return [np.arange(n)]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - group_start
    top = int(occurrence.max())
    if top == 1:
        first = occurrence == 0
        return [np.flatnonzero(first), np.flatnonzero(~first)]
    # positions grouped by occurrence, each group in batch order (a stable sort by occurrence)
    by_occ = np.argsort(occurrence, kind="stable")
    bounds = np.searchsorted(occurrence[by_occ], np.arange(1, top + 1))
    return np.split(by_occ, bounds)
