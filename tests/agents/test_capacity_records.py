"""The correlate agent writes one ``capacity`` record beside each costed alert (Faust's agent test
context, no broker): keyed by the alert id, costed and attributed as streams.ledger says."""

from __future__ import annotations

from typing import Any

import orjson

from streams.ledger import LedgerEntry
from tests.agents.test_agents_context import T0, make, port_slowdown


def test_a_slowdown_alert_goes_out_with_its_capacity_record(_loop: Any) -> None:
    app, _, sent = make()
    cause, symptom = port_slowdown()

    async def go() -> None:
        async with app.agents["correlate"].test_context() as agent:
            for rec in (cause, symptom, {"type": "watermark", "origins": {"o": T0 + 60}}):
                await agent.put(orjson.dumps(rec), key=b"j1", partition=0)

    _loop.run_until_complete(go())
    alerts = [r for t, _, r, _ in sent if t == "lockstep.alerts"]
    costs = [(k, r) for t, k, r, _ in sent if t == "lockstep.capacity"]
    assert len(alerts) == 1 and len(costs) == 1
    key, rec = costs[0]
    assert key == alerts[0]["alert_id"].encode()
    entry = LedgerEntry.from_record(rec)
    # 16 GPUs (2 nodes x 8), step time 1.0 -> 2.0 s from T0 + 15, still firing
    assert (entry.gpus, entry.fraction_lost, entry.onset, entry.end) == (16, 0.5, T0 + 15, None)
    assert entry.gpu_seconds(now=T0 + 25) == 16 * 0.5 * 10
    assert [(e.kind, e.id) for e in entry.entities] == [("port", "leaf01:7"), ("leaf", "leaf01")]
    order = [t for t, *_ in sent if t in ("lockstep.alerts", "lockstep.capacity")]
    assert order == ["lockstep.alerts", "lockstep.capacity"]  # the alert first, then what it cost


def test_the_same_alert_goes_out_with_a_fabric_health_record_per_fabric_entity(_loop: Any) -> None:
    app, _, sent = make()
    cause, symptom = port_slowdown()

    async def go() -> None:
        async with app.agents["correlate"].test_context() as agent:
            for rec in (cause, symptom, {"type": "watermark", "origins": {"o": T0 + 60}}):
                await agent.put(orjson.dumps(rec), key=b"j1", partition=0)

    _loop.run_until_complete(go())
    health = [(k, r) for t, k, r, _ in sent if t == "lockstep.fabric-health"]
    assert [k for k, _ in health] == [b"port:leaf01:7", b"leaf:leaf01"]
    for _, rec in health:
        assert rec["type"] == "entity_health" and rec["state"] == "degraded" and rec["job_id"] == "j1"
        assert rec["at_stake_gpus"] == 16 * 0.5 and rec["gpu_seconds"] is None  # still firing
    order = [t for t, *_ in sent if t in ("lockstep.capacity", "lockstep.fabric-health")]
    assert order == ["lockstep.capacity", "lockstep.fabric-health", "lockstep.fabric-health"]
