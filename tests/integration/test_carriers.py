"""Real formats through the running system: the ``convert`` agents and replay files with envelopes.

- Broker-free: the agents in Faust's own agent test context (outputs through ``build_app(emit=...)``),
  the pure helpers of :mod:`agents.carriers` and the envelope parser of :mod:`lockstep.replay`.
- Through the real embedded broker (ONE replay): the seed incident with its switch counters as a
  Prometheus scrape per switch and second, GPUs as dcgm-exporter scrapes, NCCL as Inspector JSON and
  the jobs as ``squeue --json`` — the other layers and links native — gives the native alert
  (the facts tests/integration/test_replay.py and tests/formats/test_seed_incident_real_formats.py
  assert for the native run and for the broker-free mixed run).
"""

from __future__ import annotations

import asyncio
import base64
import doctest
import importlib.util
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

import agents.carriers
import lockstep.replay
from agents.carriers import (
    FULL_ORIGINALS_PER_MESSAGE,
    MAX_DEAD_LETTERS_PER_MESSAGE,
    TOMBSTONE_REASON,
    CarrierMessage,
    rejection_dead_letters,
    route_samples,
)
from agents.topics import TopicCatalogue
from lockstep.replay import parse_envelope, read_input, read_topic, replay
from lockstep.simulate import SCENARIOS, Simulator
from models.records import DeadLetter
from models.settings import LockstepSettings
from streams.formats import FormatRejection
from tests.agent_context import Sent, captured_app, put_on

T0 = 1764502930.0


def _seed_helpers() -> ModuleType:
    """The real-format renderers of the broker-free seed test (tests/formats), loaded by path."""
    path = Path(__file__).resolve().parents[1] / "formats" / "test_seed_incident_real_formats.py"
    spec = importlib.util.spec_from_file_location("_seed_incident_real_formats", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- broker-free -----------------------------------------------------------------------------------

def test_the_module_examples_run() -> None:
    for module in (agents.carriers, lockstep.replay):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def make(loop: Any) -> tuple[Any, LockstepSettings, Sent]:
    return captured_app(loop)


SCRAPE = (b"# TYPE SymbolErrorCounter counter\n"
          b'SymbolErrorCounter{port="17"} 5 1764502930000\n'
          b'SymbolErrorCounter{port="18"} 0 1764502930000\n'
          b"this is not a sample line\n"
          b'lockstep_test_gauge{port="17"} 3 1764502930000\n')


def test_convert_sends_samples_by_source_dead_letters_rejections_and_counts_unknown_names(loop: Any) -> None:
    app, settings, sent = make(loop)
    cat = TopicCatalogue(settings)
    topic = cat._n("telemetry.raw.prometheus")

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, SCRAPE, key=b"leaf03", partition=1,
                         headers={"source": b"leaf03", "layer": b"switch"})

    loop.run_until_complete(go())
    [(t1, k1, batch, _), (t2, k2, dl, _)] = sent
    assert (t1, k1) == ("lockstep.telemetry.switch", b"leaf03")
    assert [(s["metric"], s["labels"], s["value"], s["kind"]) for s in batch if s["metric"] == "SymbolErrorCounter"] \
        == [("SymbolErrorCounter", {"port": "17"}, 5.0, "counter"), ("SymbolErrorCounter", {"port": "18"}, 0.0,
                                                                       "counter")]
    assert all(s["source"] == "leaf03" and s["ts"] == T0 for s in batch)
    assert (t2, k2) == ("lockstep.dlq", b"leaf03")
    DeadLetter.model_validate(dl)
    assert dl["stage"] == "convert" and dl["record"] == "line 4" and dl["reason"].startswith("prometheus: ")
    assert (dl["topic"], dl["partition"], dl["offset"]) == (topic, 1, 0)
    assert base64.b64decode(dl["original"]) == SCRAPE
    registry = app.lockstep_metrics.registry
    assert registry.get_sample_value("lockstep_carrier_unknown_metric_samples_total", {"format": "prometheus"}) == 1
    assert registry.get_sample_value("lockstep_carrier_samples_total", {"format": "prometheus", "layer": "switch"}) \
        == 3
    assert registry.get_sample_value("lockstep_carrier_rejections_total",
                                     {"format": "prometheus", "error": "ValidationFailed"}) == 1


