"""The typed-row fast path (streams.ingest.decode_rows + the validate stage's row index) decides exactly
as the general path (orjson records, validate_record) does, whatever the input (pure: no broker).

Each test feeds the same messages to two partitions: one as the worker runs it, one with the fast path
switched off (``decode_rows`` answering None for every message), and compares every output field, the
dead letters byte for byte, and the state at the end.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams.stages.decode as decode_stage
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline, PipelineOutput
from streams.series import SeriesLimits
from streams.snapshot import unpack

T0 = 1764502800.0

#: (layer, source, metric, labels, kind): the series the messages are made of.
SERIES: list[tuple[str, str, str, dict[str, str], str | None]] = [
    ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-1"}, None),
    ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", "UUID": "GPU-2"}, None),
    ("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-3"}, "gauge"),
    ("switch", "leaf1", "SymbolErrorCounter", {"port": "17"}, "counter"),
    ("host", "n1", "cpu_utilization", {}, None),
    ("nic", "n2", "PortXmitData", {"device": "mlx5_0", "port": "1"}, "counter"),
]


def record(series: int, ts: float, value: Any) -> dict[str, Any]:
    layer, source, metric, labels, kind = SERIES[series]
    rec: dict[str, Any] = {"ts": ts, "layer": layer, "source": source, "metric": metric, "value": value}
    if labels or series % 2:
        rec["labels"] = dict(labels)
    if kind is not None:
        rec["kind"] = kind
    return rec


def partition(idle_s: float = math.inf, max_series: int = 1000) -> PartitionPipeline:
    cfg = DetectorConfig(min_samples=5, limits=SeriesLimits(max_series, 1000, idle_s))
    return PartitionPipeline("telemetry.gpu:0", cfg, InventoryIndex())


def general_path_only() -> Any:
    """The decode stage with its fast path answering None for every message."""
    return mock.patch.object(decode_stage, "decode_rows", lambda raw: None)


def indexed(p: PartitionPipeline) -> list[int]:
    """The series ids the row index finds."""
    return [sid for _, _, sid in p.row_index_items()]


def comparable(out: PipelineOutput) -> str:
    doc = dataclasses.asdict(out)
    doc.pop("stage_seconds", None)
    doc["dead_letters"] = [d.to_record() for d in out.dead_letters]
    return repr(doc)


def state(p: PartitionPipeline) -> tuple[str, str]:
    arrays, meta = unpack(p.snapshot())
    return repr(meta), repr({k: v.tobytes() for k, v in sorted(arrays.items())})


def both(batches: list[list[bytes]], **kw: Any) -> tuple[list[str], list[str], PartitionPipeline]:
    """Outputs of the worker's path and of the general path alone over ``batches``, and the first partition."""
    fast, general = partition(**kw), partition(**kw)
    outs: dict[str, list[str]] = {"fast": [], "general": []}
    offset = 0
    for messages in batches:
        items = [(raw, Origin("telemetry.gpu", 0, offset + i)) for i, raw in enumerate(messages)]
        offset += len(messages)
        outs["fast"].append(comparable(fast.process_many(items)))
        with general_path_only():
            outs["general"].append(comparable(general.process_many(items)))
    assert state(fast) == state(general)
    return outs["fast"], outs["general"], fast


#: Ways a message's text can differ from orjson's own rendering of good records.
BAD_VALUES: list[Any] = ["12.5", True, None, [1], {"v": 1}, 2.0 ** 64, -(2.0 ** 64), 2 ** 64 + 1, 2 ** 64 - 1,
                         1e300, -1.5, 0, -0.0, 10 ** 30]
BAD_TS: list[Any] = [T0 * 1000, "2025-11-30T11:00:00Z", 5.0, 1e13, None, True, int(T0)]


def mutate(rec: dict[str, Any], how: int, arg: int) -> Any:
    rec = dict(rec)
    if how == 0:
        rec["value"] = BAD_VALUES[arg % len(BAD_VALUES)]
    elif how == 1:
        rec["ts"] = BAD_TS[arg % len(BAD_TS)]
    elif how == 2:
        rec.pop(("ts", "layer", "source", "metric", "value")[arg % 5])
    elif how == 3:  # labels in another order, not an object, or not of strings
        labels = rec.get("labels") or {"a": "1", "b": "2"}
        rec["labels"] = [dict(reversed(labels.items())), "x", {"gpu": 0}, None, {"gpu": "0", "x": ["y"]},
                         {}][arg % 6]
    elif how == 4:
        rec["kind"] = ["gauge", "counter", "histogram", 1, None][arg % 5]
    elif how == 5:
        rec["ingest_ts"] = [T0 + 1, None, "late", T0 * 1000, 1.0, int(T0)][arg % 6]
    elif how == 6:
        rec["extra"] = {"nested": [1, 2]}
    elif how == 7:
        rec["layer"] = ["moon", 3, "GPU"][arg % 3]
    elif how == 8:
        rec["source"] = ["n9", "", "n1" * 200][arg % 3]
    elif how == 9:
        not_records: list[Any] = ["not a record", 7]
        return not_records[arg % 2]
    return rec


