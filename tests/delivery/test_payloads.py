"""Pure payload builders against the published shapes and limits (no I/O)."""

from __future__ import annotations

import doctest
import re
from typing import Any

import orjson
import pytest

import lockstep.delivery.base as base_mod
import lockstep.delivery.receivers.alertmanager as am_mod
import lockstep.delivery.receivers.pagerduty as pd_mod
import lockstep.delivery.receivers.slack as slack_mod
import lockstep.delivery.receivers.syslog as syslog_mod
import lockstep.delivery.retry as retry_mod
import lockstep.delivery.text as text_mod
import streams.dispatch as dispatch_mod
import streams.matchers as matchers_mod
import streams.routes as routes_mod
from lockstep.delivery.base import DeliveryContext, retry_after_seconds
from lockstep.delivery.receivers.alertmanager import am_postable_alert
from lockstep.delivery.receivers.ocsf import ocsf_finding
from lockstep.delivery.receivers.pagerduty import pagerduty_dedup_key, pagerduty_event
from lockstep.delivery.receivers.slack import RateLimiter, slack_message
from lockstep.delivery.receivers.syslog import cef_event, octet_frame, syslog_message
from lockstep.delivery.receivers.webhook import webhook_v4
from streams.dispatch import Notification

from .servers import FakeAlertmanager, FakePagerDuty, FakeSlack, FakeWebhook, ocsf_problems

KEY = "0123456789abcdef0123456789abcdef"


def group(*alerts: dict[str, Any]) -> Notification:
    return Notification("r", '0:{job="llm-70b"}', {"job": "llm-70b"}, list(alerts), list(alerts), False)


@pytest.mark.parametrize("module", [matchers_mod, routes_mod, dispatch_mod, base_mod, slack_mod, pd_mod, am_mod,
                                    syslog_mod, retry_mod, text_mod])
def test_docstring_examples_run(module) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_slack_message_is_valid_block_kit(alert, ctx) -> None:
    msg = slack_message(group(alert), ctx)
    assert FakeSlack().check(msg, None) == []  # type: ignore[arg-type]
    kinds = [b["type"] for b in msg["blocks"]]
    assert kinds == ["header", "section", "section", "section", "actions", "context"]
    assert msg["blocks"][0]["text"]["text"] == "[FIRING:1] job_slowdown llm-70b"
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in msg["blocks"][2]["fields"]}
    assert fields["*Job*"] == "llm-70b" and fields["*GPUs*"] == "256" and fields["*Nodes*"] == "gpu[001-032]"
    assert fields["*Root cause*"] == "switch leaf03 port=17 (SymbolErrorCounter)"
    table = msg["blocks"][3]["text"]["text"]
    assert "```" in table and "leaf03 port=17" in table and "step_time_seconds" in table
    urls = [e["url"] for e in msg["blocks"][4]["elements"]]
    assert urls == ["https://lockstep.example/jobs/llm-70b/timeline?alert=sample-test",
                    "https://lockstep.example/alerts/sample-test"]
    assert msg["text"].startswith("[FIRING:1] job_slowdown llm-70b: [TEST] job llm-70b")


def test_slack_message_stays_within_every_limit_for_huge_groups(huge_alert, ctx) -> None:
    alerts = [dict(huge_alert, dedup_key=f"k{i}", alert_id=f"a{i}") for i in range(30)]
    msg = slack_message(group(*alerts), ctx)
    assert FakeSlack().check(msg, None) == []  # type: ignore[arg-type]
    assert len(msg["blocks"]) <= 50
    last = msg["blocks"][-1]
    assert last["type"] == "context" and "more alerts in this group" in last["elements"][0]["text"]
    assert len(msg["text"]) <= 3000


def test_slack_without_public_url_has_no_buttons(alert) -> None:
    msg = slack_message(group(alert), DeliveryContext(now=0.0))
    assert "actions" not in [b["type"] for b in msg["blocks"]]


def test_slack_escapes_control_characters(alert, ctx) -> None:
    alert["summary"] = "a <b> & c"
    assert "a &lt;b&gt; &amp; c" in slack_message(group(alert), ctx)["blocks"][1]["text"]["text"]


def test_rate_limiter_spaces_sends_and_honours_retry_after() -> None:
    r = RateLimiter(1.0)
    assert [r.reserve(0.0) for _ in range(3)] == [0.0, 1.0, 2.0]
    r.push_back(30.0)
    assert r.reserve(5.0) == 25.0


