"""Storage scenarios: the storage network as inventory, and per-job writes as lustre_exporter publishes them.

Both run the lab cluster of :mod:`lockstep.simulate` and add what its fault table cannot say:

- ``storage-via-network``: lustre-a's servers ``oss01`` and ``oss02`` hang off the storage leaf
  ``stor-leaf01`` (``link`` events, ports 1 and 2; the leaf's uplinks go to the spines). Port 1 (to
  oss01) takes symbol errors; a second later the pool's latency rises 6x and train-a's data loaders
  wait, then its GPUs idle and its step time rises. The switch samples name only ``stor-leaf01`` and
  ``port``: nothing in them says which job they hurt; the inventory does (the leaf is on lustre-a's
  path, train-a uses lustre-a)::

      switch stor-leaf01 port=1 SymbolErrorCounter ....XXXXXXXXXX     (F)
      storage lustre-a write_latency_seconds       .....XXXXXXXXX     (F+1)
      step train-a dataloader_wait_seconds         ......XXXXXXXX     (F+2)
      step train-a step_time_seconds               .......XXXXXXX     (F+3)

- ``checkpoint-contention-lustre-exporter``: the ``checkpoint-contention`` scenario (train-a and
  train-b checkpoint into lustre-a 5 s apart, 30 s each), with the per-job write counters sent as
  one lustre_exporter scrape per second on the ``prometheus`` carrier instead of native
  ``jobstats_write_bytes_sum`` samples: ``lustre_job_write_bytes_total{component="ost",
  target="lustre-a-OST0000",jobid="train-a"}`` (striped over two OSTs; read bytes likewise). The scrape
  carries no ``source``: the pool is the file system of ``target``.
- ``checkpoint-contention-jobstats``: the same, with the counters as Lustre prints them
  (``obdfilter.lustre-a-OST0000.job_stats=`` ...), converted by the ``lustre-jobstats`` adapter.

:func:`messages` yields :class:`lockstep.simulate.Message` objects: native batches as the simulator
makes them, and ``carrier`` messages whose value is a replay envelope (docs/contracts.md, "Real formats
in replay files"). :func:`native` converts the envelopes as the worker's convert agent does (for the
pure pipeline); :func:`write_replay` writes a ``lockstep replay`` file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.carriers import key_source
from lockstep.scenarios import write_messages
from lockstep.simulate import (
    DEFAULT_START_TS,
    F_END,
    LAB,
    LAB_DURATION,
    SCENARIOS,
    SWITCH_COUNTERS,
    F,
    Fault,
    Message,
    Scenario,
    Simulator,
)
from streams.formats import convert

STORAGE_LEAF = "stor-leaf01"
#: lustre-a's servers and their ports on the storage leaf.
SERVERS = (("oss01", "1"), ("oss02", "2"))
#: The storage leaf's uplink ports (one per spine).
UPLINK_PORTS = ("33", "34")
CARRIER = "carrier"
#: lustre-a's object storage targets (per-job counters are striped over both).
OSTS = ("lustre-a-OST0000", "lustre-a-OST0001")
#: Read counters count from here (any fixed instant before the scenarios start will do).
SCENARIO_EPOCH = DEFAULT_START_TS - 3600.0


@dataclass(frozen=True)
class StorageScenario:
    name: str
    description: str
    base: Scenario
    #: symbol errors on the storage leaf's ports (``switch_port`` faults on ``stor-leaf01``)
    storage_port_faults: tuple[Fault, ...] = ()
    #: per-job write and read counters sent in a real format instead of as native samples:
    #: ``lustre-exporter`` (a Prometheus scrape) or ``lustre-jobstats`` (the ``job_stats`` file)
    per_job_format: str | None = None
    expect: str = ""


STORAGE_SCENARIOS: dict[str, StorageScenario] = {
    "storage-via-network": StorageScenario(
        "storage-via-network",
        "stor-leaf01 port 1 (lustre-a's server oss01) takes symbol errors; lustre-a's latency rises 6x a "
        "second later, train-a's loaders wait at 2 s, its GPUs idle and its step time rises at 3 s",
        Scenario("storage-via-network", "", duration=LAB_DURATION, cluster=LAB, faults=(
            Fault("storage", F + 1, F_END, factor=6.0, pool="lustre-a"),
            Fault("loader", F + 2, F_END + 1, factor=40.0, job="train-a"),
            Fault("gpu_util", F + 3, F_END + 2, factor=0.55, job="train-a"),
            Fault("step", F + 3, F_END + 2, factor=1.7, job="train-a"))),
        storage_port_faults=(Fault("switch_port", F, F_END, rate=40.0, switch=STORAGE_LEAF, port="1"),),
        expect="job_slowdown for train-a: network (storage via network), stor-leaf01 port 1",
    ),
    "checkpoint-contention-lustre-exporter": StorageScenario(
        "checkpoint-contention-lustre-exporter",
        "checkpoint-contention, with per-job write bytes as lustre_exporter scrapes "
        "(lustre_job_write_bytes_total{component,jobid,target})",
        SCENARIOS["checkpoint-contention"], per_job_format="lustre-exporter",
        expect="one checkpoint_contention alert: lustre-a, train-a and train-b, move train-b",
    ),
    "checkpoint-contention-jobstats": StorageScenario(
        "checkpoint-contention-jobstats",
        "checkpoint-contention, with per-job write bytes as Lustre prints its job_stats "
        "(obdfilter.<target>.job_stats, converted by the lustre-jobstats adapter)",
        SCENARIOS["checkpoint-contention"], per_job_format="lustre-jobstats",
        expect="one checkpoint_contention alert: lustre-a, train-a and train-b, move train-b",
    ),
}


def messages(name: str, seed: int = 7) -> Iterator[Message]:
    """The scenario's messages in time order: inventory first, then every second."""
    spec = STORAGE_SCENARIOS[name]
    sim = Simulator(spec.base, seed=seed)
    rng = np.random.default_rng(seed + 1000)  # its own stream: the simulator's stays as in the base scenario
    counters = {port: np.zeros(len(SWITCH_COUNTERS)) for _, port in SERVERS} | {
        port: np.zeros(len(SWITCH_COUNTERS)) for port in UPLINK_PORTS}
    yield from sim.inventory()
    yield from _storage_inventory(sim)
    for rel in range(int(np.ceil(spec.base.duration))):
        t = sim.start_ts + rel
        for msg in sim.tick(float(rel)):
            if spec.per_job_format is not None and msg.topic == "storage":
                yield from _per_job_as(spec.per_job_format, msg, t)
            else:
                yield msg
        yield _storage_leaf(spec, counters, rng, float(rel), t)


