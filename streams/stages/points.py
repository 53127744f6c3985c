"""``points``: each job's own signals (the series with a lane, :mod:`streams.lanes`) to its correlation side.

Grouped by (candidate job set, lane) with array operations, then per job by exact event time
(``out.points``); for the peer-compared lanes also with each value's worker (``out.workers``), for
straggler detection. A series' candidate jobs are cached per series until the inventory changes;
a sample counts for a job only while the job runs at the sample's time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from streams.catalogue import MetricInfo, Mode
from streams.lanes import LANE_METRICS, LANES, PEER_LANES
from streams.stages.base import Batch

#: Lane names (see :mod:`streams.lanes`) and their codes in the per-series lane array.
LANE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(LANES.values()))
LANE_CODE = {(layer, meaning): LANE_NAMES.index(lane) for (layer, meaning), lane in LANES.items()}
PEER_CODES = frozenset(LANE_NAMES.index(lane) for lane in PEER_LANES)


def lane_code(layer: str, metric: str, info: MetricInfo) -> int:
    """The lane code of a series (-1: not forwarded). A series feeds the lane of its (layer, meaning)
    unless it is context (another quantity of that meaning, or the raw counter behind a derived one:
    kept in percentiles, never in a job's lanes) or the lane names its metrics
    (:data:`streams.lanes.LANE_METRICS`) and this is not one of them.

    >>> from streams.catalogue import CATALOGUE
    >>> [lane_code("gpu", m, CATALOGUE[m]) >= 0 for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE",
    ...                                                 "DCGM_FI_DEV_POWER_USAGE")]
    [True, False, False]
    """
    code = LANE_CODE.get((layer, info.meaning.value), -1)
    if code < 0 or info.mode is Mode.CONTEXT:
        return -1
    allowed = LANE_METRICS.get(LANE_NAMES[code])
    return code if allowed is None or metric in allowed else -1


def by_time(t: np.ndarray, v: np.ndarray, sids: np.ndarray | None,
            names: Mapping[int, str]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Values grouped by their exact event time: ``[[ts, [value, ...]], ...]`` in time order, and with
    ``sids`` the same groups with each value's worker: ``[[ts, [value, ...], [worker, ...]], ...]``.

    A scrape's samples share one timestamp, so a points record carries it once per group.

    >>> by_time(np.array([5.0, 4.0, 5.0]), np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]), ["a", "b", "c"])
    ([[4.0, [2.0]], [5.0, [1.0, 3.0]]], [[4.0, [2.0], ['b']], [5.0, [1.0, 3.0], ['a', 'c']]])
    """
    if t[0] == t[-1] and (t == t[0]).all():
        cuts: list[int] = []  # the common case (one scrape): no sort
    else:
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        sids = sids[order] if sids is not None else None
        cuts = (np.flatnonzero(t[1:] != t[:-1]) + 1).tolist()
    bounds = list(zip([0, *cuts], [*cuts, int(t.size)], strict=True))
    vl = v.tolist()
    groups = [[float(t[a]), vl[a:b]] for a, b in bounds]
    if sids is None:
        return groups, []
    wl = [names[i] for i in sids.tolist()]
    return groups, [[float(t[a]), vl[a:b], wl[a:b]] for a, b in bounds]


