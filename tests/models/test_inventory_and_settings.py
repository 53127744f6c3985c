"""Inventory events and the settings model: what is accepted, what is refused and why."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.inventory import JobEvent, LinkEvent, expand_nodes, inventory_adapter, inventory_key
from models.settings import LockstepSettings


def test_job_event_expands_a_slurm_hostlist_and_counts_gpus() -> None:
    job = JobEvent.model_validate({"kind": "job", "ts": "2025-11-30T11:00:00Z", "job_id": "llm-70b",
                                   "state": "RUNNING", "nodes": "gpu[001-020,025-036]", "gpus_per_node": 8,
                                   "storage": ["lustre-a"]})
    assert len(job.nodes) == 32 and job.nodes[0] == "gpu001" and job.nodes[-1] == "gpu036"
    assert job.gpus == 256
    assert inventory_key(job) == "job:llm-70b"


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"kind": "job", "ts": 1764500000, "job_id": "j", "state": "RUNNING", "nodes": "gpu[001-", "gpus_per_node": 8},
         "bad hostlist"),
        ({"kind": "job", "ts": 1764500000, "job_id": "j", "state": "DANCING", "nodes": "a", "gpus_per_node": 8},
         "state"),
        ({"kind": "job", "ts": 1764500000, "job_id": "j", "state": "RUNNING", "nodes": "a", "gpus_per_node": -1},
         "gpus_per_node"),
        ({"kind": "link", "ts": 1764500000, "node": "a", "device": "mlx5_0", "port": "1", "switch": "leaf01"},
         "switch_port"),
        ({"kind": "rack", "ts": 1764500000}, "kind"),
    ],
)
def test_bad_inventory_events_are_refused(doc: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        inventory_adapter.validate_python(doc)


def test_link_ports_given_as_integers_are_names() -> None:
    link = LinkEvent.model_validate({"kind": "link", "ts": 1764500000, "node": "gpu001", "device": "mlx5_0",
                                     "port": 1, "switch": "leaf01", "switch_port": 15})
    assert (link.port, link.switch_port) == ("1", "15")


def test_expand_nodes_accepts_lists_of_hostlists() -> None:
    assert expand_nodes(["a", "b[1-2]"]) == ["a", "b1", "b2"]


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9093")
    monkeypatch.setenv("LOCKSTEP_PARTITIONS", "16")
    s = LockstepSettings()
    assert s.kafka_bootstrap_servers == "k1:9092,k2:9093"
    assert s.partitions == 16
    assert not s.embedded_broker


def test_no_bootstrap_means_embedded_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    assert LockstepSettings(_env_file=None).embedded_broker  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": "kafka"}, "is not host:port"),
        ({"LOCKSTEP_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "SASL needs"),
        ({"LOCKSTEP_PARTITIONS": "0"}, "greater than or equal to 1"),
        ({"LOCKSTEP_KAFKA_SASL_MECHANISM": "KERBEROS"}, "sasl_mechanism"),
    ],
)
def test_bad_settings_fail_at_start_with_the_field_named(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                         fragment: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError, match=fragment):
        LockstepSettings(_env_file=None)  # type: ignore[call-arg]


def test_secrets_are_not_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("LOCKSTEP_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("LOCKSTEP_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("LOCKSTEP_KAFKA_SASL_PASSWORD", "hunter2-very-secret")
    s = LockstepSettings(_env_file=None)  # type: ignore[call-arg]
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.model_dump())
    assert s.kafka_sasl_password is not None and s.kafka_sasl_password.get_secret_value() == "hunter2-very-secret"
