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


def owner_settings(broker: EmbeddedBroker) -> LockstepSettings:
    # Snapshots only at a partition's first batch (then not for a long stretch of event time): the ones
    # written are deleted after the kill, so the new owner finds none.
    return make_settings(broker.bootstrap, snapshot_interval_s=100_000.0)


async def first_owner_killed(settings: LockstepSettings, workers: list[WorkerProcess], gen: LoadGenerator,
                             scrapes: int, opened: set[tuple[Any, ...]] | None = None
                             ) -> tuple[list[dict[str, Any]], set[str]]:
    """A first worker processes scrapes ``0..scrapes-1`` (until every anomaly in ``opened`` went out), the
    group commits them all, it is SIGKILLed and every detector snapshot is deleted. The anomalies it
    sent and the input partitions the group had committed records of."""
    await create_topics(settings, settings.kafka_bootstrap_servers or "")
    await send_inventory(settings, gen)
    first = WorkerProcess(settings, "first")
    workers.append(first)
    await send_scrapes(settings, gen, range(0, scrapes), pace_s=0.1)

    async def sent() -> bool:
        return {anomaly_key(a) for a in await read_anomalies(settings)} >= (opened or set())

    assert await wait_until(sent, 90), first.log()[-3000:]
    assert await wait_consumed(settings, 60), first.log()[-3000:]  # committed: the outputs went out
    before = await read_anomalies(settings)
    held = {f"{t}:{p}" for (t, p), c in (await committed(settings, TopicCatalogue(settings).telemetry_topics)
                                          ).items() if c > 0}
    first.kill()
    deleted = await delete_detector_snapshots(settings)
    assert deleted and not await detector_snapshots(settings)
    return before, held


def handover(broker: EmbeddedBroker, workers: list[WorkerProcess], reference: set[tuple[Any, ...]]) -> Handover:
    """The first worker opens the incident's episodes and is killed; its detector snapshots are deleted; a
    second worker takes over the rest of the traffic. The anomalies before the kill, all anomalies and
    alerts at the end, the second worker's log, and the input partitions the group had committed records of."""
    settings = owner_settings(broker)

    async def go() -> Handover:
        gen = LoadGenerator(SPEC)
        # Every episode of the incident has started by scrape 60 (none ends before scrape 70).
        before, held = await first_owner_killed(settings, workers, gen, KILLED_AT,
                                                opened={k for k in reference if k[1] == "start"})
        await send_scrapes(settings, gen, range(KILLED_AT, SCRAPES))
        second = WorkerProcess(settings, "second")
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


#: The bound of the bounded catch-up, and the scrapes its first owner processes: the input partitions
#: given one message a scrape hold fewer committed records than the bound, the others more.
BOUND = 10
BOUND_SCRAPES = 8
CAUGHT_UP = re.compile(r"(\S+): state with no snapshot caught up over offsets (\d+)\.\.(\d+) \((\d+) messages")


def test_a_catch_up_reads_at_most_its_bound_and_says_what_it_leaves_out(
        broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    settings = owner_settings(broker)

    async def go() -> tuple[str, set[str]]:
        gen = LoadGenerator(SPEC)
        _, held = await first_owner_killed(settings, workers, gen, BOUND_SCRAPES)
        await send_scrapes(settings, gen, range(BOUND_SCRAPES, BOUND_SCRAPES + 2))  # each held partition resumes
        second = WorkerProcess(settings, "second", extra_env={"LOCKSTEP_INGEST_CATCH_UP_MAX_MESSAGES": str(BOUND)})
        workers.append(second)

        async def all_caught_up() -> bool:
            return {name for name, *_ in CAUGHT_UP.findall(second.log())} >= held

        caught_up = await wait_until(all_caught_up, 90)
        second.stop()
        assert caught_up, second.log()[-4000:]
        return second.log(), held

    log, held = asyncio.run(go())
    read = {name: (int(lo), int(hi), int(n)) for name, lo, hi, n in CAUGHT_UP.findall(log)}
    left_out = {name: (int(lo), int(hi)) for name, lo, hi in re.findall(
        rf"(\S+): offsets (\d+)\.\.(\d+) are not read back: .*more than the {BOUND} a catch-up reads", log)}
    assert set(read) == held and all(n <= BOUND for *_, n in read.values()), read
    # Every partition with more than BOUND committed records says which offsets it did not read: those
    # before the last BOUND; the others were read from their first offset.
    assert left_out and all(left_out[name] == (0, read[name][0] - 1) for name in left_out), (left_out, read)
    assert {name for name, (lo, hi, _) in read.items() if lo > 0} == set(left_out)
    assert set(left_out) < held, (sorted(held), left_out)  # the premise: some partitions were under the bound
