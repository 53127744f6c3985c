"""The snapshot container (streams.snapshot.pack/unpack): zstd now, the earlier .npz still read."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streams.snapshot import _META, MAGIC, pack, unpack

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline" / "snapshot_faaa674.json"


def pack_npz(arrays: dict[str, np.ndarray], meta: Any) -> bytes:
    """The earlier format as `streams/snapshot.py` wrote it before LSZ1: an .npz deflated at level 1."""
    buf = io.BytesIO()
    payload = dict(arrays)
    payload[_META] = np.frombuffer(orjson.dumps(meta, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, arr in payload.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue()


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "f8": rng.normal(size=37),
        "f4_2d": rng.normal(size=(5, 48)).astype(np.float32),
        "u16_4d": rng.integers(0, 9, size=(3, 3, 2, 64)).astype(np.uint16),
        "i1_odd": np.arange(13, dtype=np.int8),  # 13 bytes: the next array starts unaligned unless padded
        "i8": np.arange(7, dtype=np.int64),
        "empty": np.zeros((0, 48), dtype=np.float32),
        "bool": np.array([True, False, True]),
        "strided": np.arange(20.0)[::3],  # not contiguous
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    }


@pytest.mark.parametrize("packer", [pack, pack_npz], ids=["zstd", "npz"])
def test_every_array_comes_back_equal_with_its_dtype_and_shape_and_writable(packer) -> None:  # type: ignore[no-untyped-def]
    src = arrays()
    meta = {"series": [["gpu", "n1", "util", [["gpu", "0"]]]], "watermark": 1.5, "offset": None}
    got, got_meta = unpack(packer(src, meta))
    assert got_meta == meta
    assert list(got) == list(src)
    for name, a in src.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape, name
        np.testing.assert_array_equal(got[name], a)
        got[name][...] = 0  # restore code updates its arrays in place
    # NaN and infinities survive bit for bit
    special = np.array([np.nan, np.inf, -np.inf, -0.0])
    back = unpack(packer({"s": special}, {}))[0]["s"]
    assert back.tobytes() == special.tobytes()


def test_the_current_format_is_marked_and_smaller_than_the_npz_on_sparse_state() -> None:
    state: dict[str, np.ndarray] = {"counts": np.zeros((2000, 3, 2, 64), dtype=np.uint16),
                                    "level": np.linspace(0, 1, 2000)}
    state["counts"][::7, 0, 0, :5] = 3
    blob = pack(state, {"n": 2000})
    assert blob[:4] == MAGIC
    assert len(blob) < len(pack_npz(state, {"n": 2000}))


def test_object_arrays_are_refused_both_ways() -> None:
    with pytest.raises(ValueError, match="Python objects"):
        pack({"o": np.array([{"a": 1}], dtype=object)}, {})
    blob = pack({"x": np.arange(3.0)}, {})
    import cramjam

    body = bytes(cramjam.zstd.decompress(blob[4:]))
    n = int.from_bytes(body[:4], "little")
    header = orjson.loads(body[4:4 + n])
    header["arrays"][0][1] = "|O"
    forged_header = orjson.dumps(header)
    forged = MAGIC + bytes(cramjam.zstd.compress(len(forged_header).to_bytes(4, "little") + forged_header
                                                  + body[4 + n:], level=1))
    with pytest.raises(ValueError, match="Python objects"):
        unpack(forged)


@pytest.mark.parametrize("blob, why", [
    (b"", "not a Lockstep snapshot"),
    (b"{}", "not a Lockstep snapshot"),
    (MAGIC + b"not zstd", "does not decompress"),
])
def test_a_blob_that_is_not_a_snapshot_is_a_clear_error(blob: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        unpack(blob)


def test_an_array_that_runs_past_the_end_is_refused() -> None:
    import cramjam

    blob = pack({"x": np.arange(8.0)}, {})
    body = bytes(cramjam.zstd.decompress(blob[4:]))
    cut = MAGIC + bytes(cramjam.zstd.compress(body[:-8], level=1))
    with pytest.raises(ValueError, match="past the end"):
        unpack(cut)


def test_a_snapshot_written_by_the_npz_code_still_restores_through_the_new_one() -> None:
    """The pipeline fixture of faaa674 is an .npz: re-packed now it is LSZ1 and holds the same."""
    old = base64.b64decode(orjson.loads(FIXTURE.read_bytes())["snapshot"])
    assert old[:2] == b"PK"
    arrays_old, meta_old = unpack(old)
    arrays_new, meta_new = unpack(pack(arrays_old, meta_old))
    assert meta_new == meta_old
    assert arrays_new.keys() == arrays_old.keys()
    for name in arrays_old:
        assert arrays_new[name].dtype == arrays_old[name].dtype
        np.testing.assert_array_equal(arrays_new[name], arrays_old[name])
