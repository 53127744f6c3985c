"""Decoding messages: one sample, a batch, {"samples": [...]}, control markers, garbage."""

from __future__ import annotations

import orjson
import pytest

from models.samples import MAX_MESSAGE_BYTES
from streams.ingest import decode_batch

S = {"ts": 1764502930, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 97,
     "labels": {"gpu": "0"}}


@pytest.mark.parametrize("payload", [S, [S, S], {"samples": [S, S, S]}])
def test_a_message_carries_one_sample_or_a_batch(payload: object) -> None:
    batch = decode_batch(orjson.dumps(payload))
    expected = 1 if isinstance(payload, dict) and "samples" not in payload else len(
        payload if isinstance(payload, list) else payload["samples"])  # type: ignore[index]
    assert len(batch.samples) == expected
    assert batch.rejections == []


def test_bad_records_in_a_batch_are_rejected_one_by_one_and_the_rest_kept() -> None:
    bad = dict(S, value="x")
    batch = decode_batch(orjson.dumps([S, bad, S, 7]))
    assert len(batch.samples) == 2
    assert [(r.index, r.reason) for r in batch.rejections] == [
        (1, "value must be a number, got str"), (3, "sample must be an object, got int")]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not JSON"),
        (b'"a string"', "expected an object or an array, got str"),
        (b'{"samples": 3}', '"samples" is not an array'),
        (b'{"lockstep_control": "reboot"}', "unknown control"),
        (b"x" * (MAX_MESSAGE_BYTES + 1), "exceeds"),
    ],
)
def test_whole_message_rejections_say_why(raw: bytes, reason: str) -> None:
    batch = decode_batch(raw)
    assert batch.samples == []
    assert len(batch.rejections) == 1 and batch.rejections[0].index is None
    assert reason in batch.rejections[0].reason


def test_end_of_input_marker_is_a_control_message() -> None:
    assert decode_batch(b'{"lockstep_control": "eos"}').control == "eos"
