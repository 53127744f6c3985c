"""The fabric rollup where the telemetry is ingested: one per input partition, published as summaries.

Every worker's ``/fabric/report`` answers from a per-port rollup (:class:`streams.fabric.FabricRollup`)
of the NIC and switch-port counters. Folding every raw sample into it on every worker (each read
model reading all of ``telemetry.nic`` and ``telemetry.switch``) cost each worker the same, however
many workers shared the ingest (issue 23). Instead, each input partition's pipeline folds the
samples it already decoded and validated into a :class:`PartitionFabric` (the ``fabric`` stage,
:mod:`streams.stages.fabric`), and every ``interval_s`` of the partition's event time
:meth:`PartitionFabric.publish` hands back the changed ports' summaries; the ingest agent sends
them to ``fabric-rollup``, and every read model merges them (:meth:`FabricRollup.merge`): the same
entities as folding the raw samples, for a small fraction of the work.

A port's summary (one entry of a message's ``ports``) says what its samples since the last summary
did, and where the port stands since the ingest state began (its *lineage*):

- ``key``: ``[layer, source, device, port]``; ``first``, ``last``: its earliest and latest sample
  time since the last summary; ``samples``: how many samples that was;
- ``seq``, ``tx_ts``, ``tx_bps``: the transmit rates since the last summary (at most ``recent``, the
  read side's ring), and the sequence number of the first of them in the lineage;
- ``cum``: the cumulative congestion and error totals since the lineage began (``c:<kind>``,
  ``e:<meaning>``, ``d:<UTC day number>`` for the last ``days_kept`` days); ``inc``: what they grew
  by since the last summary.

The state is snapshotted and restored with its partition's (:meth:`snapshot`, :meth:`restore`), so
a restart or a rebalance continues the lineage: a restored state that publishes again what its
previous owner had already published (the samples between the snapshot and the crash) repeats
cumulative totals and sequence numbers the read side has merged, and adds nothing. The lineage is
named by the first input offset it folded (``"<offset>/<Kafka time>"``): a state started afresh at
another offset is a new lineage, whose first summary counts its own increments only.

>>> from streams.series import SeriesRegistry, SeriesLimits
>>> reg = SeriesRegistry(SeriesLimits())
>>> sid = reg.admit("switch", "leaf01", "PortXmitWait", {"port": "7"}, "counter")
>>> fab = PartitionFabric(FabricConfig(), interval_s=5.0)
>>> fab.register(reg.take_added(), reg.meta)
>>> fab.fold([fab.codes[sid]] * 3, [100.0, 101.0, 102.0], [0.0, 4.0, 10.0])
>>> fab.lineage = "0/1.0"
>>> [p["cum"] for p in orjson.loads(fab.publish(102.0)[0])["ports"]]
[{'c:xmit_wait': 10.0}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import orjson

from streams.fabric import DAY_S, FABRIC_LAYERS, EntityKey, FabricConfig, FabricRollup, counter_class
from streams.series import SeriesMetas, grow

#: The ``type`` of a ``fabric-rollup`` message.
RECORD_TYPE = "fabric_rollup"
#: A message holds at most this many ports, and at most this many transmit rates in all (a catch-up
#: can leave ``recent`` rates pending per port): messages stay well under the broker's record limit.
MAX_PORTS_PER_MESSAGE = 2000
MAX_RATES_PER_MESSAGE = 50_000


class PortSummary:
    """One port's state on the ingest side: what :meth:`FabricRollup.fold` keeps to make rates, the
    cumulative totals, and what changed since the last summary."""

    __slots__ = ("cum", "first", "inc", "last", "last_seen", "samples", "seq", "tx_bps", "tx_ts")

    def __init__(self) -> None:
        #: metric -> (ts, value) of its last sample
        self.last: dict[str, tuple[float, float]] = {}
        self.cum: dict[str, float] = {}
        self.inc: dict[str, float] = {}
        #: transmit rates made in the lineage (the sequence number of the next)
        self.seq = 0
        self.tx_ts: list[float] = []
        self.tx_bps: list[float] = []
        self.first: float | None = None
        self.last_seen: float | None = None
        self.samples = 0

    def count(self, key: str, delta: float, days_kept: int) -> None:
        """Add a counter's increase to a total (zero too: the total then exists, as in the raw fold)."""
        cum = self.cum
        if key in cum:
            cum[key] += delta
        else:
            cum[key] = delta
            if key[0] == "d":
                days = [k for k in cum if k[0] == "d"]
                if len(days) > days_kept:  # as the read side keeps them: the last days_kept days
                    oldest = min(days, key=lambda k: int(k[2:]))
                    del cum[oldest]
                    self.inc.pop(oldest, None)
                    if oldest == key:
                        return
        self.inc[key] = self.inc.get(key, 0.0) + delta


