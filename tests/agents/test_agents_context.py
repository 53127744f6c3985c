"""The Faust agents in Faust's own agent test context (no broker): wiring, dead letters, records out.

Outputs are captured through ``build_app(emit=...)``, the agents' single send path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from agents.app import build_app
from models.inventory import inventory_adapter
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex

T0 = 1764502800.0
Sent = list[tuple[str, bytes | None, dict[str, Any], int | None]]


def make(partitions: int = 2, **extra: Any) -> tuple[Any, Any, Sent]:
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": T0 - 100, "job_id": "j1", "state": "RUNNING",
                                                 "nodes": "n[1-2]", "gpus_per_node": 8}))
    inv.apply(inventory_adapter.validate_python({"kind": "link", "ts": T0 - 100, "node": "n1", "device": "mlx5_0",
                                                 "port": "1", "switch": "leaf01", "switch_port": "7"}))
    sent: Sent = []

    async def emit(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        sent.append((topic, key, orjson.loads(value), partition))

    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9", partitions=partitions,  # type: ignore[call-arg]
                                baseline_min_samples=5, **extra)
    app, state = build_app(settings, "127.0.0.1:9", inv, emit=emit, loop=asyncio.get_event_loop())
    app.finalize()
    return app, state, sent


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.new_event_loop().run_until_complete(coro_fn())


def port_slowdown() -> tuple[dict[str, Any], dict[str, Any]]:
    """Job j1's two anomalies of a leaf port's link errors slowing its steps: the cause (switch leaf01
    port 7, from T0 + 10) and the symptom (rank 0's step time, from T0 + 15), both from input ``o``."""
    base = {"type": "anomaly", "job_id": "j1", "confirmed_ts": T0 + 11, "labels": {"port": "7"}, "direction": "up",
            "value": 50.0, "p50": 0.0, "p99": 0.0, "score": 0.99, "relation": "port", "origin": "o"}
    cause = dict(base, phase="start", ts=T0 + 10, layer="switch", source="leaf01", metric="SymbolErrorCounter",
                 meaning="link_errors", role="cause")
    symptom = dict(base, phase="start", ts=T0 + 15, confirmed_ts=T0 + 16, layer="step", source="n1",
                   metric="step_time_seconds", meaning="step_time", role="symptom", value=2.0, p50=1.0,
                   labels={"job_id": "j1", "rank": "0"})
    return cause, symptom


def switch_sample(k: int, value: float) -> bytes:
    return orjson.dumps([{"ts": T0 + k, "layer": "switch", "source": "leaf01", "metric": "SymbolErrorCounter",
                          "value": value, "labels": {"port": "7"}}])


def test_ingest_dead_letters_bad_records_with_their_reason_and_bytes(_loop: Any) -> None:
    app, state, sent = make()

    async def go() -> None:
        async with app.agents["ingest"].test_context() as agent:
            raw = b'[{"ts": 1764502930, "layer": "gpu", "source": "n1", "metric": "m", "value": 1}, {"ts": 1}]'
            await agent.put(raw, key=b"n1", partition=1)

    _loop.run_until_complete(go())
    [(topic, key, record, _)] = [s for s in sent if s[2].get("type") != "watermark"]  # and the batch's progress
    assert topic == "lockstep.dlq" and key == b"n1"
    assert record["stage"] == "validate" and record["record"] == "samples[1]"
    assert record["reason"] == "missing field 'layer'" and record["partition"] == 1
    assert list(state.pipelines) == ["<internal>:1"]


def test_ingest_maps_a_port_anomaly_to_its_job_and_publishes_progress(_loop: Any) -> None:
    app, _, sent = make()

    async def go() -> None:
        async with app.agents["ingest"].test_context() as agent:
            for k in range(10):
                await agent.put(switch_sample(k, 5.0), key=b"leaf01", partition=0)
            await agent.put(switch_sample(10, 50.0), key=b"leaf01", partition=0)
            await agent.put(switch_sample(11, 90.0), key=b"leaf01", partition=0)
            await agent.put(b'{"lockstep_control": "eos"}', key=None, partition=0)

    _loop.run_until_complete(go())
    anomalies = [(k, r) for t, k, r, _ in sent if r.get("type") == "anomaly"]
    assert [(k, r["phase"], r["ts"], r["relation"]) for k, r in anomalies] == [(b"j1", "start", T0 + 10, "port")]
    watermarks = [(p, r) for t, _, r, p in sent if r.get("type") == "watermark"]
    assert sorted(p for p, _ in watermarks) == [0, 1]  # broadcast to every anomalies partition
    assert all(r["origins"] == {"<internal>:0": T0 + 11} and r["eos"] == ["<internal>:0"] for _, r in watermarks)


def test_ingest_sends_a_batchs_progress_at_its_end_without_the_timer(_loop: Any) -> None:
    """The watermark is what an alert waits for: each batch's progress goes out after its outputs, at once
    (the broadcast timer, which a busy loop delays by up to a second, only sends heartbeats)."""
    app, _, sent = make()

    async def go() -> None:
        async with app.agents["ingest"].test_context() as agent:
            for k in range(3):
                await agent.put(switch_sample(k, 5.0), key=b"leaf01", partition=0)
                for _ in range(100):  # the batch's cadence, then its end
                    if any(r.get("type") == "watermark" and r["origins"].get("<internal>:0") == T0 + k
                           for _, _, r, _ in sent):
                        break
                    await asyncio.sleep(0.01)

    _loop.run_until_complete(go())
    progress = [r["origins"]["<internal>:0"] for _, _, r, p in sent if r.get("type") == "watermark" and p == 0]
    assert progress == [T0, T0 + 1, T0 + 2]  # one broadcast a batch, none without new progress
    assert all(not r["eos"] for _, _, r, _ in sent if r.get("type") == "watermark")


def test_correlate_turns_evidence_and_watermarks_into_an_alert_and_rejects_garbage(_loop: Any) -> None:
    app, _, sent = make()
    cause, symptom = port_slowdown()

    async def go() -> None:
        async with app.agents["correlate"].test_context() as agent:
            await agent.put(b"not json", partition=0)
            await agent.put(orjson.dumps(cause), key=b"j1", partition=0)
            await agent.put(orjson.dumps(symptom), key=b"j1", partition=0)
            await agent.put(orjson.dumps({"type": "watermark", "origins": {"o": T0 + 60}}), partition=0)

    _loop.run_until_complete(go())
    dlq = [r for t, _, r, _ in sent if t == "lockstep.dlq"]
    assert [(d["stage"], d["reason"][:8]) for d in dlq] == [("correlate", "not JSON")]
    alerts = [r for t, _, r, _ in sent if t == "lockstep.alerts"]
    assert [(a["job_id"], a["status"], a["root_cause"]["source"], a["gpus"]) for a in alerts] == [
        ("j1", "firing", "leaf01", 16)]


def test_an_alert_the_tick_decides_is_followed_by_a_snapshot(_loop: Any) -> None:
    """The watermark also moves on wall time (an input silent past the orphan hold stops holding it), so a
    verdict can come due in the correlate agent's tick with no record. Its alert is snapshotted after it is
    sent, as a record's is: restored from that snapshot, the partition has nothing left to send."""
    from agents.snapshots import read_snapshot
    from streams.jobs import JobPartition

    app, state, sent = make(watermark_orphan_hold_s=0.3)
    cause, symptom = port_slowdown()
    correlate = app.lockstep_correlate
    snapshots = app.lockstep_metrics.snapshots.labels("correlator_state")

    async def go() -> None:
        async with app.agents["correlate"].test_context() as agent:
            await agent.put(orjson.dumps(cause), key=b"j1", partition=0)
            await agent.put(orjson.dumps(symptom), key=b"j1", partition=0)
            # input o2 lags: the watermark waits for it, so nothing is due yet
            await agent.put(orjson.dumps({"type": "watermark", "origins": {"o": T0 + 60, "o2": T0 + 5}}),
                            partition=0)
            assert not [r for t, _, r, _ in sent if t == "lockstep.alerts"]
            before = snapshots._value.get()
            await asyncio.sleep(0.4)  # o2 silent past the orphan hold: the tick moves the watermark
            await correlate.tick()
            alerts = [r for t, _, r, _ in sent if t == "lockstep.alerts"]
            assert [(a["job_id"], a["status"]) for a in alerts] == [("j1", "firing")]
            assert snapshots._value.get() == before + 1, "the tick's alert is followed by a snapshot"
            restored = JobPartition(state.correlators[0].correlator.config, state.inventory)
            blob = read_snapshot(app.lockstep_runtime.correlator_table, b"0")
            assert blob is not None
            restored.restore(blob, 0.0)
            assert restored.tick(10.0).alerts == [], "the snapshot knows the alert went out"

    _loop.run_until_complete(go())
