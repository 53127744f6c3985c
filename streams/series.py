"""Series identity: one integer id per (layer, source, metric, labels), with its metadata.

Per-series numeric state lives in numpy arrays indexed by these ids (see :mod:`streams.rates` and
:mod:`streams.detect`), so a batch is processed with array operations instead of a loop of objects.
The registry also keeps the per-series facts the hot path needs as arrays (counter or gauge, rate
scale, layer, unknown metric), so a batch reads them with one gather instead of a loop.

Bounds: a registry holds at most :class:`SeriesLimits` series (per partition and per source) and
reuses the ids of evicted series, so the per-series arrays elsewhere are as long as the most series
held at once, never the number ever seen.

Memory: strings are interned (a metric name, a label name, a source is stored once however many
series share it), and so are label tuples (the series of a GPU's metrics share one). Per series the
registry holds one key, its labels in the order its source sends them (what the hot path looks up;
an alias key only for a series seen in more than one order), its id-table entry and a few bytes of
arrays. A series' identity is still its sorted key (:func:`series_key`): :class:`SeriesMeta`,
built on each look-up, carries it, with the label mapping in sorted order.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.errors import SeriesLimitExceeded
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
    """What one series is. ``labels`` is built from the key on each access (not stored twice).

    Built on each :attr:`SeriesRegistry.meta` look-up from what the registry keeps per id (the key,
    and whether it is a counter): not held per series.
    """

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


#: The metadata of a free id (no series holds it).
FREE = SeriesMeta(("", "", "", ()), lookup("", None))


class SeriesMetas:
    """:attr:`SeriesRegistry.meta`: ``meta[sid]`` is what series ``sid`` is (:data:`FREE` for a free id).

    The registry keeps a series' key and counter flag; its :class:`~streams.catalogue.MetricInfo` is
    the catalogue's for the metric and that kind (what :meth:`SeriesRegistry.restore` rebuilds too),
    so no object per series is held for it.
    """

    __slots__ = ("_reg",)

    def __init__(self, registry: SeriesRegistry) -> None:
        self._reg = registry

    def __len__(self) -> int:
        return len(self._reg.keys)

    def __getitem__(self, sid: int) -> SeriesMeta:
        key = self._reg.keys[sid]
        if key is None:
            return FREE
        if len(key[3]) > 1:  # held in the order the labels first came in: the identity is sorted
            key = (key[0], key[1], key[2], tuple(sorted(key[3])))
        return SeriesMeta(key, lookup(key[2], "counter" if self._reg.counter[sid] else "gauge"))


def _intern_labels(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The label pairs in their own order, names and (short) values interned."""
    return tuple((sys.intern(k), sys.intern(v) if len(v) <= 64 else v) for k, v in labels.items())


