"""The first mover is the earliest *significant* change (streams/correlation/rules/slowdown.py).

One row per case, one character per second from T: ``X`` while the series is anomalous. A row is
``layer source metric meaning value/p50 [labels] | timeline``: the value the episode started with and
its series' own normal (p50). Magnitude is value / p50 for a rise (p50 / value for a fall; a fabric
counter's normal is at least one event per sample); a change is significant from x2. The job is ``j``
on n1-n4 (the inventory of test_correlation_rules).
"""

from __future__ import annotations

from typing import Any

import pytest

from streams.correlate import Correlator, CorrelatorConfig
from streams.correlation.rules.slowdown import SIGNIFICANT_MAGNITUDE, magnitude
from tests.streams.test_correlation_rules import T, inventory

CFG = CorrelatorConfig(allowed_lateness_s=1.0, grace_s=3.0, lookback_s=60.0, resolve_after_s=5.0, min_firing_s=0.0,
                       symptom_hold_s=3.0)


def records(diagram: str) -> list[dict[str, Any]]:
    out = []
    for line in diagram.strip().splitlines():
        head, _, marks = line.partition("|")
        layer, source, metric, meaning, numbers, *rest = head.split()
        value, p50 = (float(x) for x in numbers.split("/"))
        labels = dict(kv.split("=") for kv in rest)
        marks = marks.strip()
        start: dict[str, Any] | None = None
        for t, ch in enumerate(marks + "."):
            if ch == "X" and start is None:
                start = {"type": "anomaly", "phase": "start", "job_id": "j", "ts": T + t, "confirmed_ts": T + t + 1,
                         "layer": layer, "source": source, "labels": labels, "metric": metric, "meaning": meaning,
                         "role": "symptom" if meaning == "step_time" else "cause",
                         "direction": "down" if value < p50 else "up", "value": value, "p50": p50, "p99": None,
                         "score": 0.9, "relation": "node", "origin": "o", "interval": 1.0}
                out.append(start)
            elif ch == "." and start is not None:
                out.append(dict(start, phase="end", ts=T + t, confirmed_ts=T + t + 1))
                start = None
    return sorted(out, key=lambda r: (r["confirmed_ts"], r["phase"] == "start"))


def verdict(diagram: str) -> dict[str, Any]:
    corr = Correlator(CFG, inventory(), {"o"})
    alerts: list[dict[str, Any]] = []
    for rec in records(diagram):
        alerts += corr.on_record(rec, 0.0).alerts
        alerts += corr.on_record({"type": "watermark", "origins": {"o": rec["confirmed_ts"]}}, 0.0).alerts
    alerts += corr.on_record({"type": "watermark", "origins": {"o": T + 200}}, 0.0).alerts
    (fired,) = [a for a in alerts if a["type"] == "job_slowdown" and a["status"] == "firing"]
    return dict(fired["root_cause"])


CASES = [
    pytest.param(
        # A healthy RoCE NIC ticks a pause frame every few seconds (0.3/s); its lone 1 30 s before the storm
        # is its normal (a counter's normal is at least one event per sample: x1). The storming NIC is x25,000.
        """
        nic  n2 rx_prio3_pause    congestion 1/0.3       device=mlx5_0 | ..XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX
        nic  n3 rx_prio3_pause    congestion 25000/0.3   device=mlx5_0 | ................................XXXXXXXXXX
        nccl n1 coll_exec_time_us latency    30000/12000               | ..................................XXXXXXXX
        step n1 step_time_seconds step_time  2/1                       | ....................................XXXXXX
        """, ("nic", "n3", "network"), id="one pause frame 30 s earlier does not beat a PFC storm"),
    pytest.param(
        # Significance is a threshold, not a ranking: the earliest significant change leads, even when a
        # later one is larger relative to its normal (errors on a clean link x40, then the pool x8).
        """
        switch  leaf1  SymbolErrorCounter   link_errors 40/0        port=12 | .....XXXXXXXXXXXXXXXXX
        storage lustre read_latency_seconds latency     0.016/0.002         | .......XXXXXXXXXXXXXXX
        step    n1     step_time_seconds    step_time   2/1                 | .........XXXXXXXXXXXXX
        """, ("switch", "leaf1", "network"), id="the earliest significant change leads, not the largest"),
    pytest.param(
        # The pool's latency drifts 1.3x (not significant) 10 s before a node's data loader saturates
        # (x40): the loader is the first mover; the pool still counts as "storage moved too".
        """
        storage lustre read_latency_seconds    latency     0.0026/0.002 | .....XXXXXXXXXXXXXXXXXXXX
        step    n2     dataloader_wait_seconds loader_wait 0.4/0.01     | ...............XXXXXXXXXX
        step    n1     step_time_seconds       step_time   2/1          | .................XXXXXXXX
        """, ("step", "n2", "unknown"), id="a small early drift does not beat a large later change"),
    pytest.param(
        # Nothing moved significantly: the earliest cause is named, as by onset alone, and the domain
        # table stays honest (only the collective moved: unknown).
        """
        nccl n1 coll_exec_time_us latency     15000/12000 | .....XXXXXXXXXXXXXXXXX
        host n2 cpu_utilization   utilisation 45/35       | .......XXXXXXXXXXXXXXX
        step n1 step_time_seconds step_time   1.3/1       | .........XXXXXXXXXXXXX
        """, ("nccl", "n1", "unknown"), id="no significant change: the earliest, as before"),
    pytest.param(
        # An XID on n4's GPU 3 (a field whose normal is 0: any change is significant) beats n3's SM clock
        # held 6 % down 2 s earlier (a fall, by its median: x1.06).
        """
        gpu  n3 DCGM_FI_DEV_SM_CLOCK   throttle  1600/1700 gpu=2 | .....XXXXXXXXXXXXXXXX
        gpu  n4 DCGM_FI_DEV_XID_ERRORS gpu_fault 79/0      gpu=3 | .......XXXXXXXXXXXXXX
        step n1 step_time_seconds      step_time 2/1             | .........XXXXXXXXXXXX
        """, ("gpu", "n4", "compute"), id="an XID beats an insignificant clock dip just before it"),
]


@pytest.mark.parametrize(("diagram", "expected"), CASES)
def test_the_first_mover_is_the_earliest_significant_change(diagram: str, expected: tuple[str, str, str]) -> None:
    rc = verdict(diagram)
    assert (rc["layer"], rc["source"], rc["domain"]) == expected, rc["reason"]


def test_magnitude_is_relative_to_the_series_own_normal() -> None:
    def m(meaning: str, value: float, p50: float | None, interval: float = 1.0) -> float:
        return magnitude({"meaning": meaning, "direction": "down" if p50 and value < p50 else "up", "value": value,
                          "p50": p50, "interval": interval})

    assert m("latency", 0.004, 0.002) == SIGNIFICANT_MAGNITUDE
    assert m("utilisation", 0.0, 95.0) == float("inf")
    assert m("latency", 3.0, None) == float("inf")  # no baseline yet
    # A counter's normal is at least one event per sample: 3 pauses in a 10 s sample on a zero median is x30.
    assert m("congestion", 3.0, 0.0, interval=10.0) == pytest.approx(30.0)
    assert m("link_errors", 1.0, 0.0) == 1.0  # one error in one second: not yet significant
    assert m("gpu_fault", 0.0, 0.0) == 1.0  # no change from zero
