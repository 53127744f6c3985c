"""Typed keys: the identity of an alert, and of a contention within a job's state.

Keys are built here and nowhere else; a key that goes into a snapshot as text has one function that
writes it and one that reads it back.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple


def dedup_key(alert_type: str, job_id: str, domain: str, root: dict[str, Any] | None) -> str:
    """Stable per (job, root cause): the same cause of the same job always maps to the same key.

    >>> dedup_key("job_slowdown", "llm", "network", {"layer": "switch", "source": "leaf03",
    ...           "labels": {"port": "17"}, "metric": "SymbolErrorCounter"})
    'job_slowdown/llm/network/switch/leaf03/port=17'
    """
    if root is None:
        return f"{alert_type}/{job_id}/{domain}"
    labels = ",".join(f"{k}={v}" for k, v in sorted(root["labels"].items()) if k not in ("job_id",))
    key = f"{alert_type}/{job_id}/{domain}/{root['layer']}/{root['source']}"
    return key + (f"/{labels}" if labels else "")


def alert_id_for(dedup: str, onset: float) -> str:
    """Deterministic id of one incident: a replay after a crash reproduces it."""
    return hashlib.sha1(f"{dedup}@{onset:.3f}".encode()).hexdigest()[:20]


class ContentionKey(NamedTuple):
    """One checkpoint contention of a pool: the pool and its start ``t*`` (to the millisecond).

    >>> key = ContentionKey.of("lustre", 1764502834.0004)
    >>> key.text, ContentionKey.parse(key.text) == key
    ('lustre@1764502834.000', True)
    """

    pool: str
    start: float

    @classmethod
    def of(cls, pool: str, start: float) -> ContentionKey:
        """The key of a contention starting at ``start``, rounded as its text keeps it."""
        return cls(pool, float(f"{start:.3f}"))

    @property
    def text(self) -> str:
        """The key as snapshots hold it: ``pool@start``."""
        return f"{self.pool}@{self.start:.3f}"

    @classmethod
    def parse(cls, text: str) -> ContentionKey:
        pool, _, start = text.rpartition("@")
        return cls(pool, float(start))
