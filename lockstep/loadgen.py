"""Load generation at cluster scale: 1,000 to 100,000 GPUs, paced to a samples/s target.

:mod:`lockstep.simulate` plays hand-made fault scenarios on a 48-node cluster; this module makes the
*volume* of a large cluster, cheaply, with the same record shapes and keys:

- per node and scrape: one ``gpu`` message (``gpus_per_node`` x ``gpu_fields`` DCGM fields), one ``nic``
  message (InfiniBand port counters), one ``host`` message, and for a busy node one ``nccl`` sample;
- per job and scrape: one ``step`` message (every rank's step time and loader wait), keyed by job;
- per leaf switch and scrape: one ``switch`` message (every downlink's counters); per pool one ``storage``.

Messages are keyed as collectors key them (telemetry by source, step by job). Optional incidents
replay the seed incident's causal chain for a job (its leaf port errs, then AllReduce slows at +2 s,
GPU utilisation falls at +5 s, step time doubles at +8 s), so alert latency can be measured at scale.

Deterministic for a seed. ``single=True`` makes one message per sample (the worst case for per-message
costs). Rate: :func:`produce` paces whole scrapes so that ``rate`` samples/s leave the producer;
event time advances one ``interval_s`` per scrape, so a rate above the cluster's natural rate
(samples per scrape / interval) plays faster than real time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

#: DCGM fields a node scrape carries, in order (the catalogue knows all of them).
GPU_FIELDS: tuple[tuple[str, float, float], ...] = (
    # name, healthy mean, noise
    ("DCGM_FI_DEV_GPU_UTIL", 95.0, 1.2),
    ("DCGM_FI_PROF_SM_ACTIVE", 0.82, 0.01),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.55, 0.01),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 0.41, 0.01),
    ("DCGM_FI_DEV_GPU_TEMP", 66.0, 0.5),
    ("DCGM_FI_DEV_MEMORY_TEMP", 71.0, 0.5),
    ("DCGM_FI_DEV_POWER_USAGE", 610.0, 6.0),
    ("DCGM_FI_DEV_FB_USED", 61000.0, 50.0),
    ("DCGM_FI_DEV_SM_CLOCK", 1980.0, 5.0),
    ("DCGM_FI_DEV_MEM_CLOCK", 2619.0, 1.0),
    ("DCGM_FI_DEV_XID_ERRORS", 0.0, 0.0),
    ("DCGM_FI_PROF_SM_OCCUPANCY", 0.47, 0.01),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 35.0, 1.0),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 0.12, 0.005),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 0.08, 0.005),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 0.0, 0.0),
)
#: InfiniBand port counters of a node's NIC and of a switch port: name, healthy increment per second.
NIC_COUNTERS: tuple[tuple[str, float], ...] = (
    ("SymbolErrorCounter", 0.0), ("LinkErrorRecoveryCounter", 0.0), ("LinkDownedCounter", 0.0),
    ("PortRcvErrors", 0.0), ("PortXmitDiscards", 0.0), ("PortXmitWait", 2000.0),
    ("PortXmitData", 6.0e8), ("PortRcvData", 6.0e8))
SWITCH_COUNTERS: tuple[tuple[str, float], ...] = (
    ("SymbolErrorCounter", 0.0), ("PortRcvErrors", 0.0), ("PortXmitWait", 3000.0), ("PortXmitData", 6.0e8))
#: Seconds after an incident's start at which each layer reacts (the seed incident's chain).
INCIDENT_CHAIN = {"switch": 0.0, "nccl": 2.0, "gpu": 5.0, "step": 8.0}
CHAIN_LAST_S = max(INCIDENT_CHAIN.values())


@dataclass(frozen=True)
class LoadSpec:
    """The shape of a generated cluster."""

    gpus: int = 1000
    gpus_per_node: int = 8
    #: DCGM fields per GPU and scrape (the first N of :data:`GPU_FIELDS`).
    gpu_fields: int = 12
    nodes_per_leaf: int = 32
    nodes_per_job: int = 32
    #: Fraction of nodes that run a job (the rest are idle).
    busy: float = 0.9
    pools: int = 2
    interval_s: float = 1.0
    start_ts: float = 1764502800.0
    seed: int = 7
    #: One message per sample instead of one per scrape.
    single: bool = False
    #: Incidents: (job index, scrape at which its leaf port starts to err); each lasts ``incident_s``.
    incidents: tuple[tuple[int, int], ...] = ()
    incident_s: float = 60.0

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))


@dataclass
class Incident:
    job: str
    start_ts: float
    end_ts: float
    switch: str
    port: str


@dataclass
class LoadGenerator:
    spec: LoadSpec
    nodes: list[str] = field(init=False)
    jobs: dict[str, list[int]] = field(init=False)
    node_job: list[str | None] = field(init=False)

    def __post_init__(self) -> None:
        s = self.spec
        self.rng = np.random.default_rng(s.seed)
        self.nodes = [f"n{i:06d}" for i in range(s.nodes)]
        busy_nodes = int(s.nodes * s.busy)
        self.jobs = {}
        self.node_job = [None] * s.nodes
        for j, first in enumerate(range(0, busy_nodes, s.nodes_per_job)):
            members = list(range(first, min(first + s.nodes_per_job, busy_nodes)))
            job = f"job{j:05d}"
            self.jobs[job] = members
            for i in members:
                self.node_job[i] = job
        self.fields = GPU_FIELDS[: max(1, min(s.gpu_fields, len(GPU_FIELDS)))]
        n, g = s.nodes, s.gpus_per_node
        self.gpu_mean = np.tile(np.array([m for _, m, _ in self.fields]), (n, g, 1))
        self.gpu_noise = np.tile(np.array([z for _, _, z in self.fields]), (n, g, 1))
        idle = np.array([job is None for job in self.node_job])
        self.gpu_mean[idle, :, 0] = 0.0
        self.nic = np.zeros((n, len(NIC_COUNTERS)))
        self.nic_inc = np.tile(np.array([r for _, r in NIC_COUNTERS]), (n, 1))
        self.nic_inc[idle] *= 0.01
        self.leaves = [f"leaf{i:04d}" for i in range(math.ceil(n / s.nodes_per_leaf))]
        self.port = np.zeros((n, len(SWITCH_COUNTERS)))  # one downlink per node
        self.pool_names = [f"pool{i:02d}" for i in range(s.pools)]
        self.incidents = []
        job_names = sorted(self.jobs)
        for j, at in s.incidents:
            job = job_names[j % len(job_names)]
            leaf, port = self.leaf_of(self.jobs[job][0])
            t = s.start_ts + at * s.interval_s
            self.incidents.append(Incident(job, t, t + s.incident_s, leaf, port))
        self._gpu_docs = [self._gpu_doc(i) for i in range(n)]

    def leaf_of(self, i: int) -> tuple[str, str]:
        return self.leaves[i // self.spec.nodes_per_leaf], str(1 + i % self.spec.nodes_per_leaf)

    # -- shapes ---------------------------------------------------------------------------------
    def _gpu_doc(self, i: int) -> list[dict[str, Any]]:
        node = self.nodes[i]
        job = self.node_job[i]
        out = []
        for k in range(self.spec.gpus_per_node):
            labels = {"gpu": str(k), "UUID": f"GPU-{i:06d}-{k}"}
            if job is not None:
                labels["hpc_job"] = job
            for name, _, _ in self.fields:
                out.append({"ts": 0.0, "layer": "gpu", "source": node, "metric": name, "value": 0.0, "labels": labels})
        return out

    @property
    def samples_per_scrape(self) -> int:
        s = self.spec
        n = s.nodes
        busy = sum(1 for j in self.node_job if j is not None)
        return (n * s.gpus_per_node * len(self.fields) + n * len(NIC_COUNTERS) + n + busy + 2 * busy
                + n * len(SWITCH_COUNTERS) + 2 * len(self.pool_names))

    @property
    def series(self) -> int:
        """Distinct series (= samples per scrape)."""
        return self.samples_per_scrape

    def inventory(self) -> list[dict[str, Any]]:
        """Links, switch tiers, pools and jobs (as inventory events)."""
        ts = self.spec.start_ts - 60.0
        out: list[dict[str, Any]] = []
        for i, node in enumerate(self.nodes):
            leaf, port = self.leaf_of(i)
            out.append({"kind": "link", "ts": ts, "node": node, "device": "mlx5_0", "port": "1", "switch": leaf,
                        "switch_port": port, "fabric": "infiniband"})
        for leaf in self.leaves:
            out.append({"kind": "switch", "ts": ts, "switch": leaf, "tier": "leaf", "uplinks": ["spine01", "spine02"]})
        for pool in self.pool_names:
            out.append({"kind": "pool", "ts": ts, "pool": pool, "fs_type": "lustre", "switches": ["spine01"]})
        for job, members in sorted(self.jobs.items()):
            out.append({"kind": "job", "ts": ts, "job_id": job, "state": "RUNNING",
                        "nodes": ",".join(self.nodes[i] for i in members), "gpus_per_node": self.spec.gpus_per_node,
                        "storage": [self.pool_names[0]] if self.pool_names else []})
        return out

    # -- scrapes --------------------------------------------------------------------------------
    @staticmethod
    def _factor(active: list[Incident], layer: str, job: str | None, t: float) -> float:
        factor = 1.0
        for inc in active:
            if inc.job == job and inc.start_ts + INCIDENT_CHAIN[layer] <= t < inc.end_ts + INCIDENT_CHAIN[layer]:
                factor *= {"nccl": 2.6, "gpu": 0.45, "step": 2.0}.get(layer, 1.0)
        return factor

    def scrape(self, k: int) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """Every message of scrape ``k``: ``(layer, key, samples)``."""
        s = self.spec
        t = round(s.start_ts + k * s.interval_s, 3)
        rng = self.rng
        # the incidents that touch scrape k at any layer (a long schedule costs per scrape, not per message)
        active = [inc for inc in self.incidents if inc.start_ts <= t < inc.end_ts + CHAIN_LAST_S]
        out: list[tuple[str, str, list[dict[str, Any]]]] = []
        gpu = np.maximum(self.gpu_mean + rng.normal(0.0, 1.0, self.gpu_mean.shape) * self.gpu_noise, 0.0)
        self.nic += self.nic_inc * s.interval_s * (1 + 0.01 * rng.normal(size=self.nic.shape))
        self.nic = np.round(self.nic)
        port_inc = np.tile(np.array([r for _, r in SWITCH_COUNTERS]), (s.nodes, 1)) * s.interval_s
        for inc in active:
            if inc.start_ts <= t < inc.end_ts:
                i = self.jobs[inc.job][0]
                port_inc[i, 0] += rng.poisson(40.0 * s.interval_s)
                port_inc[i, 1] += rng.poisson(10.0 * s.interval_s)
        self.port = np.round(self.port + port_inc)
        host = np.clip(np.where([j is None for j in self.node_job], 3.0, 35.0) + rng.normal(0, 2, s.nodes), 0, 100)
        for i, node in enumerate(self.nodes):
            job = self.node_job[i]
            values = gpu[i]
            if job is not None and active:
                values = values.copy()
                values[:, 0] *= self._factor(active, "gpu", job, t)
            doc = self._gpu_docs[i]
            for d, v in zip(doc, np.round(values, 3).ravel().tolist(), strict=True):
                d["ts"] = t
                d["value"] = v
            out.append(("gpu", node, doc))
            out.append(("nic", node, [
                {"ts": t, "layer": "nic", "source": node, "metric": name, "value": v,
                 "labels": {"device": "mlx5_0", "port": "1"}, "kind": "counter"}
                for (name, _), v in zip(NIC_COUNTERS, self.nic[i].tolist(), strict=True)]))
            out.append(("host", node, [{"ts": t, "layer": "host", "source": node, "metric": "cpu_utilization",
                                        "value": round(float(host[i]), 2), "labels": {}}]))
            if job is not None:
                coll = 12000.0 * self._factor(active, "nccl", job, t) * (1 + 0.02 * float(rng.normal()))
                out.append(("nccl", node, [{"ts": t, "layer": "nccl", "source": node, "metric": "coll_exec_time_us",
                                            "value": round(coll, 1), "labels": {"coll": "AllReduce", "job_id": job}}]))
        for job, members in sorted(self.jobs.items()):
            f = self._factor(active, "step", job, t)
            steps = f * (1 + 0.015 * rng.normal(size=len(members)))
            samples: list[dict[str, Any]] = []
            for r, (i, st) in enumerate(zip(members, steps.tolist(), strict=True)):
                labels = {"job_id": job, "rank": str(r * s.gpus_per_node)}
                samples.append({"ts": t, "layer": "step", "source": self.nodes[i], "metric": "step_time_seconds",
                                "value": round(st, 4), "labels": labels})
                samples.append({"ts": t, "layer": "step", "source": self.nodes[i], "metric": "dataloader_wait_seconds",
                                "value": round(0.01 * abs(1 + 0.1 * float(rng.normal())), 5), "labels": labels})
            out.append(("step", job, samples))
        npl = s.nodes_per_leaf
        for li, leaf in enumerate(self.leaves):
            rows = range(li * npl, min((li + 1) * npl, s.nodes))
            out.append(("switch", leaf, [
                {"ts": t, "layer": "switch", "source": leaf, "metric": name, "value": v,
                 "labels": {"port": str(1 + i % npl)}, "kind": "counter"}
                for i in rows for (name, _), v in zip(SWITCH_COUNTERS, self.port[i].tolist(), strict=True)]))
        for p, pool in enumerate(self.pool_names):
            out.append(("storage", pool, [
                {"ts": t, "layer": "storage", "source": pool, "metric": "read_latency_seconds",
                 "value": round(0.002 * (1 + 0.05 * float(rng.normal())), 6), "labels": {}},
                {"ts": t, "layer": "storage", "source": pool, "metric": "write_bytes_total",
                 "value": float(1e9 * (k + 1) * (p + 1)), "labels": {}, "kind": "counter"}]))
        return out

    def messages(self, k: int) -> Iterator[tuple[str, bytes, bytes]]:
        """Scrape ``k`` as Kafka messages: ``(layer, key, value)``; one per sample with ``single``."""
        for layer, key, value, _ in self.counted_messages(k):
            yield layer, key, value

    def counted_messages(self, k: int) -> Iterator[tuple[str, bytes, bytes, int]]:
        """:meth:`messages` with each message's number of samples: ``(layer, key, value, samples)``."""
        for layer, key, samples in self.scrape(k):
            kb = key.encode()
            if self.spec.single:
                for sample in samples:
                    yield layer, kb, orjson.dumps(sample), 1
            else:
                yield layer, kb, orjson.dumps(samples), len(samples)


