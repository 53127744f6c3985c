"""The ``alertmanager-webhook`` adapter on real Alertmanager 0.25 webhook bodies (fixture README), and what
the ingest stage makes of its event samples: an anomaly of the job on that node, at the alert's start."""

from __future__ import annotations

import orjson
import pytest

from models.inventory import inventory_adapter
from models.timeutil import parse_ts
from streams.catalogue import Meaning, Mode, lookup
from streams.detect import DetectorConfig
from streams.formats import alertmanager_webhook as am
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline

from .helpers import load, run

#: When the captures were made: after every startsAt/endsAt in them.
COLLECTED = parse_ts("2026-12-01T14:38:00Z")
STARTS = parse_ts("2026-12-01T14:35:49Z")
ENDS = parse_ts("2026-12-01T14:37:49Z")


def events(fixture: str) -> list[tuple[str, str, str, float, float]]:
    out = run("alertmanager-webhook", f"alertmanager_webhook/{fixture}", ts=COLLECTED)
    assert out.rejections == []
    return [(s["layer"], s["source"], s["metric"], s["ts"], s["value"]) for s in out.samples]


def test_each_kind_of_real_alert_becomes_an_event_on_its_node_layer_and_meaning():
    assert events("ib_link_down_firing.json") == [("nic", "gpu001", "alertmanager_link_down", STARTS, 1.0)]
    assert events("dcgm_xid_firing.json") == [("gpu", "gpu003", "alertmanager_gpu_xid", STARTS, 1.0)]
    assert events("filesystem_firing.json") == [("host", "gpu004", "alertmanager_filesystem", STARTS, 1.0)]
    assert events("instance_down_firing.json") == [("host", "gpu005", "alertmanager_node_down", STARTS, 1.0)]
    meanings = {m: (lookup(m).meaning, lookup(m).mode) for m in (
        "alertmanager_link_down", "alertmanager_gpu_xid", "alertmanager_filesystem", "alertmanager_node_down")}
    assert meanings == {"alertmanager_link_down": (Meaning.LINK_DOWN, Mode.EVENT),
                        "alertmanager_gpu_xid": (Meaning.GPU_FAULT, Mode.EVENT),
                        "alertmanager_filesystem": (Meaning.LATENCY, Mode.EVENT),
                        "alertmanager_node_down": (Meaning.LINK_DOWN, Mode.EVENT)}


def test_a_resolved_alert_is_its_start_and_its_end_and_the_series_is_the_label_set():
    out = run("alertmanager-webhook", "alertmanager_webhook/ib_link_down_resolved.json", ts=COLLECTED)
    got = [(s["source"], s["ts"], s["value"], s["labels"]["device"]) for s in out.samples]
    assert got == [("gpu001", STARTS, 1.0, "mlx5_0"), ("gpu001", ENDS, 0.0, "mlx5_0"),
                   ("gpu002", STARTS, 1.0, "mlx5_1")]
    firing = run("alertmanager-webhook", "alertmanager_webhook/ib_link_down_firing.json", ts=COLLECTED).samples[0]
    # The re-sent firing sample is the same series at the same time: the pipeline drops it as a duplicate.
    assert (firing["labels"], firing["ts"], firing["value"]) == (out.samples[0]["labels"], STARTS, 1.0)
    assert out.samples[0]["labels"]["alertname"] == "NodeInfinibandLinkDown"


def test_no_event_is_put_in_the_future_of_its_arrival():
    early = parse_ts("2026-12-01T14:36:00Z")  # arrived "before" the alert ended: a skewed sender
    out = run("alertmanager-webhook", "alertmanager_webhook/ib_link_down_resolved.json", ts=early)
    assert [s["ts"] for s in out.samples] == [STARTS, early, STARTS]


@pytest.mark.parametrize("body, reason", [
    (b"not json", "not JSON"),
    (b'{"version": "3", "status": "firing", "alerts": []}', "version"),
    (b'{"status": "firing", "alerts": []}', "version: Field required"),
    (b'{"version": "4", "status": "firing", "alerts": {}}', "alerts"),
    (b"[]", "not an Alertmanager webhook message"),
])
def test_a_body_that_is_not_a_version_4_message_is_one_decode_failure(body, reason):
    out = run("alertmanager-webhook", body, ts=COLLECTED)
    assert out.samples == [] and len(out.rejections) == 1
    rej = out.rejections[0]
    assert (rej.record, rej.error) == (None, "DecodeFailed") and reason in rej.reason


