"""A job's lanes carry one quantity in one unit: dcgm-exporter's and node_exporter's own output (the
real-format fixtures) through the pipeline.

dcgm-exporter sends, per GPU, utilisation in percent next to the profiling fractions (0-1), power
(W) and memory (MiB), all of meaning "utilisation"; node_exporter sends CPU-seconds counters per mode,
from which the adapter derives ``cpu_utilization`` (percent) and ``cpu_iowait_percent``. Before the
lane rule every one of them fed the ``gpu_util`` / ``cpu_util`` lane, whose median the timeline, the
stats topic and the job view print as "GPU utilisation, %" (0.8 "%" for GPUs at 95 % with the load
generator's DCGM fields).
"""

from __future__ import annotations

import orjson

from models.inventory import inventory_adapter
from streams.detect import DetectorConfig
from streams.formats import AdapterState, convert
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline
from tests.formats.helpers import T0, load


def pipeline(layer: str, node: str) -> PartitionPipeline:
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": node, "gpus_per_node": 8}))
    return PartitionPipeline(f"telemetry.{layer}:0", DetectorConfig(), inv)


def lane_values(pipe: PartitionPipeline, samples: list[dict[str, object]], lane: str, offset: int = 0) -> list[float]:
    out = pipe.process_many([(orjson.dumps(samples), Origin("t", 0, offset, T0))])
    return [v for _, values in out.points.get("j1", {}).get(lane, []) for v in values]


def test_the_gpu_lane_is_dcgm_exporters_utilisation_percent_alone() -> None:
    out = convert("dcgm-exporter", load("dcgm_exporter.prom"), ts=T0)
    gpu = [s for s in out.samples if s["layer"] == "gpu"]
    util = sorted(float(s["value"]) for s in gpu if s["metric"] == "DCGM_FI_DEV_GPU_UTIL")
    assert util == [96.0, 97.0]
    assert any(s["metric"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" for s in gpu)  # 0.912 on GPU 0: a fraction
    node = str(gpu[0]["source"])
    assert sorted(lane_values(pipeline("gpu", node), gpu, "gpu_util")) == util


def test_the_cpu_lane_is_the_derived_share_not_the_counters_behind_it() -> None:
    state = AdapterState()
    first = convert("node-exporter", load("node_exporter.prom"), ts=T0, state=state, default_source="n1")
    second = convert("node-exporter", load("node_exporter_next.prom"), ts=T0 + 15, state=state, default_source="n1")
    host = [s for s in second.samples if s["layer"] == "host"]
    derived = [float(s["value"]) for s in host if s["metric"] == "cpu_utilization"]
    assert derived and any(s["metric"] == "node_cpu_seconds_total" for s in host)
    assert any(s["metric"] == "cpu_iowait_percent" for s in host)
    pipe = pipeline("host", "n1")
    lane_values(pipe, [s for s in first.samples if s["layer"] == "host"], "cpu_util")
    assert lane_values(pipe, host, "cpu_util", offset=1) == derived