def test_the_ts_header_is_the_collection_time_and_the_record_time_the_fallback(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.prometheus")
    no_times = b'node_load1{instance="gpu001:9100"} 0.5\n'

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, no_times, headers={"ts": b"2025-11-30T11:42:10Z"}, timestamp=T0 + 3600)
            await put_on(agent, topic, no_times, timestamp=T0 + 7)

    loop.run_until_complete(go())
    assert [(s["ts"], s["ingest_ts"]) for _, _, batch, _ in sent for s in batch] == [(T0, T0), (T0 + 7, T0 + 7)]


def test_end_of_input_is_recorded_per_partition_and_never_forwarded(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.prometheus")

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, b'{"lockstep_control": "eos"}', partition=1)
            await put_on(agent, topic, b'{"lockstep_control": "stop"}', partition=0)

    loop.run_until_complete(go())
    assert app.lockstep_carriers.eos == {f"{topic}:1"}
    [(t, _, dl, _)] = sent  # the eos went nowhere; an unknown control verb is bad input
    assert t == "lockstep.dlq" and dl["reason"] == "unknown control 'stop'"


def test_a_tombstone_is_dead_lettered_as_one_with_an_empty_original(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.prometheus")

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, None, key=b"leaf03", partition=1)  # type: ignore[arg-type]
            await put_on(agent, topic, b"", key=b"leaf04", partition=1)  # empty, not a tombstone: an empty scrape

    loop.run_until_complete(go())
    [(t, key, dl, _)] = sent
    assert (t, key) == ("lockstep.dlq", b"leaf03")
    DeadLetter.model_validate(dl)
    assert (dl["stage"], dl["error"], dl["reason"]) == ("convert", "ValidationFailed", TOMBSTONE_REASON)
    assert (dl["original"], dl["original_size"], dl["key"]) == ("", 0, "leaf03")
    assert (dl["topic"], dl["partition"], dl["offset"]) == (topic, 1, 0)


def test_nccl_inspector_v4_3_context_is_carried_per_stream_and_survives_a_snapshot(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.nccl-inspector")
    lines = (Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "nccl_inspector_v4_3.jsonl").read_bytes()
    marker, first, second = lines.splitlines()[:3]

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, marker, key=b"gpu001")  # the record key is the stream
            await put_on(agent, topic, first, key=b"gpu001")
            await put_on(agent, topic, second, key=b"gpu002")  # another stream: no marker there

    loop.run_until_complete(go())
    samples = [s for t, _, batch, _ in sent if t == "lockstep.telemetry.nccl" for s in batch]
    assert samples and {s["source"] for s in samples} == {"gpu001"}
    [dl] = [r for t, _, r, _ in sent if t == "lockstep.dlq"]
    assert "without a preceding dump_stats marker in stream 'gpu002'" in dl["reason"]
    parts = app.lockstep_carriers
    origin = f"{topic}:0"
    remaining = parts.states[origin].nccl["gpu001"]["remaining"]
    blob = parts.snapshot(origin)
    parts.drop(origin)
    assert parts.restore(origin, blob).nccl["gpu001"]["remaining"] == remaining == 2  # 3 announced, 1 read


def test_inventory_carriers_become_job_events_keyed_for_compaction(loop: Any) -> None:
    app, settings, sent = make(loop)
    topic = TopicCatalogue(settings)._n("inventory.raw.slurm-squeue")
    squeue = orjson.dumps({"jobs": [{
        "job_id": 4242, "name": "llm", "user_name": "alice", "job_state": ["RUNNING"], "nodes": "gpu[001-002]",
        "tres_alloc_str": "cpu=128,node=2,gres/gpu=16", "start_time": {"set": True, "infinite": False,
                                                                         "number": 1764502800}}]})

    async def go() -> None:
        async with app.agents["convert_inventory"].test_context() as agent:
            await put_on(agent, topic, squeue)

    loop.run_until_complete(go())
    [(t, key, event, _)] = sent
    assert (t, key) == ("lockstep.inventory", b"job:4242")
    assert (event["kind"], event["nodes"], event["gpus_per_node"], event["ts"]) == ("job", ["gpu001", "gpu002"], 8,
                                                                                   1764502800.0)


