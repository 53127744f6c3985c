"""Compact, pickle-free snapshots of plain state: named numpy arrays plus a JSON document.

Used to put hot in-memory state (series registries, rates, detectors, correlators) into a
changelogged table now and then, and to restore it after a restart or a rebalance.
"""

from __future__ import annotations

import io
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
    np.savez_compressed(buf, **payload)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack(blob: bytes) -> tuple[dict[str, np.ndarray], Any]:
    """Inverse of :func:`pack`; never unpickles."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files if name != _META}
        meta = orjson.loads(data[_META].tobytes())
    return arrays, meta
