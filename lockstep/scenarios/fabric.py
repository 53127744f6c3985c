"""Fabric scenarios the simulator's fault table cannot say: sparse congestion counters and a PFC storm.

``pfc-storm`` runs the lab cluster of :mod:`lockstep.simulate` with the RoCE NICs' Ethernet pause
counters (``rx_pause_ctrl_phy``, ``tx_pause_ctrl_phy``, as ``ethtool -S`` of an mlx5 port names them)
added. Healthy, a RoCE port sends or receives a pause frame about once every three seconds: a sparse
counter whose rate is mostly 0 and sometimes 1. gpu015 (roce-c) sends one extra pause frame 30 s
before the fault, as any busy port does now and then. At ``F`` gpu014's NIC sends 25,000 pause frames a
second (a PFC storm, no errors); roce-c's collectives slow 2 s later, its GPUs idle at 4 s, its step
time rises at 6 s::

    nic  gpu015 tx_pause_ctrl_phy  ..x.....x.................x....     (a lone pause at F-30: normal)
    nic  gpu014 tx_pause_ctrl_phy  .x...x...........XXXXXXXXXXXXX..     (F: 25,000/s)
    nccl roce-c coll_exec_time_us  ...................XXXXXXXXXXX..     (F+2)
    step roce-c step_time_seconds  .......................XXXXXXX..     (F+6)

The verdict must name gpu014's NIC (the earliest *significant* change: x25,000 its normal), not the
lone pause 30 s earlier, and the sparse ticks alone must raise nothing (docs/correlation.md, "The first
mover"; docs/detection.md, sparse series). Deterministic by seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lockstep.scenarios import write_messages
from lockstep.simulate import F_END, LAB, LAB_DURATION, F, Fault, Message, Scenario, Simulator

PAUSE_COUNTERS = ("rx_pause_ctrl_phy", "tx_pause_ctrl_phy")
#: A healthy RoCE port's pause frames: one every this many seconds on average, per direction.
PAUSE_EVERY_S = 3.0
STORM_PER_S = 25_000.0


@dataclass(frozen=True)
class FabricScenario:
    name: str
    description: str
    base: Scenario
    #: the node whose NIC storms, and when (seconds after the start)
    storm_node: str | None = None
    storm: tuple[float, float] = (0.0, 0.0)
    #: a lone extra pause frame on this node at this time (a busy port's normal)
    lone_pause: tuple[str, float] | None = None
    expect: str = ""


FABRIC_SCENARIOS: dict[str, FabricScenario] = {
    "pfc-storm": FabricScenario(
        "pfc-storm",
        "gpu014's RoCE NIC sends 25,000 pause frames/s (a PFC storm, no errors); gpu015 sent one pause frame 30 s "
        "earlier; roce-c's collectives slow 2 s after the storm, its GPUs idle at 4 s, its step time rises at 6 s",
        Scenario("pfc-storm", "", duration=LAB_DURATION, cluster=LAB, faults=(
            Fault("nccl", F + 2, F_END + 1, factor=2.2, job="roce-c"),
            Fault("gpu_util", F + 4, F_END + 2, factor=0.5, job="roce-c"),
            Fault("step", F + 6, F_END + 3, factor=1.8, job="roce-c"))),
        storm_node="gpu014", storm=(F, F_END), lone_pause=("gpu015", F - 30.0),
        expect="job_slowdown for roce-c: network, nic gpu014 (the storm), not gpu015's lone pause",
    ),
    "sparse-pauses": FabricScenario(
        "sparse-pauses",
        "a healthy lab cluster whose RoCE ports pause now and then (about once every 3 s per direction): nothing "
        "should fire",
        Scenario("sparse-pauses", "", duration=LAB_DURATION, cluster=LAB),
        expect="no alert",
    ),
}


def messages(name: str, seed: int = 7) -> Iterator[Message]:
    """The scenario's messages in time order: inventory first, then every second."""
    spec = FABRIC_SCENARIOS[name]
    sim = Simulator(spec.base, seed=seed)
    rng = np.random.default_rng(seed + 2000)  # its own stream: the simulator's stays as in the base scenario
    roce = [node for i, node in enumerate(sim.nodes) if i + 1 >= LAB.roce_from]
    counters = {node: np.zeros(len(PAUSE_COUNTERS)) for node in roce}
    yield from sim.inventory()
    for rel in range(int(np.ceil(spec.base.duration))):
        t = sim.start_ts + rel
        yield from sim.tick(float(rel))
        for node in roce:
            inc = (rng.random(len(PAUSE_COUNTERS)) < 1.0 / PAUSE_EVERY_S).astype(float)
            if spec.storm_node == node and spec.storm[0] <= rel < spec.storm[1]:
                inc[1] += rng.poisson(STORM_PER_S)
            if spec.lone_pause is not None and spec.lone_pause == (node, float(rel)):
                inc[1] += 1.0
            counters[node] += inc
            yield Message("nic", node, [
                {"ts": round(t, 3), "layer": "nic", "source": node, "metric": metric, "value": float(v),
                 "labels": {"device": "mlx5_0", "port": "1"}, "ingest_ts": round(t + 0.05, 3), "kind": "counter"}
                for metric, v in zip(PAUSE_COUNTERS, counters[node], strict=True)], t)


def write_replay(path: Path, name: str, seed: int = 7) -> int:
    """Write the scenario as a ``lockstep replay`` file; returns the line count."""
    return write_messages(path, messages(name, seed))
