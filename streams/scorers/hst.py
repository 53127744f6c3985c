"""river's HalfSpaceTrees over a multivariate vector per entity, calibrated to ``[0, 1)``.

For an entity whose signals only look wrong *together* (a node whose GPU utilisation is normal,
NIC throughput is normal, but not in that combination), one model per entity sees the whole vector:
``river.preprocessing.MinMaxScaler`` then ``river.anomaly.HalfSpaceTrees`` (seeded per entity from
``seed`` and the entity id, so the same seed gives the same scores).

HalfSpaceTrees' raw score is not comparable across entities, so it is calibrated against the
entity's own recent raw scores (a ring of ``history`` values): ``z = (raw - median) / (1.4826 MAD)``
and ``score = z / (z + z_threshold)`` (the same map as the robust scorer: ``z_threshold`` robust
z-scores above the entity's usual raw score read 0.5, the documented ``threshold``). Scores are 0
until an entity has seen ``min_samples`` rows. Per-row Python (river learns one sample at a time):
meant for hundreds of entities, not the per-series hot path.

>>> s = HalfSpaceTreesScorer(HSTConfig(n_trees=5, height=6, window_size=50, min_samples=60), dim=2)
>>> s.register(0)
>>> rng = np.random.default_rng(3)
>>> for t in range(300):
...     _ = s.update(np.array([0]), np.array([float(t)]), rng.normal(0.5, 0.05, (1, 2)))
>>> normal = s.update(np.array([0]), np.array([300.0]), np.array([[0.5, 0.5]]))
>>> odd = s.update(np.array([0]), np.array([301.0]), np.array([[0.95, 0.05]]))
>>> bool(odd[0] > normal[0])
True
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
from river import anomaly, compose, preprocessing

from streams.scorers.robust import calibrate
from streams.series import Rows, take_rows


@dataclass(frozen=True, slots=True)
class HSTConfig:
    n_trees: int = 10
    height: int = 8
    window_size: int = 250
    seed: int = 42
    history: int = 256
    min_samples: int = 100
    z_threshold: float = 6.0
    threshold: float = 0.5


class HalfSpaceTreesScorer:
    """One HalfSpaceTrees model per entity id over ``dim`` features."""

    def __init__(self, config: HSTConfig | None = None, dim: int = 1) -> None:
        self.config = config or HSTConfig()
        self.threshold = self.config.threshold
        self.dim = dim
        self.models: list[Any] = []
        self.hist = np.zeros((0, self.config.history))
        self.count = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.models)

    def _model(self, sid: int) -> Any:
        cfg = self.config
        return compose.Pipeline(
            preprocessing.MinMaxScaler(),
            anomaly.HalfSpaceTrees(n_trees=cfg.n_trees, height=cfg.height, window_size=cfg.window_size,
                                   seed=cfg.seed * 1_000_003 + sid),
        )

    def register(self, sid: int, direction: int = 0) -> None:
        """Declare entity ``sid`` (dense ids). ``direction`` is accepted for the series contract and not
        used: a half-space tree finds a row unusual in any direction."""
        while len(self.models) <= sid:
            self.models.append(self._model(len(self.models)))
        if self.hist.shape[0] < len(self.models):
            extra = len(self.models) - self.hist.shape[0]
            self.hist = np.vstack([self.hist, np.zeros((extra, self.config.history))])
            self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])

    def clear(self, ids: np.ndarray) -> None:
        """Forget entities ``ids`` (reused ids start from a new model, as :meth:`register` makes one)."""
        for sid in ids.tolist():
            if sid < len(self.models):
                self.models[sid] = self._model(sid)
                self.hist[sid] = 0.0
                self.count[sid] = 0

    def evaluate(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> HSTScores:
        """Score rows ``x`` of entities ``ids`` without learning (the raw scores go to :meth:`learn`)."""
        cfg = self.config
        x = np.asarray(x, dtype=np.float64).reshape(ids.shape[0], self.dim)
        score = np.zeros(ids.shape[0])
        raw = np.zeros(ids.shape[0])
        rows = []
        for k, sid in enumerate(ids.tolist()):
            row = {f"f{j}": float(v) for j, v in enumerate(x[k])}
            rows.append(row)
            raw[k] = r = float(self.models[sid].score_one(row))
            n = int(self.count[sid])
            filled = min(n, cfg.history)
            if n >= cfg.min_samples and filled > 0:
                h = self.hist[sid, :filled]
                med = float(np.median(h))
                mad = 1.4826 * float(np.median(np.abs(h - med)))
                score[k] = float(calibrate(np.array([(r - med) / max(mad, 1e-9)]), cfg.z_threshold)[0])
        warm = self.count[ids] >= cfg.min_samples
        return HSTScores(score, np.zeros(ids.shape[0]), warm, raw, rows)

    def learn(self, ids: np.ndarray, x: np.ndarray, ev: HSTScores, mask: np.ndarray | None = None) -> None:
        """The models learn the rows of ``mask`` (all by default); every scored row enters the entity's
        calibration ring (what its raw scores usually are)."""
        cfg = self.config
        for k, sid in enumerate(ids.tolist()):
            if mask is None or mask[k]:
                self.models[sid].learn_one(ev.rows[k])
            n = int(self.count[sid])
            self.hist[sid, n % cfg.history] = ev.raw[k]
            self.count[sid] = n + 1

    def clean(self, ids: np.ndarray) -> np.ndarray:
        """Never: a half-space tree has no learned level to be zero (fault counters are judged by score)."""
        return np.zeros(ids.shape[0], dtype=bool)

    def update(self, ids: np.ndarray, ts: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Score then learn rows ``x`` (shape ``(n, dim)``) of entities ``ids``."""
        ev = self.evaluate(ids, ts, x)
        self.learn(ids, x, ev)
        return ev.score

    def snapshot(self, n: Rows | None = None) -> dict[str, np.ndarray]:
        """Models as a pickled blob (internal, trusted state only) plus the calibration arrays, of the first
        ``n`` entities (all by default) or of the rows listed."""
        rows = len(self.models) if n is None else n
        models = self.models[:rows] if isinstance(rows, int) else [self.models[r] for r in rows.tolist()]
        blob = pickle.dumps(models, protocol=pickle.HIGHEST_PROTOCOL)
        return {"hst.models": np.frombuffer(blob, dtype=np.uint8).copy(), "hst.hist": take_rows(self.hist, rows),
                "hst.count": take_rows(self.count, rows)}

    def restore(self, data: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Replace the state with a snapshot (``rows``: into those entities, one per snapshot row)."""
        models = pickle.loads(data["hst.models"].tobytes())  # our own snapshot, never foreign bytes
        if rows is None:
            self.models = models
            self.hist = data["hst.hist"].copy()
            self.count = data["hst.count"].copy()
            return
        if rows.size:
            self.register(int(rows.max()))
        for r, model in zip(rows.tolist(), models, strict=True):
            self.models[r] = model
        self.hist[rows] = data["hst.hist"]
        self.count[rows] = data["hst.count"]

    @property
    def nbytes_per_series(self) -> float:
        """Calibration arrays per entity (the river models' own objects are not counted)."""
        return float(self.hist.itemsize * self.config.history + self.count.itemsize)


@dataclass(slots=True)
class HSTScores:
    """Per-row outputs of :meth:`HalfSpaceTreesScorer.evaluate` (raw scores and rows handed to ``learn``)."""

    score: np.ndarray
    novelty: np.ndarray
    warm: np.ndarray
    raw: np.ndarray
    rows: list[dict[str, float]]
