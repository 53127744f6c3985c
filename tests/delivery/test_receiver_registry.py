"""The receiver registry: every kind is one module of lockstep/delivery/receivers, and a new kind is one new module.

The last test copies the source tree, adds a single module (a JSON-lines file receiver) and runs
``lockstep receivers check`` and ``test`` against a routing file that uses it: nothing else is
edited, and the file's schema, the check, the sender and the errors all come from that module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from lockstep.delivery.base import IntegrationConfig, Receiver
from lockstep.delivery.config import RECEIVER_KINDS, load_routing
from lockstep.delivery.receivers import RECEIVERS
from models.errors import ConfigError

REPO = Path(__file__).parents[2]

JSONL = '''"""JSON lines: each changed alert as one line appended to a file (one new module, nothing else)."""

from __future__ import annotations

from pathlib import Path

import orjson

from lockstep.delivery.base import DeliveryContext, IntegrationConfig, Receiver, SenderDeps
from streams.dispatch import Notification


class JsonlConfig(IntegrationConfig):
    path: str


class JsonlReceiver(Receiver):
    kind = "jsonl"
    config_model = JsonlConfig
    per_alert = True

    @classmethod
    def from_config(cls, config, deps: SenderDeps) -> Receiver:
        return cls(config, deps.redactor)

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        with Path(self.config.integration_as(JsonlConfig).path).open("ab") as f:
            for alert in notification.changed:
                f.write(orjson.dumps({"receiver": self.name, "alert_id": alert["alert_id"],
                                      "status": alert["status"]}) + b"\\n")
'''


def test_the_kinds_in_the_order_the_routing_file_lists_them() -> None:
    assert RECEIVER_KINDS == ("slack", "pagerduty", "alertmanager", "webhook", "ocsf", "syslog", "kafka")


@pytest.mark.parametrize("kind", sorted(RECEIVERS))
def test_each_kind_is_one_module_pairing_its_schema_with_its_sender(kind: str) -> None:
    sender = RECEIVERS[kind]
    assert issubclass(sender, Receiver) and sender.kind == kind
    assert sender.__module__ == f"lockstep.delivery.receivers.{kind}"
    schema = sender.config_model
    assert issubclass(schema, IntegrationConfig) and schema is not IntegrationConfig
    assert schema.__module__ == sender.__module__
    assert sender.from_config.__func__ is not Receiver.from_config.__func__  # type: ignore[attr-defined]


def test_a_kind_no_module_defines_is_not_accepted() -> None:
    with pytest.raises(ConfigError) as exc:
        load_routing("route: {receiver: r}\nreceivers: [{name: r, jsonl: {path: /tmp/x}}]", "routes.yaml")
    assert str(exc.value) == "routes.yaml: receivers[0].jsonl: Extra inputs are not permitted"


def test_a_new_receiver_is_one_module(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for package in ("models", "streams", "agents", "lockstep"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "lockstep" / "delivery" / "receivers" / "jsonl.py").write_text(JSONL)
    out = tmp_path / "alerts.jsonl"
    routes = tmp_path / "routes.yaml"
    routes.write_text(f"""
route:
  receiver: lines
  routes:
    - matchers: ['severity="critical"']
      receiver: hook
receivers:
  - name: lines
    jsonl: {{path: "{out}"}}
  - name: hook
    webhook: {{url: "http://127.0.0.1:9/hook"}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")} | {"PYTHONPATH": str(src)}

    def lockstep(*args: str) -> subprocess.CompletedProcess[str]:
        code = "import sys; from lockstep.cli import main; sys.exit(main(sys.argv[1:]))"
        return subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    check = lockstep("receivers", "check", "--routes", str(routes))
    assert check.returncode == 0, check.stderr
    assert "receiver lines: jsonl" in check.stdout.splitlines()

    test = lockstep("receivers", "test", "--routes", str(routes), "--receiver", "lines")
    assert test.returncode == 0, test.stdout + test.stderr
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(x["receiver"], x["status"]) for x in lines] == [("lines", "firing"), ("lines", "resolved")]

    routes.write_text("route: {receiver: lines}\nreceivers:\n  - name: lines\n    jsonl: {path: 1, mode: w}\n")
    bad = lockstep("receivers", "check", "--routes", str(routes))
    assert bad.returncode == 2
    assert bad.stderr.strip() == (f"lockstep receivers check: {routes}: receivers[0].jsonl.path: "
                                  "Input should be a valid string")

    routes.write_text("route: {receiver: r}\nreceivers: [{name: r}]\n")
    none = lockstep("receivers", "check", "--routes", str(routes))
    assert none.stderr.strip().endswith("receivers[0]: needs exactly one of slack, pagerduty, alertmanager, webhook, "
                                        "ocsf, syslog, kafka, jsonl (got none)")
