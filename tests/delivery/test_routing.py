"""The routing file and its tree (lockstep/delivery/config.py, streams/routes.py, streams/matchers.py) and the
dispatcher (streams/dispatch.py): fixture files, matching, grouping and timing, lifecycle, reload.

Timelines in the grouping tests are in seconds from t=0 (time is an argument, nothing sleeps)::

    t=0 a1 fires ─ group_wait 10 ─> t=10 notify [a1] ─ group_interval 60 ─> t=70 notify [a1, a2]
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.delivery.config import load_routing, reload_routing
from lockstep.delivery.redaction import missing_secrets
from models.errors import ConfigError
from streams.dispatch import Delivered, Dispatcher, lifecycle
from streams.matchers import Matcher, alert_labels
from streams.routes import group_key, parse_duration

FIXTURES = Path(__file__).parent.parent / "fixtures" / "routing"
BAD = sorted((FIXTURES / "bad").glob("*.yaml"))
GOOD = sorted((FIXTURES / "good").glob("*.yaml"))


def alert(dedup: str = "k1", *, alert_id: str | None = None, status: str = "firing", severity: str = "critical",
          job: str = "llm", domain: str = "network", type_: str = "job_slowdown", started: str = "2025-11-30T11:42:18Z",
          **labels: str) -> dict:
    return {"alert_id": alert_id or f"id-{dedup}", "dedup_key": dedup, "type": type_, "status": status,
            "severity": severity, "job_id": job, "started_at": started, "root_cause": {"domain": domain},
            "labels": dict(labels), "summary": f"{dedup} {status}"}


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_fixtures_load(path: Path) -> None:
    config = load_routing(path.read_text(), path.name)
    assert config.root.options.receiver in config.receivers


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_fixtures_fail_with_the_exact_error(path: Path) -> None:
    text = path.read_text()
    expected = text.splitlines()[0].removeprefix("# expect: ")
    with pytest.raises(ConfigError) as exc:
        load_routing(text, path.name)
    assert str(exc.value) == f"{path.name}: {expected}"


def test_every_bad_fixture_says_what_it_expects() -> None:
    assert len(BAD) >= 20
    assert all(p.read_text().startswith("# expect: ") for p in BAD)


def test_the_example_in_deploy_is_valid() -> None:
    example = Path(__file__).parents[2] / "deploy" / "routes.example.yaml"
    config = load_routing(example.read_text(), "routes.example.yaml")
    assert {"slack-oncall", "pagerduty"} <= set(config.receivers)


@pytest.fixture(scope="module")
def full():
    return load_routing((FIXTURES / "good" / "full.yaml").read_text(), "full.yaml")


@pytest.mark.parametrize(("a", "receivers"), [
    (alert(severity="critical", domain="network"), ["pagerduty", "netops"]),          # continue: true
    (alert(severity="warning", domain="network"), ["netops"]),
    (alert(severity="warning", domain="storage", type_="clock_skew"), ["siem"]),      # nested child
    (alert(severity="warning", domain="compute"), ["slack-oncall"]),                  # falls to the root
    (alert(severity="warning", domain="network", job=""), ["slack-oncall"]),          # job!="" fails
    (alert(severity="info", domain="compute", team="capacity"), ["capacity-topics"]),  # alert's own label
    (alert(severity="critical", domain="compute"), ["pagerduty"]),                    # a continue match is final
])
def test_routing_table(full, a: dict, receivers: list[str]) -> None:
    assert full.receivers_for(a) == receivers


def test_children_inherit_and_override_options(full) -> None:
    by_id = {r.id: r for r in full.root.walk()}
    assert by_id["0"].options.group_by == ("job", "type")
    assert by_id["0.0"].options.group_by == ("...",)
    assert by_id["0.0"].options.group_wait == 0.0
    assert by_id["0.0"].options.group_interval == 60.0          # inherited
    assert by_id["0.1.0"].options.group_wait == 10.0            # inherited through two levels
    assert by_id["0.2"].options.repeat_interval == 86400.0
    assert by_id["0.1.0"].options.receiver == "siem"


def test_alert_labels_cannot_be_overridden_by_the_alert() -> None:
    labels = alert_labels(alert(severity="info", domain="compute") | {"labels": {"severity": "critical"}})
    assert labels["severity"] == "info"


@pytest.mark.parametrize(("text", "labels", "hit"), [
    ('severity="critical"', {"severity": "critical"}, True),
    ('severity!="critical"', {"severity": "critical"}, False),
    ('job=~"llm-.*"', {"job": "llm-70b"}, True),
    ('job=~"llm"', {"job": "llm-70b"}, False),            # anchored
    ('job!~"llm-.*"', {"job": "vision"}, True),
    ("domain=network", {"domain": "network"}, True),       # unquoted value
    ('team=""', {}, True),                                 # missing label is the empty string
])
def test_matchers(text: str, labels: dict, hit: bool) -> None:
    assert Matcher.parse(text).matches(labels) is hit


@pytest.mark.parametrize(("text", "seconds"), [("0s", 0.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0),
                                               ("1d", 86400.0), ("1w", 604800.0), ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_group_key_is_deterministic_and_uses_only_group_by() -> None:
    cfg = load_routing((FIXTURES / "good" / "full.yaml").read_text())
    root = cfg.root
    k1, labels = group_key(root, alert_labels(alert("a", severity="warning")))
    k2, _ = group_key(root, alert_labels(alert("b", severity="critical")))
    assert k1 == k2 == '0:{job="llm",type="job_slowdown"}'
    assert labels == {"job": "llm", "type": "job_slowdown"}


SIMPLE = """
route:
  receiver: r
  group_by: [job]
  group_wait: 10s
  group_interval: 1m
  repeat_interval: 1h
