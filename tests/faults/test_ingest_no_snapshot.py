"""An input partition handed to a new worker without a snapshot, on the real broker: its new owner must
know what the previous owner held.

The previous owner processed (and the group committed) the records that opened an incident's episodes
(their ``start`` went out on ``anomalies``), then died before a snapshot of its input partitions
reached the new owner: here every detector snapshot is deleted (a tombstone on the changelog) after the
SIGKILL, which is what a worker killed before its first snapshot was due, or a snapshot lost in table
recovery, leaves behind. The new owner then found no snapshot and began empty at the commit: every
baseline relearnt from zero, and the episodes the previous owner opened never ended (no ``end`` on
``anomalies``, the incident never resolved). Now it reads the committed records again for state only
(agents.recovery.NOTHING_HELD, agents.ingest.Ingest.resume): the episodes end once the series recover,
with no second ``start``, and what reaches ``anomalies`` is what one fault-free owner gives.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import pytest

from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.loadgen import LoadGenerator
from models.settings import LockstepSettings

from .kit import (
    WorkerProcess,
    anomaly_key,
    committed,
    make_settings,
    reference_anomalies,
    send_inventory,
    send_scrapes,
    wait_until,
)
from .test_worker_faults import (
    SCRAPES,
    SPEC,
    check,
    detector_snapshots,
    read_all_anomalies,
    read_anomalies,
    wait_consumed,
    wait_resolved,
)

pytestmark = [pytest.mark.broker]

#: Scrapes the first worker processes: the incident (scrapes 40..70) has begun and not ended.
KILLED_AT = 60


@pytest.fixture(scope="module")
def reference() -> set[tuple[Any, ...]]:
    return reference_anomalies(SPEC, SCRAPES)


async def delete_detector_snapshots(settings: LockstepSettings) -> int:
    """A tombstone for every detector snapshot (and chunk): table recovery then finds none."""
    from agents.kafka import start_producer

    keys = await detector_snapshots(settings)
    producer = await start_producer(settings, settings.kafka_bootstrap_servers or "")
    try:
        for key, partition in keys.items():
            await producer.send(f"{settings.app_id}-detector_state-changelog", None, key=key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
    return len(keys)


Handover = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str, set[str]]


def handover(broker: EmbeddedBroker, workers: list[WorkerProcess], reference: set[tuple[Any, ...]],
             env: dict[str, str] | None = None) -> Handover:
    """The first worker opens the incident's episodes and is killed; its detector snapshots are deleted; a
    second worker (``env``) takes over. The anomalies before the kill, all anomalies and alerts at the
    end, the second worker's log, and the input partitions the group had committed records of."""
    # Snapshots only at a partition's first batch (then not for a long stretch of event time): the ones
    # written are deleted below, so the new owner finds none.
    settings = make_settings(broker.bootstrap, snapshot_interval_s=100_000.0)

    async def go() -> Handover:
        await create_topics(settings, broker.bootstrap)
        gen = LoadGenerator(SPEC)
        await send_inventory(settings, gen)
        first = WorkerProcess(settings, "first")
        workers.append(first)
        await send_scrapes(settings, gen, range(0, KILLED_AT), pace_s=0.1)

        async def opened() -> bool:  # every episode of the incident has started (none ends before scrape 70)
            return {anomaly_key(a) for a in await read_anomalies(settings)} >= {k for k in reference if k[1] == "start"}

        assert await wait_until(opened, 90), first.log()[-3000:]
        assert await wait_consumed(settings, 60), first.log()[-3000:]  # committed: the outputs went out
        before = await read_anomalies(settings)
        held = {f"{t}:{p}" for (t, p), c in (await committed(settings, TopicCatalogue(settings).telemetry_topics)
                                              ).items() if c > 0}
        first.kill()
        deleted = await delete_detector_snapshots(settings)
        assert deleted and not await detector_snapshots(settings)
        await send_scrapes(settings, gen, range(KILLED_AT, SCRAPES))
        second = WorkerProcess(settings, "second", extra_env=env)
        workers.append(second)
        alerts = await wait_resolved(settings, 90)
        consumed = await wait_consumed(settings, 60)
        anomalies = await read_all_anomalies(settings, reference, timeout_s=30 if consumed else 5)
        second.stop()
        return before, anomalies, alerts, second.log(), held

    return asyncio.run(go())


def test_an_input_partition_without_a_snapshot_ends_the_episodes_its_previous_owner_opened(
        broker: EmbeddedBroker, workers: list[WorkerProcess], reference: set[tuple[Any, ...]]) -> None:
    before, anomalies, alerts, log, held = handover(broker, workers, reference)
    tail = log[-4000:]
    # The premise: the new owner found no snapshot for the input partitions the first one processed.
    empty = set(re.findall(r"(\S+): no snapshot; its baselines", log))
    assert held and empty >= held and not re.findall(r"restored (\S+): \d+ series", log), tail
    assert any(a["phase"] == "start" for a in before) and not any(a["phase"] == "end" for a in before)
    # What the operator needs: the episodes opened before the kill end, each started once, and the
    # anomalies are those of one fault-free owner (warm baselines: no episode missed or invented).
    starts = Counter(anomaly_key(a) for a in anomalies if a["phase"] == "start")
    twice = {k: n for k, n in starts.items() if n > 1}
    assert not twice, f"episodes started twice: {twice}\n{tail}"
    try:
        check(reference, anomalies, alerts)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{tail}") from None
    # Each input partition the first worker committed records of was read again for state.
    caught_up = {name: int(n) for name, n in re.findall(
        r"(\S+): state with no snapshot caught up over offsets \d+\.\.\d+ \((\d+) messages", log)}
    assert set(caught_up) == held and all(caught_up.values()), (sorted(held), caught_up)
    assert "no earliest offset" not in log and "are not read back" not in log, tail


def test_a_catch_up_reads_at_most_its_bound_and_says_what_it_leaves_out(
        broker: EmbeddedBroker, workers: list[WorkerProcess], reference: set[tuple[Any, ...]]) -> None:
    _, _, _, log, held = handover(broker, workers, reference, {"LOCKSTEP_INGEST_CATCH_UP_MAX_MESSAGES": "20"})
    read = {name: (int(lo), int(hi), int(n)) for name, lo, hi, n in re.findall(
        r"(\S+): state with no snapshot caught up over offsets (\d+)\.\.(\d+) \((\d+) messages", log)}
    left_out = {name: (int(lo), int(hi)) for name, lo, hi in re.findall(
        r"(\S+): offsets (\d+)\.\.(\d+) are not read back: .*more than the 20 a catch-up reads", log)}
    assert set(read) == held and all(n <= 20 for *_, n in read.values()), read
    # Every partition with more than 20 committed records says which offsets it did not read: those
    # before the last 20.
    assert left_out and all(left_out[name] == (0, read[name][0] - 1) for name in left_out), (left_out, read)
    assert {name for name, (lo, hi, _) in read.items() if lo > 0} == set(left_out)
