"""A worker the consumer group keeps waiting says so, is not ready, and stops when asked (real broker).

The fault: a member joined the group, was made its leader and never sent the assignment (it died between
its join and its sync). A chaos run met it on the embedded broker, which keeps such a member for good;
Apache Kafka keeps it for the member's rebalance timeout. Here the test itself is that member (a raw
JoinGroup, then nothing), so every worker that joins afterwards waits: before the group watch it waited
without a word, served no HTTP and ignored SIGTERM until killed.
"""

from __future__ import annotations

import asyncio
import re
import time

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.group import JoinGroupRequest

from agents.topics import create_topics
from lockstep.broker import EmbeddedBroker
from tests.faults.kit import WorkerProcess, make_settings, wait_until
from tests.web.client import get


async def join_and_vanish(bootstrap: str, group: str) -> str:
    """Join ``group`` as a consumer with Faust's protocol and send nothing after: the group's leader that
    never syncs. Returns its member id."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        member = ""
        for _ in range(2):  # the first answer may hand out the member id (MEMBER_ID_REQUIRED, KIP-394)
            # (session 6 s: the embedded broker answers a join after half of it; rebalance timeout 60 s:
            # what Apache Kafka would wait for this member before dropping it)
            answer = await client.send(node, JoinGroupRequest(group, 6_000, 60_000, member, None, "consumer",
                                                              [("faust", bytes(10))]))
            member = answer.member_id
            if answer.error_code == 0:
                assert answer.leader_id == member, answer
                return member
        raise AssertionError(f"could not join {group}: {answer}")
    finally:
        await client.close()


def test_worker_kept_waiting_by_its_group(broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    settings = make_settings(broker.bootstrap, partitions=2, carrier_formats="none")
    asyncio.run(create_topics(settings, broker.bootstrap))
    ghost = asyncio.run(join_and_vanish(broker.bootstrap, settings.app_id))
    w = WorkerProcess(settings, "w0", {"LOCKSTEP_GROUP_WAIT_WARN_S": "2", "LOCKSTEP_CARRIER_FORMATS": "none"})
    workers.append(w)

    async def warned() -> bool:
        return "no partitions assigned by the consumer group after" in w.log()

    assert asyncio.run(wait_until(warned, 60)), w.log()[-3000:]
    line = next(x for x in w.log().splitlines() if "no partitions assigned by the consumer group after" in x)
    assert "WARN" in line and "the broker says: group state" in line and ghost in line, line
    assert "lockstep worker: consuming" not in w.log()

    found = re.search(r"HTTP API and timeline page on (http://\S+)", w.log())
    assert found, "the HTTP server starts before the group's assignment"
    url = found.group(1)
    assert get(url, "/healthz").status == 200
    ready = get(url, "/readyz")
    assert ready.status == 503 and ready.json["checks"]["group"] is False, ready.json
    assert re.fullmatch(r"no partitions assigned by the consumer group for \d+ s", ready.json["reasons"]["group"])
    metrics = get(url, "/metrics", headers={"Accept": "text/plain"}).body.decode()
    waited = re.search(r"^lockstep_group_wait_seconds (\S+)$", metrics, re.M)
    assert waited and float(waited.group(1)) >= 2.0, metrics[:2000]

    t0 = time.monotonic()
    w.stop(timeout=30)
    took = time.monotonic() - t0
    assert w.proc.returncode == 0, w.log()[-3000:]
    assert took < 15, f"a SIGTERM during the wait took {took:.1f} s"
    assert "stop requested during start-up" in w.log() and "lockstep worker: stopped during start-up" in w.log()


def test_a_slow_join_is_said_and_so_is_its_end(broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    """The other side: a wait that ends. The embedded broker answers a new group's first join after about
    half the session timeout (3 s for a test's worker process), longer than a 1 s threshold."""
    settings = make_settings(broker.bootstrap, partitions=2, carrier_formats="none")
    asyncio.run(create_topics(settings, broker.bootstrap))
    w = WorkerProcess(settings, "w0", {"LOCKSTEP_GROUP_WAIT_WARN_S": "1", "LOCKSTEP_CARRIER_FORMATS": "none"})
    workers.append(w)

    async def consuming() -> bool:
        return "lockstep worker: consuming" in w.log()

    assert asyncio.run(wait_until(consuming, 90)), w.log()[-3000:]
    log = w.log()
    said = log.index("no partitions assigned by the consumer group after")
    ended = re.search(r"partitions assigned by the consumer group after (\d+) s of waiting", log)
    assert ended and said < ended.start() < log.index("lockstep worker: consuming"), log[-3000:]
    assert int(ended.group(1)) >= 1
    found = re.search(r"API and page at (http://\S+?)/?\s", log)
    assert found
    ready = get(found.group(1), "/readyz")
    assert ready.json["checks"]["group"] is True and "group" not in ready.json["reasons"], ready.json
    metrics = get(found.group(1), "/metrics", headers={"Accept": "text/plain"}).body.decode()
    assert re.search(r"^lockstep_group_wait_seconds 0\.0$", metrics, re.M), metrics[:2000]
    w.stop()
    assert w.proc.returncode == 0


def test_a_worker_with_nothing_to_own_is_not_waiting(broker: EmbeddedBroker, workers: list[WorkerProcess]) -> None:
    """More workers than partitions: one partition of everything, one worker owns it, one keeps the standby
    copies of the state, and the third gets an empty assignment. That is an assignment (the worker stays
    ready, its wait ended), not a wait for one."""
    settings = make_settings(broker.bootstrap, partitions=1, carrier_formats="none")
    asyncio.run(create_topics(settings, broker.bootstrap))
    env = {"LOCKSTEP_GROUP_WAIT_WARN_S": "1", "LOCKSTEP_CARRIER_FORMATS": "none"}

    async def consuming(w: WorkerProcess) -> bool:
        return "lockstep worker: consuming" in w.log()

    for name in ("w0", "w1", "w2"):
        workers.append(WorkerProcess(settings, name, env))
        assert asyncio.run(wait_until(lambda: consuming(workers[-1]), 90)), workers[-1].log()[-3000:]

    def metrics(w: WorkerProcess) -> str:
        found = re.search(r"API and page at (http://\S+?)/?\s", w.log())
        assert found
        return get(found.group(1), "/metrics", headers={"Accept": "text/plain"}).body.decode()

    async def settled() -> bool:  # (the first two rebalance again as each next one joins)
        return sum('consumer="agents"' not in metrics(w) for w in workers) == 1

    assert asyncio.run(wait_until(settled, 60)), [metrics(w)[-1500:] for w in workers]
    idle = next(w for w in workers if 'consumer="agents"' not in metrics(w))
    time.sleep(2.0)  # past the threshold: an empty assignment is not a wait
    url = re.search(r"API and page at (http://\S+?)/?\s", idle.log())
    assert url
    ready = get(url.group(1), "/readyz").json
    assert ready["checks"]["group"] is True and "group" not in ready["reasons"], ready
    assert re.search(r"^lockstep_group_wait_seconds 0\.0$", metrics(idle), re.M)