def test_pagerduty_trigger_and_resolve(alert, ctx) -> None:
    server = FakePagerDuty(KEY)
    trigger = pagerduty_event(alert, KEY, ctx)
    assert server.check(trigger, None) == []  # type: ignore[arg-type]
    p = trigger["payload"]
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == alert["dedup_key"]
    assert (p["severity"], p["source"], p["group"]) == ("critical", "leaf03", "llm-70b")
    assert p["class"] == "job_slowdown/network"
    assert p["component"] == "switch leaf03 port=17"
    assert p["custom_details"]["root_cause"]["source"] == "leaf03" and "leaf03" in p["custom_details"]["timeline"]
    assert [link["text"] for link in trigger["links"]] == ["Job timeline", "Alert"]
    resolved = dict(alert, status="resolved", resolved_at="2025-11-30T11:50:00Z")
    assert pagerduty_event(resolved, KEY, ctx) == {"routing_key": KEY, "event_action": "resolve",
                                                   "dedup_key": alert["dedup_key"]}


def test_pagerduty_limits(huge_alert, ctx) -> None:
    event = pagerduty_event(huge_alert, KEY, ctx)
    assert FakePagerDuty(KEY).check(event, None) == []  # type: ignore[arg-type]
    assert len(event["payload"]["summary"]) == 1024 and len(event["dedup_key"]) == 255
    assert pagerduty_dedup_key(huge_alert["dedup_key"]) == event["dedup_key"]  # stable


@pytest.mark.parametrize(("sev", "expected"), [("critical", "critical"), ("error", "error"),
                                                ("warning", "warning"), ("info", "info")])
def test_pagerduty_severity(alert, ctx, sev, expected) -> None:
    assert pagerduty_event(dict(alert, severity=sev), KEY, ctx)["payload"]["severity"] == expected


def test_alertmanager_postable_alerts(alert, ctx) -> None:
    body = [am_postable_alert(alert, ctx, 3600.0)]
    assert FakeAlertmanager().check(body, None) == []  # type: ignore[arg-type]
    a = body[0]
    assert a["labels"]["alertname"] == "job_slowdown" and a["labels"]["severity"] == "critical"
    assert a["startsAt"] == alert["started_at"] and a["endsAt"] == "2025-11-30T12:43:20.000Z"
    assert a["generatorURL"] == "https://lockstep.example/alerts/sample-test"
    resolved = dict(alert, status="resolved", resolved_at="2025-11-30T11:43:00Z")
    assert am_postable_alert(resolved, ctx, 3600.0)["endsAt"] == "2025-11-30T11:43:00Z"
    assert {k: a["labels"][k] for k in ("switch", "port", "domain", "job", "gpus_bucket", "fabric")} == {
        "switch": "leaf03", "port": "17", "domain": "network", "job": "llm-70b", "gpus_bucket": "256-1023",
        "fabric": "ib"}


def test_alertmanager_docstring_examples() -> None:
    import doctest

    import lockstep.delivery.receivers.alertmanager as am

    result = doctest.testmod(am)
    assert result.attempted >= 5 and result.failed == 0


def test_alertmanager_times_are_never_after_the_wall_clock(alert, ctx) -> None:
    """A source (or the demo) ahead of the wall clock: Alertmanager would keep a resolved alert active."""
    ahead = dict(alert, status="resolved", started_at="2025-11-30T11:45:00Z", resolved_at="2025-11-30T11:50:00Z")
    a = am_postable_alert(ahead, ctx, 3600.0)
    assert a["startsAt"] == a["endsAt"] == "2025-11-30T11:43:20.000Z"  # ctx.now
    firing = am_postable_alert(dict(alert, started_at="2025-11-30T11:45:00Z"), ctx, 3600.0)
    assert firing["startsAt"] == "2025-11-30T11:43:20.000Z" and firing["endsAt"] == "2025-11-30T12:43:20.000Z"


