"""How ``lockstep replay`` reads, orders and batches a file (lockstep.replay: ``read_input``,
``batch_messages``, ``event_time_order``), against the plain definition kept here: every sample line
validated in full (streams.ingest.validate_record), samples sorted by (event time, line), one message
per (layer, key) and second in order of first appearance, a full one (``MAX_SAMPLES_PER_MESSAGE``)
out at once.

The replay takes a shortcut for the samples of a series it has already validated (only their time,
value, kind and ``ingest_ts`` are checked, as the agents' validate stage does); these tests hold it to
the same samples, the same bad lines with the same reasons, and the same bytes in the same order.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

import lockstep.replay as replay
from lockstep.replay import Envelope, batch_messages, event_time_order, read_input, write_simulation
from streams.ingest import validate_record

T0 = 1_764_502_930.0
Samples = list[tuple[float, int, dict[str, Any], bytes]]


def plain_samples(lines: list[bytes]) -> tuple[Samples, list[tuple[int, str]]]:
    """Sample lines validated one by one: (samples by (time, line), bad (line, reason))."""
    samples: Samples = []
    bad: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        raw = raw.strip()
        doc = orjson.loads(raw)
        try:
            samples.append((validate_record(doc).ts, number, doc, raw))
        except ValueError as exc:
            bad.append((number, str(exc)))
    samples.sort(key=lambda s: (s[0], s[1]))
    return samples, bad


def plain_messages(samples: Samples) -> list[tuple[str, str, bytes]]:
    """One message per (layer, key) and second, as (layer, key, the bytes replay produces): a second's
    messages in order of first appearance, a group that reaches the most a message holds out at once."""
    out: list[tuple[str, str, bytes]] = []
    most = replay.MAX_SAMPLES_PER_MESSAGE
    for _, second in itertools.groupby(samples, key=lambda s: math.floor(s[0])):
        groups: dict[tuple[str, str], list[bytes]] = {}
        for _, _, doc, raw in second:
            job = (doc.get("labels") or {}).get("job_id") if doc["layer"] == "step" else None
            key = (doc["layer"], job or doc["source"])
            groups.setdefault(key, []).append(raw)
            if len(groups[key]) == most:
                out.append((*key, b"[" + b",".join(groups[key]) + b"]"))
                groups[key] = []
        out.extend((layer, key, b"[" + b",".join(raws) + b"]") for (layer, key), raws in groups.items() if raws)
    return out


def as_bytes(messages: Any) -> list[tuple[str, str, bytes]]:
    return [(layer, key, b"[" + b",".join(raws) + b"]") for layer, key, raws in messages]


def sample(**fields: Any) -> dict[str, Any]:
    return {"ts": T0, "layer": "nic", "source": "gpu001", "metric": "PortXmitWait", "value": 5.0,
            "labels": {"device": "mlx5_0", "port": "1"}, "kind": "counter", "ingest_ts": T0 + 0.05} | fields


#: Each differs from the first line's series (validated in full, so known) in one field; most are bad.
VARIANTS: list[dict[str, Any]] = [
    sample(), sample(ts=T0 + 1.5), sample(ts="2025-11-30T11:42:11Z"), sample(ts=12), sample(ts=True),
    sample(ts=None), sample(value="5"), sample(value=True), sample(value=2**70), sample(value=-(2**65)),
    sample(value=1e30), sample(value=7), sample(value=2**64 - 1), sample(value=2.0**64),
    sample(kind="gauge", value=-1.0), sample(kind="counter", value=-1.0),
    sample(kind="bogus"), sample(kind=None), sample(ingest_ts="x"), sample(ingest_ts=12), sample(ingest_ts=None),
    sample(ingest_ts="2025-11-30T11:42:11Z"), sample(labels=None), sample(labels={"device": "mlx5_0", "port": 1}),
    sample(labels={"port": "1", "device": "mlx5_0"}), sample(labels=["port"]), sample(source=5), sample(metric=""),
    sample(layer="moon"), {k: v for k, v in sample().items() if k != "value"},
    {k: v for k, v in sample().items() if k != "labels"}, {k: v for k, v in sample().items() if k != "kind"},
]


def test_a_known_series_gets_the_same_samples_and_reasons_as_full_validation() -> None:
    # json, not orjson: orjson writes no integer past 64 bits. The second round: every variant's series is known.
    lines = [json.dumps(doc).encode() for doc in VARIANTS * 2]
    samples, bad = plain_samples(lines)
    data = read_input(lines)
    assert data.samples == samples
    assert [(b.line, b.reason) for b in data.bad] == bad
    assert len(bad) > len(VARIANTS)  # the premise: most variants are bad, and bad again when their series is known


def test_a_scenario_file_gives_the_same_bytes_in_the_same_order(tmp_path: Path) -> None:
    path = tmp_path / "xid.jsonl"
    write_simulation(path, "xid")
    lines = path.read_bytes().splitlines()
    data = read_input(lines)
    samples, bad = plain_samples([raw for raw in lines if b'"layer"' in raw])
    assert not data.bad and not bad
    assert [(ts, doc, raw) for ts, _, doc, raw in data.samples] == [(ts, doc, raw) for ts, _, doc, raw in samples]
    expected = plain_messages(samples)
    assert len(expected) > 1000 and len({layer for layer, _, _ in expected}) >= 4
    assert as_bytes(batch_messages(data.samples)) == expected
    assert as_bytes(event_time_order(data.samples, [])) == expected


def test_a_full_message_goes_out_at_once_and_none_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "MAX_SAMPLES_PER_MESSAGE", 2)
    docs = [sample(source="a", value=1.0), sample(source="a", value=2.0), sample(source="b"),
            sample(source="a", value=3.0, ts=T0 + 1), sample(source="a", value=4.0, ts=T0 + 1.5),
            sample(source="b", ts=T0 + 1.2)]
    data = read_input([orjson.dumps(d) for d in docs])
    raws = [orjson.dumps(d) for d in docs]
    expected = [("nic", "a", [raws[0], raws[1]]), ("nic", "b", [raws[2]]),
                ("nic", "a", [raws[3], raws[4]]), ("nic", "b", [raws[5]])]
    assert list(batch_messages(data.samples)) == expected
    assert list(event_time_order(data.samples, [])) == expected
    assert as_bytes(expected) == plain_messages(data.samples)


def test_envelopes_go_after_the_native_messages_of_their_second() -> None:
    docs = [sample(source="a"), sample(source="b", ts=T0 + 1)]
    data = read_input([orjson.dumps(d) for d in docs])
    early, late = (Envelope(9, "prometheus", T0, b"up 1"), Envelope(8, "prometheus", T0 + 0.5, b"up 1"))
    order = [m if isinstance(m, Envelope) else m[1] for m in event_time_order(data.samples, [early, late])]
    assert order == ["a", early, late, "b"]
