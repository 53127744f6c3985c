"""Alerts a restored correlation partition decides while catching up "state only" and that the previous owner
never sent are sent then (agents.correlating.Correlate.send_unsent, agents.recovery.unsent).

Why they can differ: the catch-up reads the records the previous owner processed, but the watermark also
moves on wall time. An input whose worker fell silent holds it back for ``orphan_hold_s``; one its worker
last reported idle does not. Live, a dead worker's inputs were silent for seconds and held the watermark,
so no verdict was due; in the catch-up the same records come within milliseconds, the dead worker's
inputs look idle rather than silent, the watermark passes the verdict's time, and the alert was decided
and, state only, never sent. Found by a chaos run (benchmarks/chaos.py, seed 2): a ``job_slowdown``
resolved on the alerts topic with no firing record before it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

import agents.correlating as correlating
from agents.correlating import Correlate, Decided
from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.replay import read_topic
from lockstep.worker import Worker
from models.settings import LockstepSettings
from streams.correlation.config import CorrelatorConfig
from streams.correlation.watermark import Watermark

pytestmark = pytest.mark.broker

T0 = 1764502800.0


def alert(alert_id: str, status: str, started: str = "2025-11-30T11:40:48.000Z") -> dict[str, Any]:
    return {"type": "clock_skew", "severity": "warning", "status": status, "alert_id": alert_id, "job_id": "j1",
            "started_at": started, "detected_at": started}


def test_the_watermark_of_a_catch_up_is_not_the_live_one() -> None:
    """The premise: the same records, live (a dead worker's inputs silent for 20 s) and folded at once."""
    def fed(gap_s: float) -> float:
        w = Watermark(CorrelatorConfig(), inputs={"t:0", "t:1"})
        # a lull: both inputs' workers report them idle at scrape 52
        w.observe({"origins": {"t:0": T0 + 52, "t:1": T0 + 52}, "idle": ["t:0", "t:1"]}, now_wall=0.0)
        # then t:0's worker dies; t:1's worker goes on to scrape 82
        w.observe({"origins": {"t:1": T0 + 82}}, now_wall=gap_s)
        return w.current(gap_s) - T0

    lateness = CorrelatorConfig().allowed_lateness_s
    assert fed(20.0) == 52 - lateness  # live: t:0 silent, held for orphan_hold_s
    assert fed(0.01) == 82 - lateness  # a catch-up: t:0 last said idle, so the watermark runs on


def test_alerts_decided_while_catching_up_and_never_sent_are_sent_once(
        settings: LockstepSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(correlating, "SENT_SEARCH_CHUNK", 2)  # the backward search crosses chunks
    bootstrap = settings.kafka_bootstrap_servers or ""
    cat = TopicCatalogue(settings)

    async def go() -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[tuple[str, str], float]]:
        await create_topics(settings, bootstrap)
        producer = await start_producer(settings, bootstrap)
        try:  # what the previous owner sent: a's firing, and others' records after it
            for rec in [alert("a", "firing"), *(alert(f"o{k}", "firing") for k in range(5))]:
                await producer.send(cat.alerts, orjson.dumps(rec), key=b"j1")
            await producer.flush()
        finally:
            await producer.stop()
        worker = Worker(settings, bootstrap)
        await worker.start()
        try:
            correlate = Correlate(worker.app.lockstep_runtime)
            decided = Decided()
            decided.alerts = [alert("a", "firing"), alert("b", "firing"), alert("b", "resolved")]
            decided.first_ts = time.time() - 5.0
            await correlate.send_unsent(0, decided)
            await worker.app.producer.flush()
            first = [(r["alert_id"], r["status"]) for r in await read_topic(settings, bootstrap, cat.alerts)]
            await correlate.send_unsent(0, decided)  # a second restore of the same catch-up: all sent now
            await worker.app.producer.flush()
            second = [(r["alert_id"], r["status"]) for r in await read_topic(settings, bootstrap, cat.alerts)]
            recovered = {(s.labels["type"], s.labels["status"]): s.value
                         for m in worker.metrics.registry.collect() for s in m.samples
                         if s.name == "lockstep_alerts_recovered_total"}
        finally:
            await worker.stop()
        return first, second, recovered

    first, second, recovered = asyncio.run(go())
    assert sorted(first) == sorted([("a", "firing"), *((f"o{k}", "firing") for k in range(5)),
                                    ("b", "firing"), ("b", "resolved")]), first
    assert [x for x in first if x[0] == "b"] == [("b", "firing"), ("b", "resolved")]  # in the order decided
    assert sorted(second) == sorted(first)
    assert recovered == {("clock_skew", "firing"): 1.0, ("clock_skew", "resolved"): 1.0}
