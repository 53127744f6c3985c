"""The fabric rollup built at ingest and merged from its summaries gives the report the raw fold gives.

The raw fold is what every read model did before issue 23: each NIC and switch message folded into a
:class:`FabricRollup` (``fold_message``). The new path: each input partition's pipeline folds its
validated samples (the ``fabric`` stage) and publishes summaries (:meth:`PartitionFabric.publish`),
which a read-side :class:`FabricRollup` merges. Both run here over the same real-format input: the
``roce-retransmits`` scenario's messages as the telemetry topics carry them (the simulator, one
message per layer, source and second), and the load generator's cluster (the scale bench's).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lockstep.replay import batch_messages, read_input, write_simulation
from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.fabric import FABRIC_LAYERS, FabricConfig, FabricRollup, fabric_report
from streams.fabric_publish import PartitionFabric
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline
from streams.readstore import ReadStore

PARTITIONS = 4
Message = tuple[str, int, bytes]  # (topic, partition, value)


def scenario(tmp: Path, name: str) -> tuple[list[Message], InventoryIndex]:
    path = tmp / f"{name}.jsonl"
    write_simulation(path, name)
    with open(path, "rb") as fh:
        data = read_input(fh)
    inv = InventoryIndex()
    for _, _, event in data.inventory:
        inv.apply(event)
    msgs = [(f"telemetry.{layer}", zlib.crc32(key.encode()) % PARTITIONS, b"[" + b",".join(raws) + b"]")
            for layer, key, raws in batch_messages(data.samples)]
    return msgs, inv


def loadgen(scrapes: int) -> tuple[list[Message], InventoryIndex]:
    from lockstep.loadgen import LoadGenerator, LoadSpec

    gen = LoadGenerator(LoadSpec(gpus=256, nodes_per_job=4, incidents=((0, 10),), incident_s=20.0, seed=5))
    inv = InventoryIndex()
    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    msgs = [(f"telemetry.{layer}", zlib.crc32(key) % PARTITIONS, value)
            for k in range(scrapes) for layer, key, value in gen.messages(k)]
    return msgs, inv


def raw_fold(msgs: list[Message]) -> FabricRollup:
    """What a read model did before: every NIC and switch message folded whole."""
    roll = FabricRollup()
    for topic, _, value in msgs:
        if topic.rpartition(".")[2] in FABRIC_LAYERS:
            roll.fold_message(value)
    return roll


class Ingest:
    """Input partitions' pipelines with the fabric rollup, fed in batches; the summaries they publish."""

    def __init__(self, inv: InventoryIndex, interval_s: float = 5.0) -> None:
        self.inv, self.interval_s = inv, interval_s
        self.pipes: dict[str, PartitionPipeline] = {}
        self.offsets: dict[str, int] = {}
        self.published: list[bytes] = []

    def pipe(self, name: str) -> PartitionPipeline:
        if name not in self.pipes:
            self.pipes[name] = PartitionPipeline(name, DetectorConfig(), self.inv, fabric=FabricConfig(),
                                                 fabric_interval_s=self.interval_s)
        return self.pipes[name]

    def feed(self, msgs: list[Message], batch: int = 40) -> None:
        for start in range(0, len(msgs), batch):
            groups: dict[str, list[tuple[bytes, Origin]]] = {}
            for topic, partition, value in msgs[start:start + batch]:
                name = f"{topic}:{partition}"
                offset = self.offsets.get(name, 0)
                self.offsets[name] = offset + 1
                groups.setdefault(name, []).append((value, Origin(topic, partition, offset, 1000.0 + offset)))
            for name, items in groups.items():
                pipe = self.pipe(name)
                pipe.process_many(items)
                self.publish(pipe)

    def publish(self, pipe: PartitionPipeline, force: bool = False) -> None:
        assert pipe.fabric is not None
        self.published += pipe.fabric.publish(pipe.watermark, pipe.origin, force=force)

    def flush(self) -> None:
        for pipe in self.pipes.values():
            self.publish(pipe, force=True)


