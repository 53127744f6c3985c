"""Rolling tail percentiles per series over event-time windows, with a fixed memory per series.

Each series has one log-bucket grid (DDSketch-style: bucket ``k`` holds values in
``(gamma**(k-1), gamma**k]`` with ``gamma = (1 + accuracy) / (1 - accuracy)``, so any value read back
is within ``accuracy`` of a value of the bucket) of ``buckets`` counters, and for every window ``w`` two
panes of that grid: the current pane (event time ``[p*w, (p+1)*w)``) and the previous one. A window
ending at ``now`` is estimated the way sliding-window rate limiters do it: the current pane plus the
previous pane weighted by the part of it still inside the window (``1 - (now - p*w) / w``), which
assumes the previous pane's samples were spread evenly in time. Samples older than ``2 w`` never
count; a sample one pane late still lands in the previous pane; older ones are dropped and counted.

The grid covers ``gamma ** (buckets - 3)`` (about 22x for the defaults) below its top and moves up when
a larger value arrives, folding the lowest buckets into bucket 1 (the high percentiles, the ones that
matter for stalls, stay exact to ``accuracy``; a percentile that falls into the folded bucket reads as
its upper edge). Bucket 0 counts values ``<= 0`` (read back as 0: these are non-negative quantities such
as latencies, times, rates and utilisations). Counters are ``uint16`` by default and saturate at 65535
per bucket and pane (use ``uint32`` for sources above ~18 samples/s into one 1-hour pane).

Memory per series with the defaults (windows 60/300/3600 s, 64 buckets, uint16): 3 * 2 * 64 * 2 bytes
of counts + 13 bytes of bookkeeping (grid offset, started flag, latest event time; each window's
current pane follows from the latest event time) = 781 bytes, whatever the sample rate.

>>> rp = RollingPercentiles(SketchConfig(windows=(60.0,)))
>>> rp.register(0)
>>> for t in range(240):   # one sample a second; every minute holds the values 1..60 once
...     rp.add(np.array([0]), np.array([float(t)]), np.array([float(t % 60 + 1)]))
>>> [round(float(v), 1) for v in rp.quantiles(np.array([0]), (50.0, 99.0), window=0)[:, 0]]
[30.7, 58.9]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.series import RowIndex, Rows, grow, row_index, rows_size, run_index, take_rows

#: ``SketchConfig.percentiles`` default: what capacity teams ask for.
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
_NO_PANE = np.iinfo(np.int64).min // 4


@dataclass(frozen=True, slots=True)
class SketchConfig:
    windows: tuple[float, ...] = (60.0, 300.0, 3600.0)
    buckets: int = 64
    accuracy: float = 0.025
    dtype: str = "uint16"
    #: Where the first positive value of a series lands, counted from the top bucket.
    headroom: int = 16

    @property
    def gamma(self) -> float:
        return (1.0 + self.accuracy) / (1.0 - self.accuracy)


class RollingPercentiles:
    """Per-series rolling percentile sketches; see the module docstring."""

    def __init__(self, config: SketchConfig | None = None) -> None:
        self.config = cfg = config or SketchConfig()
        if cfg.buckets < 8:
            raise ValueError("need at least 8 buckets")
        self._log_gamma = float(np.log(cfg.gamma))
        self._max = int(np.iinfo(np.dtype(cfg.dtype)).max)
        nw, b = len(cfg.windows), cfg.buckets
        self._w = np.asarray(cfg.windows, dtype=np.float64)
        self._windex = np.arange(nw)
        self._w_col = self._w[:, None]
        #: Each window's first counter in a series' block of ``windows * 2 * buckets`` (flat indices), a column.
        self._window_start = (self._windex * (2 * b))[:, None]
        self.counts = np.zeros((0, nw, 2, b), dtype=cfg.dtype)
        self.offset = np.zeros(0, dtype=np.int32)  # key of bucket 1's upper edge minus 1
        self.started = np.zeros(0, dtype=bool)
        self.last_ts = np.full(0, np.nan)
        self.dropped = 0

    def __len__(self) -> int:
        return int(self.offset.shape[0])

    def register(self, sid: int) -> None:
        """Make room for series ``sid`` (dense ids, storage grows by doubling)."""
        size = sid + 1
        if size > self.offset.shape[0]:
            self.counts = grow(self.counts, size, 0)
            self.offset = grow(self.offset, size, 0)
            self.started = grow(self.started, size, False)
            self.last_ts = grow(self.last_ts, size, np.nan)

    def clear(self, ids: np.ndarray) -> None:
        """Forget series ``ids``: their rows as :meth:`register` leaves a new one (ids are reused)."""
        ids = ids[ids < self.offset.shape[0]]
        self.counts[ids] = 0
        self.offset[ids] = 0
        self.started[ids] = False
        self.last_ts[ids] = np.nan

    def _panes(self, last_ts: np.ndarray) -> np.ndarray:
        """Each window's current pane of series whose latest sample is at ``last_ts``: shape
        ``(len(last_ts), windows)``, :data:`_NO_PANE` before a first sample.

        Not stored: a pane only ever moves to that of a later sample, so it is the latest sample's
        (``floor`` of a division by a positive width never decreases), the very division :meth:`add`
        places a sample with.
        """
        return np.ascontiguousarray(self._window_panes(last_ts).T)

    def _window_panes(self, last_ts: np.ndarray) -> np.ndarray:
        """:meth:`_panes` by window: shape ``(windows, len(last_ts))`` (each window's panes contiguous: on a
        round of 1,440 rows the division and the conversion cost under half of what they cost along the
        3-long window axis)."""
        none = np.isnan(last_ts)
        if not np.count_nonzero(none):
            return np.floor(last_ts / self._w_col).astype(np.int64)
        p = np.floor(np.where(none, 0.0, last_ts) / self._w_col).astype(np.int64)
        p[:, none] = _NO_PANE
        return p

    # -- grid -----------------------------------------------------------------------------------
    def _keys(self, x: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """Each value's grid key (``pos``: ``x > 0`` when the caller has it).

        No ``np.errstate`` (~2 us a call): the logarithm's argument is positive or 1 (NaN too), so neither
        it nor the division and ceiling can raise a floating-point flag (an infinite value gives an infinite
        key quietly)."""
        k = np.ceil(np.log(np.where(x > 0 if pos is None else pos, x, 1.0)) / self._log_gamma)
        return k.astype(np.int64)

    def _shift(self, sid: int, d: int) -> None:
        """Move series ``sid``'s grid up by ``d`` buckets, folding the lowest into bucket 1."""
        c = self.counts[sid].astype(np.int64)
        b = c.shape[-1]
        e = min(d, b - 2)  # a shift past the whole grid folds everything into bucket 1
        folded = c[..., 1: 2 + e].sum(axis=-1)
        c[..., 2: b - e] = c[..., 2 + e:]
        c[..., b - e:] = 0
        c[..., 1] = folded
        self.counts[sid] = np.minimum(c, self._max)
        self.offset[sid] += d

    def _bucket(self, ids: np.ndarray, x: np.ndarray, sel: RowIndex) -> np.ndarray:
        cfg = self.config
        b = cfg.buckets
        pos = x > 0
        keys = self._keys(x, pos)
        # A series' first positive value places its grid (``pos > started``: positive and not started).
        fresh = pos > self.started[sel]
        if np.count_nonzero(fresh):
            fi = ids[fresh]
            self.offset[fi] = (keys[fresh] - (b - 1 - cfg.headroom) + 1).astype(np.int32)
            self.started[fi] = True
        j = keys - self.offset[sel] + 1
        over = pos & (j > b - 1)
        if np.count_nonzero(over):
            for k in over.nonzero()[0]:
                self._shift(int(ids[k]), int(j[k] - (b - 1)))
            j = keys - self.offset[sel] + 1
        # np.minimum(np.maximum()) is np.clip for integers, without np.clip's Python-level dispatch; a value
        # <= 0 is bucket 0 (the product by ``pos``: one operation where np.where is two)
        return np.minimum(np.maximum(j, 1), b - 1) * pos

    # -- updates --------------------------------------------------------------------------------
    def _empty_pane(self, buckets: int) -> np.void:
        """An all-zero pane grid as one opaque item (what :meth:`add`'s pane view holds)."""
        grid = np.zeros(buckets, dtype=self.counts.dtype).view(np.dtype((np.void, buckets * self.counts.itemsize)))
        return grid[0]  # type: ignore[no-any-return]

    def add(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray, sel: RowIndex | None = None) -> None:
        """Add one sample per series (``ids`` unique within a call; use :meth:`add_many` otherwise).

        ``sel``: ``ids`` as an index (:func:`streams.series.run_index`), when the caller has it. A read
        through it may be a view of the state: each is used before the same rows are written."""
        if ids.size == 0:
            return
        if sel is None:
            sel = run_index(ids)
        bucket = self._bucket(ids, x, sel)
        last = self.last_ts[sel]  # (maybe a view: not read after the write below)
        cur = self._window_panes(last)
        self.last_ts[sel] = np.fmax(last, ts)  # the panes move with it (to p where adv >= 1)
        # All windows at once, as (window, row): the (window, row) pairs are independent.
        p = np.floor(ts / self._w_col).astype(np.int64)
        adv = p - cur
        nw, b = adv.shape[0], self.counts.shape[-1]
        if not self.counts.flags.c_contiguous:
            self.counts = np.ascontiguousarray(self.counts)
        # One flat index per (window, row): slot 0 (current pane) or 1 (the one before), the value's bucket.
        flat = (ids * (nw * 2 * b) + bucket) + self._window_start
        # Most rounds stay inside every window's current pane (a 60 s window rolls every 60th scrape of
        # one a second): nothing rolls, no sample is late, every sample lands in slot 0.
        if np.count_nonzero(adv):
            moved = adv >= 1
            if np.count_nonzero(moved):
                # Each pane's grid as one opaque item (a 1-D gather and scatter of whole grids costs under
                # half of ``counts[rows, windows, slot]``'s, which copies a grid bucket by bucket).
                panes = self.counts.reshape(-1).view(np.dtype((np.void, b * self.counts.itemsize)))
                roll1 = adv == 1
                if np.count_nonzero(roll1):
                    w, r = roll1.nonzero()
                    cur_pane = (ids[r] * nw + w) * 2
                    panes[cur_pane + 1] = panes[cur_pane]
                    panes[cur_pane] = self._empty_pane(b)
                reset = adv >= 2
                if np.count_nonzero(reset):
                    w, r = reset.nonzero()
                    cur_pane = (ids[r] * nw + w) * 2
                    panes[cur_pane] = panes[cur_pane + 1] = self._empty_pane(b)
            flat += (adv < 0) * b
            ok = adv >= -1
            late = ok.size - np.count_nonzero(ok)
            if late:
                self.dropped += late
                flat = flat[ok]
        flat = flat.ravel()
        counts = self.counts.reshape(-1)  # a view of the contiguous array: writes go through
        vals = counts[flat]
        counts[flat] = vals + (vals < self._max)  # saturating (a (window, row) index is never repeated)

    def add_many(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> None:
        """Add samples in any order, several per series allowed (processed in event-time order).

        Gives the state that :meth:`add` one sample at a time in event-time order would give, with a
        fixed number of array operations whatever the number of samples per series (a job's summary
        series receives thousands of values a second).
        """
        if ids.size == 0:
            return
        cfg = self.config
        b = cfg.buckets
        order = np.argsort(ts, kind="stable")
        ids, ts, x = ids[order], ts[order], x[order]
        uniq, inv = np.unique(ids, return_inverse=True)
        if uniq.size == ids.size:
            self.add(ids, ts, x)
            return
        pos = x > 0
        keys = self._keys(x)
        # The first positive value of a new series places its grid; the largest value moves it up.
        fresh = pos & ~self.started[ids]
        if fresh.any():
            rows = np.flatnonzero(fresh)
            first = rows[np.unique(inv[rows], return_index=True)[1]]
            fi = ids[first]
            self.offset[fi] = (keys[first] - (b - 1 - cfg.headroom) + 1).astype(np.int32)
            self.started[fi] = True
        if pos.any():
            top = np.full(uniq.size, np.iinfo(np.int64).min)
            np.maximum.at(top, inv[pos], keys[pos])
            j_top = top - self.offset[uniq] + 1
            for k in np.flatnonzero((top > np.iinfo(np.int64).min) & (j_top > b - 1)).tolist():
                self._shift(int(uniq[k]), int(j_top[k] - (b - 1)))
        bucket = np.where(pos, np.clip(keys - self.offset[ids] + 1, 1, b - 1), 0)
        panes0 = self._panes(self.last_ts[uniq])
        np.fmax.at(self.last_ts, ids, ts)  # each window's pane moves to ``final`` with it
        for wi in range(self._w.shape[0]):
            p = np.floor(ts / self._w[wi]).astype(np.int64)
            cur0 = panes0[:, wi]
            latest = np.full(uniq.size, np.iinfo(np.int64).min)
            np.maximum.at(latest, inv, p)
            final = np.maximum(cur0, latest)
            old = self.counts[uniq, wi].astype(np.int64)
            new = np.zeros_like(old)
            same = cur0 == final
            behind = cur0 == final - 1
            new[same] = old[same]
            new[behind, 1] = old[behind, 0]
            late = p < cur0[inv] - 1
            if late.any():
                self.dropped += int(late.sum())
            rel = final[inv] - p  # 0: the final current pane, 1: the previous one, more: rolled out
            ok = (rel <= 1) & ~late
            np.add.at(new, (inv[ok], rel[ok], bucket[ok]), 1)
            self.counts[uniq, wi] = np.minimum(new, self._max)

    # -- reads ----------------------------------------------------------------------------------
    def window_counts(self, ids: np.ndarray, window: int, now: np.ndarray | float | None = None) -> np.ndarray:
        """Estimated counts per bucket of the window ending at ``now`` (default: each series' last sample)."""
        w = self._w[window]
        t = self.last_ts[ids] if now is None else np.broadcast_to(np.asarray(now, dtype=np.float64), ids.shape)
        t = np.nan_to_num(t, nan=0.0)
        p_now = np.floor(t / w).astype(np.int64)
        frac = (t - p_now * w) / w
        cur = self.counts[ids, window, 0].astype(np.float64)
        prev = self.counts[ids, window, 1].astype(np.float64)
        gap = p_now - self._panes(self.last_ts[ids])[:, window]
        keep_prev = np.where(gap == 0, 1.0 - frac, 0.0)
        keep_cur = np.where(gap == 0, 1.0, np.where(gap == 1, 1.0 - frac, 0.0))
        return cur * keep_cur[:, None] + prev * keep_prev[:, None]  # type: ignore[no-any-return]

    def values(self, ids: np.ndarray) -> np.ndarray:
        """The value each bucket reads back as, per series: shape ``(len(ids), buckets)``."""
        g = self.config.gamma
        j = np.arange(self.config.buckets)
        k = self.offset[ids][:, None].astype(np.float64) + j[None, :] - 1
        mid = 2.0 * g ** k / (g + 1.0)
        edge1 = g ** (self.offset[ids].astype(np.float64))
        v = np.where(j[None, :] == 1, edge1[:, None], mid)
        v[:, 0] = 0.0
        return v  # type: ignore[no-any-return]

    def quantiles(self, ids: np.ndarray, qs: tuple[float, ...] = DEFAULT_PERCENTILES, window: int = -1,
                  now: np.ndarray | float | None = None) -> np.ndarray:
        """Percentiles ``qs`` (0-100) of each series over ``window``: shape ``(len(qs), len(ids))``.

        NaN where the window holds no sample. ``now`` is event time (default: the series' last sample).
        """
        window = window % self._w.shape[0]
        c = self.window_counts(ids, window, now)
        total = c.sum(axis=1)
        cum = np.cumsum(c, axis=1)
        vals = self.values(ids)
        out = np.full((len(qs), ids.shape[0]), np.nan)
        have = total > 0
        rows = np.arange(ids.shape[0])
        for i, q in enumerate(qs):
            target = (q / 100.0) * total
            # first bucket whose cumulative count reaches the target (at least one sample in)
            idx = np.argmax(cum >= np.maximum(target, 1e-9)[:, None] - 1e-9, axis=1)
            out[i] = np.where(have, vals[rows, idx], np.nan)
        return out

    def counts_in(self, ids: np.ndarray, window: int = -1, now: np.ndarray | float | None = None) -> np.ndarray:
        """Estimated number of samples in the window."""
        return self.window_counts(ids, window % self._w.shape[0], now).sum(axis=1)  # type: ignore[no-any-return]

    # -- state ----------------------------------------------------------------------------------
    _FIELDS = ("counts", "offset", "started", "last_ts")

    def snapshot(self, n: Rows | None = None) -> dict[str, np.ndarray]:
        """The state of the first ``n`` series (all by default) or of the rows listed, in that order;
        ``sketch.pane`` too (derived, not held), so that a worker of a version that stored it restores
        this snapshot."""
        rows = len(self) if n is None else n
        out = {f"sketch.{k}": take_rows(getattr(self, k), rows) for k in self._FIELDS}
        out["sketch.pane"] = self._panes(out["sketch.last_ts"])
        return out

    def restore(self, data: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """The state of :meth:`snapshot` into the first series, or into ``rows`` (one per snapshot row)
        (its ``sketch.pane`` is not read: the panes follow from ``sketch.last_ts``)."""
        n = data["sketch.offset"].shape[0]
        if data["sketch.counts"].shape[1:] != self.counts.shape[1:]:
            raise ValueError("snapshot sketch shape differs from the configured windows/buckets")
        size = rows_size(n if rows is None else rows)
        if size:
            self.register(size - 1)
        at = row_index(n if rows is None else rows)
        for k in self._FIELDS:
            getattr(self, k)[at] = data[f"sketch.{k}"]

    @property
    def nbytes_per_series(self) -> float:
        cap = max(self.offset.shape[0], 1)
        return sum(getattr(self, k).nbytes for k in self._FIELDS) / cap  # type: ignore[no-any-return]
