"""The per-partition pipeline: stages, dead letters, counters, snapshot/restore."""

from __future__ import annotations

import base64

import orjson

from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

T0 = 1764502800.0
ORIGIN = Origin("telemetry.switch", 3, 42)


def inventory() -> InventoryIndex:
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": "n[1-2]", "gpus_per_node": 8}))
    for i in (1, 2):
        inv.apply(inventory_adapter.validate_python({"kind": "link", "ts": T0 - 100, "node": f"n{i}",
                                                     "device": "mlx5_0", "port": "1", "switch": "leaf01",
                                                     "switch_port": str(i)}))
    return inv


def sample(ts: float, value: float, port: str = "1", metric: str = "SymbolErrorCounter") -> dict[str, object]:
    return {"ts": ts, "layer": "switch", "source": "leaf01", "metric": metric, "value": value,
            "labels": {"port": port}}


def pipe(**cfg: object) -> PartitionPipeline:
    return PartitionPipeline("telemetry.switch:3", DetectorConfig(min_samples=5, **cfg), inventory())  # type: ignore[arg-type]


def test_a_clean_link_that_starts_erring_is_an_anomaly_mapped_to_the_job_behind_the_port() -> None:
    p = pipe()
    for k in range(10):
        out = p.process(orjson.dumps([sample(T0 + k, 100)]), ORIGIN)
        assert out.anomalies == []
    # An error on a clean link is an anomaly from its first increment: confirmed by that one sample.
    out = p.process(orjson.dumps([sample(T0 + 10, 140)]), ORIGIN)
    assert [(a["job_id"], a["phase"], a["ts"], a["relation"], a["labels"]) for a in out.anomalies] == [
        ("j1", "start", T0 + 10, "port", {"port": "1"})]
    assert out.anomalies[0]["meaning"] == "link_errors"
    assert p.process(orjson.dumps([sample(T0 + 11, 180)]), ORIGIN).anomalies == []


def test_out_of_order_samples_become_dead_letters_and_duplicates_are_counted() -> None:
    p = pipe()
    p.process(orjson.dumps([sample(T0 + 5, 10)]), ORIGIN)
    raw = orjson.dumps([sample(T0 + 3, 11), sample(T0 + 5, 10)])
    out = p.process(raw, ORIGIN)
    assert out.out_of_order == 1 and out.duplicates == 1
    assert len(out.dead_letters) == 1
    dl = out.dead_letters[0].to_record(ORIGIN, 0.0)
    assert dl["stage"] == "rate" and dl["error"] == "LateData" and "out of order" in dl["reason"]
    assert base64.b64decode(dl["original"]) == raw
    assert (dl["topic"], dl["partition"], dl["offset"]) == ("telemetry.switch", 3, 42)


def test_a_negative_counter_is_rejected_at_normalise() -> None:
    out = pipe().process(orjson.dumps([sample(T0, -5)]), ORIGIN)
    assert [d.stage for d in out.dead_letters] == ["normalise"]
    assert out.rejected == 1 and out.samples == 0


def test_a_counter_reset_never_gives_a_negative_rate_or_an_anomaly() -> None:
    p = pipe()
    for k in range(10):
        p.process(orjson.dumps([sample(T0 + k, 1000 + 5 * k, metric="PortXmitWait")]), ORIGIN)
    out = p.process(orjson.dumps([sample(T0 + 10, 3, metric="PortXmitWait")]), ORIGIN)
    assert out.resets == 1 and out.anomalies == []


def test_unknown_metrics_are_kept_and_counted() -> None:
    out = pipe().process(orjson.dumps([sample(T0, 1, metric="vendor_magic_total")]), ORIGIN)
    assert out.unknown_metrics == 1 and out.samples == 1 and out.dead_letters == []