def test_a_bad_alert_costs_that_alert_only():
    doc = orjson.loads(load("alertmanager_webhook/ib_link_down_resolved.json"))
    doc["alerts"].insert(0, {"status": "firing", "labels": {"alertname": "X", "instance": 7}, "startsAt": "now"})
    doc["alerts"].insert(1, {"status": "firing", "labels": {"alertname": "Lonely"},
                             "startsAt": "2026-12-01T14:35:49Z"})
    doc["alerts"].insert(2, {"status": "firing", "labels": {"alertname": "X", "instance": "gpu009:9100"},
                             "startsAt": "yesterday"})
    out = run("alertmanager-webhook", orjson.dumps(doc), ts=COLLECTED)
    assert [(r.record, r.error) for r in out.rejections] == [("alerts[0]", "ValidationFailed"),
                                                              ("alerts[1]", "ValidationFailed"),
                                                              ("alerts[2]", "ValidationFailed")]
    assert "labels.instance" in out.rejections[0].reason and "names no node" in out.rejections[1].reason
    assert "startsAt" in out.rejections[2].reason
    assert len(out.samples) == 3  # the three samples of the real alerts


def test_switch_pool_and_job_labels_place_an_alert_and_the_source_header_stands_in():
    doc = orjson.loads(load("alertmanager_webhook/instance_down_firing.json"))
    alert = doc["alerts"][0]
    doc["alerts"] = [
        {**alert, "labels": {"alertname": "IBSwitchPortDown", "switch": "leaf03", "port": "17"}},
        {**alert, "labels": {"alertname": "LustreOSTFull", "pool": "lustre-a"}},
        {**alert, "labels": {"alertname": "TrainingLossNaN", "job_id": "llm-70b"}},
        {**alert, "labels": {"alertname": "RackPowerHigh"}},
    ]
    out = run("alertmanager-webhook", orjson.dumps(doc), ts=COLLECTED, headers={"source": "gpu010"})
    assert [(s["layer"], s["source"], s["metric"]) for s in out.samples] == [
        ("switch", "leaf03", "alertmanager_link_down"), ("storage", "lustre-a", "alertmanager_filesystem"),
        ("host", "gpu010", "alertmanager_alert"), ("host", "gpu010", "alertmanager_alert")]


def test_an_empty_group_is_skipped_not_rejected():
    out = run("alertmanager-webhook", b'{"version": "4", "status": "resolved", "alerts": []}', ts=COLLECTED)
    assert out.rejections == [] and out.skipped == {am.SKIP_NO_ALERTS: 1}


def test_a_real_alert_is_an_anomaly_of_the_job_on_that_node_at_the_alerts_start():
    inv = InventoryIndex()
    inv.apply(inventory_adapter.validate_python({"kind": "job", "ts": STARTS - 600, "job_id": "j1",
                                                 "state": "RUNNING", "nodes": "gpu[001-004]", "gpus_per_node": 8}))
    for fixture, layer in (("ib_link_down_resolved.json", "nic"), ("dcgm_xid_firing.json", "gpu")):
        out = run("alertmanager-webhook", f"alertmanager_webhook/{fixture}", ts=COLLECTED)
        p = PartitionPipeline(f"telemetry.{layer}:0", DetectorConfig(), inv)
        res = p.process(orjson.dumps(out.samples), Origin(f"telemetry.{layer}", 0, 1))
        starts = sorted((a["job_id"], a["phase"], a["ts"], a["meaning"], a["source"]) for a in res.anomalies
                        if a["phase"] == "start")
        expected = {"nic": [("j1", "start", STARTS, "link_down", "gpu001"), ("j1", "start", STARTS, "link_down",
                                                                              "gpu002")],
                    "gpu": [("j1", "start", STARTS, "gpu_fault", "gpu003")]}[layer]
        assert starts == expected
