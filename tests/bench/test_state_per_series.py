"""The bench's state figure (issue 23: <= 1.5 KB a series), at a size a test can afford.

``state_per_series`` builds one partition pipeline from load-generator scrapes (GPU labels out of
order, as DCGM sends them) and counts its arrays at allocated capacity plus the registry.
"""

from __future__ import annotations

import pytest

from benchmarks.lockbench import state_per_series


def test_state_per_series_stays_under_the_goal_with_one_registry_key_a_series() -> None:
    st = state_per_series(3_000)
    parts = st["parts_bytes"]
    assert st["series"] >= 3_000
    assert abs(sum(parts.values()) - st["arrays_and_registry_bytes_per_series"]) < 1.0
    # the state (what a snapshot carries) under the goal; the validate stage's row index, a cache of
    # (layer, source, raw labels) -> series ids by metric, is counted in the total and bounded on its own
    assert st["state_bytes_per_series"] <= 1_500
    # one entry a label set (its ids in a tuple, the metrics' positions in a layout shared by every label
    # set with the same metrics): 36.3 B measured (a dict of metric -> id per label set was 63.9)
    assert 0 < parts["row_index"] <= 45
    total = st["state_bytes_per_series"] + parts["row_index"]
    assert st["arrays_and_registry_bytes_per_series"] == pytest.approx(total, abs=0.2)
    # and with it, under the goal too (1,475.3 measured here; 1,496.6 at 99,638 series)
    assert st["arrays_and_registry_bytes_per_series"] <= 1_500
    # one key, one id-table entry and a share of the label tuples a series (two keys were ~300 B)
    assert parts["registry"] < 250
    assert 0 < st["snapshot_bytes_per_series"] < 200