receivers:
  - name: r
    webhook: {url: "http://x"}
"""


def test_group_wait_then_group_interval_then_repeat() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r")
    d.add(alert("a1"), 0.0, token="o1")
    assert d.flush(9.9) == []
    [n] = d.flush(10.0)
    assert [a["dedup_key"] for a in n.changed] == ["a1"] and n.tokens == ["o1"] and not n.repeat
    d.settle(n, 10.0)
    d.add(alert("a2"), 15.0, token="o2")                 # joins the notified group
    assert d.flush(69.9) == []                           # waits for group_interval, not group_wait
    [n] = d.flush(70.0)
    assert [a["dedup_key"] for a in n.alerts] == ["a1", "a2"]
    assert [a["dedup_key"] for a in n.changed] == ["a2"]
    d.settle(n, 70.0)
    assert d.flush(130.0) == []                          # nothing new, repeat_interval not reached
    assert d.take_settled() == []
    [n] = d.flush(70.0 + 3600.0 + 60.0)                  # repeat of a still-firing group
    assert n.repeat and n.changed == []


def test_resolved_alert_is_notified_once_then_leaves_the_group() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r")
    d.add(alert("a1"), 0.0)
    d.settle(d.flush(10.0)[0], 10.0)
    d.add(alert("a1", status="resolved"), 20.0, token="o3")
    [n] = d.flush(70.0)
    assert n.changed[0]["status"] == "resolved" and n.tokens == ["o3"]
    d.settle(n, 70.0)
    assert d.groups == {} and d.next_due() is None


def test_send_resolved_false_drops_resolved_alerts_and_settles_their_tokens() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r", send_resolved=False)
    d.add(alert("a1"), 0.0)
    d.settle(d.flush(10.0)[0], 10.0)
    d.add(alert("a1", status="resolved"), 20.0, token="o3")
    assert d.flush(70.0) == []
    assert d.take_settled() == ["o3"]


def test_alerts_for_other_receivers_settle_at_once() -> None:
    cfg = load_routing((FIXTURES / "good" / "full.yaml").read_text())
    d = Dispatcher(cfg.root, "pagerduty")
    assert d.add(alert(severity="warning"), 0.0, token="o1") is False
    assert d.take_settled() == ["o1"]


def test_restored_alerts_are_not_news() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r")
    d.restore(alert("a1"), notified_at=100.0)
    assert d.flush(1000.0) == []                         # not changed, repeat not due
    [n] = d.flush(100.0 + 3600.0 + 60.0)
    assert n.repeat


@pytest.mark.parametrize(("prev", "new", "expected"), [
    (None, alert("k", alert_id="a1"), "new"),
    (Delivered("r", "k", "a1", "firing", "2025-11-30T11:42:18Z", 0.0), alert("k", alert_id="a1"), "duplicate"),
    (Delivered("r", "k", "a1", "firing", "2025-11-30T11:42:18Z", 0.0), alert("k", alert_id="a1", status="resolved"),
     "update"),
    (Delivered("r", "k", "a1", "resolved", "2025-11-30T11:42:18Z", 0.0), alert("k", alert_id="a1"), "stale"),
    (Delivered("r", "k", "a1", "resolved", "2025-11-30T11:42:18Z", 0.0),
     alert("k", alert_id="a2", started="2025-11-30T12:00:00Z"), "new"),            # trigger after resolve
    (Delivered("r", "k", "a2", "firing", "2025-11-30T12:00:00Z", 0.0),
     alert("k", alert_id="a1", status="resolved"), "stale"),                        # older incident replayed
])
def test_lifecycle(prev, new, expected) -> None:
    assert lifecycle(prev, new) == expected


def test_reload_keeps_the_running_config_on_a_bad_file() -> None:
    cfg = load_routing(SIMPLE)
    result = reload_routing(cfg, "route: [", "routes.yaml")
    assert result.config is cfg and not result.changed
    assert result.error is not None and result.error.startswith("routes.yaml: line ")


def test_reload_reports_added_removed_and_modified_receivers() -> None:
    cfg = load_routing(SIMPLE)
    new = SIMPLE.replace('url: "http://x"', 'url: "http://y"') + """  - name: extra
    webhook: {url: "http://z"}
