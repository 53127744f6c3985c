"""Compact, pickle-free snapshots of plain state: named numpy arrays plus a JSON document.

Used to put hot in-memory state (series registries, rates, detectors, correlators) into a
changelogged table now and then, and to restore it after a restart or a rebalance.
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from typing import Any

import numpy as np
import orjson

_META = "__meta__"


def pack(arrays: dict[str, np.ndarray], meta: Any) -> bytes:
    """Serialise ``arrays`` and the JSON-able ``meta`` into one compressed blob.

    >>> blob = pack({"a": np.arange(3.0)}, {"n": 3})
    >>> arrays, meta = unpack(blob)
    >>> arrays["a"].tolist(), meta
    ([0.0, 1.0, 2.0], {'n': 3})
    """
    buf = io.BytesIO()
    payload = dict(arrays)
    payload[_META] = np.frombuffer(orjson.dumps(meta, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)
    # An ordinary .npz (what np.savez_compressed writes), deflated at level 1: snapshots are taken on
    # the hot path, and level 1 is several times faster than the default 6 for a few percent of size.
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, arr in payload.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue()


def unpack(blob: bytes) -> tuple[dict[str, np.ndarray], Any]:
    """Inverse of :func:`pack`; never unpickles."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files if name != _META}
        meta = orjson.loads(data[_META].tobytes())
    return arrays, meta


def snapshot_due(name: str, watermark: float, last: float | None, interval_s: float, *,
                 now: float | None = None, last_wall: float | None = None, wall_floor_s: float = 0.0) -> bool:
    """Whether the state of input ``name`` is due for a snapshot at event time ``watermark``.

    ``last`` is the watermark of its previous snapshot (None: none yet, due now). Snapshots fall on
    a grid of ``interval_s`` shifted by a phase drawn from the name, so the partitions of a worker,
    which advance together, spread their snapshots over the interval instead of all writing them in
    the same batch (a burst that stalls the event loop and shows up in the alert latency).

    ``now`` and ``last_wall`` (wall time now and at the previous snapshot, any monotonic clock): a
    snapshot also waits ``wall_floor_s`` since the previous one. Live, event time runs at wall speed
    and the floor changes nothing; a catch-up runs event time many times faster, and a snapshot every
    ``interval_s`` of it would cost the worker a fifth of its CPU (docs/performance.md). What a crash
    makes the next owner re-read is bounded by the floor's worth of processing either way.

    >>> snapshot_due("gpu:0", 200.0, 100.0, 10.0, now=5.0, last_wall=0.0, wall_floor_s=10.0)
    False
    >>> snapshot_due("gpu:0", 200.0, 100.0, 10.0, now=10.0, last_wall=0.0, wall_floor_s=10.0)
    True

    >>> snapshot_due("gpu:0", 100.0, None, 10.0)
    True
    >>> def taken(name):
    ...     last, out = None, []
    ...     for t in range(100, 131):
    ...         if snapshot_due(name, float(t), last, 10.0):
    ...             last = float(t)
    ...             out.append(t)
    ...     return out
    >>> taken("gpu:0"), taken("nic:3")
    ([100, 103, 113, 123], [100, 107, 117, 127])
    """
    if last is None:
        return True
    if now is not None and last_wall is not None and now - last_wall < wall_floor_s:
        return False
    phase = interval_s * (zlib.crc32(name.encode()) % 1000) / 1000.0
    return math.floor((watermark + phase) / interval_s) > math.floor((last + phase) / interval_s)