def _storage_inventory(sim: Simulator) -> list[Message]:
    ts = sim.start_ts - 60.0
    out = [Message("inventory", f"link:{server}:mlx5_0:1", {
        "kind": "link", "ts": ts, "node": server, "device": "mlx5_0", "port": "1", "switch": STORAGE_LEAF,
        "switch_port": port, "fabric": "infiniband", "speed_gbps": sim.cluster.host_gbps}, ts)
        for server, port in SERVERS]
    out.append(Message("inventory", f"switch:{STORAGE_LEAF}", {
        "kind": "switch", "ts": ts, "switch": STORAGE_LEAF, "tier": "leaf", "uplinks": sim.spines}, ts))
    return out


def _storage_leaf(spec: StorageScenario, counters: dict[str, np.ndarray], rng: np.random.Generator, rel: float,
                  t: float) -> Message:
    samples = []
    for port, ctr in counters.items():
        inc = np.array([0, 0, 0, 0, rng.poisson(3000), max(rng.normal(2.4e9, 1e7) / 4, 0)])
        for f in spec.storage_port_faults:
            if f.active(rel) and f.port == port:
                inc[0] += rng.poisson(f.rate)
                inc[2] += rng.poisson(f.rate / 4)
        ctr += np.round(inc)
        samples += [{"ts": round(t, 3), "layer": "switch", "source": STORAGE_LEAF, "metric": name, "value": float(v),
                     "labels": {"port": port}, "ingest_ts": round(t + 0.05, 3), "kind": "counter"}
                    for name, v in zip(SWITCH_COUNTERS, ctr, strict=True)]
    return Message("switch", STORAGE_LEAF, samples, t)


