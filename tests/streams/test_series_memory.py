"""What the series registry holds per series: shared label tuples, alias keys, metadata built on look-up.

Equal label tuples are one object, counted, and dropped with the last series holding them (job
churn must not grow the registry); an alias key (labels out of order) reuses its key's pairs and
goes with its series; ``meta[sid]`` is rebuilt from the key and the counter flag.
"""

from __future__ import annotations

import numpy as np
import pytest

import streams.series as series
from streams.catalogue import MetricInfo, lookup
from streams.series import FREE, SeriesLimits, SeriesRegistry


def gpu_labels(node: int, gpu: int, job: str) -> dict[str, str]:
    return {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "hpc_job": job}  # out of order, as DCGM sends them


def test_the_series_of_one_gpu_share_their_labels_and_an_alias_shares_the_keys_pairs() -> None:
    reg = SeriesRegistry()
    util = reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    power = reg.id_for("gpu", "n1", "DCGM_FI_DEV_POWER_USAGE", gpu_labels(1, 0, "j1"), None)
    other = reg.id_for("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    key = reg.keys[util]
    assert key is not None and key[3] == (("UUID", "GPU-1-0"), ("gpu", "0"), ("hpc_job", "j1"))
    assert reg.keys[power][3] is key[3] and reg.keys[other][3] is key[3]  # type: ignore[index]
    raw = ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", tuple(gpu_labels(1, 0, "j1").items()))
    assert reg.lookup_raw(raw) == util  # the hot path's unsorted look-up
    [alias] = [k for k, sid in reg._ids.items() if sid == util and k is not key]
    assert alias == raw and {id(p) for p in alias[3]} == {id(p) for p in key[3]}
    assert len(reg._labels) == 2  # the sorted tuple and the raw-order one, for all three series


def test_job_churn_leaves_no_label_tuples_or_keys_behind() -> None:
    reg = SeriesRegistry(SeriesLimits(max_series=64))
    for job in range(50):  # each job's series evicted before the next job's arrive (ids reused)
        ids = [reg.id_for("gpu", f"n{g // 2}", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(g // 2, g % 2, f"job{job}"), None)
               for g in range(8)]
        assert sorted(ids) == list(range(8))
        assert len(reg._labels) == 16 and len(reg._ids) == 16
        reg.evict(np.array(ids))
        assert len(reg._labels) == 0 and len(reg._ids) == 0 and reg._aliases == [None] * 8
    assert reg.size == 8


def test_meta_is_rebuilt_from_the_key_and_the_kind() -> None:
    reg = SeriesRegistry()
    gauge = reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, None)
    made_counter = reg.id_for("host", "n1", "my_custom_total", {}, "counter")
    assert reg.meta[gauge].info is lookup("DCGM_FI_DEV_GPU_UTIL")
    assert reg.meta[made_counter].info == lookup("my_custom_total", "counter") and reg.meta[made_counter].info.counter
    assert (reg.meta[gauge].layer, reg.meta[gauge].source, reg.meta[gauge].labels) == ("gpu", "n1", {"gpu": "0"})
    reg.evict(np.array([gauge]))
    assert reg.meta[gauge] is FREE and len(reg.meta) == 2
    back = SeriesRegistry.restore(reg.snapshot())
    assert back.meta[made_counter].info == reg.meta[made_counter].info and back.meta[gauge] is FREE


def test_a_scale_float32_cannot_hold_keeps_the_registry_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = SeriesRegistry()
    reg.id_for("nic", "n1", "PortXmitData", {"port": "1"}, None)
    assert reg.scale.dtype == np.float32 and float(reg.scale[0]) == 4.0
    tenth = MetricInfo(*[getattr(lookup("PortXmitData"), f) for f in ("meaning", "counter", "mode", "bad")], 0.1)
    monkeypatch.setattr(series, "lookup", lambda metric, kind=None: tenth)
    sid = reg.id_for("nic", "n1", "vendor_bytes_total", {"port": "1"}, None)
    assert reg.scale.dtype == np.float64 and reg.scale[sid] == 0.1 and reg.scale[0] == 4.0
