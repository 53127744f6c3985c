"""The read model follows the two fabric input topics into the store's rollup unless told not to."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from prometheus_client import CollectorRegistry

from agents.readmodel import ReadModel, ReadModelMetrics
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.readstore import ReadStore


def _model(**extra: object) -> ReadModel:
    settings = LockstepSettings(_env_file=None, **extra)  # type: ignore[call-arg, arg-type]
    return ReadModel(settings, "127.0.0.1:1", ReadStore(), ReadModelMetrics(CollectorRegistry()))


def test_the_fabric_topics_are_read_into_the_rollup() -> None:
    rm = _model()
    cat = TopicCatalogue(rm.settings)
    assert {t for t, k in rm.kinds.items() if k == "fabric"} == {cat.telemetry("nic"), cat.telemetry("switch")}
    batch = [{"ts": 1_764_500_000.0 + i, "layer": "switch", "source": "leaf01", "metric": "PortXmitWait",
              "value": 10.0 * i, "labels": {"port": "1"}, "kind": "counter"} for i in range(3)]
    tp = SimpleNamespace(topic=cat.telemetry("switch"))
    rm._fold(tp, [SimpleNamespace(value=orjson.dumps(batch), key=None), SimpleNamespace(value=None, key=None)])
    assert rm.store.fabric.entities[("switch", "leaf01", "", "1")].congestion == {"xmit_wait": 20.0}
    assert rm.metrics.records.labels("fabric", "applied")._value.get() == 1
    assert rm.metrics.records.labels("fabric", "skipped")._value.get() == 1


def test_fabric_report_false_reads_no_telemetry() -> None:
    assert "fabric" not in _model(fabric_report=False).kinds.values()