def test_samples_are_batched_per_layer_and_native_key() -> None:
    samples = [{"layer": "step", "source": "gpu001", "labels": {"job_id": "j1"}},
               {"layer": "gpu", "source": "gpu001", "labels": {}},
               {"layer": "step", "source": "gpu002", "labels": {"job_id": "j1"}},
               {"layer": "step", "source": "gpu003", "labels": {}}]
    assert [(layer, key, len(b)) for layer, key, b in route_samples(samples)] == [
        ("step", "j1", 2), ("gpu", "gpu001", 1), ("step", "gpu003", 1)]
    many = [{"layer": "gpu", "source": "a", "n": i} for i in range(5)]
    assert [[s["n"] for s in b] for _, _, b in route_samples(many, max_per_message=2)] == [[0, 1], [2, 3], [4]]


def test_dead_letters_per_message_are_bounded_and_carry_the_original_a_few_times() -> None:
    msg = CarrierMessage("t", 0, 9, b"k", T0, b"x" * 1000)
    rejections = [FormatRejection("telegraf", f"line {i}", "bad") for i in range(1, 251)]
    out = rejection_dead_letters(msg, rejections)
    assert len(out) == MAX_DEAD_LETTERS_PER_MESSAGE
    for rec in out:
        DeadLetter.model_validate(rec)
    with_original = [r for r in out if r["original"]]
    assert len(with_original) == FULL_ORIGINALS_PER_MESSAGE
    assert all(r.get("original_truncated") and r["original_sha256"] for r in out[FULL_ORIGINALS_PER_MESSAGE:])
    assert out[-1]["reason"] == "telegraf: 151 more records rejected, the first of them: bad"
    assert out[-2]["record"] == f"line {MAX_DEAD_LETTERS_PER_MESSAGE - 1}"


@pytest.mark.parametrize(("doc", "reason"), [
    ({"carrier": "nope", "ts": T0, "payload": "x"}, "unknown carrier 'nope'"),
    ({"carrier": "nccl-prometheus", "ts": T0, "payload": "x"}, "ride the 'prometheus' carrier"),
    ({"carrier": "prometheus", "payload": "x"}, "missing field 'ts'"),
    ({"carrier": "prometheus", "ts": 12, "payload": "x"}, "ts: "),
    ({"carrier": "prometheus", "ts": T0}, "exactly one of 'payload'"),
    ({"carrier": "prometheus", "ts": T0, "payload": "x", "payload_b64": "eA=="}, "exactly one of 'payload'"),
    ({"carrier": "prometheus", "ts": T0, "payload_b64": "not base64!"}, "payload_b64 is not base64"),
    ({"carrier": "prometheus", "ts": T0, "payload": "x", "headers": {"source": 1}}, "headers must be"),
    ({"carrier": "prometheus", "ts": T0, "payload": "x", "header": {}}, "unknown field(s) 'header'"),
])
def test_bad_envelopes_are_bad_lines_with_a_reason(doc: dict[str, Any], reason: str) -> None:
    envelope, why = parse_envelope(doc, 1)
    assert envelope is None and why is not None and reason in why, why
    data = read_input([orjson.dumps(doc)])
    assert [b.line for b in data.bad] == [1] and data.bad[0].reason.startswith("carrier envelope: ")


def test_envelopes_are_read_in_event_time_order_with_their_bytes() -> None:
    lines = [orjson.dumps({"carrier": "perfquery", "ts": T0 + 1, "payload_b64": base64.b64encode(b"\xff").decode(),
                           "headers": {"source": "gpu001"}}),
             orjson.dumps({"carrier": "slurm-squeue", "ts": T0, "payload": "{}", "key": "cluster-a"})]
    data = read_input(lines)
    assert [(e.carrier, e.payload, e.kafka_key()) for e in data.envelopes] == [
        ("slurm-squeue", b"{}", "cluster-a"), ("perfquery", b"\xff", "gpu001")]


# -- through the real broker -------------------------------------------------------------------------