async def produce(settings: Any, bootstrap: str, spec: LoadSpec, *, rate: float | None = None,
                  scrapes: int | None = None, seconds: float | None = None, stop: asyncio.Event | None = None,
                  inventory: bool = True, on_scrape: Callable[[int, float, float], None] | None = None,
                  first_scrape: int = 0,
                  placed: Callable[[str, int, int, int], None] | None = None,
                  hold: asyncio.Event | None = None) -> dict[str, Any]:
    """Produce the generated cluster to the telemetry topics (inventory first).

    ``rate``: samples/s (None: as fast as the producer takes them). Stops after ``scrapes`` scrapes,
    ``seconds`` of wall time, or when ``stop`` is set. ``on_scrape(k, event_ts, acked_wall)`` is called
    once every message of scrape ``k`` has been acknowledged by the broker. ``placed(topic, partition,
    offset, samples)`` is called for every telemetry message once all are acknowledged (where the broker
    put it, and how many samples it holds: a bench counts the samples behind a committed offset). While
    ``hold`` is set, nothing is sent (input that pauses: the scrapes resume where they stopped, at
    ``rate`` with no burst to catch up; neither ``seconds`` nor the returned seconds count the pause).
    """
    from agents.kafka import start_producer
    from agents.topics import TopicCatalogue
    from models.inventory import inventory_adapter, inventory_key

    gen = LoadGenerator(spec)
    cat = TopicCatalogue(settings)
    producer = await start_producer(settings, bootstrap, max_batch_size=1024 * 1024)
    sent_samples = sent_messages = 0
    sent: list[tuple[Any, int]] = []  # (the send's future, its samples), kept only for ``placed``
    try:
        if inventory:
            for doc in gen.inventory():
                event = inventory_adapter.validate_python(doc)
                await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
            await producer.flush()
        per_scrape = gen.samples_per_scrape
        wall0 = time.monotonic()
        k = first_scrape
        topics = {layer: cat.telemetry(layer) for layer in ("gpu", "nic", "host", "nccl", "step", "switch", "storage")}
        while True:
            if scrapes is not None and k - first_scrape >= scrapes:
                break
            if seconds is not None and time.monotonic() - wall0 >= seconds:
                break
            if stop is not None and stop.is_set():
                break
            if hold is not None and hold.is_set():
                held = time.monotonic()
                while hold.is_set() and not (stop is not None and stop.is_set()):
                    await asyncio.sleep(0.05)
                wall0 += time.monotonic() - held  # the rate resumes from here, no burst to catch up
            futures = []
            for layer, key, value, n in gen.counted_messages(k):
                fut = await producer.send(topics[layer], value, key=key)
                futures.append(fut)
                if placed is not None:
                    sent.append((fut, n))
                sent_messages += 1
            sent_samples += per_scrape
            if on_scrape is not None:
                await asyncio.gather(*futures)
                on_scrape(k, spec.start_ts + k * spec.interval_s, time.monotonic())
            k += 1
            if rate:
                delay = wall0 + sent_samples / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        await producer.flush()
        wall = time.monotonic() - wall0
        for fut, n in sent:
            meta = await fut
            placed(meta.topic, meta.partition, meta.offset, n)  # type: ignore[misc]
        return {"scrapes": k - first_scrape, "messages": sent_messages, "samples": sent_samples,
                "seconds": round(wall, 3), "samples_per_s": round(sent_samples / wall, 1) if wall > 0 else None,
                "series": gen.series}
    finally:
        await producer.stop()


