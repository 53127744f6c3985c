"""A simulated training cluster: leaf/spine fabric, jobs, storage pools, telemetry at 1 Hz, faults.

Deterministic for a given seed and start time (time is an input: ``Simulator.tick(t)`` produces the
messages of second ``t``). Faults are data (:class:`Fault`), grouped into named scenarios.

The default cluster: 48 nodes x 8 GPUs on 6 leaves (8 nodes each, downlink ports 15-22; uplink ports
1-2, one to each of 2 spines, whose port N faces leaf N); InfiniBand on gpu001-040, RoCE on
gpu041-048; hosts' links at 200 Gb/s (4x HDR, 200GbE), switch-to-switch links at 400 Gb/s (4x NDR),
as the inventory says; pools ``lustre-a`` and ``nfs-home``. Every switch port reports its counters,
the spines' included.
Jobs: ``llm-70b`` (32 nodes, 256 GPUs), ``vision-7b`` (8 nodes, 64 GPUs), ``rec-ft`` (4 nodes, 32
GPUs, RoCE); gpu045-048 idle.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from models.inventory import expand_nodes
from models.timeutil import parse_ts

#: The seed incident's textbook times: switch errors at 11:42:10, AllReduce +2 s, GPU util +5 s,
#: step time +8 s.
SEED_FAULT_TS = parse_ts("2025-11-30T11:42:10Z")
DEFAULT_START_TS = SEED_FAULT_TS - 70.0

IB_NIC_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
                   "PortXmitDiscards", "PortXmitWait", "PortXmitData", "PortRcvData")
ROCE_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled",
                 "rx_discards_phy", "tx_bytes_phy", "rx_bytes_phy")
SWITCH_COUNTERS = ("SymbolErrorCounter", "LinkDownedCounter", "PortRcvErrors", "PortXmitDiscards",
                   "PortXmitWait", "PortXmitData")


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    nodes: str
    storage: tuple[str, ...]
    step_time: float = 1.0
    start_offset: float = 0.0
    end_offset: float | None = None
    name: str | None = None
    #: How a job ends, as a real one does: its last ``final_save_s`` steps run ``final_save_factor``
    #: slower (the final checkpoint), then its ranks exit ``wind_down_s`` before the scheduler says
    #: so (step and collective samples stop, GPUs idle), and the scheduler holds the nodes in
    #: ``COMPLETING`` for ``completing_s`` before ``COMPLETED`` (0: ``COMPLETED`` at ``end_offset``).
    wind_down_s: float = 0.0
    completing_s: float = 0.0
    final_save_s: float = 0.0
    final_save_factor: float = 1.0
    #: A healthy periodic checkpoint: every ``checkpoint_every_s`` the job writes ``checkpoint_factor``
    #: x its usual rate to its first pool for ``checkpoint_s`` (0: no checkpoints).
    checkpoint_every_s: float = 0.0
    checkpoint_s: float = 10.0
    checkpoint_factor: float = 20.0
    #: Seconds the checkpoint schedule is shifted by (so jobs sharing a pool take turns).
    checkpoint_phase_s: float = 0.0
    #: The scheduler's final state: ``COMPLETED``, or ``CANCELLED`` (scancel: no final save).
    end_state: str = "COMPLETED"
    #: Slow healthy drift of the job's step (and collective) time: a relative change per hour, linear
    #: from the job's start (0.06: 6 % slower after an hour, as a growing sequence or a warming room does).
    drift_per_h: float = 0.0

    def phase(self, rel: float) -> str:
        """``pending``, ``training``, ``exited`` (ranks gone, the scheduler not told yet), ``completing``
        (the scheduler's COMPLETING) or ``ended``, at ``rel`` seconds since the scenario start."""
        if rel < self.start_offset:
            return "pending"
        if self.end_offset is None:
            return "training"
        if rel >= self.end_offset + self.completing_s:
            return "ended"
        if rel >= self.end_offset:
            return "completing"
        return "exited" if rel >= self.end_offset - self.wind_down_s else "training"


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int = 48
    gpus_per_node: int = 8
    nodes_per_leaf: int = 8
    spines: int = 2
    first_port: int = 15
    roce_from: int = 41
    #: Line rates the inventory gives: a host's link (HDR InfiniBand, 200GbE) and a leaf-spine link (NDR).
    host_gbps: float = 200.0
    uplink_gbps: float = 400.0
    pools: tuple[tuple[str, str], ...] = (("lustre-a", "lustre"), ("nfs-home", "nfs"))
    #: Slow healthy drift of busy GPUs' temperature: degrees Celsius per hour (a warming machine room).
    gpu_temp_drift_per_h: float = 0.0
    jobs: tuple[JobSpec, ...] = (
        JobSpec("llm-70b", "gpu[001-020,025-036]", ("lustre-a",), 1.0, name="llm-70b-pretrain"),
        JobSpec("vision-7b", "gpu[021-024,037-040]", ("lustre-a",), 0.6, name="vision-7b-ft"),
        JobSpec("rec-ft", "gpu[041-044]", ("nfs-home",), 0.4, name="recsys-finetune"),
    )

    def node_names(self) -> list[str]:
        return [f"gpu{i:03d}" for i in range(1, self.nodes + 1)]

    def leaf_of(self, index: int) -> tuple[str, str]:
        """Leaf switch and its downlink port for node number ``index`` (1-based)."""
        leaf = (index - 1) // self.nodes_per_leaf + 1
        port = self.first_port + (index - 1) % self.nodes_per_leaf
        return f"leaf{leaf:02d}", str(port)


@dataclass(frozen=True)
class Fault:
    """A change to one signal during ``[start, end)`` seconds after the scenario start.

    ``target`` selects what changes: ``switch_port`` (switch, port: ``rate`` errors/s), ``nic``
    (node: ``rate`` errors/s), ``nccl``, ``gpu_util``, ``step``, ``loader``, ``cpu`` (``factor`` on
    the nodes of ``job``, or on ``node``; ``gpu`` narrows ``gpu_util`` to one GPU), ``storage``
    (``pool``: read/write latency ``factor``), ``xid`` (``node``, ``gpu``: XID code ``rate``),
    ``write_burst`` (``job`` writes ``factor`` x its usual rate to ``pool``: a checkpoint),
    ``clock`` (``node``'s clock is ``offset`` seconds off for the whole scenario), ``stall`` (``job``
    hangs while RUNNING: its ranks send no step or collective samples and its GPUs idle).
    """

    target: str
    start: float
    end: float
    factor: float = 1.0
    rate: float = 0.0
    job: str | None = None
    node: str | None = None
    switch: str | None = None
    port: str | None = None
    pool: str | None = None
    gpu: int | None = None
    metric: str | None = None
    offset: float = 0.0

    def active(self, rel: float) -> bool:
        return self.start <= rel < self.end


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration: float
    faults: tuple[Fault, ...] = ()
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    expect: str = ""

    @property
    def fault_offset(self) -> float | None:
        """Seconds from the scenario start to its first fault, None without one.

        A standing condition (a fault active from the start to the end, such as a skewed clock) is
        not a fault that *happens*, so it does not count.

        >>> [SCENARIOS[name].fault_offset for name in ("seed-incident", "clock-skew", "xid", "healthy")]
        [70.0, 70.0, 45.0, None]
        """
        starts = [f.start for f in self.faults if math.isfinite(f.end)]
        return min(starts) if starts else None


def _seed_faults(fault_at: float, length: float = 60.0, job: str = "llm-70b") -> tuple[Fault, ...]:
    end = fault_at + length
    return (
        Fault("switch_port", fault_at, end, rate=40.0, switch="leaf03", port="17"),
        Fault("nccl", fault_at + 2, end + 1, factor=2.6, job=job),
        Fault("gpu_util", fault_at + 5, end + 2, factor=0.45, job=job),
        Fault("step", fault_at + 8, end + 3, factor=2.0, job=job),
    )


FAULT_AT = SEED_FAULT_TS - DEFAULT_START_TS  # 70 s of healthy warm-up first

#: A 16-node lab cluster for the other scenarios (smaller, so their replays stay quick):
#: leaf01 = gpu001-008, leaf02 = gpu009-016 (RoCE from gpu013); pools lustre-a and nfs-home.
LAB_JOBS = (
    JobSpec("train-a", "gpu[001-008]", ("lustre-a",), 1.0, name="train-a"),
    JobSpec("train-b", "gpu[009-012]", ("lustre-a",), 0.8, name="train-b"),
    JobSpec("roce-c", "gpu[013-016]", ("nfs-home",), 0.5, name="roce-c"),
)
LAB = ClusterSpec(nodes=16, roce_from=13, jobs=LAB_JOBS)
LAB_CHURN = ClusterSpec(nodes=16, roce_from=13, jobs=(
    JobSpec("train-a", "gpu[001-008]", ("lustre-a",), 1.0),
    JobSpec("train-b", "gpu[009-012]", ("lustre-a",), 0.8, start_offset=60.0, end_offset=150.0),
    JobSpec("roce-c", "gpu[013-016]", ("nfs-home",), 0.5, end_offset=100.0),
    JobSpec("eval-d", "gpu[013-016]", ("nfs-home",), 0.7, start_offset=120.0),
))
#: A busy lab cluster with churn: train-a runs throughout and checkpoints every 120 s; short jobs follow each
#: other on gpu009-012 and gpu013-016, each ending as real jobs do (a slow final save, ranks exiting
#: before the scheduler's COMPLETING, COMPLETING held a few seconds, or COMPLETED at once).
def _ending(spec: JobSpec) -> JobSpec:
    """``spec`` ending as a real job does: a 3 s final save at x2.5 step time, ranks gone 4 s before the end."""
    return replace(spec, wind_down_s=4.0, final_save_s=3.0, final_save_factor=2.5)


LAB_BUSY = ClusterSpec(nodes=16, roce_from=13, jobs=(
    JobSpec("train-a", "gpu[001-008]", ("lustre-a",), 1.0, checkpoint_every_s=120.0),
    _ending(JobSpec("ft-1", "gpu[009-012]", ("lustre-a",), 0.8, end_offset=130.0, completing_s=8.0)),
    _ending(JobSpec("ft-2", "gpu[009-012]", ("lustre-a",), 0.7, start_offset=150.0, end_offset=280.0)),
    JobSpec("ft-3", "gpu[009-012]", ("lustre-a",), 0.9, start_offset=300.0, completing_s=5.0,
            checkpoint_every_s=90.0),
    _ending(JobSpec("ev-1", "gpu[013-016]", ("nfs-home",), 0.5, end_offset=100.0, completing_s=6.0)),
    _ending(JobSpec("ev-2", "gpu[013-016]", ("nfs-home",), 0.6, start_offset=115.0, end_offset=215.0)),
    _ending(JobSpec("ev-3", "gpu[013-016]", ("nfs-home",), 0.5, start_offset=230.0, end_offset=340.0,
                    completing_s=10.0)),
    JobSpec("ev-4", "gpu[013-016]", ("nfs-home",), 0.4, start_offset=355.0),
))

#: Three leaves of 8 nodes, InfiniBand only: ``wide`` spans leaf01 and leaf02 (its collectives cross the
#: spines), ``local`` and ``other`` each stay on one leaf (leaf01, leaf03).
SPREAD = ClusterSpec(nodes=24, roce_from=25, jobs=(
    JobSpec("wide", "gpu[001-004,009-012]", ("lustre-a",), 1.0, name="wide-pretrain"),
    JobSpec("local", "gpu[005-008]", ("nfs-home",), 0.8, name="local-finetune"),
    JobSpec("other", "gpu[017-020]", ("nfs-home",), 0.6, name="other-eval"),
))

#: The long busy-healthy replay: 40 simulated minutes.
BUSY_40M_DURATION = 2400.0


def _short_jobs(prefix: str, nodes: str, pool: str, seed: int, until: float) -> tuple[JobSpec, ...]:
    """Short jobs of 2-5 minutes back to back on ``nodes`` (each 10-30 s after the last one's final
    state) until ``until``, ending in turn as real ones do: COMPLETING held 5-15 s, COMPLETED at once, or
    CANCELLED (scancel: no final save, the ranks gone at once, sometimes COMPLETING first). The same
    ``seed`` gives the same jobs."""
    rng = np.random.default_rng(seed)
    jobs: list[JobSpec] = []
    start = 0.0
    while start < until:
        length = float(rng.integers(120, 301))
        kind = len(jobs) % 3
        spec = JobSpec(f"{prefix}-{len(jobs) + 1:02d}", nodes, (pool,), round(float(rng.uniform(0.4, 0.9)), 2),
                       start_offset=start, end_offset=start + length)
        if kind == 0:
            spec = replace(_ending(spec), completing_s=float(rng.integers(5, 16)))
        elif kind == 1:
            spec = _ending(spec)
        else:
            spec = replace(spec, end_state="CANCELLED", completing_s=5.0 if len(jobs) % 2 else 0.0)
        jobs.append(spec)
        start = start + length + spec.completing_s + float(rng.integers(10, 31))
    return tuple(jobs)


#: A busy lab cluster for 40 minutes: two long jobs share lustre-a and checkpoint every 5 minutes, taking
#: turns (train-b 150 s after train-a); train-a's steps drift 6 %/h slower and the busy GPUs warm by
#: 4 degrees C/h; short jobs follow each other on gpu009-012 (lustre-a) and gpu013-016 (nfs-home, RoCE).
LAB_BUSY_40M = ClusterSpec(nodes=16, roce_from=13, gpu_temp_drift_per_h=4.0, jobs=(
    JobSpec("train-a", "gpu[001-006]", ("lustre-a",), 1.0, checkpoint_every_s=300.0, drift_per_h=0.06),
    JobSpec("train-b", "gpu[007-008]", ("lustre-a",), 0.8, checkpoint_every_s=300.0, checkpoint_phase_s=150.0,
            drift_per_h=-0.03),
    *_short_jobs("ft", "gpu[009-012]", "lustre-a", 40, BUSY_40M_DURATION - 150.0),
    *_short_jobs("ev", "gpu[013-016]", "nfs-home", 41, BUSY_40M_DURATION - 150.0),
))
F = 45.0  # the lab scenarios' fault time (45 s of warm-up)
F_END = F + 40.0
LAB_DURATION = F_END + 50.0

SCENARIOS: dict[str, Scenario] = {
    "seed-incident": Scenario(
        "seed-incident",
        "leaf03 port 17 takes symbol errors 70 s in; llm-70b's AllReduce rises 2 s later, GPU utilisation "
        "falls at 5 s, step time doubles at 8 s; all recover after 60 s",
        duration=FAULT_AT + 110.0,
        faults=_seed_faults(FAULT_AT),
        expect="one job_slowdown for llm-70b: network, leaf03 port 17, switch -> nccl -> gpu -> step",
    ),
    "clock-skew": Scenario(
        "clock-skew",
        "the seed incident, with gpu005's clock 6 s behind (its samples claim to be 6 s older)",
        duration=FAULT_AT + 110.0,
        faults=(*_seed_faults(FAULT_AT), Fault("clock", 0.0, math.inf, offset=-6.0, node="gpu005")),
        expect="the seed alert (still leaf03 port 17) and a clock_skew alert for gpu005, about -6 s",
    ),
    "roce-retransmits": Scenario(
        "roce-retransmits",
        "gpu014's RoCE NIC starts retransmitting (out-of-sequence, sequence errors, ACK timeouts); roce-c's "
        "collectives slow 2 s later, its GPUs idle at 4 s, its step time rises at 6 s",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("nic", F, F_END, rate=200.0, node="gpu014"),
                Fault("nccl", F + 2, F_END + 1, factor=2.2, job="roce-c"),
                Fault("gpu_util", F + 4, F_END + 2, factor=0.5, job="roce-c"),
                Fault("step", F + 6, F_END + 3, factor=1.8, job="roce-c")),
        expect="job_slowdown for roce-c: network, nic gpu014 device mlx5_0",
    ),
    "storage-latency": Scenario(
        "storage-latency",
        "lustre-a's latency jumps 8x while train-a streams its dataset: train-a's loaders wait 2 s later, "
        "its GPUs idle and its step time rises at 3 s; train-b (same pool, cached data) is unaffected",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("storage", F, F_END, factor=8.0, pool="lustre-a"),
                Fault("loader", F + 2, F_END + 1, factor=40.0, job="train-a"),
                Fault("gpu_util", F + 3, F_END + 2, factor=0.55, job="train-a"),
                Fault("step", F + 3, F_END + 2, factor=1.7, job="train-a")),
        expect="job_slowdown for train-a: storage, pool lustre-a (train-b listed in other_jobs)",
    ),
    "checkpoint-contention": Scenario(
        "checkpoint-contention",
        "train-a and train-b checkpoint to lustre-a at overlapping times (5 s apart, 30 s each); the pool's "
        "write latency climbs while both write",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("write_burst", F, F + 30, factor=40.0, job="train-a", pool="lustre-a"),
                Fault("write_burst", F + 5, F + 35, factor=40.0, job="train-b", pool="lustre-a")),
        expect="one checkpoint_contention alert: lustre-a, train-a and train-b, 25 s overlap, stagger advice",
    ),
    "dataloader": Scenario(
        "dataloader",
        "gpu003's data loader saturates (its CPUs at ~100%, data wait 50x) with network and storage healthy; "
        "every rank of train-a waits for it 1 s later",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("loader", F, F_END, factor=50.0, node="gpu003"),
                Fault("cpu", F, F_END, factor=2.7, node="gpu003"),
                Fault("nccl", F + 1, F_END + 1, factor=1.4, job="train-a"),
                Fault("step", F + 1, F_END + 1, factor=1.5, job="train-a")),
        expect="job_slowdown for train-a: dataloader, node gpu003",
    ),
    "xid": Scenario(
        "xid",
        "GPU 3 of gpu005 reports XID 79 (fallen off the bus) and stalls; train-a's collectives slow 2 s "
        "later and its step time rises at 3 s",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("xid", F, F + 1, rate=79.0, node="gpu005", gpu=3),
                Fault("gpu_util", F + 1, F_END, factor=0.2, node="gpu005", gpu=3),
                Fault("nccl", F + 2, F_END + 1, factor=2.0, job="train-a"),
                Fault("step", F + 3, F_END + 2, factor=1.9, job="train-a")),
        expect="job_slowdown for train-a: compute, gpu005 GPU 3 (XID)",
    ),
    "straggler": Scenario(
        "straggler",
        "gpu006's rank of train-a computes 45% slower than its 7 peers (a throttled GPU, a busy host) for "
        "40 s; network, storage and the other ranks stay healthy",
        duration=LAB_DURATION, cluster=LAB,
        faults=(Fault("step", F, F_END, factor=1.45, node="gpu006"),),
        expect="a straggler alert for train-a naming gpu006 (rank 40), resolved after the fault",
    ),
    "healthy": Scenario("healthy", "a healthy cluster; no alert", duration=160.0, expect="no alert"),
    "busy-churn": Scenario(
        "busy-churn",
        "a busy healthy lab cluster for 7 minutes: train-a checkpoints every 2 minutes, six short jobs start and "
        "end on gpu009-016 (each a slow final save, ranks exiting 4 s before the scheduler's COMPLETING or "
        "COMPLETED, COMPLETING held up to 10 s)",
        duration=420.0, cluster=LAB_BUSY, expect="no alert",
    ),
    "busy-healthy-40m": Scenario(
        "busy-healthy-40m",
        "a busy healthy lab cluster for 40 minutes: train-a and train-b checkpoint into lustre-a every 5 minutes "
        "in turn, their step times and the GPUs' temperature drift slowly; short jobs of 2-5 minutes follow each "
        "other on gpu009-012 and gpu013-016, ending COMPLETING, COMPLETED at once or CANCELLED",
        duration=BUSY_40M_DURATION, cluster=LAB_BUSY_40M, expect="no alert",
    ),
    "job-stalled": Scenario(
        "job-stalled",
        "train-b hangs 45 s in while RUNNING (a deadlocked collective: no step times, its GPUs idle) for "
        "4 minutes, then resumes; train-a and roce-c stay healthy",
        duration=F + 240.0 + 60.0, cluster=LAB,
        faults=(Fault("stall", F, F + 240.0, job="train-b"),),
        expect="one job_stalled for train-b (no_data, since 11:41:4x), resolved when its steps resume",
    ),
    "uplink-errors": Scenario(
        "uplink-errors",
        "leaf01's uplink (port 1, to spine01) takes symbol errors 45 s in: wide, which spans leaf01 and leaf02, "
        "sees its AllReduce rise 2 s later, its GPUs idle at 5 s, its step time double at 8 s; local, on leaf01 "
        "alone (its traffic never leaves the leaf), slows 4 s in because gpu006's data loader saturates",
        duration=LAB_DURATION, cluster=SPREAD,
        faults=(Fault("switch_port", F, F_END, rate=40.0, switch="leaf01", port="1"),
                Fault("nccl", F + 2, F_END + 1, factor=2.4, job="wide"),
                Fault("gpu_util", F + 5, F_END + 2, factor=0.5, job="wide"),
                Fault("step", F + 8, F_END + 3, factor=1.9, job="wide"),
                Fault("loader", F + 3, F_END, factor=50.0, node="gpu006"),
                Fault("cpu", F + 3, F_END, factor=2.7, node="gpu006"),
                Fault("nccl", F + 4, F_END + 1, factor=1.4, job="local"),
                Fault("step", F + 4, F_END + 1, factor=1.5, job="local")),
        expect="job_slowdown for wide: network, leaf01 port 1 (an uplink); job_slowdown for local: dataloader, "
               "node gpu006, not the uplink",
    ),
    "healthy-churn": Scenario(
        "healthy-churn",
        "a healthy lab cluster where jobs start and end (train-b from 60 s to 150 s, roce-c ends at 100 s, "
        "eval-d starts on its nodes at 120 s)",
        duration=200.0, cluster=LAB_CHURN, expect="no alert",
    ),
}