class Points:
    name = "points"

    def run(self, batch: Batch) -> None:
        rounds = batch.rounds
        if len(rounds) == 1:
            self._round(batch, rounds[0].ids, rounds[0].ts, rounds[0].x)
        elif rounds:
            # Every round at once (a backlog batch holds dozens of scrapes of a few series each): the groups
            # are by event time, so they do not depend on how the samples were cut into rounds.
            self._round(batch, np.concatenate([r.ids for r in rounds]), np.concatenate([r.ts for r in rounds]),
                        np.concatenate([r.x for r in rounds]))

    def _round(self, batch: Batch, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> None:
        part, out = batch.part, batch.out
        lane = part._lane[ids]
        sel = np.flatnonzero(lane >= 0)
        if sel.size == 0:
            return
        sids = ids[sel]
        # (int32 a series: the version modulo 2**31; a stale job set taken for fresh would need exactly a
        # multiple of 2**31 inventory changes since the series was last looked at)
        version = part.inventory.version % 2**31
        stale = part._jobset_version[sids] != version
        if stale.any():
            for sid in np.unique(sids[stale]).tolist():
                part._jobset[sid] = part.jobset_of(sid)
                part._jobset_version[sid] = version
        js = part._jobset[sids].astype(np.int64)
        mapped = js >= 0
        if not mapped.all():
            sel, js = sel[mapped], js[mapped]
            if sel.size == 0:
                return
        group = js * 64 + lane[sel]
        order = np.argsort(group, kind="stable")
        sel, group = sel[order], group[order]
        bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), int(sel.size)]
        # One scrape (the common case): every row at one time, so a group is one time and its values, and a
        # job runs at that time or not (no masks, no grouping by time).
        t0 = float(ts[0]) if ts[0] == ts[-1] and (ts == ts[0]).all() else None
        for a, b in zip(starts, ends, strict=True):
            if t0 is not None:
                self._at_one_time(part, out, t0, int(group[a]), sel[a:b], ids, x)
            else:
                self._at_times(part, out, ts, int(group[a]), sel[a:b], ids, x)

    @staticmethod
    def _at_times(part: Any, out: Any, ts: np.ndarray, g: int, rows: np.ndarray, ids: np.ndarray,
                  x: np.ndarray) -> None:
        """:meth:`_round`'s work for one (job set, lane) group (``g``) of a round: the values of ``rows``
        grouped by time (:func:`by_time`), for each job of the set at the times it runs."""
        names = part._worker
        t = ts[rows]
        v = x[rows]
        lane_name = LANE_NAMES[g % 64]
        peer = g % 64 in PEER_CODES
        whole: tuple[list[list[Any]], list[list[Any]]] | None = None
        for job in part._jobsets[g // 64]:
            active = part.active(job, t)
            if active.all():
                if whole is None:
                    whole = by_time(t, v, ids[rows] if peer else None, names)
                groups, wgroups = whole
            elif active.any():
                groups, wgroups = by_time(t[active], v[active], ids[rows[active]] if peer else None, names)
            else:
                continue
            _add(out, job, lane_name, groups, wgroups if peer else None)

    @staticmethod
    def _at_one_time(part: Any, out: Any, t0: float, g: int, rows: np.ndarray, ids: np.ndarray, x: np.ndarray) -> None:
        """:meth:`_at_times` for a round whose rows are all at time ``t0``: the same groups, without the
        masks and the grouping by time."""
        lane_name = LANE_NAMES[g % 64]
        peer = g % 64 in PEER_CODES
        whole: tuple[list[list[Any]], list[list[Any]]] | None = None
        for job in part._jobsets[g // 64]:
            if not part.active_at(job, t0):
                continue
            if whole is None:
                vl = x[rows].tolist()
                whole = ([[t0, vl]], [[t0, list(vl), [part._worker[i] for i in ids[rows].tolist()]]] if peer else [])
            _add(out, job, lane_name, whole[0], whole[1] if peer else None)


def _add(out: Any, job: str, lane_name: str, groups: list[list[Any]], wgroups: list[list[Any]] | None) -> None:
    """A job's groups of one lane into the batch's points (and, for a peer-compared lane, its groups with
    each value's worker into ``out.workers``)."""
    lanes = out.points.get(job)
    if lanes is None:
        lanes = out.points[job] = {}
    have = lanes.get(lane_name)
    if have is None:
        lanes[lane_name] = list(groups)
    else:
        have.extend(groups)
    if wgroups is not None:
        out.workers.setdefault(job, {}).setdefault(lane_name, []).extend(wgroups)
