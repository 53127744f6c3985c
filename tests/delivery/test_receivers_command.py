"""``lockstep receivers test`` and ``check`` against real local receivers (no broker needed)."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from lockstep.cli import main
from lockstep.commands.receivers import _test
from models.settings import LockstepSettings

from .servers import FakePagerDuty, FakeSlack, FakeWebhook

PD_KEY = "b1b2c3d4e5f60718293a4b5c6d7e8f90"


def routes(tmp_path: Path, slack: FakeSlack, pd: FakePagerDuty, hook_url: str) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(f"""
route:
  receiver: slack
  routes:
    - matchers: ['severity="critical"']
      receiver: pd
      continue: true
receivers:
  - name: slack
    slack: {{webhook_url: {{secret: slack_url}}, rate_per_s: 10}}
  - name: pd
    pagerduty: {{routing_key: {{secret: pd_key}}, url: "{pd.url}"}}
  - name: hook
    webhook: {{url: "{hook_url}", timeout: 1s}}
  - name: topics
    kafka: {{topic: "alerts.{{type}}"}}
""")
    return path


def test_receivers_test_reports_each_receiver(tmp_path: Path) -> None:
    async def go() -> tuple[int, str, FakeSlack, FakePagerDuty, FakeWebhook]:
        slack, pd, hook = FakeSlack(), FakePagerDuty(PD_KEY), FakeWebhook()
        for s in (slack, pd, hook):
            await s.start()
        hook.fail(503, times=2)                        # the webhook is down: reported, with the status
        settings = LockstepSettings(_env_file=None, delivery_secrets={"slack_url": slack.url,  # type: ignore[call-arg]
                                                                     "pd_key": PD_KEY})
        out = io.StringIO()
        try:
            code = await _test(settings, routes(tmp_path, slack, pd, hook.url), None, True, out)
        finally:
            for s in (slack, pd, hook):
                await s.stop()
        return code, out.getvalue(), slack, pd, hook

    code, text, slack, pd, hook = asyncio.run(go())
    assert len(hook.requests) == 1
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert code == 1
    assert " ok (" in lines["slack"] and " ok (" in lines["pd"]
    assert lines["hook"].split(None, 2)[2].startswith(
        "FAILED (will retry): hook: HTTP 503 Service Unavailable: planned 503 (body 11 B, sha256 ")
    assert lines["topics"].split(None, 2)[2] == "skipped: needs LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS"
    assert len(slack.accepted) == 2 and slack.violations == []
    [incident] = pd.incidents
    assert incident.resolved and pd.violations == []
    assert slack.url not in text and PD_KEY not in text


def test_receivers_check_prints_the_tree(tmp_path: Path, monkeypatch, capsys) -> None:
    path = routes(tmp_path, FakeSlack(), FakePagerDuty(PD_KEY), "http://127.0.0.1:9/hook")
    monkeypatch.setenv("LOCKSTEP_SECRET_SLACK_URL", "https://hooks.example/x")
    monkeypatch.setenv("LOCKSTEP_SECRET_PD_KEY", PD_KEY)
    assert main(["receivers", "check", "--routes", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0 [*] -> slack group_by=[] wait=30s interval=300s repeat=14400s" in out
    assert '  0.0 [severity="critical"] -> pd (continue)' in out
    assert "receiver topics: kafka" in out


def test_receivers_check_fails_on_a_missing_secret(tmp_path: Path, monkeypatch, capsys) -> None:
    path = routes(tmp_path, FakeSlack(), FakePagerDuty(PD_KEY), "http://127.0.0.1:9/hook")
    for name in ("LOCKSTEP_SECRET_SLACK_URL", "LOCKSTEP_SECRET_PD_KEY", "LOCKSTEP_DELIVERY_SECRETS"):
        monkeypatch.delenv(name, raising=False)
    assert main(["receivers", "check", "--routes", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f'lockstep receivers check: {path}: receivers[0].slack.webhook_url: secret "slack_url" is not set '
        "(set LOCKSTEP_SECRET_SLACK_URL or LOCKSTEP_SECRET_SLACK_URL_FILE)")


@pytest.mark.parametrize("argv", [["deliver", "--routes", "/nonexistent.yaml"]])
def test_deliver_refuses_to_start_without_a_usable_file(argv, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    assert main(argv) == 2
    assert "cannot read the routing file" in capsys.readouterr().err


@pytest.mark.parametrize("value, said", [
    ('{"slack": "hunter2-secret-value",}', "not valid JSON: Expecting property name enclosed in double quotes "
                                           "at line 1 column 34 (character 33)"),
    ('{"slack": "hunter2-secret-value"', "not valid JSON: Expecting ',' delimiter at line 1 column 33 (character 32)"),
    ('["hunter2-secret-value"]', 'must be a JSON object {"name": "value"}, not a JSON list'),
    ('{"slack": 424242424242}', "the value of 'slack' must be a string, not a JSON int"),
])
def test_broken_delivery_secrets_are_one_config_error_line_without_the_value(
        value: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in [k for k in os.environ if k.startswith("LOCKSTEP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LOCKSTEP_DELIVERY_SECRETS", value)
    monkeypatch.chdir(Path(__file__).parent)  # no .env here
    for command in (["deliver"], ["receivers", "check"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err == f"lockstep: LOCKSTEP_DELIVERY_SECRETS: {said}\n"
        assert "hunter2" not in err and "424242" not in err


def test_receivers_test_never_prints_what_an_echoing_receiver_says_of_its_secret_url(tmp_path: Path) -> None:
    token = "Xk7pQ2vR9sL4mN8wZ1cY6tB3"

    async def go() -> str:
        slack, pd, hook = FakeSlack(f"/services/T08ZK3L7QHF/B08ZK3MN2PA/{token}"), FakePagerDuty(PD_KEY), FakeWebhook()
        for s in (slack, pd, hook):
            await s.start()
        slack.fail(500, times=2, echo=True)           # the answer repeats the request path and body
        settings = LockstepSettings(_env_file=None, delivery_secrets={"slack_url": slack.url,  # type: ignore[call-arg]
                                                                     "pd_key": PD_KEY})
        out = io.StringIO()
        try:
            await _test(settings, routes(tmp_path, slack, pd, hook.url), ["slack"], True, out)
        finally:
            for s in (slack, pd, hook):
                await s.stop()
        return out.getvalue()

    text = asyncio.run(go())
    assert text.startswith("slack") and "FAILED (will retry): slack: HTTP 500 Internal Server Error (body " in text
    assert token not in text and "B08ZK3MN2PA" not in text and "%2Fservices" not in text
