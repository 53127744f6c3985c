"""What the series registry holds per series: shared label tuples, alias keys, metadata built on look-up.

Equal label tuples are one object, counted, and dropped with the last series holding them (job
churn must not grow the registry); an alias key (labels out of order) reuses its key's pairs and
goes with its series; ``meta[sid]`` is rebuilt from the key and the counter flag.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import streams.series as series
from streams.catalogue import MetricInfo, lookup
from streams.series import FREE, SeriesLimits, SeriesRegistry


def gpu_labels(node: int, gpu: int, job: str) -> dict[str, str]:
    return {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "hpc_job": job}  # out of order, as DCGM sends them


def test_the_series_of_one_gpu_share_their_labels_and_each_is_held_under_the_order_it_comes_in() -> None:
    reg = SeriesRegistry()
    util = reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    power = reg.id_for("gpu", "n1", "DCGM_FI_DEV_POWER_USAGE", gpu_labels(1, 0, "j1"), None)
    other = reg.id_for("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    raw = ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", tuple(gpu_labels(1, 0, "j1").items()))
    key = reg.keys[util]
    assert key == raw and reg.lookup_raw(raw) == util  # the hot path's unsorted look-up
    assert reg.keys[power][3] is key[3] and reg.keys[other][3] is key[3]  # type: ignore[index]
    assert len(reg._ids) == 3 and len(reg._labels) == 1  # one key a series, one label tuple for all three
    # The identity is the sorted one: the metadata, and the same series in any order.
    assert reg.meta[util].key == ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL",
                                  (("UUID", "GPU-1-0"), ("gpu", "0"), ("hpc_job", "j1")))
    assert list(reg.meta[util].labels) == ["UUID", "gpu", "hpc_job"]
    assert reg.get(reg.meta[util].key) == util
    in_order = dict(sorted(gpu_labels(1, 0, "j1").items()))
    assert reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", in_order, None) == util  # another order: an alias
    alias = reg._aliases[util]
    assert alias == reg.meta[util].key and {id(p) for p in alias[3]} == {id(p) for p in key[3]}
    assert reg.lookup_raw(alias) == util and len(reg._ids) == 4 and len(reg) == 3


def test_after_a_restore_a_series_is_held_under_the_order_its_source_sends() -> None:
    reg = SeriesRegistry()
    sid = reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    snap = orjson.loads(orjson.dumps(reg.snapshot()))
    assert list(snap["rows"][sid][3]) == ["UUID", "gpu", "hpc_job"]  # the rows as before: sorted
    back = SeriesRegistry.restore(snap)
    raw = ("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", tuple(gpu_labels(1, 0, "j1").items()))
    assert back.lookup_raw(raw) == -1  # restored sorted: the first sample takes the slow path
    assert back.admit("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None) == sid
    assert back.lookup_raw(raw) == sid and back.keys[sid] == raw and back._aliases[sid] is None
    assert len(back._ids) == 1 and len(back._labels) == 1 and len(back._orders) == 1
    # the sorted order again (an exporter that changed): an alias now, the key stays
    assert back.admit("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", dict(sorted(gpu_labels(1, 0, "j1").items())), None) == sid
    assert back.keys[sid] == raw and len(back._ids) == 2 and len(back) == 1


def test_job_churn_leaves_no_label_tuples_keys_or_orders_behind() -> None:
    reg = SeriesRegistry(SeriesLimits(max_series=64))
    for job in range(50):  # each job's series evicted before the next job's arrive (ids reused)
        ids = [reg.id_for("gpu", f"n{g // 2}", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(g // 2, g % 2, f"job{job}"), None)
               for g in range(8)]
        sorted_too = [reg.id_for("gpu", f"n{g // 2}", "DCGM_FI_DEV_GPU_UTIL",
                                 dict(sorted(gpu_labels(g // 2, g % 2, f"job{job}").items())), None) for g in range(8)]
        assert sorted(ids) == list(range(8)) and sorted_too == ids
        assert len(reg._labels) == 16 and len(reg._ids) == 16 and len(reg._orders) == 1
        if job % 2:  # a snapshot now and then: its rows are kept, and go with their series
            rows = reg.snapshot()["rows"]
            assert len(reg._row_labels) == 8 and all(row[3] == reg.meta[sid].labels for sid, row in enumerate(rows))
        reg.evict(np.array(ids))
        assert len(reg._labels) == 0 and len(reg._ids) == 0 and not reg._orders and reg._aliases == [None] * 8
        assert len(reg._row_labels) == 0
    assert reg.size == 8


def test_snapshot_rows_of_equal_labels_share_one_mapping() -> None:
    reg = SeriesRegistry()
    a = reg.id_for("gpu", "n1", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    b = reg.id_for("gpu", "n1", "DCGM_FI_DEV_POWER_USAGE", gpu_labels(1, 0, "j1"), None)
    rows = reg.snapshot()["rows"]
    assert rows[a][3] is rows[b][3] and list(rows[a][3]) == ["UUID", "gpu", "hpc_job"]
    c = reg.id_for("gpu", "n2", "DCGM_FI_DEV_GPU_UTIL", gpu_labels(1, 0, "j1"), None)
    assert reg.snapshot()["rows"][c][3] is rows[a][3]
    assert orjson.loads(orjson.dumps(reg.snapshot()))["rows"][c] == ["gpu", "n2", "DCGM_FI_DEV_GPU_UTIL",
                                                                    {"UUID": "GPU-1-0", "gpu": "0", "hpc_job": "j1"},
                                                                    "gauge"]


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
