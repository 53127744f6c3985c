"""The rules file: every good fixture loads; every bad one fails with exactly the error it declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.errors import ConfigError
from models.timeutil import parse_ts
from streams.rules import load_rules

FIXTURES = Path(__file__).parent.parent / "fixtures" / "rules"
REPO = Path(__file__).parents[2]


@pytest.mark.parametrize("path", sorted((FIXTURES / "good").glob("*.yaml")), ids=lambda p: p.name)
def test_good_files_load(path: Path) -> None:
    rules = load_rules(path.read_text(), "rules")
    assert rules.inhibit  # default or explicit inhibition rules


@pytest.mark.parametrize("path", sorted((FIXTURES / "bad").glob("*.yaml")), ids=lambda p: p.name)
def test_bad_files_fail_with_the_exact_error(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    with pytest.raises(ConfigError) as info:
        load_rules(path.read_text(), "rules")
    if first.startswith("# expect-prefix: "):
        assert str(info.value).startswith(first.removeprefix("# expect-prefix: "))
    else:
        assert str(info.value) == first.removeprefix("# expect: ")


def test_the_example_file_in_deploy_loads() -> None:
    load_rules((REPO / "deploy" / "rules.example.yaml").read_text(), "rules.example.yaml")


def test_maintenance_window_matches_root_cause_labels_during_its_window_only() -> None:
    rules = load_rules((FIXTURES / "good" / "maintenance.yaml").read_text())
    alert = {"type": "job_slowdown", "job_id": "vision-7b", "severity": "critical",
             "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"}}}
    assert rules.silenced_by(alert, parse_ts("2025-11-30T12:00:00Z")) == ["leaf03-firmware"]
    assert rules.silenced_by(alert, parse_ts("2025-11-30T13:00:00Z")) == []  # ends_at is exclusive
    warning = {"type": "gpu_utilisation", "job_id": "llm-70b", "severity": "warning", "root_cause": {}}
    assert rules.silenced_by(warning, parse_ts("2025-11-30T10:00:00Z")) == ["llm-70b-experiment"]
    assert rules.silenced_by(dict(warning, severity="critical"), parse_ts("2025-11-30T10:00:00Z")) == []


def test_empty_inhibit_rules_turn_inhibition_off() -> None:
    assert load_rules("inhibit_rules: []").inhibit == []


@pytest.mark.parametrize("text", ['switch="leaf03"', "domain=network", 'job_id!=""', 'domain=~"network|storage"',
                                  'alertname!~"gpu_.*"', "switch leaf03", 'domain=~"net(work"', 'job_id=="j"',
                                  '9lives="x"'])
def test_rules_and_routes_accept_and_reject_the_same_matchers_with_the_same_message(text: str) -> None:
    from lockstep.delivery.config import load_routing

    quoted = text.replace("'", "''")
    rules = (f"silences: [{{id: s, matchers: ['{quoted}'], starts_at: 2025-11-30T11:00:00Z, "
             "ends_at: 2025-11-30T12:00:00Z, created_by: me}]")
    routes = (f"route: {{receiver: r, routes: [{{matchers: ['{quoted}'], receiver: r}}]}}\n"
              "receivers: [{name: r, webhook: {url: 'http://x'}}]")
    said = []
    for load, prefix in ((load_rules, "rules: silences.0.matchers: Value error, "),
                         (load_routing, "routes: route.routes[0].matchers: ")):
        try:
            load(rules if load is load_rules else routes)
            said.append("ok")
        except ConfigError as exc:
            assert str(exc).startswith(prefix)
            said.append(str(exc).removeprefix(prefix))
    assert said[0] == said[1]
    assert (said[0] == "ok") == (text in ('switch="leaf03"', "domain=network", 'job_id!=""',
                                          'domain=~"network|storage"', 'alertname!~"gpu_.*"'))