def _per_job_as(fmt: str, msg: Message, t: float) -> Iterator[Message]:
    """The pool's batch without its per-job jobstats samples, and those as one message of ``fmt``."""
    per_job = [s for s in msg.value if s["metric"] == "jobstats_write_bytes_sum"]
    rest = [s for s in msg.value if s["metric"] != "jobstats_write_bytes_sum"]
    yield Message(msg.topic, msg.key, rest, msg.ts)
    if not per_job:
        return
    # Reads: a steady 20 MB/s per job and target (a dataset streamed at the same pace).
    reads = int(2e7 * (t - SCENARIO_EPOCH))
    writes = {(str(s["labels"]["job_id"]), target): value for s in per_job
              for target, value in zip(OSTS, _striped(int(s["value"])), strict=True)}
    if fmt == "lustre-exporter":
        payload = _lustre_exporter_text(writes, reads)
        envelope = {"carrier": "prometheus", "ts": t, "key": "oss01", "payload": payload}
    else:
        envelope = {"carrier": "lustre-jobstats", "ts": t, "key": "oss01", "payload": _job_stats_text(writes, reads, t)}
    yield Message(CARRIER, "oss01", envelope, t)


def _striped(total: int) -> tuple[int, int]:
    half = total // 2
    return half, total - half


def _lustre_exporter_text(writes: dict[tuple[str, str], int], reads: int) -> str:
    """The per-job families as lustre_exporter publishes them (label order as in its output)."""
    lines = ["# HELP lustre_job_read_bytes_total The total number of bytes that have been read.",
             "# TYPE lustre_job_read_bytes_total counter"]
    lines += [f'lustre_job_read_bytes_total{{component="ost",target="{target}",jobid="{job}"}} {reads}'
              for job, target in writes]
    lines += ["# HELP lustre_job_write_bytes_total The total number of bytes that have been written.",
              "# TYPE lustre_job_write_bytes_total counter"]
    lines += [f'lustre_job_write_bytes_total{{component="ost",target="{target}",jobid="{job}"}} {value}'
              for (job, target), value in writes.items()]
    return "\n".join(lines) + "\n"


def _job_stats_text(writes: dict[tuple[str, str], int], reads: int, t: float) -> str:
    """``lctl get_param obdfilter.*.job_stats`` of the pool's OSS."""
    lines = []
    for target in OSTS:
        lines += [f"obdfilter.{target}.job_stats=", "job_stats:"]
        for (job, tgt), value in writes.items():
            if tgt != target:
                continue
            lines += [f"- job_id:          {job}", f"  snapshot_time:   {int(t)}",
                      f"  read_bytes:      {{ samples: {reads // 4194304}, unit: bytes, min: 4194304, max: 4194304, "
                      f"sum: {reads} }}",
                      f"  write_bytes:     {{ samples: {value // 4194304}, unit: bytes, min: 1048576, max: 4194304, "
                      f"sum: {value} }}"]
    return "\n".join(lines) + "\n"


def native(stream: Iterable[Message]) -> Iterator[Message]:
    """Envelopes converted to native batches (one per layer and source), as the worker's convert agent
    does (the record key is the default source); native messages pass unchanged."""
    for msg in stream:
        if msg.topic != CARRIER:
            yield msg
            continue
        env: dict[str, Any] = msg.value
        out = convert(env["carrier"], env["payload"].encode(), headers=env.get("headers"), ts=float(env["ts"]),
                      default_source=key_source(env["carrier"], env.get("key")))
        if out.rejections:
            raise ValueError(f"the scenario's own scrape was rejected: {out.rejections[:3]}")
        batches: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for s in out.samples:
            batches.setdefault((s["layer"], s["source"]), []).append(s)
        for (layer, source), samples in batches.items():
            yield Message(layer, source, samples, msg.ts)


def write_replay(path: Path, name: str, seed: int = 7) -> int:
    """Write the scenario as a ``lockstep replay`` file (native lines and envelopes); returns the line count."""
    return write_messages(path, messages(name, seed))
