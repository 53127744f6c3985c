"""Peer rows of ``lockstep bench``: the stream processors a user would pick instead of Lockstep, each doing
the smallest honest version of Lockstep's ingest work on the same batched scrape messages.

    python -m benchmarks.peers quix             --bootstrap H:P --group G --topics T1,... --state-dir D [--progress F]
    python -m benchmarks.peers quix-memory      ...
    python -m benchmarks.peers bytewax          ... --progress FILE
    python -m benchmarks.peers bytewax-recovery ... --progress FILE --state-dir D

The work, the same in both: decode each message (a JSON list of samples, orjson in both frameworks),
and per series (metric, source, labels) keep an exponentially weighted mean and variance and the
z-score of each new value (:func:`update_baseline`); count the samples with ``|z| > 4``. No
validation, normalisation, rates, percentiles, episodes, correlation or outputs: a fraction of
what Lockstep's worker does with the same messages.

Each is written as its framework's documentation shows it:

- **Quix Streams** (``quix``, ``quix-memory``): an ``Application`` with one ``StreamingDataFrame`` per
  telemetry topic, ``value_deserializer="json"``, and a stateful ``update`` that keeps one state entry
  per series under the message's key (``State.get``/``State.set``); the default store (RocksDB, with
  its changelog topics) or ``MemoryStore`` (also with its changelog). Commits every second
  (``commit_interval=1.0``), like Lockstep's worker, so the bench measures it from the group's
  committed offsets as it measures the worker (it also writes a ``--progress`` file, to cross-check).
- **Bytewax** (``bytewax``, ``bytewax-recovery``): a ``Dataflow`` from the Kafka connector's ``input``
  operator (``oks``), ``key_on`` the message key, ``map_value`` to decode, ``stateful_map`` holding
  the key's series baselines, and an output counting the samples. State is in memory (Bytewax's
  default), or snapshotted to its SQLite recovery store every epoch (``RecoveryConfig``, 10 s epochs).
  Bytewax does not commit offsets to a consumer group (its offsets live in its own state), so its
  output writes ``<monotonic seconds> <samples done>`` to the ``--progress`` file, which the bench
  reads instead of committed offsets (the same clock: ``CLOCK_MONOTONIC`` is system-wide). It reads
  the backlog to its end and exits.

Neither framework is a dependency of Lockstep: they come with the ``bench`` extra
(``pip install -e '.[bench]'``), and :func:`available` says which ones this Python has.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import orjson

#: Peer kinds, the framework each needs, and the label the bench prints.
PEERS: dict[str, tuple[str, str]] = {
    "quix": ("quixstreams", "Quix Streams, RocksDB store (default)"),
    "quix-memory": ("quixstreams", "Quix Streams, MemoryStore"),
    "bytewax": ("bytewax", "Bytewax, in-memory state (default)"),
    "bytewax-recovery": ("bytewax", "Bytewax, SQLite recovery every 10 s"),
}

ALPHA = 0.05  # weight of a new value in the rolling mean and variance
Z_LIMIT = 4.0


def available() -> dict[str, str | None]:
    """Per peer kind: None when its framework is importable here, else why not (printed by the bench)."""
    return {kind: None if importlib.util.find_spec(module) is not None
            else f"{module} not installed (pip install -e '.[bench]')"
            for kind, (module, _) in PEERS.items()}


def series_key(sample: dict[str, Any]) -> str:
    """One string per series: metric, source and the sorted labels.

    >>> series_key({"metric": "m", "source": "n1", "labels": {"port": "1", "device": "d"}, "value": 1.0})
    'm|n1|device=d,port=1'
    """
    labels = sample.get("labels") or {}
    return f"{sample['metric']}|{sample.get('source', '')}|" + ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def update_baseline(state: list[float] | None, value: float) -> tuple[list[float], float]:
    """Fold ``value`` into a series' ``[mean, variance, count]``; returns the new state and the value's
    z-score against the state before it (0 until the variance is known).

    >>> s, z = update_baseline(None, 10.0)
    >>> s, z
    ([10.0, 0.0, 1.0], 0.0)
    >>> s, z = update_baseline(s, 12.0)
    >>> [round(x, 3) for x in s], z
    ([10.1, 0.19, 2.0], 0.0)
    >>> round(update_baseline(s, 20.0)[1], 2)
    22.71
    """
    if state is None:
        return [value, 0.0, 1.0], 0.0
    mean, var, n = state
    d = value - mean
    z = d / math.sqrt(var) if var > 0.0 else 0.0
    mean += ALPHA * d
    var = (1.0 - ALPHA) * (var + ALPHA * d * d)
    return [mean, var, n + 1.0], z


# -- Quix Streams ---------------------------------------------------------------------------------
def run_quix(bootstrap: str, group: str, topics: list[str], state_dir: Path, memory: bool,
             progress: Path | None = None) -> None:
    from quixstreams import Application, State
    from quixstreams.state.memory import MemoryStore

    # The group timeouts of Lockstep's worker (10 s session and rebalance, 1 s heartbeat): a broker
    # answers a new group's join only after a share of the rebalance timeout, which for librdkafka is
    # max.poll.interval.ms (5 minutes by default).
    group_timeouts = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 10000}
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      commit_interval=1.0, state_dir=str(state_dir), consumer_extra_config=group_timeouts,
                      loglevel=os.environ.get("PEER_LOGLEVEL", "WARNING"))
    anomalies = 0
    done = messages = 0
    written = 0.0

    def score(samples: list[dict[str, Any]], state: State) -> None:
        nonlocal anomalies, done, messages, written
        done += len(samples)
        messages += 1
        if progress is not None and not messages % 64 and time.monotonic() - written >= 0.25:
            written = write_progress(progress, done)
        for sample in samples:
            key = series_key(sample)
            baseline, z = update_baseline(state.get(key), float(sample["value"]))
            state.set(key, baseline)
            if abs(z) > Z_LIMIT:
                anomalies += 1

    for name in topics:
        sdf = app.dataframe(app.topic(name, key_deserializer="str", value_deserializer="json"))
        if memory:
            sdf.register_store(store_type=MemoryStore)
        sdf.update(score, stateful=True)
    app.run()


def write_progress(progress: Path, done: int) -> float:
    """Write ``<monotonic seconds> <samples done>`` to ``progress`` whole (never half a line); returns the time."""
    now = time.monotonic()
    tmp = progress.with_suffix(".tmp")
    tmp.write_text(f"{now} {done}\n")
    os.replace(tmp, progress)
    return now


# -- Bytewax --------------------------------------------------------------------------------------
def bytewax_flow(bootstrap: str, topics: list[str], progress: Path) -> Any:
    """The dataflow: Kafka input, key on the message key, decode, per-key series baselines, count."""
    import bytewax.operators as op
    from bytewax.connectors.kafka import operators as kop
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class ProgressPartition(StatelessSinkPartition[Any]):  # type: ignore[misc]
        def __init__(self) -> None:
            self.done = 0
            self.written = 0.0

        def write_batch(self, items: list[Any]) -> None:
            self.done += sum(n for _, (n, _) in items)  # (key, (samples, anomalies)) a message
            now = time.monotonic()
            if now - self.written >= 0.25:
                self._write(now)

        def _write(self, now: float) -> None:
            self.written = write_progress(progress, self.done)

        def close(self) -> None:
            self._write(time.monotonic())

    class ProgressSink(DynamicSink[Any]):  # type: ignore[misc]
        def build(self, step_id: str, worker_index: int, worker_count: int) -> ProgressPartition:
            return ProgressPartition()

    def score(baselines: dict[str, list[float]] | None, samples: list[dict[str, Any]]
              ) -> tuple[Any, tuple[int, int]]:
        baselines = {} if baselines is None else baselines
        anomalies = 0
        for sample in samples:
            key = series_key(sample)
            baselines[key], z = update_baseline(baselines.get(key), float(sample["value"]))
            if abs(z) > Z_LIMIT:
                anomalies += 1
        return baselines, (len(samples), anomalies)

    flow = Dataflow("lockstep_peer")
    kin = kop.input("kafka_in", flow, brokers=[bootstrap], topics=topics, tail=False)
    keyed = op.key_on("key_on_source", kin.oks, lambda msg: msg.key.decode())
    decoded = op.map_value("decode", keyed, lambda msg: orjson.loads(msg.value))
    scored = op.stateful_map("baseline", decoded, score)
    op.output("progress", scored, ProgressSink())
    return flow


def run_bytewax(bootstrap: str, topics: list[str], progress: Path, state_dir: Path | None) -> None:
    from datetime import timedelta

    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.run import cli_main

    recovery = None
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
        init_db_dir(state_dir, 1)
        recovery = RecoveryConfig(str(state_dir))
    cli_main(bytewax_flow(bootstrap, topics, progress), workers_per_process=1,
             epoch_interval=timedelta(seconds=10), recovery_config=recovery)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=tuple(PEERS))
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topics", required=True)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--progress", type=Path)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    topics = args.topics.split(",")
    if args.mode.startswith("quix"):
        run_quix(args.bootstrap, args.group, topics, args.state_dir, memory=args.mode == "quix-memory",
                 progress=args.progress)
    else:
        if args.progress is None:
            p.error("bytewax needs --progress")
        run_bytewax(args.bootstrap, topics, args.progress,
                    args.state_dir if args.mode == "bytewax-recovery" else None)


if __name__ == "__main__":
    main()
