"""The pipeline as a list of named stages: the list, the names, per-stage timing, a stage list of one's own."""

from __future__ import annotations

import importlib
import itertools
from typing import Any

import numpy as np
import orjson
import pytest

from lockstep.local import LocalRunner
from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import INGEST_STAGES, PIPELINE, STAGES, Origin, PartitionPipeline
from streams.stages import Batch, Episodes, StageRef

T0 = 1764502800.0


def inventory() -> InventoryIndex:
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": "n[1-2]", "gpus_per_node": 8}))
    return inv


def gpu(ts: float, node: str, value: float, metric: str = "DCGM_FI_DEV_GPU_UTIL") -> dict[str, object]:
    return {"ts": ts, "layer": "gpu", "source": node, "metric": metric, "value": value, "labels": {"gpu": "0"}}


def traffic() -> list[tuple[bytes, Origin]]:
    """30 scrapes of two nodes' GPU utilisation, node n2 dropping to 0 from scrape 20, and one bad message of each
    kind the ingest stages refuse."""
    msgs = [orjson.dumps([gpu(T0 + k, "n1", 90.0), gpu(T0 + k, "n2", 90.0 if k < 20 else 0.0)]) for k in range(30)]
    msgs += [b"{not json", orjson.dumps([{"ts": T0 + 31, "layer": "gpu"}]),
             orjson.dumps([gpu(T0 + 5, "n1", 90.0)]),  # out of order
             orjson.dumps([{"ts": T0 + 31, "layer": "nic", "source": "n1", "metric": "port_xmit_data", "value": -3,
                            "labels": {"device": "mlx5_0", "port": "1"}}])]  # a negative counter
    return [(raw, Origin("telemetry.gpu", 0, i, T0 + i)) for i, raw in enumerate(msgs)]


def pipe(**kwargs: object) -> PartitionPipeline:
    return PartitionPipeline("telemetry.gpu:0", DetectorConfig(min_samples=5), inventory(), **kwargs)  # type: ignore[arg-type]


def test_the_pipeline_is_one_list_of_uniquely_named_stages() -> None:
    assert STAGES == ("decode", "validate", "normalise", "fabric", "clocks", "rate", "score", "episodes", "points")
    assert tuple(s.name for s in INGEST_STAGES) == STAGES
    names = [s.name for s in PIPELINE]
    assert names[: len(STAGES)] == list(STAGES)
    assert names[len(STAGES):] == ["correlate", "inhibit", "silence", "track", "emit", "route", "deliver"]
    assert len(set(names)) == len(names)
    assert all(callable(s.run) for s in INGEST_STAGES)


@pytest.mark.parametrize("ref", [s for s in PIPELINE if isinstance(s, StageRef)], ids=lambda s: s.name)
def test_a_stage_that_runs_elsewhere_names_code_that_exists(ref: StageRef) -> None:
    assert ref.runs_in and ref.does and ref.code
    for dotted in ref.code:
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        assert obj is not None, dotted


def test_a_pipeline_runs_the_list_it_is_given() -> None:
    assert pipe().stages == INGEST_STAGES


def test_dead_letters_carry_the_name_of_a_stage_in_the_list() -> None:
    out = pipe().process_many(traffic())
    stages = [dl.stage for dl in out.dead_letters]
    assert stages == ["decode", "validate", "normalise", "rate"]  # in the order the stages run


def test_the_batch_gives_the_same_output_as_its_messages_one_by_one() -> None:
    """Several samples of a series in one batch are several rounds through rate, score, episodes and points."""
    whole = pipe().process_many(traffic())
    one, anomalies, points = pipe(), [], []
    for item in traffic():
        out = one.process_many([item])
        anomalies += out.anomalies
        points += [groups for lanes in out.points.get("j1", {}).values() for groups in lanes]
    assert [a["source"] for a in whole.anomalies] == ["n2"] and whole.anomalies == anomalies
    assert [g for lanes in whole.points["j1"].values() for g in lanes] == points


