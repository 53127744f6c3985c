"""Compact, pickle-free snapshots of plain state: named numpy arrays plus a JSON document.

Used to put hot in-memory state (series registries, rates, detectors, correlators) into a
changelogged table now and then, and to restore it after a restart or a rebalance.
"""

from __future__ import annotations

import io
import math
import zlib
from typing import Any

import cramjam
import numpy as np
import orjson

_META = "__meta__"


#: The first bytes of a snapshot in the current format (what :func:`pack` writes). A snapshot that
#: starts with ``PK`` is the earlier format, an ``.npz`` (zip, deflate level 1): :func:`unpack` reads both.
MAGIC = b"LSZ1"
#: Array data starts at multiples of this many bytes in the uncompressed body (aligned views).
_ALIGN = 16


def pack(arrays: dict[str, np.ndarray], meta: Any) -> bytes:
    """Serialise ``arrays`` and the JSON-able ``meta`` into one compressed blob.

    The blob is :data:`MAGIC`, then one zstd frame (level 1) of: a 4-byte little-endian header
    length, the header (JSON: ``meta`` and each array's name, dtype and shape, in order), and each
    array's bytes in C order, each starting at a multiple of 16 bytes. Nothing is pickled; object
    arrays are refused. zstd at level 1 is about 7x faster than the deflate level 1 of the earlier
    ``.npz`` format on a partition's state, and its output about a quarter smaller
    (docs/performance.md): snapshots are taken on the hot path.

    >>> blob = pack({"a": np.arange(3.0), "b": np.zeros((2, 2), dtype=np.uint16)}, {"n": 3})
    >>> blob[:4]
    b'LSZ1'
    >>> arrays, meta = unpack(blob)
    >>> arrays["a"].tolist(), arrays["b"].shape, str(arrays["b"].dtype), meta
    ([0.0, 1.0, 2.0], (2, 2), 'uint16', {'n': 3})
    """
    specs: list[list[Any]] = []
    chunks: list[bytes | memoryview] = []
    offset = 0
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        if a.dtype.hasobject:
            raise ValueError(f"snapshot: array {name!r} holds Python objects")
        pad = -offset % _ALIGN
        if pad:
            chunks.append(bytes(pad))
            offset += pad
        specs.append([name, a.dtype.str, list(a.shape), offset])
        data = a.reshape(-1).view(np.uint8).data if a.size else b""
        chunks.append(data)
        offset += a.nbytes
    header = orjson.dumps({"meta": meta, "arrays": specs}, option=orjson.OPT_SERIALIZE_NUMPY)
    body = b"".join([len(header).to_bytes(4, "little"), header, *chunks])
    return MAGIC + bytes(cramjam.zstd.compress(body, level=1))


def unpack(blob: bytes) -> tuple[dict[str, np.ndarray], Any]:
    """Inverse of :func:`pack`, for this format and the earlier ``.npz`` one; never unpickles.

    The arrays it returns are writable. Raises ``ValueError`` on a blob that is neither.
    """
    if blob[:4] != MAGIC:
        if blob[:2] != b"PK":
            raise ValueError("snapshot: not a Lockstep snapshot (neither LSZ1 nor .npz)")
        return _unpack_npz(blob)
    try:
        body = bytearray(cramjam.zstd.decompress(blob[4:]))
    except cramjam.DecompressionError as exc:
        raise ValueError(f"snapshot: the zstd frame does not decompress: {exc}") from None
    if len(body) < 4:
        raise ValueError(f"snapshot: body of {len(body)} bytes")
    n = int.from_bytes(body[:4], "little")
    header = orjson.loads(bytes(body[4:4 + n]))
    start = 4 + n
    view = memoryview(body)
    arrays: dict[str, np.ndarray] = {}
    for name, dtype_str, shape, offset in header["arrays"]:
        dtype = np.dtype(dtype_str)
        if dtype.hasobject:
            raise ValueError(f"snapshot: array {name!r} holds Python objects")
        count = math.prod(shape)
        lo = start + offset
        hi = lo + count * dtype.itemsize
        if hi > len(body):
            raise ValueError(f"snapshot: array {name!r} runs past the end of the blob")
        arrays[name] = np.frombuffer(view[lo:hi], dtype=dtype, count=count).reshape(shape)
    return arrays, header["meta"]


def _unpack_npz(blob: bytes) -> tuple[dict[str, np.ndarray], Any]:
    """A snapshot of the earlier format: an ``.npz`` whose ``__meta__`` entry is the JSON document."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files if name != _META}
        meta = orjson.loads(data[_META].tobytes())
    return arrays, meta


def _phase(name: str) -> float:
    """A fraction in [0, 1) drawn from ``name``: where an input's snapshots fall in an interval."""
    return (zlib.crc32(name.encode()) % 1000) / 1000.0


def wall_due(name: str, now: float, last_wall: float | None, wall_floor_s: float) -> bool:
    """Whether ``wall_floor_s`` of wall time allows input ``name`` a snapshot at ``now`` (any monotonic
    clock) after one at ``last_wall`` (None: none yet). The wall time is cut into cells of the floor,
    shifted by a phase drawn from the name, and an input has at most one snapshot a cell: inputs whose
    first snapshots fell in one batch (a worker's start) do not all come due again in one batch a floor
    later, a burst of every partition's snapshot that stalls the event loop (fourteenth session,
    docs/performance.md). Two snapshots of an input are at least ``wall_floor_s`` apart on average and
    never two in one cell.

    >>> wall_due("gpu:0", 5.0, None, 10.0), wall_due("gpu:0", 5.0, 4.0, 0.0)
    (True, True)
    >>> [t for t in range(0, 40) if wall_due("gpu:0", float(t), 0.0, 10.0)][:1], _phase("gpu:0")
    ([3], 0.706)
    """
    if last_wall is None or wall_floor_s <= 0:
        return True
    shift = wall_floor_s * _phase(name)
    return math.floor((now + shift) / wall_floor_s) > math.floor((last_wall + shift) / wall_floor_s)


def snapshot_due(name: str, watermark: float, last: float | None, interval_s: float, *,
                 now: float | None = None, last_wall: float | None = None, wall_floor_s: float = 0.0) -> bool:
    """Whether the state of input ``name`` is due for a snapshot at event time ``watermark``.

    ``last`` is the watermark of its previous snapshot (None: none yet, due now). Snapshots fall on
    a grid of ``interval_s`` shifted by a phase drawn from the name, so the partitions of a worker,
    which advance together, spread their snapshots over the interval instead of all writing them in
    the same batch (a burst that stalls the event loop and shows up in the alert latency).

    ``now`` and ``last_wall`` (wall time now and at the previous snapshot, any monotonic clock): a
    snapshot also waits for the next cell of ``wall_floor_s`` of wall time (:func:`wall_due`). Live,
    event time runs at wall speed and the floor changes nothing; a catch-up runs event time many times
    faster, and a snapshot every ``interval_s`` of it would cost the worker a fifth of its CPU
    (docs/performance.md). What a crash makes the next owner re-read is bounded by the floor's worth of
    processing either way.

    >>> snapshot_due("gpu:0", 200.0, 100.0, 10.0, now=2.0, last_wall=0.0, wall_floor_s=10.0)
    False
    >>> snapshot_due("gpu:0", 200.0, 100.0, 10.0, now=3.0, last_wall=0.0, wall_floor_s=10.0)
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
    if now is not None and not wall_due(name, now, last_wall, wall_floor_s):
        return False
    phase = interval_s * _phase(name)
    return math.floor((watermark + phase) / interval_s) > math.floor((last + phase) / interval_s)