def test_webhook_v4_shape_and_truncation(alert, ctx) -> None:
    alerts = [dict(alert, dedup_key=f"k{i}", alert_id=f"a{i}") for i in range(3)]
    alerts[2] = dict(alerts[2], status="resolved", resolved_at="2025-11-30T11:50:00Z")
    body = webhook_v4(group(*alerts), ctx, max_alerts=2)
    assert FakeWebhook().check(body, None) == []  # type: ignore[arg-type]
    assert body["version"] == "4" and body["status"] == "firing" and body["truncatedAlerts"] == 1
    assert len(body["alerts"]) == 2 and body["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert body["commonLabels"]["job"] == "llm-70b" and "dedup_key" not in body["commonLabels"]
    assert body["groupKey"] == '0:{job="llm-70b"}'


@pytest.mark.parametrize(("status", "repeat", "activity", "status_id"), [
    ("firing", False, 1, 1), ("firing", True, 2, 1), ("resolved", False, 3, 4)])
def test_ocsf_detection_finding(alert, ctx, status, repeat, activity, status_id) -> None:
    a = dict(alert, status=status, resolved_at="2025-11-30T11:50:00Z" if status == "resolved" else None)
    f = ocsf_finding(a, ctx, repeat)
    assert ocsf_problems(f) == []
    assert (f["class_uid"], f["category_uid"]) == (2004, 2)
    assert (f["activity_id"], f["type_uid"]) == (activity, 200400 + activity)
    assert f["status_id"] == status_id and f["severity_id"] == 5
    assert f["finding_info"]["uid"] == alert["alert_id"]
    assert f["finding_info"]["first_seen_time"] == 1764502940000
    assert f["metadata"]["product"] == {"name": "Lockstep", "vendor_name": "Lockstep", "version": "0.1.0"}
    types = [r["type"] for r in f["resources"]]
    assert types[0] == "job" and types.count("node") == 32 and types[-1] == "switch_port"
    assert f["resources"][-1]["uid"] == "leaf03:17"
    orjson.dumps(f)


def test_cef_line(alert, ctx) -> None:
    alert["summary"] = "a|b\\c=d\nnext"
    line = cef_event(alert, ctx)
    header = re.split(r"(?<!\\)\|", line)
    assert header[:5] == ["CEF:0", "Lockstep", "Lockstep", "0.1.0", "job_slowdown"]
    assert header[5] == "a\\|b\\\\c=d next" and header[6] == "10"
    assert "msg=a|b\\\\c\\=d\\nnext" in line and "\n" not in line
    assert "cs1Label=job cs1=llm-70b" in line and f"externalId={alert['alert_id']}" in line


def test_syslog_framing(alert, ctx) -> None:
    msg = syslog_message(alert, "hello", ctx)
    assert re.match(rb"^<130>1 2025-11-30T11:42:25\.000Z deliver-1 lockstep - alert - \xef\xbb\xbfhello$", msg)
    assert octet_frame(msg) == str(len(msg)).encode() + b" " + msg


def test_a_straggler_alert_fits_every_published_shape(straggler, ctx) -> None:
    """Alerts without a timeline (a peer-comparison verdict) pass the same checks as a job slowdown."""
    msg = slack_message(group(straggler), ctx)
    assert FakeSlack().check(msg, None) == []  # type: ignore[arg-type]
    assert msg["blocks"][0]["text"]["text"] == "[FIRING:1] straggler train-a"
    assert "gpu006" in orjson.dumps(msg).decode()
    event = pagerduty_event(straggler, KEY, ctx)
    assert FakePagerDuty(KEY).check(event, None) == []  # type: ignore[arg-type]
    assert event["dedup_key"] == pagerduty_dedup_key("straggler/train-a/step_time/gpu006/rank40")
    assert FakeAlertmanager().check([am_postable_alert(straggler, ctx, 3600.0)], None) == []  # type: ignore[arg-type]
    assert FakeWebhook().check(webhook_v4(group(straggler), ctx), None) == []  # type: ignore[arg-type]
    finding = ocsf_finding(straggler, ctx)
    assert ocsf_problems(finding) == []
    assert [r["type"] for r in finding["resources"]][:2] == ["job", "node"]
    assert cef_event(straggler, ctx).split("|")[4] == "straggler"


@pytest.mark.parametrize(("header", "expected"), [("7", 7.0), ("Sun, 30 Nov 2025 11:43:50 GMT", 30.0),
                                                  ("soon", None), (None, None)])
def test_retry_after(header, expected) -> None:
    assert retry_after_seconds(header, 1_764_503_000.0) == expected
