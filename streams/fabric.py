"""The six fabric questions, answered from data, per fabric (InfiniBand, RoCE) and per tier.

Two parts, both pure (no faust, no I/O, no clock: ``now`` is an argument):

- :class:`FabricRollup`: a small per-entity rollup of the NIC and switch-port counters (one entity
  per NIC port ``nic/<node>/<device>/<port>`` and per switch port ``switch/<switch>/<port>``),
  fed by the read model from the per-port summaries each input partition's ingest publishes
  (:meth:`FabricRollup.merge`, :mod:`streams.fabric_publish`), or sample by sample
  (:meth:`FabricRollup.fold`, :meth:`FabricRollup.fold_message`: the same entities). Per entity it
  keeps the last value of each counter (to turn counters into per-second rates), a ring of the last
  :attr:`FabricConfig.recent` transmit rates with their times, congestion and error totals, per-day
  error totals (the last :attr:`FabricConfig.days_kept` days) and when it was first and last heard
  from. Memory is O(entities): about 10 KB per entity at the default ring of 600 rates, at most
  :attr:`FabricConfig.max_entities` entities (new ones beyond are refused and counted).
- :func:`fabric_report`: the six answers over the rollup, the inventory index (links and their line
  rate, switches and tiers, jobs and nodes), the read store's job lanes (when collectives ran) and
  its alerts. docs/fabric.md says what each number is, how it is computed and what evidence comes
  with it.

Tiers: ``host`` (NIC ports), then the switch's tier from the inventory (``leaf``, ``spine``,
``core``; a switch the inventory does not know is ``unknown``). Fabric: a NIC's and a leaf
downlink's from their ``link`` event; an uplink port's, a spine's or a core's from the links below
them (the fabric most of their hosts are on).

>>> roll = FabricRollup()
>>> for t, words in ((100.0, 0.0), (101.0, 2.5e9), (102.0, 5.0e9)):
...     _ = roll.fold("switch", "leaf01", "PortXmitData", {"port": "15"}, t, words, "counter")
>>> e = roll.entities[("switch", "leaf01", "", "15")]
>>> [round(float(r) / 1e9, 1) for r in e.tx_rates()[1]]  # PortXmitData counts 4-byte words
[10.0, 10.0]
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from models.timeutil import format_ts, parse_ts
from streams.catalogue import Meaning, MetricInfo, lookup
from streams.ingest import decode_batch
from streams.inventory import InventoryIndex
from streams.lanes import LANE_ORDER

if TYPE_CHECKING:  # the read store holds a rollup: it imports this module
    from streams.readstore import ReadStore

#: The telemetry layers the rollup keeps.
FABRIC_LAYERS = ("nic", "switch")
#: Error meanings counted as loss and errors (question 3).
ERROR_MEANINGS = (Meaning.LINK_ERRORS, Meaning.DROPS, Meaning.RETRANSMITS, Meaning.LINK_DOWN)
#: Congestion kinds (question 2), told apart by the counter's name (see :func:`congestion_kind`).
CONGESTION_KINDS = ("xmit_wait", "ecn", "cnp", "pfc_pause", "other")
#: The six questions, in the order the report lists them.
QUESTIONS = ("bandwidth", "congestion", "loss", "telemetry", "placement", "diagnosability")
DAY_S = 86_400.0
#: Metric names whose classification is kept (names beyond it are looked up each time).
CLASS_CACHE = 4096

EntityKey = tuple[str, str, str, str]  # (layer, source, device, port); device is "" for a switch port


@dataclass(frozen=True, slots=True)
class FabricConfig:
    """Bounds and thresholds of the rollup and the report (docs/fabric.md)."""

    #: Transmit rates kept per entity (a ring; at 1 Hz, the last ten minutes).
    recent: int = 600
    #: At most this many entities; samples of new ones beyond are refused (counted).
    max_entities: int = 200_000
    #: Days of error totals kept per entity (for "trending worse over days").
    days_kept: int = 8
    #: A link at or above this share of its line rate is saturated.
    saturated: float = 0.9
    #: An entity not heard from for this long (event time) is silent.
    stale_s: float = 120.0
    #: An entity whose congestion rate is at least this many times its group's median is a hotspot.
    hotspot_ratio: float = 3.0
    #: Rows of evidence per list (the counts are always complete).
    top: int = 10


def congestion_kind(metric: str) -> str:
    """Which congestion signal a counter is.

    >>> [congestion_kind(m) for m in ("PortXmitWait", "np_ecn_marked_roce_packets", "np_cnp_sent",
    ...                               "rx_prio3_pause", "PortRcvBECN", "SWPortVLCongestion0")]
    ['xmit_wait', 'ecn', 'cnp', 'pfc_pause', 'ecn', 'other']
    """
    name = metric.lower()
    if "xmitwait" in name or "xmit_wait" in name:
        return "xmit_wait"
    if "pause" in name:
        return "pfc_pause"
    if "cnp" in name:
        return "cnp"
    if "ecn" in name:
        return "ecn"
    return "other"


def is_transmit_bytes(metric: str) -> bool:
    """True for a counter of bytes (or IB 4-byte words) a port sent: what utilisation is measured on.

    Per-priority byte counters are left out (they add up to the port's total, which is counted).

    >>> [is_transmit_bytes(m) for m in ("PortXmitData", "tx_bytes_phy", "port_data_transmitted_bytes_total",
    ...                                 "PortRcvData", "tx_prio3_bytes", "PortXmitPkts")]
    [True, True, True, False, False, False]
    """
    name = metric.lower()
    if "prio" in name:
        return False
    return "xmitdata" in name or "transmitted_bytes" in name or name.startswith("tx_bytes") or "_tx_bytes" in name


def counter_class(metric: str, info: MetricInfo) -> tuple[str | None, str, float]:
    """``(category, kind or meaning, scale)`` of a counter the report uses: ``tx`` (bytes sent),
    ``congestion``, ``errors``; ``(None, "", 1.0)`` for any other sample (it only says its exporter is alive).

    >>> counter_class("PortXmitData", lookup("PortXmitData")), counter_class("PortXmitWait", lookup("PortXmitWait"))
    (('tx', '', 4.0), ('congestion', 'xmit_wait', 1.0))
    """
    if info.counter and info.meaning is Meaning.THROUGHPUT and is_transmit_bytes(metric):
        return ("tx", "", info.scale)
    if info.counter and info.meaning is Meaning.CONGESTION:
        return ("congestion", congestion_kind(metric), 1.0)
    if info.counter and info.meaning in ERROR_MEANINGS:
        return ("errors", info.meaning.value, 1.0)
    return (None, "", 1.0)


class EntityRollup:
    """One NIC port's or switch port's counters (see the module docstring)."""

    __slots__ = ("congestion", "cum", "days", "errors", "first_seen", "last", "last_seen", "lineage", "n_rates",
                 "ring_bps", "ring_ts", "seq")

    def __init__(self, recent: int, ts: float) -> None:
        #: metric -> (ts, value) of its last sample
        self.last: dict[str, tuple[float, float]] = {}
        self.ring_ts = np.full(recent, np.nan, dtype=np.float64)
        self.ring_bps = np.full(recent, np.nan, dtype=np.float64)
        self.n_rates = 0
        self.congestion: dict[str, float] = {}
        self.errors: dict[str, float] = {}
        #: day number -> errors counted that day
        self.days: dict[int, float] = {}
        self.first_seen = ts
        self.last_seen = ts
        # Merged from published summaries (:meth:`FabricRollup.merge`): the ingest state they came from,
        # its cumulative totals as last merged and the sequence number of the next transmit rate.
        self.lineage: str | None = None
        self.cum: dict[str, float] = {}
        self.seq = 0

    def push_rate(self, ts: float, bps: float) -> None:
        """One transmit rate into the ring (the oldest goes once it is full)."""
        slot = self.n_rates % self.ring_ts.shape[0]
        self.ring_ts[slot] = ts
        self.ring_bps[slot] = bps
        self.n_rates += 1

    def add(self, key: str, delta: float, days_kept: int) -> None:
        """Add ``delta`` to a total named as in a summary: ``c:<kind>`` (congestion), ``e:<meaning>``
        (errors) or ``d:<day number>`` (errors that UTC day; the last ``days_kept`` days are kept)."""
        what, name = key[0], key[2:]
        if what == "c":
            self.congestion[name] = self.congestion.get(name, 0.0) + delta
        elif what == "e":
            self.errors[name] = self.errors.get(name, 0.0) + delta
        elif what == "d":
            day = int(name)
            self.days[day] = self.days.get(day, 0.0) + delta
            while len(self.days) > days_kept:
                del self.days[min(self.days)]

    def tx_rates(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ts, bytes per second)`` of the transmit rates held, oldest first."""
        held = min(self.n_rates, self.ring_ts.shape[0])
        if held < self.ring_ts.shape[0]:
            return self.ring_ts[:held], self.ring_bps[:held]
        start = self.n_rates % self.ring_ts.shape[0]
        order = np.r_[start:self.ring_ts.shape[0], 0:start]
        return self.ring_ts[order], self.ring_bps[order]

    @property
    def span_s(self) -> float:
        """Seconds between the first and the last sample (the time rates are over)."""
        return max(self.last_seen - self.first_seen, 0.0)


class FabricRollup:
    """The per-entity rollup (module docstring). Fold samples with :meth:`fold` or :meth:`fold_message`, or
    merge the summaries of :mod:`streams.fabric_publish` with :meth:`merge` or :meth:`merge_message`."""

    def __init__(self, config: FabricConfig | None = None) -> None:
        self.config = config or FabricConfig()
        self.entities: dict[EntityKey, EntityRollup] = {}
        #: Samples of new entities refused because :attr:`FabricConfig.max_entities` were held.
        self.refused = 0
        #: The latest event time of any sample folded.
        self.latest: float | None = None
        self._classes: dict[tuple[str, str | None], tuple[str | None, str, float]] = {}

    @staticmethod
    def key(layer: str, source: str, labels: dict[str, str]) -> EntityKey:
        """The entity a sample belongs to: ``(layer, source, device, port)``."""
        if layer == "switch":
            return (layer, source, "", labels.get("port", ""))
        return (layer, source, labels.get("device", ""), labels.get("port", ""))

    def fold_message(self, raw: bytes) -> int:
        """Fold one telemetry message (a sample, a batch or ``{"samples": [...]}``); the samples used.

        Bad records are skipped here: the ingest agent dead-letters them with their reason.
        """
        used = 0
        for s in decode_batch(raw).samples:
            if s.layer in FABRIC_LAYERS:
                used += self.fold(s.layer, s.source, s.metric, s.labels, s.ts, s.value, s.kind)
        return used

    def fold(self, layer: str, source: str, metric: str, labels: dict[str, str], ts: float, value: float,
             kind: str | None) -> bool:
        """Fold one sample; False if it is not a fabric counter the report uses (or was refused)."""
        if layer not in FABRIC_LAYERS:
            return False
        what = self._classes.get((metric, kind))
        if what is None:
            what = self._classify(metric, kind)
        category, sub, scale = what
        entity = self._touch(layer, source, labels, ts)
        if entity is None:
            return False
        if category is None:  # not a counter the report uses; it still says the exporter is alive (coverage)
            return True
        before = entity.last.get(metric)
        if before is None or ts > before[0]:
            entity.last[metric] = (ts, value)
        if before is None or ts <= before[0] or value < before[1]:
            return True  # the first value, a duplicate or late sample, or a counter reset: no rate
        delta, dt = value - before[1], ts - before[0]
        if category == "tx":
            entity.push_rate(ts, delta * scale / dt)
        elif category == "congestion":
            entity.congestion[sub] = entity.congestion.get(sub, 0.0) + delta
        else:
            entity.errors[sub] = entity.errors.get(sub, 0.0) + delta
            day = math.floor(ts / DAY_S)
            entity.days[day] = entity.days.get(day, 0.0) + delta
            while len(entity.days) > self.config.days_kept:
                del entity.days[min(entity.days)]
        return True

    def merge_message(self, raw: bytes) -> int:
        """Merge one ``fabric-rollup`` message (:mod:`streams.fabric_publish`); the samples it stands for
        (0 for a message that is not one: skipped)."""
        try:
            msg = orjson.loads(raw)
            lineage, ports = f"{msg['origin']}@{msg['lineage']}", msg["ports"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return 0
        used = 0
        for port in ports:
            try:
                used += self.merge(lineage, port)
            except (KeyError, TypeError, ValueError, IndexError):
                continue  # a port summary this version cannot read: the others still count
        return used

    def merge(self, lineage: str, port: dict[str, Any]) -> int:
        """Merge one port's summary from the ingest state ``lineage``; the samples it stands for (0: refused).

        The same samples folded here with :meth:`fold` and published as summaries give the same
        entity. A summary carries its port's cumulative totals since the lineage began (``cum``) and
        the sequence number of its first transmit rate (``seq``), so one published twice (a restored
        state publishing again what its previous owner had) adds nothing: only what the cumulative
        totals grew by is added, and only rates past the last sequence number merged are kept. The
        first summary of a lineage adds its own increments (``inc``) instead: what the port did before
        it (before this read model's start, or before an ingest state started afresh) is not counted.
        """
        key: EntityKey = (str(port["key"][0]), str(port["key"][1]), str(port["key"][2]), str(port["key"][3]))
        first, last, samples = float(port["first"]), float(port["last"]), int(port.get("samples", 1))
        entity = self.entities.get(key)
        if entity is None:
            if len(self.entities) >= self.config.max_entities:
                self.refused += samples
                return 0
            entity = self.entities[key] = EntityRollup(self.config.recent, first)
        entity.first_seen = min(entity.first_seen, first)
        entity.last_seen = max(entity.last_seen, last)
        if self.latest is None or last > self.latest:
            self.latest = last
        cum: dict[str, float] = port.get("cum") or {}
        tx_ts: list[float] = port.get("tx_ts") or []
        tx_bps: list[float] = port.get("tx_bps") or []
        seq = int(port.get("seq", 0))
        days_kept = self.config.days_kept
        if entity.lineage != lineage:
            entity.lineage = lineage
            entity.cum = dict(cum)
            entity.seq = seq + len(tx_ts)
            skip = 0
            for k, d in (port.get("inc") or {}).items():
                entity.add(k, float(d), days_kept)
        else:
            skip = max(entity.seq - seq, 0)
            entity.seq = max(entity.seq, seq + len(tx_ts))
            held = entity.cum
            for k, v in cum.items():
                was = held.get(k)
                if was is None or v > was:  # a total first seen (at zero too: it then exists), or grown
                    held[k] = v
                    entity.add(k, v - (was or 0.0), days_kept)
        for t, bps in zip(tx_ts[skip:], tx_bps[skip:], strict=True):
            entity.push_rate(t, bps)
        if len(entity.cum) > 2 * days_kept + 16:  # old days' cumulative totals: no summary adds to them again
            days = sorted((k for k in entity.cum if k.startswith("d:")), key=lambda k: int(k[2:]))
            for k in days[:max(len(days) - days_kept, 0)]:
                del entity.cum[k]
        return samples

    def _classify(self, metric: str, kind: str | None) -> tuple[str | None, str, float]:
        """:func:`counter_class` of a metric and kind, kept per name (at most :data:`CLASS_CACHE` names)."""
        what = counter_class(metric, lookup(metric, kind))
        if len(self._classes) < CLASS_CACHE:
            self._classes[(metric, kind)] = what
        return what

    def _touch(self, layer: str, source: str, labels: dict[str, str], ts: float) -> EntityRollup | None:
        key = self.key(layer, source, labels)
        entity = self.entities.get(key)
        if entity is None:
            if len(self.entities) >= self.config.max_entities:
                self.refused += 1
                return None
            entity = self.entities[key] = EntityRollup(self.config.recent, ts)
        entity.first_seen = min(entity.first_seen, ts)
        entity.last_seen = max(entity.last_seen, ts)
        if self.latest is None or ts > self.latest:
            self.latest = ts
        return entity


# -- the report -----------------------------------------------------------------------------------

@dataclass(slots=True)
class _Place:
    """Where an entity sits: its fabric, tier, name in the report, line rate and the nodes behind it."""

    fabric: str
    tier: str
    name: str
    speed_gbps: float | None
    nodes: list[str] = field(default_factory=list)
    role: str = "host"


def _majority(values: list[str]) -> str:
    return Counter(values).most_common(1)[0][0] if values else "unknown"


def _switch_fabrics(inv: InventoryIndex) -> dict[str, str]:
    """Each switch's fabric: the fabric most of the hosts below it are on."""
    below: dict[str, list[str]] = defaultdict(list)
    for link in inv.links.values():
        below[link.switch].append(link.fabric)
    out = {sw: _majority(f) for sw, f in below.items()}
    for _ in range(2):  # leaf -> spine -> core
        up: dict[str, list[str]] = defaultdict(list)
        for sw, ups in inv.uplinks.items():
            for u in ups:
                up[u] += below.get(sw, [out[sw]] if sw in out else [])
        for sw, f in up.items():
            below.setdefault(sw, f)
            out.setdefault(sw, _majority(f))
    return out


def _place(key: EntityKey, inv: InventoryIndex, switch_fabric: dict[str, str]) -> _Place:
    layer, source, device, port = key
    if layer == "nic":
        link = inv.links.get((source, device, port))
        return _Place(link.fabric if link else "unknown", "host", f"{source} {device} port {port}",
                      link.speed_gbps if link else None, [source])
    name = f"{source} port {port}"
    tier = inv.tiers.get(source, "unknown")
    behind = sorted(inv.by_switch_port.get((source, port), ()))
    if behind:
        link = inv.links[behind[0]]
        return _Place(link.fabric, tier, name, link.speed_gbps, sorted({b[0] for b in behind}), "downlink")
    described = inv.switch_port(source, port)
    return _Place(switch_fabric.get(source, "unknown"), tier, name, described.speed_gbps if described else None,
                  inv.nodes_behind_link(source, port), "uplink")


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def _collective_seconds(store: ReadStore, inv: InventoryIndex, nodes: list[str], secs: np.ndarray) -> dict[str, int]:
    """For each job on ``nodes``: how many of the seconds ``secs`` its collectives ran (its
    ``collective_time`` lane holds a value for that second)."""
    out: dict[str, int] = {}
    lane, count = LANE_ORDER.index("collective_time"), 0  # field 0 of a lane-second is its count
    jobs = {j for n in nodes for j in inv.jobs_on_node(n, None)}
    for job in sorted(jobs):
        ring = store.lanes.get(job)
        if ring is None or not secs.size:
            continue
        slots = secs % ring.capacity
        held = (ring.secs[slots] == secs) & (ring.data[slots, lane, count] > 0)
        if held.any():
            out[job] = int(held.sum())
    return out


def _group(fabric: str, tier: str, value: Any, unit: str, evidence: list[dict[str, Any]],
           **extra: Any) -> dict[str, Any]:
    return {"fabric": fabric, "tier": tier, "value": value, "unit": unit, **extra, "evidence": evidence}


def fabric_report(rollup: FabricRollup, inv: InventoryIndex, store: ReadStore, now: float) -> dict[str, Any]:
    """The six questions (docs/fabric.md), each a list of ``groups`` (one per fabric and tier), each
    group with its ``value`` (the headline number, None when the data cannot say), its ``unit``, the
    figures behind it and its ``evidence`` (the links, jobs or incidents that make the number).
    ``now`` is the event time the answer is for (ages and silence are measured from it)."""
    cfg = rollup.config
    switch_fabric = _switch_fabrics(inv)
    places = {k: _place(k, inv, switch_fabric) for k in rollup.entities}
    groups: dict[tuple[str, str], list[EntityKey]] = defaultdict(list)
    for k, p in places.items():
        groups[(p.fabric, p.tier)].append(k)
    order = sorted(groups)
    report = {
        "now": now, "now_iso": format_ts(now),
        "entities": len(rollup.entities), "refused": rollup.refused,
        "config": {"saturated": cfg.saturated, "stale_s": cfg.stale_s, "hotspot_ratio": cfg.hotspot_ratio,
                   "recent": cfg.recent, "days_kept": cfg.days_kept},
        "fabrics": sorted({f for f, _ in groups} | {link.fabric for link in inv.links.values()}),
        "questions": {
            "bandwidth": _bandwidth(rollup, inv, store, places, groups, order),
            "congestion": _congestion(rollup, places, groups, order),
            "loss": _loss(rollup, places, groups, order),
            "telemetry": _telemetry(rollup, inv, places, switch_fabric, now),
            "placement": _placement(inv, now),
            "diagnosability": _diagnosability(store, inv, switch_fabric),
        },
    }
    return report


def _bandwidth(rollup: FabricRollup, inv: InventoryIndex, store: ReadStore, places: dict[EntityKey, _Place],
               groups: dict[tuple[str, str], list[EntityKey]], order: list[tuple[str, str]]) -> dict[str, Any]:
    cfg = rollup.config
    out = []
    for g in order:
        utils: list[np.ndarray] = []
        gbps: list[np.ndarray] = []
        links: list[dict[str, Any]] = []
        saturating: list[dict[str, Any]] = []
        unrated: list[dict[str, Any]] = []
        no_speed = 0
        for k in groups[g]:
            p, e = places[k], rollup.entities[k]
            ts, bps = e.tx_rates()
            if not bps.size:
                continue
            g_rate = bps * 8 / 1e9
            gbps.append(g_rate)
            if p.speed_gbps is None:
                no_speed += 1
                unrated.append({"link": p.name, "speed_gbps": None, "p50": None, "p99": None,
                                "gbps_p99": _r(_pct(g_rate, 99), 2)})
                continue
            u = g_rate / p.speed_gbps
            utils.append(u)
            row = {"link": p.name, "speed_gbps": p.speed_gbps, "p50": _r(_pct(u, 50)), "p99": _r(_pct(u, 99)),
                   "gbps_p99": _r(_pct(g_rate, 99), 2)}
            links.append(row)
            hot = np.floor(ts[u >= cfg.saturated]).astype(np.int64)
            if hot.size:
                during = _collective_seconds(store, inv, p.nodes, hot)
                if during:
                    saturating.append({**row, "seconds_saturated": int(hot.size), "during_collectives": during})
        u_all = np.concatenate(utils) if utils else np.empty(0)
        g_all = np.concatenate(gbps) if gbps else np.empty(0)
        links.sort(key=lambda r: (-(r["p99"] or 0.0), r["link"]))
        saturating.sort(key=lambda r: (-r["seconds_saturated"], r["link"]))
        unrated.sort(key=lambda r: (-(r["gbps_p99"] or 0.0), r["link"]))
        named = {r["link"] for r in saturating}  # (a saturating link's row has more keys than its plain one)
        evidence = saturating + [r for r in links if r["link"] not in named] + unrated
        out.append(_group(g[0], g[1], _r(_pct(u_all, 99)), "share of line rate", evidence[:cfg.top],
                          p50=_r(_pct(u_all, 50)), p99=_r(_pct(u_all, 99)),
                          throughput_gbps_p50=_r(_pct(g_all, 50), 2), throughput_gbps_p99=_r(_pct(g_all, 99), 2),
                          links_measured=len(gbps), links_without_line_rate=no_speed,
                          links_saturating_in_collectives=len(saturating)))
    return {"question": "can the fabric deliver the bandwidth the workload needs?",
            "value_is": "p99 of transmit utilisation (rate / line rate) over every link and sample", "groups": out}


def _rate_of(entities: list[EntityRollup], attr: str) -> dict[str, float]:
    span = sum(e.span_s for e in entities)
    totals: dict[str, float] = defaultdict(float)
    for e in entities:
        for k, v in getattr(e, attr).items():
            totals[k] += v
    return {k: v / span for k, v in sorted(totals.items())} if span > 0 else {}


def _congestion(rollup: FabricRollup, places: dict[EntityKey, _Place],
                groups: dict[tuple[str, str], list[EntityKey]], order: list[tuple[str, str]]) -> dict[str, Any]:
    cfg = rollup.config
    out = []
    for g in order:
        ents = [rollup.entities[k] for k in groups[g]]
        rates = _rate_of(ents, "congestion")
        per = [(k, sum(rollup.entities[k].congestion.values()) / rollup.entities[k].span_s)
               for k in groups[g] if rollup.entities[k].span_s > 0 and rollup.entities[k].congestion]
        median = float(np.median([r for _, r in per])) if per else 0.0
        rows: list[dict[str, Any]] = [
            {"link": places[k].name, "per_s": _r(r, 3), "x_median": _r(r / median, 2) if median > 0 else None,
                 "hotspot": r > 0 and (median == 0 or r >= cfg.hotspot_ratio * median),
                 "by_kind": {c: _r(v / rollup.entities[k].span_s, 3)
                             for c, v in sorted(rollup.entities[k].congestion.items())},
                 "nodes_behind": len(places[k].nodes)} for k, r in per]
        rows.sort(key=lambda h: (-h["per_s"], h["link"]))
        hot = [h for h in rows if h["hotspot"]]
        out.append(_group(g[0], g[1], _r(sum(rates.values()), 3) if per else None, "congestion events per port-second",
                          (hot or rows)[:cfg.top], by_kind={k: _r(v, 3) for k, v in rates.items()},
                          ports_reporting_congestion=len(per), median_per_port=_r(median, 3), hotspots=len(hot)))
    return {"question": "does the fabric control congestion?",
            "value_is": "XmitWait ticks, ECN marks, CNPs and PFC pauses per port-second (all kinds summed)",
            "groups": out}


def trending_worse(days: dict[int, float]) -> list[float] | None:
    """The daily error counts if they trend worse: at least two days, never falling from one day to
    the next, and the last at least twice the first (and above zero); else None.

    >>> trending_worse({1: 2, 2: 5, 3: 9}), trending_worse({1: 2, 2: 1, 3: 9}), trending_worse({1: 4})
    ([2, 5, 9], None, None)
    """
    if len(days) < 2:
        return None
    series = [days[d] for d in sorted(days)]
    if all(b >= a for a, b in itertools.pairwise(series)) and series[-1] > 0 and series[-1] >= 2 * series[0]:
        return series
    return None


def _loss(rollup: FabricRollup, places: dict[EntityKey, _Place],
          groups: dict[tuple[str, str], list[EntityKey]], order: list[tuple[str, str]]) -> dict[str, Any]:
    cfg = rollup.config
    out = []
    for g in order:
        ents = [rollup.entities[k] for k in groups[g]]
        rates = _rate_of(ents, "errors")
        erring = [(k, sum(rollup.entities[k].errors.values()) / rollup.entities[k].span_s) for k in groups[g]
                  if rollup.entities[k].span_s > 0 and sum(rollup.entities[k].errors.values()) > 0]
        erring.sort(key=lambda x: (-x[1], places[x[0]].name))
        trending = []
        for k in groups[g]:
            series = trending_worse(rollup.entities[k].days)
            if series is not None:
                days = sorted(rollup.entities[k].days)
                trending.append({"link": places[k].name, "trend": "worse",
                                 "daily": [{"day": format_ts(d * DAY_S)[:10], "errors": v}
                                           for d, v in zip(days, series, strict=True)]})
        evidence = [{"link": places[k].name, "errors_per_s": _r(r, 4),
                     "by_meaning": {m: v for m, v in sorted(rollup.entities[k].errors.items())},
                     "nodes_behind": len(places[k].nodes)} for k, r in erring[:cfg.top]]
        have = any(e.span_s > 0 for e in ents)
        out.append(_group(g[0], g[1], _r(sum(rates.values()), 6) if have else None, "errors per port-second",
                          evidence + trending[:cfg.top], by_meaning={k: _r(v, 6) for k, v in rates.items()},
                          ports_with_errors=len(erring), ports=len(ents), trending_worse=len(trending)))
    return {"question": "does the fabric avoid or recover from loss as the deployment expects?",
            "value_is": "link errors, drops, retransmits and link downs per port-second", "groups": out}


def _telemetry(rollup: FabricRollup, inv: InventoryIndex, places: dict[EntityKey, _Place],
               switch_fabric: dict[str, str], now: float) -> dict[str, Any]:
    cfg = rollup.config
    expected: dict[tuple[str, str], set[EntityKey]] = defaultdict(set)
    for (node, device, port), link in inv.links.items():
        expected[(link.fabric, "host")].add(("nic", node, device, port))
    for (switch, port), behind in inv.by_switch_port.items():
        if behind:
            link = inv.links[min(behind)]
            expected[(link.fabric, inv.tiers.get(switch, "leaf"))].add(("switch", switch, "", port))
    seen: dict[tuple[str, str], set[EntityKey]] = defaultdict(set)
    for k, p in places.items():
        seen[(p.fabric, p.tier)].add(k)
    # Spines and cores: no link event names their ports, so they are counted per switch (any port heard).
    switches: dict[tuple[str, str], set[str]] = defaultdict(set)
    for sw, tier in inv.tiers.items():
        if tier not in ("host", "leaf"):
            switches[(switch_fabric.get(sw, "unknown"), tier)].add(sw)
    out = []
    for g in sorted(set(expected) | set(seen) | set(switches)):
        exp, got = expected.get(g, set()), seen.get(g, set())
        fresh = {k for k in got if now - rollup.entities[k].last_seen <= cfg.stale_s}
        ages = np.array([max(now - rollup.entities[k].last_seen, 0.0) for k in got])
        by_source: dict[str, list[EntityKey]] = defaultdict(list)
        for k in exp | got:
            by_source[k[1]].append(k)
        for sw in switches.get(g, ()):
            by_source.setdefault(sw, [])
        silent = sorted(s for s, ks in by_source.items() if not any(k in fresh for k in ks))
        evidence = [{"silent_exporter": s, "last_seen_age_s": _age(rollup, by_source.get(s, []), now)}
                    for s in silent[:cfg.top]]
        evidence += [{"not_reporting": _name(k), "last_seen_age_s": _age(rollup, [k], now)}
                     for k in sorted(exp - fresh)[:cfg.top]]
        if not evidence:  # all reporting: the stalest, so the age figures have their names
            stalest = sorted(got, key=lambda k: (rollup.entities[k].last_seen, k))[:cfg.top]
            evidence = [{"reporting": _name(k), "last_seen_age_s": _age(rollup, [k], now)} for k in stalest]
        figures = {"last_seen_age_s_p50": _r(_pct(ages, 50), 1), "last_seen_age_s_max": _r(_pct(ages, 100), 1),
                   "silent_exporters": len(silent), "silent": silent[:50]}
        if g in switches:
            named = switches[g] | {k[1] for k in got}
            up = {k[1] for k in fresh}
            out.append(_group(g[0], g[1], _r(len(up) / len(named)), "share of the tier's switches reporting",
                              evidence, expected=len(named), reporting=len(up), not_in_inventory=None, **figures))
            continue
        share = len(fresh & exp) / len(exp) if exp else (len(fresh) / len(got) if got else None)
        out.append(_group(g[0], g[1], _r(share), "share of expected ports reporting", evidence,
                          expected=len(exp) if exp else len(got), reporting=len(fresh & exp) if exp else len(fresh),
                          not_in_inventory=len(got - exp) if exp else None, **figures))
    return {"question": "do operators see the NIC and switch telemetry that matters?",
            "value_is": f"share of the inventory's NIC and switch ports heard from in the last {cfg.stale_s:g} s",
            "groups": out}


def _name(k: EntityKey) -> str:
    layer, source, device, port = k
    return f"{source} {device} port {port}" if layer == "nic" else f"{source} port {port}"


def _age(rollup: FabricRollup, keys: list[EntityKey], now: float) -> float | None:
    seen = [rollup.entities[k].last_seen for k in keys if k in rollup.entities]
    return _r(now - max(seen), 1) if seen else None


def least_groups(sizes: list[int], need: int) -> int:
    """The fewest groups (leaves, spine groups) of the given node capacities that hold ``need`` nodes.

    >>> least_groups([8, 8, 8, 4], 20), least_groups([8, 8], 8), least_groups([4], 9)
    (3, 1, 1)
    """
    if need <= 0 or not sizes:
        return 0 if need <= 0 else 1
    total = 0
    for i, size in enumerate(sorted(sizes, reverse=True), start=1):
        total += size
        if total >= need:
            return i
    return len(sizes)


def _placement(inv: InventoryIndex, now: float) -> dict[str, Any]:
    leaf_nodes: dict[str, set[str]] = defaultdict(set)
    node_fabric: dict[str, list[str]] = defaultdict(list)
    for link in inv.links.values():
        leaf_nodes[link.switch].add(link.node)
        node_fabric[link.node].append(link.fabric)
    # A spine group: the leaves that share one set of uplinks (traffic between them stays below those spines).
    group_of = {leaf: ",".join(sorted(inv.uplinks.get(leaf, ()))) or leaf for leaf in leaf_nodes}
    group_nodes: dict[str, set[str]] = defaultdict(set)
    for leaf, cabled in leaf_nodes.items():
        group_nodes[group_of[leaf]] |= cabled
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for info in inv.active_jobs(now):
        placed = [n for n in info.nodes if n in node_fabric]
        if not placed:
            continue
        fabric = _majority([f for n in placed for f in node_fabric[n]])
        leaves = inv.leaves_of(placed)
        spine_groups = {group_of[leaf] for leaf in leaves if leaf in group_of}
        least_leaves = least_groups([len(v) for v in leaf_nodes.values()], len(placed))
        least_spine = least_groups([len(v) for v in group_nodes.values()], len(placed))
        rows[fabric].append({"job_id": info.job_id, "nodes": len(placed), "gpus": info.gpus,
                             "leaves": len(leaves), "least_leaves": least_leaves,
                             "spine_groups": len(spine_groups), "least_spine_groups": least_spine,
                             "extra_leaves": len(leaves) - least_leaves,
                             "leaf_names": sorted(leaves)[:16]})
    out = []
    for fabric in sorted(rows):
        jobs = sorted(rows[fabric], key=lambda r: (-r["extra_leaves"], -r["nodes"], r["job_id"]))
        for tier, have, least in (("leaf", "leaves", "least_leaves"), ("spine", "spine_groups", "least_spine_groups")):
            at_least = sum(1 for r in jobs if r[have] <= r[least])
            out.append(_group(fabric, tier, _r(at_least / len(jobs)),
                              f"share of jobs on the fewest {have} their size allows", jobs, jobs=len(jobs),
                              at_least=at_least,
                              mean_excess=_r(sum(r[have] - r[least] for r in jobs) / len(jobs), 2)))
    return {"question": "can the topology support the scheduler's placement?",
            "value_is": "share of running jobs whose leaf (spine-group) spread is the least their node count allows",
            "groups": out}


def _mover(cause: dict[str, Any]) -> str:
    """``switch leaf03 port 17``, ``nic gpu014``: the first mover as the report names it."""
    port = (cause.get("labels") or {}).get("port") if cause.get("layer") == "switch" else None
    return f"{cause.get('layer')} {cause.get('source')}" + (f" port {port}" if port else "")


def _diagnosability(store: ReadStore, inv: InventoryIndex, switch_fabric: dict[str, str]) -> dict[str, Any]:
    node_fabric: dict[str, str] = {}
    for link in inv.links.values():
        node_fabric.setdefault(link.node, link.fabric)
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in store.alerts.values():
        a = entry.firing or entry.latest
        if a.get("type") != "job_slowdown":
            continue
        try:
            onset, detected = parse_ts(a["started_at"]), parse_ts(a["detected_at"])
        except (KeyError, TypeError, ValueError):
            continue
        cause = a.get("root_cause") or {}
        has_cause = bool(cause.get("source")) and cause.get("domain") not in (None, "unknown")
        nodes = [n for n in a.get("nodes") or [] if n in node_fabric]
        if cause.get("layer") == "switch" and cause.get("source") in switch_fabric:
            fabric = switch_fabric[str(cause["source"])]
        else:
            fabric = _majority([node_fabric[n] for n in nodes])
        first_seen = cause.get("first_seen")
        lead = None
        if first_seen:
            try:
                lead = _r(onset - parse_ts(first_seen), 3)
            except (TypeError, ValueError):
                lead = None
        if cause.get("layer") == "nic":
            tier = "host"
        elif cause.get("layer") == "switch":
            tier = inv.tiers.get(str(cause.get("source")), "unknown")
        else:
            tier = None
        rows[fabric].append({"alert_id": entry.alert_id, "first_mover_tier": tier, "job_id": a.get("job_id"),
                             "started_at": a["started_at"],
                             "detected_at": a["detected_at"], "onset_to_alert_s": _r(detected - onset, 3),
                             "first_mover": _mover(cause) if has_cause else None,
                             "domain": cause.get("domain"), "first_mover_lead_s": lead})
    out = []
    for fabric in sorted(rows):
        every = sorted(rows[fabric], key=lambda r: (r["started_at"], r["alert_id"]))
        tiers = sorted({r["first_mover_tier"] for r in every if r["first_mover_tier"]})
        # Every incident of the fabric, then those whose first mover is on each fabric tier.
        for tier, inc in (("all", every), *((t, [r for r in every if r["first_mover_tier"] == t]) for t in tiers)):
            delays = np.array([r["onset_to_alert_s"] for r in inc], dtype=np.float64)
            named = sum(1 for r in inc if r["first_mover"])
            out.append(_group(fabric, tier, _r(_pct(delays, 50), 3), "seconds from slowdown onset to alert", inc[:50],
                              incidents=len(inc), named_first_mover=named, share_named=_r(named / len(inc))))
    return {"question": "can the team diagnose the fabric during a training slowdown?",
            "value_is": "median event-time seconds from slowdown onset to the alert; share_named: incidents "
                        "whose alert names a first mover", "groups": out}