def test_snapshot_and_restore_continue_exactly_where_the_state_was() -> None:
    stream = [orjson.dumps([sample(T0 + k, 100 + (30 * (k - 30) if k >= 30 else 0), port=str(1 + k % 2))])
              for k in range(40)]
    a = pipe()
    for raw in stream[:25]:
        a.process(raw, ORIGIN)
    b = pipe()
    b.restore(a.snapshot())
    rest_a = [a.process(raw, ORIGIN).anomalies for raw in stream[25:]]
    rest_b = [b.process(raw, ORIGIN).anomalies for raw in stream[25:]]
    assert rest_a == rest_b
    assert any(rest_a)


def test_step_times_are_forwarded_per_worker_for_peer_comparison() -> None:
    p = pipe()
    msg = {"samples": [{"ts": T0 + 1.0, "layer": "step", "source": f"n{i}", "metric": "step_time_seconds",
                        "value": 1.0 + i / 10, "labels": {"job_id": "j1", "rank": str(8 * (i - 1))}}
                       for i in (1, 2)]}
    out = p.process(orjson.dumps(msg), Origin("telemetry.step", 0, 7))
    [rec] = out.points_records("telemetry.step:0")
    assert rec["job_id"] == "j1"
    # values grouped by event time (a scrape's samples share it)
    assert rec["lanes"]["step_time"] == [[T0 + 1.0, [1.1, 1.2]]]
    assert rec["workers"]["step_time"] == [[T0 + 1.0, [1.1, 1.2], ["n1/rank0", "n2/rank8"]]]
    # A switch counter is a job signal but not a per-worker one.
    out = p.process(orjson.dumps({"samples": [sample(T0 + 1.0, 0.0), sample(T0 + 2.0, 5.0)]}), ORIGIN)
    assert all("workers" not in r for r in out.points_records("o"))


def test_one_points_record_per_job_per_batch_folds_exactly_like_one_per_partition() -> None:
    """The worker merges a batch's points across its input partitions (merged_points_records): the
    correlation side must end up with the same lanes, stats and straggler verdicts as from the
    per-partition records."""
    import math
    import zlib

    from lockstep.loadgen import LoadGenerator, LoadSpec
    from streams.lanes import JobSignals
    from streams.pipeline import merged_points_records

    gen = LoadGenerator(LoadSpec(gpus=64, nodes_per_job=4, incidents=((0, 20),), incident_s=15.0, seed=3))
    inv = InventoryIndex()
    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    pipes: dict[str, PartitionPipeline] = {}
    per_partition, merged = JobSignals(), JobSignals()
    got: dict[str, list[object]] = {"a": [], "b": []}
    for k0 in range(0, 60, 2):  # batches of two scrapes
        groups: dict[str, list[tuple[bytes, Origin]]] = {}
        for k in (k0, k0 + 1):
            for layer, key, value in gen.messages(k):
                p = zlib.crc32(key) % 4
                groups.setdefault(f"{layer}:{p}", []).append((value, Origin(layer, p, k)))
        outs = []
        for name, items in sorted(groups.items()):
            pipe = pipes.setdefault(name, PartitionPipeline(name, DetectorConfig(), inv))
            outs.append((name, pipe.process_many(items)))
        for name, out in outs:
            for rec in out.points_records(name):
                per_partition.add(orjson.loads(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY)))
        records = merged_points_records(outs)
        assert len(records) == len({r["job_id"] for _, out in outs for r in out.points_records("o")})
        for rec in records:
            merged.add(orjson.loads(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY)))
        wm = min(p.watermark for p in pipes.values() if p.watermark is not None)
        for signals, key in ((per_partition, "a"), (merged, "b")):
            timelines, stats = signals.advance(wm)
            got[key].append((timelines, stats, [(e.lane, e.workers) for e in signals.peer_events]))
    for signals, key in ((per_partition, "a"), (merged, "b")):
        got[key].append(signals.advance(math.inf))
    assert got["a"] == got["b"]
    assert any(timelines for timelines, *_ in got["a"][:-1])  # the comparison is not of empty results
