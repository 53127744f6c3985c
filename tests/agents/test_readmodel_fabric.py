"""The read model follows ``fabric-rollup`` (the summaries ingest publishes) into the store's rollup
unless told not to; it no longer reads the raw NIC and switch telemetry."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from agents.readmodel import ReadModel, ReadModelMetrics
from agents.topics import TopicCatalogue
from models.settings import LockstepSettings
from streams.fabric import FabricConfig
from streams.fabric_publish import PartitionFabric
from streams.readstore import ReadStore
from streams.series import SeriesLimits, SeriesRegistry


def _model(**extra: object) -> ReadModel:
    settings = LockstepSettings(_env_file=None, **extra)  # type: ignore[call-arg, arg-type]
    return ReadModel(settings, "127.0.0.1:1", ReadStore(), ReadModelMetrics(CollectorRegistry()))


def test_the_fabric_summaries_are_read_into_the_rollup() -> None:
    rm = _model()
    cat = TopicCatalogue(rm.settings)
    assert {t for t, k in rm.kinds.items() if k == "fabric"} == {cat.fabric_rollup}
    assert cat.telemetry("nic") not in rm.kinds and cat.telemetry("switch") not in rm.kinds
    reg = SeriesRegistry(SeriesLimits())
    sid = reg.admit("switch", "leaf01", "PortXmitWait", {"port": "1"}, "counter")
    fab = PartitionFabric(FabricConfig())
    fab.register(reg.take_added(), reg.meta)
    fab.lineage = "0/1.0"
    fab.fold([int(fab.codes[sid])] * 3, [1_764_500_000.0 + i for i in range(3)], [0.0, 10.0, 20.0])
    (value,) = fab.publish(1_764_500_002.0, "lockstep.telemetry.switch:0")
    tp = SimpleNamespace(topic=cat.fabric_rollup)
    rm._fold(tp, [SimpleNamespace(value=value, key=None), SimpleNamespace(value=None, key=None),
                  SimpleNamespace(value=b"not json", key=None)])
    assert rm.store.fabric.entities[("switch", "leaf01", "", "1")].congestion == {"xmit_wait": 20.0}
    assert rm.metrics.records.labels("fabric", "applied")._value.get() == 1
    assert rm.metrics.records.labels("fabric", "skipped")._value.get() == 2


def test_fabric_report_false_reads_no_summaries() -> None:
    assert "fabric" not in _model(fabric_report=False).kinds.values()
