"""The ablated worker of ``worker_ab --upto`` (benchmarks/ablated_worker.py) really runs fewer stages.

A cut that did not apply would measure the whole worker under another name; one that broke the pipeline
would measure a worker that dead-letters everything. Both are checked on real load-generator messages.
"""

from __future__ import annotations

import pytest

from benchmarks import ablated_worker
from lockstep.loadgen import LoadGenerator, LoadSpec
from models.inventory import inventory_adapter
from streams import pipeline
from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.stages.base import Origin


@pytest.fixture
def restore_init() -> object:
    init = pipeline.PartitionPipeline.__init__
    yield init
    pipeline.PartitionPipeline.__init__ = init  # type: ignore[method-assign]


def _gpu_batch() -> tuple[InventoryIndex, list[tuple[bytes, Origin]]]:
    gen = LoadGenerator(LoadSpec(gpus=64))
    inv = InventoryIndex()
    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    msgs = [raw for k in range(3) for layer, _, raw in gen.messages(k) if layer == "gpu"]
    return inv, [(raw, Origin("telemetry.gpu", 0, i, None, None)) for i, raw in enumerate(msgs)]


def test_a_cut_worker_runs_the_stages_up_to_the_one_named_and_keeps_every_sample(restore_init: object) -> None:
    inv, items = _gpu_batch()
    whole_pipe = pipeline.PartitionPipeline("telemetry.gpu:0", DetectorConfig(), inv)
    whole = whole_pipe.process_many(items)
    ablated_worker.install("validate")
    cut = pipeline.PartitionPipeline("telemetry.gpu:0", DetectorConfig(), inv)
    assert [s.name for s in cut.stages] == ["decode", "validate"]
    out = cut.process_many(items)
    # every message decoded and validated (each series admitted), none dead-lettered, nothing computed from
    # them (the samples are counted from the normalise stage on)
    assert out.messages == whole.messages == len(items)
    assert len(cut.registry) == len(whole_pipe.registry) > 0
    assert not out.dead_letters and not whole.dead_letters
    assert whole.samples > 0 and whole.points
    assert out.samples == 0 and not out.points
    # a pipeline given its stages explicitly keeps them (the cut is only a default)
    explicit = pipeline.PartitionPipeline("x:0", DetectorConfig(), inv, stages=pipeline.INGEST_STAGES)
    assert len(explicit.stages) == len(pipeline.INGEST_STAGES)


def test_a_cut_after_a_stage_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="no ingest stage 'scores'"):
        ablated_worker.cut_stages("scores")
