"""Input partitions scored together: pipelines sharing one detector bank (streams.pipeline.run_together).

A worker's pipelines share a bank so that one ``score`` update serves every partition's round. What
must hold: the outputs and the snapshots are those of each partition alone with a bank of its own;
a dropped pipeline's rows are reused only once no batch can hold it, and clean; a bug in one
partition's stages costs only that partition, one in the shared score every partition scored with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from benchmarks.bench_pipeline import agent_batches, workload
from streams.detect import DetectorBank, DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline, PipelineOutput, run_together
from streams.series import SeriesLimits
from streams.snapshot import unpack

Batches = list[tuple[str, list[tuple[bytes, str, int, int]]]]


def comparable(out: PipelineOutput) -> bytes:
    return orjson.dumps({"anomalies": out.anomalies, "points": out.points, "workers": out.workers,
                         "clocks": out.clocks, "samples": out.samples, "evicted": out.evicted,
                         "dead": [(d.stage, d.reason, d.record, d.original.hex()) for d in out.dead_letters]},
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS)


def items(batch: list[tuple[bytes, str, int, int]]) -> list[tuple[bytes, Origin]]:
    return [(raw, Origin(topic, p, off, None, None)) for raw, topic, p, off in batch]


def alone(inv: InventoryIndex, cfg: DetectorConfig, batches: Batches) -> tuple[list[bytes], dict[str, Any]]:
    pipes: dict[str, PartitionPipeline] = {}
    outs = []
    for origin, batch in batches:
        pipe = pipes.get(origin) or pipes.setdefault(origin, PartitionPipeline(origin, cfg, inv))
        outs.append(comparable(pipe.process_many(items(batch))))
    return outs, pipes


def together(inv: InventoryIndex, cfg: DetectorConfig, batches: Batches,
             bank: DetectorBank) -> tuple[list[bytes], dict[str, PartitionPipeline]]:
    pipes: dict[str, PartitionPipeline] = {}
    outs = []
    for group in agent_batches(batches):
        work = [(pipes.get(o) or pipes.setdefault(o, PartitionPipeline(o, cfg, inv, bank=bank)), items(b))
                for o, b in group]
        for out in run_together(work):
            assert isinstance(out, PipelineOutput), out
            outs.append(comparable(out))
        bank.recycle()
    return outs, pipes


def same_state(a: PartitionPipeline, b: PartitionPipeline) -> bool:
    (xa, ma), (xb, mb) = unpack(a.snapshot()), unpack(b.snapshot())
    return ma == mb and xa.keys() == xb.keys() and all(np.array_equal(xa[k], xb[k], equal_nan=True) for k in xa)


@pytest.fixture(scope="module")
def load() -> tuple[InventoryIndex, Batches]:
    inv, batches, _ = workload(64, 40, 3, 2)  # an incident half-way, and bad messages of every stage
    return inv, batches


def test_scored_together_the_outputs_and_snapshots_are_those_of_each_partition_alone(load: Any) -> None:
    inv, batches = load
    cfg = DetectorConfig(min_samples=5)
    outs_alone, pipes_alone = alone(inv, cfg, batches)
    bank = DetectorBank(cfg)
    outs_together, pipes_together = together(inv, cfg, batches, bank)
    assert sum(len(orjson.loads(o)["anomalies"]) for o in outs_alone) > 0  # the incident gives episodes
    assert len({o for o, _ in batches}) == len(pipes_together) > 6  # several layers and partitions at once
    assert outs_together == outs_alone
    assert all(same_state(pipes_alone[o], pipes_together[o]) for o in pipes_alone)
    assert bank.rows_in_use == sum(len(p.registry) for p in pipes_together.values())


def test_idle_series_evicted_and_their_ids_reused_keep_both_ways_equal(load: Any) -> None:
    inv, batches = load
    # a scrape a second; for the middle third, every other message of a batch is missing: those sources go
    # idle and are evicted, then come back as new series on the ids they left
    cfg = DetectorConfig(min_samples=5, limits=SeriesLimits(idle_s=4.0))
    third = len(batches) // 3
    gappy = batches[:third] + [(o, b[::2]) for o, b in batches[third:2 * third]] + batches[2 * third:]
    outs_alone, pipes_alone = alone(inv, cfg, gappy)
    outs_together, pipes_together = together(inv, cfg, gappy, DetectorBank(cfg))
    assert sum(orjson.loads(o)["evicted"] for o in outs_alone) > 10
    assert outs_together == outs_alone
    assert all(same_state(pipes_alone[o], pipes_together[o]) for o in pipes_alone)


def test_a_restored_pipeline_takes_new_rows_and_gives_the_same_outputs(load: Any) -> None:
    inv, batches = load
    cfg = DetectorConfig(min_samples=5)
    half = len(batches) // 2
    _, pipes_alone = alone(inv, cfg, batches[:half])
    bank = DetectorBank(cfg)
    _, first = together(inv, cfg, batches[:half], bank)
    # the worker restarts: every partition restored from its snapshot into a bank that already holds others
    bank2 = DetectorBank(cfg)
    other = PartitionPipeline("telemetry.host:9", cfg, inv, bank=bank2)
    other.process_many(items(batches[0][1]))
    restored = {}
    for origin, pipe in first.items():
        restored[origin] = PartitionPipeline(origin, cfg, inv, bank=bank2)
        restored[origin].restore(pipe.snapshot())
        assert same_state(restored[origin], pipes_alone[origin])
    outs_alone = [comparable(pipes_alone[o].process_many(items(b))) for o, b in batches[half:]]
    outs_together = []
    for group in agent_batches(batches[half:]):
        outs_together += [comparable(o) for o in run_together([(restored[o], items(b)) for o, b in group])
                          if isinstance(o, PipelineOutput)]
    assert outs_together == outs_alone


def test_dropped_rows_are_reused_only_after_a_recycle_and_clean() -> None:
    cfg = DetectorConfig(min_samples=2)
    inv = InventoryIndex()
    bank = DetectorBank(cfg)
    a = PartitionPipeline("telemetry.host:0", cfg, inv, bank=bank)
    msg = [({"ts": 1764502800.0 + k, "layer": "host", "source": f"n{i}", "metric": "node_load1", "value": 5.0 + i}, k)
           for k in range(3) for i in range(4)]
    for k in range(3):
        a.process_many([(orjson.dumps([m for m, at in msg if at == k]), Origin("telemetry.host", 0, k))])
    rows = a.rows_of(np.arange(4))
    assert bank.scorer.count[rows].tolist() == [3, 3, 3, 3]  # type: ignore[attr-defined]
    a.release()
    b = PartitionPipeline("telemetry.host:1", cfg, inv, bank=bank)
    b.process_many([(orjson.dumps([m for m, at in msg if at == 0]), Origin("telemetry.host", 1, 0))])
    assert set(b.rows_of(np.arange(4)).tolist()).isdisjoint(rows.tolist())  # not before a recycle
    assert bank.scorer.count[rows].tolist() == [3, 3, 3, 3]  # type: ignore[attr-defined]  # a's state kept meanwhile
    assert bank.recycle() == 4 and bank.recycle() == 0
    assert bank.scorer.count[rows].tolist() == [0, 0, 0, 0]  # type: ignore[attr-defined]
    c = PartitionPipeline("telemetry.host:2", cfg, inv, bank=bank)
    c.process_many([(orjson.dumps([m for m, at in msg if at == 0]), Origin("telemetry.host", 2, 0))])
    assert sorted(c.rows_of(np.arange(4)).tolist()) == sorted(rows.tolist())
    assert bank.scorer.count[c.rows_of(np.arange(4))].tolist() == [1, 1, 1, 1]  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="recycled"):
        a.process_many([(orjson.dumps([m for m, at in msg if at == 0]), Origin("telemetry.host", 0, 9))])
    assert bank.rows_in_use == 8


def test_a_bug_in_one_partition_costs_that_partition_and_one_in_the_shared_score_every_partition(
        load: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    inv, batches = load
    cfg = DetectorConfig(min_samples=5)
    group = agent_batches(batches)[0]
    bank = DetectorBank(cfg)
    pipes = [PartitionPipeline(o, cfg, inv, bank=bank) for o, _ in group]
    victim = pipes[1].origin

    import streams.stages.points as points

    real = points.Points.run

    def flaky(self: Any, batch: Any) -> None:
        if batch.part.origin == victim:
            raise ZeroDivisionError("a bug")
        real(self, batch)

    monkeypatch.setattr(points.Points, "run", flaky)
    outs = run_together([(p, items(b)) for p, (_, b) in zip(pipes, group, strict=True)])
    assert [isinstance(o, ZeroDivisionError) for o in outs] == [p.origin == victim for p in pipes]
    assert "in ingest stage 'points' of " + victim in str(outs[1].__notes__)  # type: ignore[union-attr]
    assert pipes[1].last_offset is None and all(p.last_offset is not None for p in pipes if p.origin != victim)
    monkeypatch.setattr(points.Points, "run", real)

    def broken(self: Any, *a: Any, **kw: Any) -> Any:
        raise ValueError("score bug")

    monkeypatch.setattr(DetectorBank, "update", broken)
    second = agent_batches(batches)[1]
    outs = run_together([(p, items(b)) for p, (_, b) in zip(pipes, second, strict=True)])
    assert all(isinstance(o, ValueError) for o in outs)
    assert "in ingest stage 'score' of " in str(outs[0].__notes__)  # type: ignore[union-attr]
