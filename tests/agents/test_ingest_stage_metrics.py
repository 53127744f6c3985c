"""The ingest agent times every stage of the pipeline by its name (``lockstep_stage_seconds{stage}``)."""

from __future__ import annotations

from typing import Any

import orjson

from agents.app import build_app
from agents.metrics import WorkerMetrics
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex
from streams.pipeline import STAGES

T0 = 1764502800.0


def observed(metrics: WorkerMetrics) -> dict[str, float]:
    """Observations of ``lockstep_stage_seconds`` by stage."""
    return {s.labels["stage"]: s.value for m in metrics.stage_seconds.collect() for s in m.samples
            if s.name.endswith("_count")}


def test_each_ingest_stage_is_observed_once_per_partition_batch_by_its_name(_loop: Any) -> None:
    metrics = WorkerMetrics()
    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9",  # type: ignore[call-arg]
                                partitions=2)
    app, _ = build_app(settings, "127.0.0.1:9", InventoryIndex(), metrics=metrics, emit=_discard, loop=_loop)
    app.finalize()

    async def go() -> None:
        async with app.agents["ingest"].test_context() as agent:
            for k in range(3):
                await agent.put(orjson.dumps([{"ts": T0 + k, "layer": "gpu", "source": "n1", "metric": "m",
                                               "value": 1.0}]), key=b"n1", partition=0)

    _loop.run_until_complete(go())
    counts = observed(metrics)
    batches = counts["ingest_batch"]  # one pipeline call per partition and batch (the agent batches the puts)
    assert batches >= 1
    assert {stage: counts.get(stage) for stage in STAGES} == dict.fromkeys(STAGES, batches)


async def _discard(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
    return None
