"""Every dead-letter path makes a record that validates against the published DeadLetter schema.

One test per path: the ingest pipeline (decode, validate, normalise, rate), a real-format carrier,
the inventory reader, a replay input line, an agent's event (and a tombstone), and the correlation
catch-up (records read around Faust). Each builds through models.deadletter; the JSON Schema check is
the one a consumer of the ``dlq`` topic would run.
"""

from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace
from typing import Any

import jsonschema
import orjson
import pytest

from agents.carriers import TOMBSTONE_REASON, CarrierMessage, dead_letter_record, rejection_dead_letters
from agents.deadletters import dead_letter_of
from models.deadletter import dead_letter_record as build
from models.errors import InternalError, LateData, ValidationFailed
from models.records import DeadLetter
from streams.detect import DetectorConfig
from streams.formats import AdapterState, convert
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

SCHEMA = DeadLetter.model_json_schema()
T0 = 1764502800.0


def check(rec: dict[str, Any], original: bytes) -> None:
    jsonschema.validate(orjson.loads(orjson.dumps(rec)), SCHEMA)
    assert base64.b64decode(rec["original"]) == original and rec["original_size"] == len(original)


@pytest.mark.parametrize(("raw", "stage"), [
    (b"{oops", "decode"),
    (orjson.dumps({"ts": T0, "layer": "gpu", "source": "n1", "metric": "m", "value": 1e300}), "validate"),
    (orjson.dumps({"ts": T0, "layer": "nic", "source": "n1", "metric": "port_xmit_data", "value": -3,
                   "labels": {"device": "mlx5_0", "port": "1"}}), "normalise"),
])
def test_the_ingest_pipeline(raw: bytes, stage: str) -> None:
    pipe = PartitionPipeline("t:0", DetectorConfig(), InventoryIndex())
    out = pipe.process_many([(raw, Origin("lockstep.telemetry.gpu", 0, 7, T0, b"n1"))])
    [dl] = out.dead_letters
    rec = dl.to_record()
    check(rec, raw)
    assert rec["stage"] == stage and rec["offset"] == 7 and rec["key"] == "n1"


def test_late_data_in_the_rate_stage() -> None:
    pipe = PartitionPipeline("t:0", DetectorConfig(), InventoryIndex())
    good = orjson.dumps({"ts": T0 + 5, "layer": "gpu", "source": "n1", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 9})
    late = orjson.dumps({"ts": T0, "layer": "gpu", "source": "n1", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 9})
    pipe.process_many([(good, Origin("t", 0, 1, T0))])
    [dl] = pipe.process_many([(late, Origin("t", 0, 2, T0))]).dead_letters
    rec = dl.to_record()
    check(rec, late)
    assert rec["error"] == LateData.__name__


def test_a_real_format_carrier() -> None:
    raw = b"# TYPE x counter\nx{a=\"1\"} not-a-number\n"
    converted = convert("prometheus", raw, headers={"source": "n1"}, ts=T0, state=AdapterState())
    assert converted.rejections
    msg = CarrierMessage("lockstep.telemetry.raw.prometheus", 1, 9, b"n1", T0, raw)
    for rec in rejection_dead_letters(msg, converted.rejections):
        check(rec, raw)
    tomb = dead_letter_record(CarrierMessage("t", 0, 5, b"k", None, b""), reason=TOMBSTONE_REASON,
                              error="ValidationFailed", record=None)
    check(tomb, b"")


def test_the_inventory_reader() -> None:
    from agents.inventory_reader import InventoryReader
    from models.settings import LockstepSettings

    got: list[dict[str, Any]] = []

    async def dead_letter(rec: dict[str, Any]) -> None:
        got.append(rec)

    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9")  # type: ignore[call-arg]
    reader = InventoryReader(settings, "127.0.0.1:9", "lockstep.inventory", InventoryIndex(), dead_letter)
    raw = b'{"kind": "job", "job_id": "x"}'
    msg = SimpleNamespace(value=raw, offset=3, key=b"job:x", timestamp=int(T0 * 1000))
    from aiokafka import TopicPartition

    asyncio.run(reader._apply_batches({TopicPartition("lockstep.inventory", 0): [msg]}))
    [rec] = got
    check(rec, raw)
    assert rec["stage"] == "inventory" and rec["offset"] == 3


def test_a_replay_input_line() -> None:
    rec = build(stage="replay", error=ValidationFailed, reason="not JSON", original=b"{x", topic="in.jsonl",
                partition=None, offset=None, record="line 4")
    check(rec, b"{x")


def test_an_agent_event_and_a_record_read_around_faust() -> None:
    message = SimpleNamespace(topic="lockstep.anomalies", partition=2, offset=11, key=b"j1", timestamp=T0)
    rec = dead_letter_of("correlate", InternalError, "internal error: KeyError('x')",
                         SimpleNamespace(message=message, value=b"{}"))
    check(rec, b"{}")
    assert rec["error"] == "InternalError" and rec["ts"] == T0
    aiokafka_record = SimpleNamespace(topic="lockstep.anomalies", partition=2, offset=12, key=None,
                                      timestamp=int(T0 * 1000), value=None)
    tomb = dead_letter_of("correlate", ValidationFailed, TOMBSTONE_REASON, aiokafka_record)
    check(tomb, b"")
    assert tomb["ts"] == T0


def test_the_correlation_catch_up_dead_letters_what_it_used_to_suppress() -> None:
    from agents.app import build_app
    from agents.correlating import Correlate
    from models.settings import LockstepSettings

    sent: list[tuple[str, dict[str, Any]]] = []

    async def emit(topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        sent.append((topic, orjson.loads(value)))

    async def go() -> int:
        settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers="127.0.0.1:9")  # type: ignore[call-arg]
        app, _ = build_app(settings, "127.0.0.1:9", InventoryIndex(), emit=emit, loop=asyncio.get_running_loop())
        correlate = Correlate(app.lockstep_runtime)
        corr = correlate.correlator_for(0)
        records = [SimpleNamespace(topic="x.anomalies", partition=0, offset=o, key=None, timestamp=int(T0 * 1000),
                                   value=v) for o, v in enumerate([b"{not json", b'{"type": "nonsense"}', None])]
        return await correlate.fold(corr, records, outputs=True)

    folded = asyncio.run(go())
    dlq = [rec for topic, rec in sent if topic.endswith("dlq")]
    assert folded == 0 and len(dlq) == 3
    for rec, raw in zip(dlq, [b"{not json", b'{"type": "nonsense"}', b""], strict=True):
        check(rec, raw)
        assert rec["stage"] == "correlate"