def dumps(doc: Any, indent: int | None = None) -> bytes:
    """JSON text (the standard library's: orjson refuses integers beyond 64 bits, which senders may write)."""
    return json.dumps(doc, indent=indent, separators=None if indent else (",", ":")).encode()


def render(records: list[Any], style: int) -> bytes:
    raw = dumps(records)
    if style == 1:  # whitespace and an escape: the same records, other bytes
        return dumps(records, indent=2).replace(b'"n1"', b'"n\\u0031"')
    if style == 2:
        return dumps({"samples": records})
    if style == 3 and records:
        return dumps(records[0])
    if style == 4:  # a duplicate key: the last one counts, on both paths
        return raw.replace(b'"value":', b'"value":-7,"value":', 1)
    if style == 5:
        return b"[" + raw[1:-1][: max(0, len(raw) // 2 - 1)]  # cut short: not JSON
    return raw


messages = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, len(SERIES) - 1), st.floats(-5, 500, allow_nan=False),
                           st.integers(0, 40), st.integers(0, 20)), max_size=8),
        st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5]),
        st.integers(0, 30),
    ),
    min_size=1, max_size=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.integers(1, 4))
def test_any_input_gives_the_same_outputs_and_state_on_both_paths(msgs: list[Any], per_batch: int) -> None:
    rendered = []
    for k, (recs, style, dt) in enumerate(msgs):
        records: list[Any] = []
        for series, value, how, arg in recs:
            rec = record(series, T0 + 10 * k + dt, value)
            records.append(rec if how >= 10 else mutate(rec, how, arg))
        rendered.append(render(records, style))
    batches = [rendered[i:i + per_batch] for i in range(0, len(rendered), per_batch)]
    fast, general, _ = both(batches)
    assert fast == general


def test_known_series_take_the_fast_path_and_a_new_one_the_general_path() -> None:
    p = partition()
    first = orjson.dumps([record(s, T0, 1.0) for s in range(4)])
    p.process_many([(first, Origin("t", 0, 0))])
    assert len(p.row_ids) == 0  # the first message admitted its series on the general path
    p.process_many([(orjson.dumps([record(s, T0 + 1, 2.0) for s in range(4)]), Origin("t", 0, 1))])
    assert sorted(indexed(p)) == [0, 1, 2, 3]
    # the keys hold the registry's own strings, not the decoded copies
    for key, metric, sid in p.row_index_items():
        held = p.registry.keys[sid]
        assert held is not None and key[0] is held[0] and key[1] is held[1] and metric is held[2]
    # label sets with the same metrics share one layout: here the three GPUs' (one metric each)
    assert len(p.row_ids) == 4 and len(p.row_layouts) == 2
    gpu0 = p.row_ids[("gpu", "n1", b'{"gpu":"0","UUID":"GPU-1"}')]
    gpu1 = p.row_ids[("gpu", "n1", b'{"gpu":"1","UUID":"GPU-2"}')]
    assert gpu0[0] is gpu1[0] and gpu0[1:] == (0,) and gpu1[1:] == (1,)
    out = p.process_many([(orjson.dumps([record(s, T0 + 2, 3.0) for s in range(6)]), Origin("t", 0, 2))])
    assert out.samples == 6 and len(p.registry) == 6