def merged(published: list[bytes]) -> FabricRollup:
    roll = FabricRollup()
    for value in published:
        roll.merge_message(value)
    return roll


def entities(roll: FabricRollup) -> dict[Any, Any]:
    """Every entity as plain values (the ring in time order)."""
    out = {}
    for key, e in roll.entities.items():
        ts, bps = e.tx_rates()
        out[key] = (e.first_seen, e.last_seen, ts.tolist(), bps.tolist(), e.n_rates, dict(e.congestion),
                    dict(e.errors), dict(e.days))
    return out


def report(roll: FabricRollup, inv: InventoryIndex) -> dict[str, Any]:
    assert roll.latest is not None
    return fabric_report(roll, inv, ReadStore(), roll.latest)


@pytest.fixture(scope="module")
def roce(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Message], InventoryIndex]:
    return scenario(tmp_path_factory.mktemp("roce"), "roce-retransmits")


def test_the_report_from_published_summaries_is_the_raw_folds(roce: tuple[list[Message], InventoryIndex]) -> None:
    msgs, inv = roce
    old = raw_fold(msgs)
    ingest = Ingest(inv)
    ingest.feed(msgs)
    ingest.flush()
    new = merged(ingest.published)
    assert entities(new) == entities(old)
    assert report(new, inv) == report(old, inv)
    # The comparison is of a report with numbers in it: rates, congestion, errors on the faulty NIC.
    loss = [g for g in report(old, inv)["questions"]["loss"]["groups"] if (g["fabric"], g["tier"]) == ("roce", "host")]
    assert loss[0]["value"] > 0 and loss[0]["evidence"][0]["link"].startswith("gpu014")
    samples = sum(len(orjson.loads(v)) for t, _, v in msgs if t.rpartition(".")[2] in FABRIC_LAYERS)
    ports = sum(len(orjson.loads(v)["ports"]) for v in ingest.published)
    assert ports * 5 < samples  # what every read model merges instead: a small fraction


def test_the_load_generators_cluster_gives_the_same_report() -> None:
    msgs, inv = loadgen(40)
    old = raw_fold(msgs)
    ingest = Ingest(inv, interval_s=3.0)
    ingest.feed(msgs, batch=300)
    ingest.flush()
    new = merged(ingest.published)
    assert len(old.entities) == 64 and entities(new) == entities(old)
    assert report(new, inv) == report(old, inv)


def _restart(ingest: Ingest, name: str, snapshot: bytes, msgs: list[Message], resume_at: int) -> None:
    """Partition ``name`` restored from ``snapshot`` on another worker, which processes its messages
    from offset ``resume_at`` again (state only up to where it left off, as a catch-up does)."""
    pipe = PartitionPipeline(name, DetectorConfig(), ingest.inv, fabric=FabricConfig(),
                             fabric_interval_s=ingest.interval_s)
    pipe.restore(snapshot)
    ingest.pipes[name] = pipe
    topic, _, partition = name.rpartition(":")
    mine = [(v, Origin(topic, int(partition), i, 1000.0 + i))
            for i, (v, _) in enumerate((v, p) for t, p, v in msgs if t == topic and p == int(partition))]
    assert pipe.last_offset is not None
    for start in range(pipe.last_offset + 1, len(mine), 25):
        pipe.process_many(mine[start:start + 25])
        ingest.publish(pipe)