def test_each_stage_is_timed_with_the_clock_it_is_given_and_decode_keeps_its_own_time() -> None:
    ticks = itertools.count()
    seen: list[int] = []

    def timer() -> float:
        seen.append(next(ticks))
        return float(seen[-1])

    items = traffic()
    out = pipe().process_many(items, timer)
    assert set(out.stage_seconds) == set(STAGES)
    # Decode runs lazily inside validate's run: a tick per message and one for the end are decode's, with the
    # tick of its own run (which only hands validate the iterator).
    assert out.stage_seconds["decode"] == len(items) + 1 + 1
    assert all(s >= 1 for s in out.stage_seconds.values())
    assert sum(out.stage_seconds.values()) == seen[-1] - seen[0]
    assert pipe().process_many(items).stage_seconds == {}  # no timer, no timing


def test_a_stage_list_of_ones_own_runs_in_place_of_the_default() -> None:
    class Recorder:
        name = "recorder"

        def __init__(self) -> None:
            self.rounds: list[int] = []

        def run(self, batch: Batch) -> None:
            self.rounds.append(len(batch.rounds))

    recorder = Recorder()
    without_episodes = tuple(s for s in INGEST_STAGES if not isinstance(s, Episodes))
    out = pipe(stages=(*without_episodes, recorder)).process_many(traffic())
    full = pipe().process_many(traffic())
    assert out.anomalies == [] and full.anomalies  # no episodes stage, no anomaly records
    assert out.points == full.points and out.samples == full.samples
    assert recorder.rounds == [30]  # a round per scrape (the late sample's round has nothing usable)


def test_a_stage_that_raises_is_named_in_the_error_and_the_offset_does_not_move() -> None:
    class Broken:
        name = "broken"

        def run(self, batch: Batch) -> None:
            raise RuntimeError("a bug")

    p = pipe(stages=(*INGEST_STAGES[:3], Broken(), *INGEST_STAGES[3:]))
    with pytest.raises(RuntimeError) as err:
        p.process_many(traffic())
    assert "in ingest stage 'broken' of telemetry.gpu:0" in err.value.__notes__
    assert p.last_offset is None


def test_the_local_runner_runs_the_same_stages_and_reports_them_by_name() -> None:
    runner = LocalRunner(partitions=1, timer=lambda: 0.0)
    assert runner.stages == INGEST_STAGES
    runner.inventory_event({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING", "nodes": "n[1-2]",
                            "gpus_per_node": 8})
    for raw, origin in traffic():
        runner.message("gpu", "n1", raw, float(int(origin.timestamp or 0)))
    result = runner.finish()
    assert result.dead_letters_by_stage == {"decode": 1, "validate": 1, "normalise": 1, "rate": 1}
    assert set(result.stage_seconds) == set(STAGES)


