"""An Alertmanager alert is evidence for the first mover, end to end through the real broker.

The seed incident (a symbol-error burst on leaf03 port 17 slowing ``llm-70b``) is replayed with every
switch sample of leaf03 port 17 taken out: the only word about that port is what an operator's own
Prometheus rule would say, an Alertmanager webhook message (``version: "4"``, on the carrier
``alertmanager-webhook``) whose alert ``InfinibandPortSymbolErrors{switch="leaf03", port="17"}``
started at the burst's onset. The job's slowdown alert must name that alert's event as its root cause
(network, leaf03 port 17), ahead of the NCCL, GPU and step evidence that follows it.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson
import pytest

from lockstep.replay import replay
from lockstep.simulate import SCENARIOS, Simulator
from models.settings import LockstepSettings
from models.timeutil import format_ts

pytestmark = pytest.mark.broker

#: The seed incident's onset on leaf03 port 17 (its first SymbolErrorCounter increase, 11:42:10Z).
ONSET = 1764502930.0


def webhook(starts: float) -> bytes:
    """An Alertmanager webhook message, as Alertmanager 0.25 shapes it (tests/fixtures/formats/
    alertmanager_webhook/), for one firing alert on a switch port."""
    labels = {"alertname": "InfinibandPortSymbolErrors", "switch": "leaf03", "port": "17", "severity": "critical",
              "job": "ufm"}
    return orjson.dumps({
        "receiver": "lockstep", "status": "firing", "version": "4", "truncatedAlerts": 0,
        "groupKey": '{}:{alertname="InfinibandPortSymbolErrors"}', "externalURL": "http://alertmanager:9093",
        "groupLabels": {"alertname": labels["alertname"]}, "commonLabels": labels, "commonAnnotations": {},
        "alerts": [{"status": "firing", "labels": labels, "annotations": {"summary": "symbol errors on leaf03/17"},
                    "startsAt": format_ts(starts), "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
                    "fingerprint": "5d1c0ffee0ddba11"}]})


def write_replay(path: Path) -> int:
    sim = Simulator(SCENARIOS["seed-incident"], seed=7)
    removed = 0
    with open(path, "wb") as fh:
        for m in sim.run():
            if m.topic == "inventory":
                fh.write(orjson.dumps(m.value) + b"\n")
                continue
            for sample in m.value:
                if (sample["layer"], sample["source"], sample["labels"].get("port")) == ("switch", "leaf03", "17"):
                    removed += 1
                    continue
                fh.write(orjson.dumps(sample) + b"\n")
        # Posted a second after the onset (group_wait), stamped with the alert's start.
        fh.write(orjson.dumps({"carrier": "alertmanager-webhook", "ts": ONSET + 1,
                               "payload": webhook(ONSET).decode()}) + b"\n")
    return removed


def test_an_alertmanager_alert_on_a_switch_port_is_the_root_cause_of_the_job_slowdown(
        tmp_path: Path, settings: LockstepSettings) -> None:
    path = tmp_path / "alertmanager-seed.jsonl"
    assert write_replay(path) > 0
    out, err = io.StringIO(), io.StringIO()
    summary = asyncio.run(replay(settings, path, out, stderr=err, timeout_s=300))
    assert summary["bad_lines"] == 0, err.getvalue()[:2000]
    assert summary["envelopes"] == 1
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    firing = [a for a in alerts if a["status"] == "firing" and a["job_id"] == "llm-70b"]
    assert firing, alerts
    cause = firing[0]["root_cause"]
    assert (cause["domain"], cause["layer"], cause["source"], cause["metric"]) == (
        "network", "switch", "leaf03", "alertmanager_link_errors")
    assert cause["labels"]["port"] == "17" and cause["labels"]["alertname"] == "InfinibandPortSymbolErrors"
    first = firing[0]["timeline"][0]
    assert (first["layer"], first["metric"]) == ("switch", "alertmanager_link_errors")
    assert list(dict.fromkeys(e["layer"] for e in firing[0]["timeline"]))[:2] == ["switch", "nccl"]