class _Shared:
    """One object for equal label tuples, counted: dropped when the last series holding it goes.

    Most series share their labels with others (the same ``gpu``, ``UUID`` and job labels under each
    of a GPU's metrics: about 800 distinct label tuples for 10,000 series), so each series keeps a
    reference instead of its own tuple of pairs.

    >>> shared = _Shared()
    >>> a = shared.take((("gpu", "0"),))
    >>> shared.take((("gpu", "0"),)) is a, len(shared)
    (True, 1)
    >>> shared.drop(a); len(shared)
    1
    >>> shared.drop(a); len(shared)
    0
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        #: value -> [the shared object, how many holders]
        self._held: dict[Any, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._held)

    def take(self, value: Any, make: Callable[[Any], Any] | None = None) -> Any:
        """The shared object for ``value`` (``value`` itself, or ``make(value)`` when first taken)."""
        entry = self._held.get(value)
        if entry is None:
            entry = self._held[value] = [value if make is None else make(value), 0]
        entry[1] += 1
        return entry[0]

    def drop(self, value: Any) -> None:
        entry = self._held[value]
        entry[1] -= 1
        if not entry[1]:
            del self._held[value]

    def nbytes(self) -> int:
        """Bytes of the shared tuples, their pairs and this table (the strings are interned elsewhere)."""
        pairs = {id(p): sys.getsizeof(p) for value, _ in self._held.values() for p in value}
        return (sys.getsizeof(self._held) + sum(sys.getsizeof(e) + sys.getsizeof(e[0]) for e in self._held.values())
                + sum(pairs.values()))


@dataclass(frozen=True, slots=True)
class SeriesLimits:
    """How many series one input partition holds, and for how long an idle one is kept.

    ``max_series`` bounds the partition, ``max_per_source`` each source within it; a sample of a new
    series beyond either is refused (:class:`SeriesLimitExceeded`), samples of known series never
    are. A series with no sample for ``idle_s`` of the partition's event time is evicted and its id
    reused (``math.inf`` keeps every series). The defaults and what they cost are in
    docs/operations.md ("Size").
    """

    max_series: int = 50_000
    max_per_source: int = 5_000
    idle_s: float = 3600.0


#: :meth:`SeriesRegistry.admit` results for a refused series (a valid id is ``>= 0``).
REFUSED_PARTITION, REFUSED_SOURCE = -1, -2
REFUSED_REASONS = {REFUSED_PARTITION: "partition", REFUSED_SOURCE: "source"}


class SeriesRegistry:
    """Assigns dense integer ids to series, reusing the ids of evicted series.

    An id is *live* while its series is held; :meth:`evict` frees it, and the next new series takes
    the most recently freed id (per-series arrays elsewhere are indexed by id, so their size is the
    id space :attr:`size`, never more than the most series held at once). ``len()`` is the number of
    live series.

    >>> reg = SeriesRegistry(SeriesLimits(max_series=2, max_per_source=2))
    >>> reg.id_for("nic", "n1", "PortXmitData", {"port": "1", "device": "mlx5_0"}, None)
    0
    >>> reg.lookup_raw(("nic", "n1", "PortXmitData", (("port", "1"), ("device", "mlx5_0"))))
    0
    >>> bool(reg.counter[0]), float(reg.scale[0]), reg.meta[0].labels
    (True, 4.0, {'device': 'mlx5_0', 'port': '1'})
    >>> reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, None)
    1
    >>> reg.admit("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, None) == REFUSED_PARTITION
    True
    >>> _ = reg.evict(np.array([0]))
    >>> len(reg), reg.size, reg.lookup_raw(("nic", "n1", "PortXmitData", (("port", "1"), ("device", "mlx5_0"))))
    (1, 2, -1)
    >>> reg.id_for("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, None)   # the freed id, reused
    0
    """

    def __init__(self, limits: SeriesLimits | None = None) -> None:
        self.limits = limits or SeriesLimits()
        #: keys with the labels in the order they come in -> id (the hot path indexes it directly):
        #: each series' key, and an alias key for each other order it was seen in
        self._ids: dict[Any, int] = {}
        self.raw_ids = self._ids
        #: per id: the series' key (labels in the order first seen), or None for an id that is free
        self.keys: list[SeriesKey | None] = []
        #: per id: the series, or :data:`FREE` for an id that is free
        self.meta = SeriesMetas(self)
        self.counter = np.zeros(0, dtype=bool)
        #: float32 while every factor is one float32 holds exactly (the catalogue's are 1 and 4), else
        #: float64: the rate stage multiplies in float64 either way, so the rates are the same
        self.scale = np.ones(0, dtype=np.float32)
        self.layer_code = np.zeros(0, dtype=np.int8)
        self.unknown = np.zeros(0, dtype=bool)
        #: per id: True while a series holds it
        self.live = np.zeros(0, dtype=bool)
        #: freed ids, the next one to reuse last
        self.free: list[int] = []
        #: live series per source
        self.per_source: dict[str, int] = {}
        self._live = 0
        #: per id: its alias keys (None, one key or a list of them: only for series seen with their
        #: labels in more than one order)
        self._aliases: list[Any] = []
        #: the label tuples of keys and aliases, one object for equal ones
        self._labels = _Shared()
        #: the orders label names came in (in keys and aliases), by the sorted names: where a series
        #: seen in one order is looked for when its labels come in another
        self._orders: dict[tuple[str, ...], _Shared] = {}
        #: ids given out (new or reused) since the last :meth:`take_added`
        self._added: list[int] = []
        #: :meth:`snapshot`'s rows so far (kept up to date on reuse and eviction; new ids are appended)
        self._snapshot_rows: list[list[Any] | None] = []
        #: the rows' label mappings, one for equal labels (by the sorted label tuple)
        self._row_labels = _Shared()

    def __len__(self) -> int:
        return self._live

    @property
    def size(self) -> int:
        """The id space: every id ever given out is below it (live or free)."""
        return len(self.keys)

    def lookup_raw(self, key: Any) -> int:
        """Id of a known series by its raw-order key, or -1 (also for unhashable garbage)."""
        try:
            return self._ids.get(key, -1)
        except TypeError:
            return -1

    def admit(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None) -> int:
        """The id of a series, registering it if it is new and the limits allow; else
        :data:`REFUSED_PARTITION` or :data:`REFUSED_SOURCE` (nothing is registered)."""
        sid = self._ids.get(raw_key(layer, source, metric, labels))
        if sid is not None:
            return sid
        sid = self._find(layer, source, metric, labels)
        if sid is not None:  # a known series, its labels in another order
            self._alias(sid, labels)
            return sid
        lim = self.limits
        if self._live >= lim.max_series:
            return REFUSED_PARTITION
        if self.per_source.get(source, 0) >= lim.max_per_source:
            return REFUSED_SOURCE
        return self._add(layer, source, metric, labels, kind)

    def _find(self, layer: str, source: str, metric: str, labels: dict[str, str]) -> int | None:
        """The id of the series with these labels held under another order of their names, or None."""
        if len(labels) < 2:
            return None
        names = tuple(labels)
        for order in self._orders.get(tuple(sorted(names)), ()):
            if order != names:
                sid = self._ids.get((layer, source, metric, tuple((n, labels[n]) for n in order)))
                if sid is not None:
                    return sid
        return None

    def _hold(self, key: SeriesKey, sid: int) -> None:
        """Index ``key`` (a series' key or alias) for ``sid``, its label order known to :meth:`_find`."""
        self._ids[key] = sid
        if len(key[3]) > 1:
            names = tuple(name for name, _ in key[3])
            orders = self._orders.get(tuple(sorted(names)))
            if orders is None:
                orders = self._orders[tuple(sorted(names))] = _Shared()
            orders.take(names)

    def _release(self, key: SeriesKey) -> None:
        """Undo :meth:`_hold` (and the key's share of its label tuple)."""
        del self._ids[key]
        self._labels.drop(key[3])
        if len(key[3]) > 1:
            names = tuple(name for name, _ in key[3])
            index = tuple(sorted(names))
            orders = self._orders[index]
            orders.drop(names)
            if not len(orders):
                del self._orders[index]

    def id_for(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None) -> int:
        """The id of a series, registered if new; raises :class:`SeriesLimitExceeded` if refused."""
        sid = self.admit(layer, source, metric, labels, kind)
        if sid < 0:
            raise SeriesLimitExceeded(f"series cap ({REFUSED_REASONS[sid]}) refuses {layer}/{source}/{metric}")
        return sid

    def _alias(self, sid: int, labels: dict[str, str]) -> None:
        """Let the labels' own order find series ``sid`` too (the hot path looks keys up unsorted).

        A series held in sorted order with no alias yet (as :meth:`restore` holds every series: the
        snapshot's rows are sorted) is held in this order instead: after a restore each series
        again has one key, the order its source sends.
        """
        key = self.keys[sid]
        assert key is not None
        pairs = {p[0]: p for p in key[3]}  # the key's own pairs: the alias holds no strings of its own
        alias: SeriesKey = (key[0], key[1], key[2], self._labels.take(tuple(pairs[name] for name in labels)))
        held = self._aliases[sid]
        if held is None and list(key[3]) == sorted(key[3]):
            self._release(key)
            self.keys[sid] = alias
        else:
            self._aliases[sid] = alias if held is None else [*held, alias] if type(held) is list else [held, alias]
        self._hold(alias, sid)

    def _add(self, layer: str, source: str, metric: str, labels: dict[str, str], kind: str | None,
             sid: int | None = None) -> int:
        if sid is None:
            sid = self.free.pop() if self.free else len(self.keys)
        source = sys.intern(source)
        key: SeriesKey = (sys.intern(layer), source, sys.intern(metric), self._labels.take(_intern_labels(labels)))
        info = lookup(metric, kind)
        self._hold(key, sid)
        if sid >= len(self.keys):
            self.keys.extend([None] * (sid + 1 - len(self.keys)))
            self._aliases.extend([None] * (sid + 1 - len(self._aliases)))
        self.keys[sid] = key
        self._ensure(sid + 1)
        self.counter[sid] = info.counter
        if self.scale.dtype != np.float64 and float(np.float32(info.scale)) != info.scale:
            self.scale = self.scale.astype(np.float64)
        self.scale[sid] = info.scale
        self.layer_code[sid] = LAYER_CODES.get(layer, 0)
        self.unknown[sid] = info.meaning.value == "unknown"
        self.live[sid] = True
        self._live += 1
        self.per_source[source] = self.per_source.get(source, 0) + 1
        self._added.append(sid)
        if sid < len(self._snapshot_rows):
            self._snapshot_rows[sid] = self._row(sid)
        return sid

    def _row(self, sid: int) -> list[Any]:
        """Series ``sid``'s row of :meth:`snapshot`: layer, source, metric, labels (a mapping shared by
        the rows with equal labels: rows are read-only), kind."""
        m = self.meta[sid]
        labels = self._row_labels.take(m.key[3], dict)
        return [m.layer, m.source, m.metric, labels, "counter" if m.info.counter else "gauge"]

    def _ensure(self, size: int) -> None:
        if size > self.counter.shape[0]:
            self.counter = grow(self.counter, size, False)
            self.scale = grow(self.scale, size, 1.0)
            self.layer_code = grow(self.layer_code, size, 0)
            self.unknown = grow(self.unknown, size, False)
            self.live = grow(self.live, size, False)

    def take_added(self) -> list[int]:
        """The ids given out (new or reused) since the last call, in the order they were given."""
        added, self._added = self._added, []
        return added

    def evict(self, sids: np.ndarray) -> list[SeriesMeta]:
        """Forget the live series ``sids`` and free their ids; returns what they were.

        Their keys no longer resolve, so a later sample of one of them is a new series. The caller
        clears its per-series state of these ids (a reused id must start clean).
        """
        gone: list[SeriesMeta] = []
        rows = self._snapshot_rows
        for sid in sids.tolist():
            meta = self.meta[sid]
            if meta is FREE:
                continue
            key = self.keys[sid]
            assert key is not None
            self._release(key)
            self.keys[sid] = None
            held = self._aliases[sid]
            if held is not None:
                for alias in held if type(held) is list else (held,):
                    self._release(alias)
                self._aliases[sid] = None
            left = self.per_source[meta.source] - 1
            if left:
                self.per_source[meta.source] = left
            else:
                del self.per_source[meta.source]
            self.free.append(sid)
            if sid < len(rows) and rows[sid] is not None:
                rows[sid] = None
                self._row_labels.drop(meta.key[3])
            gone.append(meta)
        if gone:
            self.live[sids] = False
            self._live -= len(gone)
        return gone

    def get(self, key: SeriesKey) -> int | None:
        """The id of the series ``key`` names (its labels in any order), or None."""
        sid = self._ids.get(key)
        return sid if sid is not None else self._find(key[0], key[1], key[2], dict(key[3]))

    def snapshot(self) -> dict[str, Any]:
        """Plain data: the keys in id order (``None`` for a free id; metadata is rebuilt from the
        catalogue) and the free ids in reuse order. Read-only: the rows are kept and updated by later
        calls."""
        rows = self._snapshot_rows
        if len(rows) < len(self.keys):
            rows.extend(None if self.keys[sid] is None else self._row(sid) for sid in range(len(rows), len(self.keys)))
        return {"rows": rows, "free": self.free}

    @classmethod
    def restore(cls, data: list[Any] | dict[str, Any], limits: SeriesLimits | None = None) -> SeriesRegistry:
        """The registry of :meth:`snapshot` (also a plain row list, the format before ids were reused),
        with every series in its id. A snapshot holding more series than ``limits`` allow keeps them
        all; new series are refused until evictions bring it below."""
        reg = cls(limits)
        rows, free = (data, []) if isinstance(data, list) else (data["rows"], data["free"])
        for sid, row in enumerate(rows):
            if row is None:
                continue
            layer, source, metric, labels, kind = row
            reg._add(layer, source, metric, labels, kind, sid=sid)
        if len(rows) > len(reg.keys):  # trailing free ids
            reg.keys.extend([None] * (len(rows) - len(reg.keys)))
            reg._aliases.extend([None] * (len(rows) - len(reg._aliases)))
            reg._ensure(len(rows))
        reg.free = [int(sid) for sid in free]
        if sorted(reg.free) != [sid for sid, row in enumerate(rows) if row is None]:
            raise ValueError("series snapshot: the free ids do not match the free rows")
        return reg

    def nbytes(self) -> int:
        """Approximate bytes held by the registry: the per-series arrays, the id table and lists, each
        key and alias, and the shared label tuples once (not the strings: they
        are interned, one per distinct name or value, and :meth:`snapshot`'s rows once taken)."""
        arrays = (self.counter.nbytes + self.scale.nbytes + self.layer_code.nbytes + self.unknown.nbytes
                  + self.live.nbytes)
        objects = (sys.getsizeof(self._ids) + sys.getsizeof(self.keys) + sys.getsizeof(self.free)
                   + sys.getsizeof(self._aliases) + self._labels.nbytes()
                   + sum(sys.getsizeof(k) + orders.nbytes() for k, orders in self._orders.items()))
        objects += sum(sys.getsizeof(key) for key in self._ids)
        objects += sum(sys.getsizeof(a) for a in self._aliases if type(a) is list)
        return arrays + objects


#: Per-series arrays grow in steps of this many rows, and by this factor.
GROW_ROWS = 256
GROW_FACTOR = 1.0625


#: Which rows of per-series arrays a snapshot or restore covers: the first ``n`` (an int) or those listed
#: (an index array: a pipeline's rows of a detector bank it shares, :class:`streams.detect.DetectorBank`).
Rows = int | np.ndarray


def row_index(rows: Rows) -> slice | np.ndarray:
    """``rows`` as an index: the first ``n`` rows as a slice, or the index array itself."""
    return slice(0, rows) if isinstance(rows, int) else rows


#: An index of a round's rows in per-series arrays: a slice for one ascending run of consecutive rows, else
#: the rows' index array (:func:`run_index`).
RowIndex = slice | np.ndarray


def run_index(ids: np.ndarray) -> RowIndex:
    """``ids`` (an int array of rows) as an index: ``slice(ids[0], ids[-1] + 1)`` where they are one strictly
    ascending run of consecutive rows (the rows of most rounds of a detector bank), else ``ids`` itself.

    Both index the same elements in the same order; a slice is cheaper (a view to read, a block copy to
    write, where an array gathers and scatters element by element). The contract for a caller: a read
    ``v = a[index]`` is a VIEW of ``a`` when ``index`` is a slice (a copy otherwise), so ``v`` must not be
    written into, nor read after ``a``'s same rows are written, unless it is taken with ``.copy()``. Anything
    but indexing (sizes, arithmetic on row numbers, subsets such as ``ids[mask]``) keeps using ``ids``.

    >>> run_index(np.array([3, 4, 5])), run_index(np.array([3, 5, 4])).tolist()
    (slice(3, 6, None), [3, 5, 4])
    """
    n = ids.shape[0]
    if n and int(ids[n - 1]) - int(ids[0]) == n - 1 and (n == 1 or bool((ids[1:] > ids[:-1]).all())):
        return slice(int(ids[0]), int(ids[0]) + n)
    return ids


def take_rows(array: np.ndarray, rows: Rows) -> np.ndarray:
    """A copy of ``array``'s ``rows`` (the first ``n``, or those listed), for a snapshot.

    >>> a = np.arange(5.0)
    >>> take_rows(a, 2).tolist(), take_rows(a, np.array([4, 1])).tolist()
    ([0.0, 1.0], [4.0, 1.0])
    """
    return array[:rows].copy() if isinstance(rows, int) else array[rows]


def rows_size(rows: Rows) -> int:
    """The rows a :meth:`restore` must have room for: ``n``, or one more than the largest listed."""
    if isinstance(rows, int):
        return rows
    return int(rows.max()) + 1 if rows.size else 0


def grow(array: np.ndarray, size: int, fill: float | int | bool = 0) -> np.ndarray:
    """Return ``array`` with at least ``size`` rows, new rows set to ``fill``.

    Capacity grows by a sixteenth, in whole steps of :data:`GROW_ROWS` rows: amortised O(1) per row
    (each row copied about 16 times while a partition fills: the first scrape of 99,193 new series
    took 2.0-2.1 CPU-s instead of 1.7-2.0 with a quarter), and at most about 6 % of the rows unused
    right after a growth past a few thousand rows (a quarter left 20 % unused, doubling half: state
    per series is counted at allocated capacity).

    >>> a = grow(np.zeros(0), 10)
    >>> a.shape[0]
    256
    >>> [grow(np.zeros(n), n + 1).shape[0] for n in (256, 1024, 10_240)]
    [512, 1280, 11008]
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


def lexsorted(major: np.ndarray, minor: np.ndarray) -> bool:
    """Whether rows are already in ``(major, minor)`` order, so that the stable ``np.lexsort((minor, major))``
    would leave them as they are (the common case of a batch: a scrape's samples share their time).

    >>> lexsorted(np.array([0, 0, 1, 1]), np.array([5.0, 5.0, 1.0, 2.0]))
    True
    >>> lexsorted(np.array([0, 0, 1]), np.array([5.0, 4.0, 1.0])), lexsorted(np.array([1, 0]), np.array([1.0, 2.0]))
    (False, False)
    """
    if major.size < 2:
        return True
    step = major[1:] - major[:-1]
    return bool((step >= 0).all() and ((step > 0) | (minor[1:] >= minor[:-1])).all())


def run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins: True at the first element and wherever one differs from
    the one before (``np.r_[True, v[1:] != v[:-1]]`` without ``np.r_``'s per-call cost).

    >>> run_starts(np.array([4, 4, 7, 4])).tolist(), run_starts(np.array([], dtype=int)).tolist()
    ([True, False, True, True], [])
    """
    starts = np.empty(values.shape[0], dtype=bool)
    if starts.size:
        starts[0] = True
        np.not_equal(values[1:], values[:-1], out=starts[1:])
    return starts


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
    starts = run_starts(sorted_ids)
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