def test_an_evicted_id_reused_by_another_series_is_not_found_under_the_old_labels() -> None:
    """Series 0 goes idle and is evicted; series 1 takes its id; series 0 comes back as a new series (with
    the id series 2 left when it went idle in turn)."""
    batches = [[orjson.dumps([record(0, T0, 10.0)])], [orjson.dumps([record(0, T0 + 1, 11.0)])],
               [orjson.dumps([record(2, T0 + 100 + k, 50.0)]) for k in range(3)],
               [orjson.dumps([record(1, T0 + 200, 20.0)])],
               [orjson.dumps([record(0, T0 + 201, 12.0)])], [orjson.dumps([record(0, T0 + 202, 13.0)])]]
    fast, general, p = both(batches, idle_s=50.0)
    assert fast == general
    assert len(p.registry) == 2  # series 2 went idle too
    sid0 = p.registry.lookup_raw(("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"), ("UUID", "GPU-1"))))
    sid1 = p.registry.lookup_raw(("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "1"), ("UUID", "GPU-2"))))
    assert sid0 >= 0 and sid1 >= 0 and sid0 != sid1
    entry = p.row_ids[("gpu", "n1", b'{"gpu":"0","UUID":"GPU-1"}')]
    assert entry[entry[0]["DCGM_FI_DEV_GPU_UTIL"]] == sid0


def test_a_label_set_indexed_again_with_a_new_metric_keeps_the_ids_it_had() -> None:
    """Series of one label set come in separate messages: each time the label set's entry is rebuilt with
    the new metric in its place, and label sets with the same metrics share a layout."""
    labels = [{"gpu": "0", "UUID": "GPU-1"}, {"gpu": "1", "UUID": "GPU-2"}]
    metrics = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"]

    def msg(k: int, gpu: int, upto: int) -> bytes:
        return orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": "n1", "metric": metric, "value": 1.0 + k,
                              "labels": labels[gpu]} for metric in metrics[:upto]])

    batches = [[msg(k, gpu, upto)] for k, (gpu, upto) in enumerate(
        [(0, 1), (0, 1), (0, 2), (0, 2), (1, 3), (0, 3), (0, 3), (1, 3)])]
    fast, general, p = both(batches)
    assert fast == general
    assert sorted(indexed(p)) == list(range(6))
    for gpu in (0, 1):
        entry = p.row_ids[("gpu", "n1", orjson.dumps(labels[gpu]))]
        for metric in metrics:
            held = p.registry.keys[entry[entry[0][metric]]]
            assert held is not None and held[2] == metric and dict(held[3]) == labels[gpu]
    assert len(p.row_layouts) == 3  # one metric, two, then the three both GPUs share
    assert p.row_ids[("gpu", "n1", orjson.dumps(labels[0]))][0] is p.row_ids[("gpu", "n1", orjson.dumps(labels[1]))][0]


def test_consecutive_rows_with_the_same_labels_but_another_source_or_layer_find_their_own_series() -> None:
    """The look-up is skipped for a row whose labels, source and layer are the previous row's: a change
    of source or layer alone (the same label text, the same metric) still finds that row's series."""
    keys = [("gpu", "n1"), ("gpu", "n1"), ("gpu", "n2"), ("nic", "n2"), ("nic", "n2"), ("gpu", "n1")]
    metrics = ["m", "k", "m", "m", "k", "x"]

    def msg(t: int) -> bytes:
        return orjson.dumps([{"ts": T0 + t, "layer": layer, "source": source, "metric": metric,
                              "value": 10.0 * i + t, "labels": {"port": "1"}}
                             for i, ((layer, source), metric) in enumerate(zip(keys, metrics, strict=True))])

    fast, general, p = both([[msg(t)] for t in range(4)])
    assert fast == general
    assert len(p.registry) == 6 and sorted(indexed(p)) == list(range(6))
    # the last batch went through the fast path: every row's value went to its own series
    ids = [p.registry.lookup_raw((layer, source, metric, (("port", "1"),)))
           for (layer, source), metric in zip(keys, metrics, strict=True)]
    assert sorted(ids) == list(range(6))
    assert p.detector.last_value[ids].tolist() == [10.0 * i + 3 for i in range(6)]


def test_a_restored_partition_rebuilds_its_row_index_from_the_registry() -> None:
    p = partition()
    for k in range(3):
        p.process_many([(orjson.dumps([record(s, T0 + k, 1.0 + k) for s in range(6)]), Origin("t", 0, k))])
    q = partition()
    q.restore(p.snapshot())
    assert q.row_ids == {} and q.row_layouts == {}
    # The registry restores each series under its sorted labels: the first message after the restore
    # takes the general path (which holds each series under the order its source sends again), the
    # next one the fast path.
    for k in (5, 6):
        msg = [(orjson.dumps([record(s, T0 + k, 9.0 + k) for s in range(6)]), Origin("t", 0, k))]
        assert comparable(p.process_many(msg)) == comparable(q.process_many(msg))
    assert sorted(indexed(q)) == sorted(indexed(p)) == list(range(6))


@pytest.mark.parametrize("value, why", [(-3.0, "counter value is negative"), ("7", "value must be a number")])
def test_a_bad_row_among_good_ones_is_one_dead_letter_and_the_rest_go_on(value: Any, why: str) -> None:
    p = partition()
    good = [record(s, T0, 1.0) for s in range(6)]
    p.process_many([(orjson.dumps(good), Origin("t", 0, 0))])
    bad = [record(s, T0 + 1, 2.0) for s in range(6)]
    bad[3]["value"] = value  # series 3 is a counter
    raw = orjson.dumps(bad)
    out = p.process_many([(raw, Origin("t", 0, 1))])
    assert out.samples == 5 and out.rejected == 1
    [dl] = out.dead_letters
    rec = dl.to_record()
    assert why in rec["reason"] and rec["record"] == "samples[3]"