def write_mixed_seed(path: Path) -> dict[str, int]:
    """The seed incident with switch, GPU, NCCL and job inventory as real-format envelopes."""
    h = _seed_helpers()
    counts = {"native": 0, "prometheus-switch": 0, "prometheus-dcgm": 0, "nccl-inspector": 0, "slurm-squeue": 0}
    sim = Simulator(SCENARIOS["seed-incident"], seed=7)
    with open(path, "wb") as fh:
        def envelope(carrier: str, ts: float, payload: bytes, what: str, **extra: Any) -> None:
            fh.write(orjson.dumps({"carrier": carrier, "ts": ts, "payload": payload.decode(), **extra}) + b"\n")
            counts[what] += 1

        for msg in sim.run():
            if msg.topic == "inventory":
                if msg.value["kind"] == "job":
                    envelope("slurm-squeue", msg.ts, h._squeue(msg.value, msg.value["gpus_per_node"]), "slurm-squeue")
                else:
                    fh.write(orjson.dumps(msg.value) + b"\n")
                    counts["native"] += 1
                continue
            samples = msg.value
            if msg.topic == "switch":
                envelope("prometheus", msg.ts, h._switch_scrape(samples), "prometheus-switch",
                         headers={"source": msg.key, "layer": "switch"})
            elif msg.topic == "gpu":
                envelope("prometheus", msg.ts, h._dcgm_scrape(msg.key, samples), "prometheus-dcgm", key=msg.key)
            elif msg.topic == "nccl":
                envelope("nccl-inspector", msg.ts, h._inspector_json(msg.key, samples), "nccl-inspector",
                         key=msg.key, headers={"job_id": samples[0]["labels"]["job_id"]})
            else:
                for sample in samples:
                    fh.write(orjson.dumps(sample) + b"\n")
                    counts["native"] += 1
    return counts


@pytest.mark.broker
def test_a_seed_replay_mixing_real_formats_and_native_samples_gives_the_native_alert(
        tmp_path: Path, settings: LockstepSettings) -> None:
    path = tmp_path / "mixed-seed.jsonl"
    counts = write_mixed_seed(path)
    assert all(n > 0 for n in counts.values()), counts
    out, err = io.StringIO(), io.StringIO()
    summary = asyncio.run(replay(settings, path, out, stderr=err, timeout_s=300))
    assert summary["bad_lines"] == 0, err.getvalue()[:2000]
    assert summary["envelopes"] == sum(n for k, n in counts.items() if k != "native")
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    key = "job_slowdown/llm-70b/network/switch/leaf03/port=17"
    assert [(a["status"], a["job_id"], a["dedup_key"]) for a in alerts] == [
        ("firing", "llm-70b", key), ("resolved", "llm-70b", key)]
    firing = alerts[0]
    assert firing["gpus"] == 256 and len(firing["nodes"]) == 32
    cause = firing["root_cause"]
    assert (cause["domain"], cause["source"], cause["labels"]) == ("network", "leaf03", {"port": "17"})
    assert cause["first_seen"].startswith("2025-11-30T11:42:10")
    assert list(dict.fromkeys(e["layer"] for e in firing["timeline"])) == ["switch", "nccl", "gpu", "step"]
    onsets = {e["layer"]: e["ts"][11:19] for e in reversed(firing["timeline"])}
    assert onsets == {"switch": "11:42:10", "nccl": "11:42:12", "gpu": "11:42:15", "step": "11:42:18"}
    # Nothing was rejected on the way: the replay's dead-letter topic is empty.
    assert _replay_topic(settings, "dlq") == []


def _replay_topic(settings: LockstepSettings, name: str) -> list[Any]:
    """A topic of the replay run (its prefix is ``<prefix>replay-<id>.``)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def go() -> list[Any]:
        assert settings.kafka_bootstrap_servers
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            topics = [t for t in await admin.list_topics()
                      if t.startswith(settings.topic_prefix + "replay-") and t.endswith("." + name)]
        finally:
            await admin.close()
        assert len(topics) == 1, topics
        return await read_topic(settings, settings.kafka_bootstrap_servers, topics[0])

    return asyncio.run(go())