def test_a_round_at_one_time_gives_the_points_the_grouping_by_time_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The points stage's one-scrape path (no masks, no grouping by time) against its general path, over
    jobs that end and start on the same nodes between scrapes and a peer-compared lane (step time per rank)."""
    from lockstep.loadgen import LoadGenerator, LoadSpec
    from streams.stages.points import Points

    spec = LoadSpec(gpus=32, nodes_per_job=2)
    t0 = spec.start_ts

    def run() -> list[tuple[Any, Any]]:
        gen = LoadGenerator(spec)  # (its values are drawn as it goes: a fresh one gives the same messages)
        pipes: dict[str, PartitionPipeline] = {}
        outs = []
        inv = handover_inventory(spec)
        for k in range(10):
            for layer, _key, raw in gen.messages(k):
                origin = f"telemetry.{layer}:0"
                pipe = pipes.get(origin) or pipes.setdefault(origin, PartitionPipeline(origin, DetectorConfig(), inv))
                out = pipe.process_many([(raw, Origin(f"telemetry.{layer}", 0, k))])
                outs.append((out.points, out.workers))
        return outs

    calls = []
    one_time = Points._at_one_time

    def counted(*a: Any) -> None:
        calls.append(a[2])
        one_time(*a)

    monkeypatch.setattr(Points, "_at_one_time", staticmethod(counted))
    fast = run()

    def general(part: Any, out: Any, t: float, g: int, rows: Any, ids: Any, x: Any) -> None:
        Points._at_times(part, out, np.full(ids.shape[0], t), g, rows, ids, x)

    monkeypatch.setattr(Points, "_at_one_time", staticmethod(general))
    assert fast == run()
    assert {t0 + 2, t0 + 5, t0 + 8} <= set(calls)  # before, between and after the two jobs
    jobs = {job for points, _ in fast for job in points}
    assert {"job00000", "job09"} <= jobs and any(workers for _, workers in fast)


def test_a_backlog_batch_gives_each_job_the_points_its_scrapes_give_one_by_one() -> None:
    """The points stage groups a batch's rounds at once: the same values at the same times for each job and
    lane (and worker) as the scrapes one at a time, with jobs that end and start on the same nodes and a
    source missing from one scrape (so a round mixes two scrapes' times)."""
    from collections import Counter

    from lockstep.loadgen import LoadGenerator, LoadSpec

    spec = LoadSpec(gpus=32, nodes_per_job=2)
    t0 = spec.start_ts

    def messages() -> dict[str, list[tuple[bytes, Origin]]]:
        gen = LoadGenerator(spec)
        parts: dict[str, list[tuple[bytes, Origin]]] = {}
        for k in range(10):
            for layer, key, raw in gen.messages(k):
                if k == 3 and key == b"n000000":
                    continue  # this node's scrape 3 is lost: its scrape 4 shares round 4 with the others' scrape 3
                items = parts.setdefault(f"telemetry.{layer}:0", [])
                items.append((raw, Origin(f"telemetry.{layer}", 0, len(items))))
        return parts

    def flat(outs: list[Any]) -> tuple[Counter[Any], Counter[Any]]:
        points: Counter[Any] = Counter()
        workers: Counter[Any] = Counter()
        for out in outs:
            for job, lanes in out.points.items():
                points.update((job, lane, g[0], v) for lane, groups in lanes.items() for g in groups for v in g[1])
            for job, lanes in out.workers.items():
                workers.update((job, lane, g[0], v, w) for lane, groups in lanes.items() for g in groups
                               for v, w in zip(g[1], g[2], strict=True))
        return points, workers

    inv = handover_inventory(spec)
    together = [PartitionPipeline(origin, DetectorConfig(), inv).process_many(items)
                for origin, items in messages().items()]
    one_by_one = []
    for origin, items in messages().items():
        pipe = PartitionPipeline(origin, DetectorConfig(), inv)
        one_by_one += [pipe.process_many([item]) for item in items]
    points, workers = flat(together)
    assert (points, workers) == flat(one_by_one)
    jobs = {job for job, *_ in points}
    assert {"job00000", "job09"} <= jobs and workers
    assert not any(job == "job00000" and ts > t0 + 4.5 for job, _, ts, _ in points)  # ended: nothing after
    assert not any(job == "job09" and ts < t0 + 7.0 for job, _, ts, _ in points)  # not started: nothing before
    assert max(out.samples for out in together) > 100  # several scrapes a batch: several rounds


def test_each_sample_keeps_its_message_and_arrival_time_on_both_paths() -> None:
    """The message index and arrival time (``ingest_ts``) of every sample, whichever path validated it:
    typed rows (with no arrival times, some, all) and records (a ``{"samples": ...}`` document), around a
    message that is a dead letter."""

    def sample(k: int, node: str, ingest: float | None = None) -> dict[str, object]:
        rec = gpu(T0 + k, node, 50.0 + k)
        if ingest is not None:
            rec["ingest_ts"] = ingest
        return rec

    p = pipe()
    p.process_many([(orjson.dumps([sample(0, "n1"), sample(0, "n2")]), Origin("telemetry.gpu", 0, 0))])
    messages = [
        orjson.dumps([sample(1, "n1"), sample(1, "n2")]),  # typed rows, no arrival time
        orjson.dumps([sample(2, "n1", T0 + 2.5), sample(2, "n2")]),  # typed rows, one arrival time
        orjson.dumps({"samples": [sample(3, "n1"), sample(3, "n2", T0 + 3.25)]}),  # records, one arrival time
        b"{not json",
        orjson.dumps({"samples": [sample(4, "n1"), sample(4, "n2")]}),  # records, none
        orjson.dumps([sample(5, "n1", T0 + 5.5), sample(5, "n2", T0 + 5.75)]),  # typed rows, every one
    ]
    batch = p.begin([(raw, Origin("telemetry.gpu", 0, i + 1)) for i, raw in enumerate(messages)])
    assert batch.msg is not None and batch.ingest is not None and batch.ts is not None
    assert batch.msg.tolist() == [0, 0, 1, 1, 2, 2, 4, 4, 5, 5]
    assert batch.ts.tolist() == [T0 + k for k in (1, 1, 2, 2, 3, 3, 4, 4, 5, 5)]
    nan = float("nan")
    expected = [nan, nan, T0 + 2.5, nan, nan, T0 + 3.25, nan, nan, T0 + 5.5, T0 + 5.75]
    np.testing.assert_array_equal(batch.ingest, np.array(expected))
    assert [d.stage for d in batch.out.dead_letters] == ["decode"]


def test_a_batch_judges_clocks_as_its_messages_one_by_one() -> None:
    """The clocks stage over a batch: each (message, source) gives one delay, in message order, as the
    messages one at a time do, whether a batch needs no sort (a message is one source's scrape at one
    time) or does (a message of two sources and times, out of order); a source 5 s ahead is found."""
    nodes = [f"n{i}" for i in range(1, 6)]
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": "n[1-5]", "gpus_per_node": 8}))

    def traffic(mixed: bool) -> list[tuple[bytes, Origin]]:
        out = []
        for k in range(40):
            for i, node in enumerate(nodes):
                ahead = 5.0 if node == "n5" else 0.0  # n5 stamps its samples 5 s ahead
                recs = [gpu(T0 + k + ahead, node, 50.0), gpu(T0 + k + ahead, node, 40.0, "DCGM_FI_PROF_SM_ACTIVE")]
                if mixed and i == 1:  # and a message carrying another node's older sample after its own
                    recs.append(gpu(T0 + k - 0.5, "n1", 45.0, "DCGM_FI_PROF_DRAM_ACTIVE"))
                kafka_ts = T0 + k + 0.05 + 0.01 * i
                out.append((orjson.dumps(recs), Origin("telemetry.gpu", 0, len(out), kafka_ts)))
        return out

    for mixed in (False, True):
        batched = PartitionPipeline("telemetry.gpu:0", DetectorConfig(), inv)
        whole = [c for k in range(0, 200, 50) for c in batched.process_many(traffic(mixed)[k:k + 50]).clocks]
        one = PartitionPipeline("telemetry.gpu:0", DetectorConfig(), inv)
        alone = [c for item in traffic(mixed) for c in one.process_many([item]).clocks]
        assert whole == alone
        assert [(c["source"], c["phase"]) for c in whole] == [("n5", "start")]
        assert batched.clocks.offset("n5") == one.clocks.offset("n5")


def handover_inventory(spec: Any) -> InventoryIndex:
    """The generated cluster's inventory, with its first job ending after 4 scrapes and job09 running on
    the same two nodes from scrape 7 on."""
    from lockstep.loadgen import LoadGenerator

    t0 = spec.start_ts
    inv = InventoryIndex()
    for doc in LoadGenerator(spec).inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    for doc in ({"kind": "job", "ts": t0 + 4.5, "job_id": "job00000", "state": "COMPLETED",
                 "nodes": "n000000,n000001", "gpus_per_node": 8},
                {"kind": "job", "ts": t0 + 7.0, "job_id": "job09", "state": "RUNNING",
                 "nodes": "n000000,n000001", "gpus_per_node": 8}):
        inv.apply(inventory_adapter.validate_python(doc))
    return inv