class PartitionFabric:
    """The fabric rollup of one input partition (module docstring). Pure: time is the samples' own."""

    def __init__(self, config: FabricConfig | None = None, interval_s: float = 5.0) -> None:
        self.config = config or FabricConfig()
        #: Event-time seconds between summaries.
        self.interval_s = interval_s
        #: Per series id: its index in :attr:`_series`, or -1 (not a NIC or switch sample).
        self.codes = np.full(0, -1, dtype=np.int32)
        #: (port, metric, category, kind or meaning, scale) of each fabric series, shared by equal ones
        self._series: list[tuple[EntityKey, str, str | None, str, float]] = []
        self._series_ids: dict[tuple[EntityKey, str, str | None, str, float], int] = {}
        self.ports: dict[EntityKey, PortSummary] = {}
        #: Ports with samples since the last summary.
        self.changed: set[EntityKey] = set()
        #: Where the lineage began (None: nothing folded yet); set by the stage from the first offset.
        self.lineage: str | None = None
        #: The event time of the last summary.
        self.published_at: float | None = None

    # -- folding ----------------------------------------------------------------------------------
    def register(self, sids: Iterable[int], metas: SeriesMetas) -> None:
        """Classify series ``sids`` (new, or ids reused for another series) once: fabric or not, which port."""
        for sid in sids:
            if sid >= self.codes.shape[0]:
                self.codes = grow(self.codes, max(sid + 1, 2 * self.codes.shape[0]), -1)
            meta = metas[sid]
            if meta.layer not in FABRIC_LAYERS:
                self.codes[sid] = -1
                continue
            port = FabricRollup.key(meta.layer, meta.source, meta.labels)
            what = (port, meta.metric, *counter_class(meta.metric, meta.info))
            code = self._series_ids.get(what)
            if code is None:
                code = self._series_ids[what] = len(self._series)
                self._series.append(what)
            self.codes[sid] = code

    def series(self, sid: int) -> tuple[EntityKey, str, str | None, str, float] | None:
        """What series ``sid`` is to the rollup: ``(port, metric, category, kind or meaning, scale)``, or
        None (not a NIC or switch sample)."""
        code = int(self.codes[sid]) if sid < self.codes.shape[0] else -1
        return self._series[code] if code >= 0 else None

    def fold(self, codes: Sequence[int], ts: Sequence[float], values: Sequence[float]) -> None:
        """Fold samples (series codes, times, values; in arrival order) as :meth:`FabricRollup.fold` would."""
        series, ports, changed = self._series, self.ports, self.changed
        recent, days_kept = self.config.recent, self.config.days_kept
        day_from, day_to, day_key = math.inf, -math.inf, ""  # the UTC day of the last error sample, and its key
        for code, t, value in zip(codes, ts, values, strict=True):
            port_key, metric, category, sub, scale = series[code]
            port = ports.get(port_key)
            if port is None:
                port = ports[port_key] = PortSummary()
            if port.samples == 0:
                changed.add(port_key)
                port.first = port.last_seen = t
            else:
                if t < port.first:  # type: ignore[operator]
                    port.first = t
                if t > port.last_seen:  # type: ignore[operator]
                    port.last_seen = t
            port.samples += 1
            if category is None:
                continue
            before = port.last.get(metric)
            if before is None or t > before[0]:
                port.last[metric] = (t, value)
            if before is None or t <= before[0] or value < before[1]:
                continue  # the first value, a duplicate or late sample, or a counter reset: no rate
            delta = value - before[1]
            if category == "tx":
                port.tx_ts.append(t)
                port.tx_bps.append(delta * scale / (t - before[0]))
                port.seq += 1
                if len(port.tx_ts) > recent:  # the read side keeps the last ``recent`` anyway
                    del port.tx_ts[0], port.tx_bps[0]
            else:  # the totals, the common case (the total exists) inline: this is per sample
                cum, inc = port.cum, port.inc
                key = ("c:" if category == "congestion" else "e:") + sub
                if key in cum:
                    cum[key] += delta
                    inc[key] = inc.get(key, 0.0) + delta
                else:
                    port.count(key, delta, days_kept)
                if category == "errors":
                    if not day_from <= t < day_to:
                        day = math.floor(t / DAY_S)
                        day_from, day_to, day_key = day * DAY_S, (day + 1) * DAY_S, f"d:{day}"
                    if day_key in cum:
                        cum[day_key] += delta
                        inc[day_key] = inc.get(day_key, 0.0) + delta
                    else:
                        port.count(day_key, delta, days_kept)

    # -- publishing -------------------------------------------------------------------------------
    def due(self, watermark: float | None) -> bool:
        """Whether summaries are due at the partition's event time ``watermark``."""
        if not self.changed or watermark is None:
            return False
        return self.published_at is None or watermark >= self.published_at + self.interval_s

    def publish(self, watermark: float | None, origin: str = "", force: bool = False) -> list[bytes]:
        """The changed ports' summaries as ``fabric-rollup`` messages, if due (or ``force``: the end of
        the input, an idle partition); the ports start a new interval."""
        if not self.changed or not (force or self.due(watermark)):
            return []
        if watermark is not None:
            self.published_at = watermark
        head = {"type": RECORD_TYPE, "origin": origin, "lineage": self.lineage or "", "through": watermark}
        out: list[bytes] = []
        batch: list[dict[str, Any]] = []
        rates = 0
        for key in sorted(self.changed):
            port = self.ports[key]
            rec: dict[str, Any] = {"key": list(key), "first": port.first, "last": port.last_seen,
                                   "samples": port.samples}
            if port.tx_ts:
                rec.update(seq=port.seq - len(port.tx_ts), tx_ts=port.tx_ts, tx_bps=port.tx_bps)
            if port.cum:
                rec["cum"] = port.cum
            if port.inc:
                rec["inc"] = port.inc
            batch.append(rec)
            rates += len(port.tx_ts)
            if len(batch) >= MAX_PORTS_PER_MESSAGE or rates >= MAX_RATES_PER_MESSAGE:
                out.append(orjson.dumps({**head, "ports": batch}))
                batch, rates = [], 0
            port.tx_ts, port.tx_bps, port.inc = [], [], {}
            port.first = port.last_seen = None
            port.samples = 0
        if batch:
            out.append(orjson.dumps({**head, "ports": batch}))
        self.changed = set()
        return out

    # -- state ------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The JSON-able state (the series codes are not in it: :meth:`register` rebuilds them)."""
        return {"lineage": self.lineage, "published_at": self.published_at,
                "ports": [[list(k), {m: list(v) for m, v in p.last.items()}, p.cum, p.inc, p.seq, p.tx_ts, p.tx_bps,
                           p.first, p.last_seen, p.samples] for k, p in self.ports.items()]}

    def restore(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`snapshot` gave (the series codes are kept)."""
        self.lineage = state.get("lineage")
        self.published_at = state.get("published_at")
        self.ports, self.changed = {}, set()
        for k, last, cum, inc, seq, tx_ts, tx_bps, first, last_seen, samples in state.get("ports", []):
            key: EntityKey = (k[0], k[1], k[2], k[3])
            p = self.ports[key] = PortSummary()
            p.last = {m: (float(v[0]), float(v[1])) for m, v in last.items()}
            p.cum, p.inc, p.seq = dict(cum), dict(inc), int(seq)
            p.tx_ts, p.tx_bps = list(tx_ts), list(tx_bps)
            p.first, p.last_seen, p.samples = first, last_seen, int(samples)
            if p.samples:
                self.changed.add(key)
