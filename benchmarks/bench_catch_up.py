"""What a state catch-up costs: an input partition with no snapshot read back from the broker for state.

An input partition handed over without a snapshot is read again from its earliest offset to the
group's commit, state only (agents.ingest.Ingest.resume, agents.recovery.NOTHING_HELD). This measures
that read for a realistic backlog on the embedded broker: ``--minutes`` of event time of a
``--gpus`` cluster (lockstep.loadgen, one scrape a second), the share of one partition of each
telemetry topic out of ``--partitions`` (keyed as the producer keys them). For each layer it reads the
partition the way the agent does (agents.gaps.RangeReader.chunks, INGEST_BATCH_MESSAGES a call) into a
fresh PartitionPipeline, and, as the same-run baseline, the same messages through a fresh pipeline from
memory (the pipeline's own cost): the ratio is what the broker read adds::

    PYTHONPATH=$PWD python -m benchmarks.bench_catch_up --gpus 1024 --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path

from agents.app import detector_config
from agents.gaps import RangeReader
from agents.ingest import INGEST_BATCH_MESSAGES, items_of
from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator, LoadSpec
from models.inventory import inventory_adapter
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

LAYERS = ("gpu", "nic", "host", "nccl", "step", "switch", "storage")


async def run(bootstrap: str, gpus: int, minutes: float, partitions: int, partition: int) -> None:
    from aiokafka.partitioner import DefaultPartitioner

    if True:  # the broker is started outside the event loop (lockstep.broker)
        run_id = uuid.uuid4().hex[:8]
        settings = LockstepSettings(  # type: ignore[call-arg]
            _env_file=None, kafka_bootstrap_servers=bootstrap, topic_prefix=f"b{run_id}.",
            app_id=f"lockstep-bench-{run_id}", partitions=partitions, data_dir=Path(f"/tmp/lockstep-bench-{run_id}"))
        await create_topics(settings, bootstrap)
        cat = TopicCatalogue(settings)
        gen = LoadGenerator(LoadSpec(gpus=gpus))
        inv = InventoryIndex()
        for doc in gen.inventory():
            inv.apply(inventory_adapter.validate_python(doc))
        part = DefaultPartitioner()
        every = list(range(partitions))
        kept: dict[str, list[bytes]] = {layer: [] for layer in LAYERS}
        producer = await start_producer(settings, bootstrap)
        started = time.perf_counter()
        try:
            for k in range(int(minutes * 60)):
                for layer, key, value in gen.messages(k):
                    if part(key, every, every) != partition:
                        continue  # another partition's share
                    kept[layer].append(value)
                    await producer.send(cat.telemetry(layer), value, key=key, partition=partition)
            await producer.flush()
        finally:
            await producer.stop()
        produced_s = time.perf_counter() - started
        total = sum(len(v) for v in kept.values())
        print(f"{gpus} GPUs, {minutes:g} min of event time, partition {partition} of {partitions}: {total} messages "
              f"produced in {produced_s:.1f} s")
        config = detector_config(settings)
        reader = RangeReader(settings, bootstrap)
        sums = [0, 0.0, 0.0]
        print(f"{'layer':8} {'messages':>9} {'samples':>9} {'memory s':>9} {'catch-up s':>10} {'ratio':>6} "
              f"{'msgs/s':>8}")
        try:
            for layer in LAYERS:
                n = len(kept[layer])
                if not n:
                    continue
                topic = cat.telemetry(layer)
                origin = f"{topic}:{partition}"
                # The baseline: the same messages through a fresh pipeline from memory.
                pipe = PartitionPipeline(origin, config, inv)
                t0 = time.perf_counter()
                samples, now = 0, time.time()
                for lo in range(0, n, INGEST_BATCH_MESSAGES):
                    out = pipe.process_many([(raw, Origin(topic, partition, lo + i, now))
                                             for i, raw in enumerate(kept[layer][lo:lo + INGEST_BATCH_MESSAGES])])
                    samples += out.samples
                memory_s = time.perf_counter() - t0
                # The catch-up: read from the broker as the agent does, into a fresh pipeline.
                pipe = PartitionPipeline(origin, config, inv)
                t0 = time.perf_counter()
                read = 0
                async for chunk in reader.chunks(topic, partition, 0, n, INGEST_BATCH_MESSAGES):
                    pipe.process_many(items_of(chunk))
                    read += len(chunk)
                catch_s = time.perf_counter() - t0
                assert read == n, (layer, read, n)
                sums[0] += n
                sums[1] += memory_s
                sums[2] += catch_s
                print(f"{layer:8} {n:9d} {samples:9d} {memory_s:9.2f} {catch_s:10.2f} {catch_s / memory_s:6.2f} "
                      f"{n / catch_s:8.0f}")
        finally:
            await reader.close()
        print(f"{'all':8} {sums[0]:9d} {'':9} {sums[1]:9.2f} {sums[2]:10.2f} {sums[2] / sums[1]:6.2f} "
              f"{sums[0] / sums[2]:8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--partition", type=int, default=0)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        asyncio.run(run(broker.bootstrap, args.gpus, args.minutes, args.partitions, args.partition))


if __name__ == "__main__":
    main()