def test_a_restored_partition_publishing_again_adds_nothing_twice(roce: tuple[list[Message], InventoryIndex]) -> None:
    """A worker dies after publishing past its last snapshot; the next owner restores the snapshot and
    publishes the same samples again (with other batch edges): the merged rollup is unchanged."""
    msgs, inv = roce
    old = raw_fold(msgs)
    ingest = Ingest(inv)
    half = len(msgs) // 2
    ingest.feed(msgs[:half // 2])
    snapshots = {name: pipe.snapshot() for name, pipe in ingest.pipes.items()}
    ingest.feed(msgs[half // 2:half])  # published on; then the worker is gone
    for name, snap in snapshots.items():
        if "nic" in name or "switch" in name:
            _restart(ingest, name, snap, msgs[:half], 0)
    ingest.feed(msgs[half:])
    ingest.flush()
    seen: dict[tuple[str, str, int], int] = {}
    for value in ingest.published:
        msg = orjson.loads(value)
        for port in msg["ports"]:
            if "seq" in port:
                k = (msg["origin"], str(port["key"]), port["seq"])
                seen[k] = seen.get(k, 0) + 1
    assert max(seen.values()) > 1  # the same rates were published twice
    new = merged(ingest.published)
    assert entities(new) == entities(old)
    assert report(new, inv) == report(old, inv)


def test_summaries_read_twice_add_nothing() -> None:
    msgs, inv = loadgen(20)
    ingest = Ingest(inv, interval_s=2.0)
    ingest.feed(msgs, batch=300)
    ingest.flush()
    once = entities(merged(ingest.published))
    twice = merged(ingest.published)
    for value in ingest.published[: len(ingest.published) // 2]:  # a read model reading part of it again
        twice.merge_message(value)
    assert entities(twice) == once


def test_a_read_model_starting_late_counts_only_what_it_read() -> None:
    """The first summary of a lineage it reads adds that summary's own increments, not the totals since
    the ingest state began (the read model reads history_s back, as from the raw topics before)."""
    msgs, inv = loadgen(30)
    ingest = Ingest(inv, interval_s=5.0)
    ingest.feed(msgs[: len(msgs) // 2], batch=300)
    before = len(ingest.published)
    ingest.feed(msgs[len(msgs) // 2:], batch=300)
    ingest.flush()
    late, whole = merged(ingest.published[before:]), merged(ingest.published)
    key = next(k for k, e in whole.entities.items() if e.congestion and sum(e.congestion.values()) > 0)
    assert 0 < sum(late.entities[key].congestion.values()) < sum(whole.entities[key].congestion.values())
    assert late.entities[key].first_seen > whole.entities[key].first_seen


def test_a_pipeline_without_the_fabric_report_keeps_no_rollup() -> None:
    msgs, inv = loadgen(3)
    pipe = PartitionPipeline("telemetry.switch:0", DetectorConfig(), inv)
    pipe.process_many([(v, Origin("telemetry.switch", 0, i)) for i, (t, _, v) in enumerate(msgs)
                       if t == "telemetry.switch"])
    assert pipe.fabric is None


def test_the_rollup_survives_a_snapshot_as_it_was() -> None:
    msgs, inv = loadgen(8)
    ingest = Ingest(inv, interval_s=1000.0)  # nothing published yet: everything pending goes with the snapshot
    ingest.feed(msgs, batch=500)
    for name, pipe in ingest.pipes.items():
        copy = PartitionPipeline(name, DetectorConfig(), inv, fabric=FabricConfig())
        copy.restore(pipe.snapshot())
        assert copy.fabric is not None and pipe.fabric is not None
        assert copy.fabric.snapshot() == orjson.loads(orjson.dumps(pipe.fabric.snapshot()))
        n = pipe.registry.size
        assert [copy.fabric.series(sid) for sid in range(n)] == [pipe.fabric.series(sid) for sid in range(n)]
    assert any(p.fabric is not None and p.fabric.ports for p in ingest.pipes.values())


def partitions(msgs: list[Message]) -> Iterator[str]:
    yield from sorted({f"{t}:{p}" for t, p, _ in msgs})


def test_every_summary_is_on_its_partition_and_small() -> None:
    msgs, inv = loadgen(12)
    fab = PartitionFabric(FabricConfig(), interval_s=2.0)
    assert fab.publish(100.0) == []  # nothing folded: nothing to say
    ingest = Ingest(inv, interval_s=2.0)
    ingest.feed(msgs, batch=200)
    for value in ingest.published:
        msg = orjson.loads(value)
        assert msg["type"] == "fabric_rollup" and msg["origin"] in set(partitions(msgs))
        assert msg["origin"].rpartition(":")[0].rpartition(".")[2] in FABRIC_LAYERS
        assert len(value) < 1_000_000