"""
    result = reload_routing(cfg, new)
    assert result.changed and result.error is None
    assert result.added == {"extra"} and result.modified == {"r"} and result.removed == set()
    assert reload_routing(result.config, new).changed is False


def test_missing_secrets_names_the_path() -> None:
    cfg = load_routing((FIXTURES / "good" / "full.yaml").read_text())
    missing = missing_secrets(cfg, ["SLACK_ONCALL", "pd_routing_key", "am_url"])
    assert missing == ['receivers[2].webhook.bearer_token: secret "netops_token" is not set']


def test_a_group_in_flight_is_not_flushed_again_until_settled() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r")
    d.add(alert("a1"), 0.0)
    [n] = d.flush(10.0)
    assert d.flush(500.0) == []          # the send is slow: no second notification of the same news
    d.settle(n, 500.0)
    d.add(alert("a1", status="resolved"), 501.0)
    [n2] = d.flush(560.0)
    assert n2.changed[0]["status"] == "resolved"


def test_split_gives_one_notification_per_changed_alert_and_per_firing_alert_on_repeat() -> None:
    d = Dispatcher(load_routing(SIMPLE).root, "r")
    d.add(alert("a1", job="llm"), 0.0)
    d.add(alert("a2", job="llm"), 0.0)
    [n] = d.flush(10.0)
    assert [u.changed[0]["dedup_key"] for u in n.split()] == ["a1", "a2"]
    d.settle(n, 10.0)
    [r] = d.flush(10.0 + 3600.0 + 60.0)
    assert r.repeat and [(u.changed[0]["dedup_key"], u.repeat) for u in r.split()] == [("a1", True), ("a2", True)]