@dataclass
class Message:
    """One Kafka message the simulator emits: a scrape of one source (or an inventory event)."""

    topic: str  # a layer name, or "inventory"
    key: str
    value: Any
    ts: float


class Simulator:
    """Generates a scenario second by second. Identical seeds and starts give identical output."""

    def __init__(self, scenario: Scenario, start_ts: float = DEFAULT_START_TS, seed: int = 7) -> None:
        self.scenario = scenario
        self.cluster = scenario.cluster
        self.start_ts = start_ts
        self.rng = np.random.default_rng(seed)
        c = self.cluster
        self.nodes = c.node_names()
        self.node_index = {n: i for i, n in enumerate(self.nodes)}
        self.job_nodes = {j.job_id: expand_nodes(j.nodes) for j in c.jobs}
        #: node -> the jobs that use it over the scenario, in start order (churn reuses nodes)
        self.node_jobs: dict[str, list[JobSpec]] = {}
        for spec in sorted(c.jobs, key=lambda j: j.start_offset):
            for name in self.job_nodes[spec.job_id]:
                self.node_jobs.setdefault(name, []).append(spec)
        self.leaves = sorted({c.leaf_of(i)[0] for i in range(1, c.nodes + 1)})
        self.spines = [f"spine{i:02d}" for i in range(1, c.spines + 1)]
        n = len(self.nodes)
        # Cumulative counters, per node and per switch port.
        self.nic_ctr = np.zeros((n, len(IB_NIC_COUNTERS)))
        self.roce_ctr = np.zeros((n, len(ROCE_COUNTERS)))
        self.port_ctr: dict[tuple[str, str], np.ndarray] = {}
        for i in range(1, c.nodes + 1):
            self.port_ctr[c.leaf_of(i)] = np.zeros(len(SWITCH_COUNTERS))
        for leaf in self.leaves:
            for s in range(len(self.spines)):
                self.port_ctr[(leaf, str(1 + s))] = np.zeros(len(SWITCH_COUNTERS))
        for spine in self.spines:
            for j in range(len(self.leaves)):
                self.port_ctr[(spine, str(1 + j))] = np.zeros(len(SWITCH_COUNTERS))
        self.pool_ctr = {p: np.zeros(2) for p, _ in c.pools}
        self.job_write_ctr: dict[tuple[str, str], float] = {}
        self.gpu_temp = 62 + self.rng.normal(0, 2, (n, c.gpus_per_node))
        self.last_xid = np.zeros((n, c.gpus_per_node))

    # -- inventory ----------------------------------------------------------------------------
    def inventory(self) -> list[Message]:
        """Links, switch tiers, pools and the jobs running at the start."""
        c = self.cluster
        ts = self.start_ts - 60.0
        out: list[Message] = []
        for i, node in enumerate(self.nodes, start=1):
            leaf, port = c.leaf_of(i)
            fabric = "roce" if i >= c.roce_from else "infiniband"
            out.append(Message("inventory", f"link:{node}:mlx5_0:1", {
                "kind": "link", "ts": ts, "node": node, "device": "mlx5_0", "port": "1",
                "switch": leaf, "switch_port": port, "fabric": fabric, "speed_gbps": c.host_gbps}, ts))
        for leaf in self.leaves:
            out.append(Message("inventory", f"switch:{leaf}", {
                "kind": "switch", "ts": ts, "switch": leaf, "tier": "leaf", "uplinks": self.spines,
                "ports": {str(1 + s): {"peer": spine, "speed_gbps": c.uplink_gbps}
                          for s, spine in enumerate(self.spines)}}, ts))
        for spine in self.spines:
            out.append(Message("inventory", f"switch:{spine}", {
                "kind": "switch", "ts": ts, "switch": spine, "tier": "spine", "uplinks": [],
                "ports": {str(1 + j): {"peer": leaf, "speed_gbps": c.uplink_gbps}
                          for j, leaf in enumerate(self.leaves)}}, ts))
        for pool, fs in c.pools:
            out.append(Message("inventory", f"pool:{pool}", {
                "kind": "pool", "ts": ts, "pool": pool, "fs_type": fs, "switches": ["stor-leaf01", *self.spines]}, ts))
        for job in c.jobs:
            if job.start_offset <= 0:
                out.append(self._job_event(job, ts, "RUNNING"))
        return out

    def _job_event(self, job: JobSpec, ts: float, state: str) -> Message:
        return Message("inventory", f"job:{job.job_id}", {
            "kind": "job", "ts": ts, "job_id": job.job_id, "state": state, "nodes": job.nodes,
            "gpus_per_node": self.cluster.gpus_per_node, "storage": list(job.storage), "name": job.name}, ts)

    def _running(self, job: JobSpec, rel: float) -> bool:
        """The job holds its nodes (training, exited or completing: its GPUs still carry its label)."""
        return job.phase(rel) in ("training", "exited", "completing")

    def _training(self, job: JobSpec, rel: float) -> bool:
        """The job's ranks compute (and report steps): training, and not stalled."""
        return job.phase(rel) == "training" and not any(f.job == job.job_id for f in self._faults(rel, "stall"))

    # -- telemetry ----------------------------------------------------------------------------
    def _faults(self, rel: float, target: str) -> list[Fault]:
        return [f for f in self.scenario.faults if f.target == target and f.active(rel)]

    def _job_on(self, node: str, rel: float) -> JobSpec | None:
        """The job holding ``node`` at ``rel`` (the first one to, when none does)."""
        specs = self.node_jobs.get(node, [])
        return next((j for j in specs if self._running(j, rel)), specs[0] if specs else None)

    def _job_factor(self, rel: float, target: str, node: str, gpu: int | None = None) -> float:
        factor = 1.0
        job = self._job_on(node, rel)
        for f in self._faults(rel, target):
            if f.gpu is not None and gpu is not None and f.gpu != gpu:
                continue
            if (f.node is not None and f.node == node) or (f.node is None and job is not None and f.job == job.job_id):
                factor *= f.factor
        return factor

    def _clock(self, node: str, rel: float) -> float:
        """The node's clock error: its timestamps are ``offset`` seconds off the true time."""
        return sum(f.offset for f in self.scenario.faults if f.target == "clock" and f.node == node)

    def tick(self, rel: float) -> list[Message]:
        """All messages for second ``rel`` (seconds since the scenario start)."""
        c = self.cluster
        t = self.start_ts + rel
        rng = self.rng
        out: list[Message] = []
        # Job lifecycle events inside the scenario.
        for spec in c.jobs:
            if spec.start_offset > 0 and abs(rel - spec.start_offset) < 0.5:
                out.append(self._job_event(spec, t, "RUNNING"))
            if spec.end_offset is not None and abs(rel - spec.end_offset) < 0.5:
                out.append(self._job_event(spec, t, "COMPLETING" if spec.completing_s > 0 else spec.end_state))
            if spec.end_offset is not None and spec.completing_s > 0 and \
                    abs(rel - spec.end_offset - spec.completing_s) < 0.5:
                out.append(self._job_event(spec, t, spec.end_state))
        g = c.gpus_per_node
        for i, node in enumerate(self.nodes):
            job = self._job_on(node, rel)
            busy = job is not None and self._running(job, rel)
            training = job is not None and self._training(job, rel)
            skew = self._clock(node, rel)
            ts = round(t + skew, 3)
            ingest = round(t + 0.05, 3)
            # GPU
            util_f = np.array([self._job_factor(rel, "gpu_util", node, k) for k in range(g)]) if busy else np.ones(g)
            util = np.clip((95.0 if training else 0.0) * util_f + (rng.normal(0, 1.2, g) if training else np.zeros(g)),
                           0, 100)
            warm = 66 + c.gpu_temp_drift_per_h * rel / 3600.0 if busy else 38
            self.gpu_temp[i] += rng.normal(0, 0.1, g) + (warm - self.gpu_temp[i]) * 0.05
            for f in self._faults(rel, "xid"):
                if f.node == node and f.gpu is not None and rel - f.start < 1.0:
                    self.last_xid[i, f.gpu] = f.rate or 79.0
            gpu_samples = []
            for k in range(g):
                lab = {"gpu": str(k), "UUID": f"GPU-{i:04d}{k:04d}-sim"}
                if busy and job is not None:
                    lab["hpc_job"] = job.job_id
                gpu_samples.append(_s(ts, "gpu", node, "DCGM_FI_DEV_GPU_UTIL", round(float(util[k]), 2), lab, ingest))
                gpu_samples.append(_s(ts, "gpu", node, "DCGM_FI_DEV_GPU_TEMP", round(float(self.gpu_temp[i, k]), 1),
                                      lab, ingest))
                gpu_samples.append(_s(ts, "gpu", node, "DCGM_FI_DEV_XID_ERRORS", float(self.last_xid[i, k]), lab,
                                      ingest))
            out.append(Message("gpu", node, gpu_samples, t))
            # NIC
            idx = i + 1
            if idx >= c.roce_from:
                tx = max(rng.normal(2.5e9 if busy else 1e6, 1e7 if busy else 1e4), 0)
                inc = np.array([0, 0, 0, rng.poisson(30 if busy else 1), rng.poisson(25 if busy else 1), 0,
                                round(tx), round(tx * rng.normal(1, 0.01))], float)
                for f in self._faults(rel, "nic"):
                    if f.node == node:
                        inc[0] += rng.poisson(f.rate)
                        inc[1] += rng.poisson(f.rate / 2)
                        inc[2] += rng.poisson(max(f.rate / 10, 1))
                self.roce_ctr[i] += inc
                labels = {"device": "mlx5_0", "port": "1"}
                out.append(Message("nic", node, [
                    _s(ts, "nic", node, name, float(v), labels, ingest, "counter")
                    for name, v in zip(ROCE_COUNTERS, self.roce_ctr[i], strict=True)], t))
            else:
                data_words = rng.normal(2.5e9 if busy else 1e6, 1e7 if busy else 1e4) / 4
                inc = np.array([0, 0, 0, 0, 0, rng.poisson(2000 if busy else 5), max(data_words, 0),
                                max(data_words * rng.normal(1, 0.01), 0)])
                for f in self._faults(rel, "nic"):
                    if f.node == node:
                        inc[0] += rng.poisson(f.rate)
                        inc[3] += rng.poisson(f.rate / 4)
                self.nic_ctr[i] += np.round(inc)
                labels = {"device": "mlx5_0", "port": "1"}
                out.append(Message("nic", node, [
                    _s(ts, "nic", node, name, float(v), labels, ingest, "counter")
                    for name, v in zip(IB_NIC_COUNTERS, self.nic_ctr[i], strict=True)], t))
            # Host
            cpu = (35.0 if busy else 3.0) * self._job_factor(rel, "cpu", node) + rng.normal(0, 2)
            out.append(Message("host", node, [_s(ts, "host", node, "cpu_utilization",
                                                  round(float(np.clip(cpu, 0, 100)), 2), {}, ingest)], t))
            if not training or job is None:
                continue
            # NCCL
            drift = 1.0 + job.drift_per_h * (rel - job.start_offset) / 3600.0
            base_us = 12000.0 * job.step_time * drift
            coll = base_us * self._job_factor(rel, "nccl", node) * rng.normal(1, 0.02)
            out.append(Message("nccl", node, [_s(ts, "nccl", node, "coll_exec_time_us", round(float(coll), 1),
                                                  {"coll": "AllReduce", "job_id": job.job_id}, ingest)], t))
            # Step (one reporting rank per node: local rank 0)
            rank = str(self.job_nodes[job.job_id].index(node) * g)
            # In synchronous data-parallel training every rank waits for the slowest: a job-wide
            # ``step`` fault models that; ``loader`` raises one node's (or the job's) data wait.
            step = job.step_time * drift * self._job_factor(rel, "step", node) * rng.normal(1, 0.015)
            if job.end_offset is not None and rel >= job.end_offset - job.wind_down_s - job.final_save_s:
                step *= job.final_save_factor
            loader = 0.01 * job.step_time * self._job_factor(rel, "loader", node) * abs(rng.normal(1, 0.1))
            out.append(Message("step", job.job_id, [
                _s(ts, "step", node, "step_time_seconds", round(float(step), 4), {"job_id": job.job_id, "rank": rank},
                   ingest),
                _s(ts, "step", node, "dataloader_wait_seconds", round(float(loader), 5),
                   {"job_id": job.job_id, "rank": rank}, ingest)], t))
        # Switches: leaf downlinks and uplinks, spine ports.
        per_switch: dict[str, list[dict[str, Any]]] = {}
        for (switch, port), ctr in self.port_ctr.items():
            inc = np.array([0, 0, 0, 0, rng.poisson(3000), max(rng.normal(2.4e9, 1e7) / 4, 0)])
            for f in self._faults(rel, "switch_port"):
                if f.switch == switch and f.port == port:
                    inc[0] += rng.poisson(f.rate)
                    inc[2] += rng.poisson(f.rate / 4)
            ctr += np.round(inc)
            per_switch.setdefault(switch, []).extend(
                _s(round(t, 3), "switch", switch, name, float(v), {"port": port}, round(t + 0.05, 3), "counter")
                for name, v in zip(SWITCH_COUNTERS, ctr, strict=True))
        for switch, samples in per_switch.items():
            out.append(Message("switch", switch, samples, t))
        # Storage pools.
        for pool, _ in c.pools:
            lat_f = 1.0
            for f in self._faults(rel, "storage"):
                if f.pool == pool:
                    lat_f *= f.factor
            # Per-job writes, as Lustre jobstats report them; checkpoint bursts of several jobs at once
            # make the pool's write latency climb much more than one burst alone.
            job_writes = []
            bursting = 0
            for spec in c.jobs:
                if pool not in spec.storage or not self._running(spec, rel):
                    continue
                burst = [f for f in self._faults(rel, "write_burst") if f.pool == pool and f.job == spec.job_id]
                factor = 1.0 + sum(f.factor for f in burst)
                if spec.checkpoint_every_s > 0 and pool == spec.storage[0] and self._training(spec, rel):
                    since = rel - spec.start_offset - spec.checkpoint_phase_s
                    if since >= spec.checkpoint_every_s and since % spec.checkpoint_every_s < spec.checkpoint_s:
                        factor += spec.checkpoint_factor
                bursting += 1 if burst else 0
                key = (pool, spec.job_id)
                self.job_write_ctr[key] = self.job_write_ctr.get(key, 0.0) + max(rng.normal(5e7 * factor, 1e6), 0)
                job_writes.append(_s(round(t, 3), "storage", pool, "jobstats_write_bytes_sum",
                                     float(round(self.job_write_ctr[key])), {"job_id": spec.job_id},
                                     round(t + 0.05, 3), "counter"))
            contention = 1.0 + 0.6 * bursting ** 2
            read_lat = 0.002 * lat_f * rng.lognormal(0, 0.05)
            write_lat = 0.004 * lat_f * contention * rng.lognormal(0, 0.05)
            self.pool_ctr[pool] += [max(rng.normal(4e9, 4e7), 0), max(rng.normal(1e9 * (1 + bursting), 1e7), 0)]
            ingest = round(t + 0.05, 3)
            out.append(Message("storage", pool, [
                _s(round(t, 3), "storage", pool, "read_latency_seconds", round(float(read_lat), 6), {}, ingest),
                _s(round(t, 3), "storage", pool, "write_latency_seconds", round(float(write_lat), 6), {}, ingest),
                _s(round(t, 3), "storage", pool, "read_bytes_total", float(self.pool_ctr[pool][0]), {}, ingest,
                   "counter"),
                _s(round(t, 3), "storage", pool, "write_bytes_total", float(self.pool_ctr[pool][1]), {}, ingest,
                   "counter"),
                *job_writes,
            ], t))
        return out

    def run(self, duration: float | None = None) -> Iterator[Message]:
        """Inventory first, then every second of the scenario."""
        yield from self.inventory()
        total = self.scenario.duration if duration is None else duration
        for rel in range(math.ceil(total)):
            yield from self.tick(float(rel))


def _s(ts: float, layer: str, source: str, metric: str, value: float, labels: dict[str, str],
       ingest_ts: float, kind: str | None = None) -> dict[str, Any]:
    sample: dict[str, Any] = {"ts": ts, "layer": layer, "source": source, "metric": metric, "value": value,
                              "labels": labels, "ingest_ts": ingest_ts}
    if kind is not None:
        sample["kind"] = kind
    return sample