def run_cli(args: Any) -> int:
    """``lockstep simulate --gpus N [--rate R] [--duration S] (--kafka | -o FILE)``."""
    import contextlib
    import signal
    import sys

    from lockstep.logs import setup_logging
    from models.settings import LockstepSettings

    spec = LoadSpec(gpus=args.gpus, seed=args.seed)
    gen = LoadGenerator(spec)
    natural = gen.samples_per_scrape / spec.interval_s
    print(f"lockstep simulate: {spec.gpus:,} GPUs, {spec.nodes:,} nodes, {len(gen.jobs):,} jobs, "
          f"{gen.series:,} series, {natural:,.0f} samples/s in real time", file=sys.stderr)
    if args.output is not None and not args.kafka:
        scrapes = int(args.duration or 60)
        n = 0
        with open(args.output, "wb") as fh:
            for doc in gen.inventory():
                fh.write(orjson.dumps(doc) + b"\n")
            for k in range(scrapes):
                for _, _, samples in gen.scrape(k):
                    for sample in samples:
                        fh.write(orjson.dumps(sample) + b"\n")
                        n += 1
        print(f"wrote {n:,} samples ({scrapes} scrapes) to {args.output}", file=sys.stderr)
        return 0
    settings = LockstepSettings()
    setup_logging(settings.log_level)
    bootstrap = settings.kafka_bootstrap_servers
    if bootstrap is None:
        print("lockstep simulate --gpus: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS, or give --output FILE", file=sys.stderr)
        return 2

    async def main() -> dict[str, Any]:
        from agents.topics import create_topics

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await create_topics(settings, bootstrap)
        return await produce(settings, bootstrap, spec, rate=args.rate or natural, seconds=args.duration, stop=stop)

    summary = asyncio.run(main())
    print(f"lockstep simulate: {orjson.dumps(summary).decode()}", file=sys.stderr)
    return 0
