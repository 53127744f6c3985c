"""docker-compose.yml: valid against the Compose Specification schema, and a coherent stack."""

from __future__ import annotations

import base64
import json
import re

import jsonschema
import pytest

from lockstep.cli import build_parser

from .files import COMPOSE, SCHEMAS, interpolate, load_compose, service_environment

WORKERS = ("worker-1", "worker-2")


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def schema() -> dict:
    # The compose-spec JSON schema as vendored by check-jsonschema 0.39.0 (Apache-2.0, LICENSE.compose-spec).
    return json.loads((SCHEMAS / "compose-spec.json").read_text())


def test_valid_against_the_compose_spec(compose: dict, schema: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(compose), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)


def test_the_schema_check_catches_a_misspelt_key(compose: dict, schema: dict) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["worker-1"]["restrat"] = "always"
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(broken))


def test_interpolation_follows_compose_rules() -> None:
    env = {"A": "1", "E": ""}
    assert interpolate("${A:-2}/${B:-2}/${E:-3}/${E-4}/$$A/$A", env) == "1/2/3//$A/1"
    with pytest.raises(ValueError):
        interpolate("${B:?needed}", env)
    # Values from the environment override the defaults of the file.
    changed = load_compose({"LOCKSTEP_PARTITIONS": "16"})
    assert changed["services"]["worker-1"]["environment"]["LOCKSTEP_PARTITIONS"] == "16"


def test_kafka_is_the_official_image_in_kraft_mode(compose: dict) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = {k: str(v) for k, v in kafka["environment"].items()}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    listeners = dict(item.split("://", 1) for item in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    protocols = dict(item.split(":", 1) for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(listeners) <= set(protocols) and set(advertised) <= set(protocols)
    assert controller in listeners and controller not in advertised
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    voter_id, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert voter_id == env["KAFKA_NODE_ID"]
    assert voter == f"{kafka['hostname']}:{listeners[controller].rsplit(':', 1)[1]}"
    # A KRaft cluster id is a base64url-encoded UUID: 16 bytes.
    cid = env["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cid + "=" * (-len(cid) % 4))) == 16
    # Single node: internal topics with one replica, and no implicit topics.
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    data_dir = env["KAFKA_LOG_DIRS"]
    assert any(v.split(":")[1] == data_dir for v in kafka["volumes"])
    # Every published port is an advertised listener on localhost.
    for port in kafka["ports"]:
        host_ip, host_port, container_port = port.split(":")
        assert host_ip == "127.0.0.1"
        assert f"localhost:{host_port}" in advertised.values()
        assert any(v.endswith(f":{container_port}") for v in listeners.values())


def test_lockstep_services_reach_kafka_on_an_advertised_listener(compose: dict) -> None:
    kafka_env = compose["services"]["kafka"]["environment"]
    advertised = {item.split("://", 1)[1] for item in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    for name in ("topic-init", *WORKERS, "simulator"):
        env = service_environment(compose["services"][name])
        assert env["LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS"] in advertised, name


def test_topics_are_created_before_anything_else_runs(compose: dict) -> None:
    services = compose["services"]
    assert services["topic-init"]["command"] == ["topics", "create"]
    assert services["topic-init"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    for name in (*WORKERS, "simulator"):
        assert services[name]["depends_on"] == {"topic-init": {"condition": "service_completed_successfully"}}


def test_two_workers_share_one_consumer_group_and_keep_their_own_state(compose: dict) -> None:
    services = compose["services"]
    envs = [service_environment(services[w]) for w in WORKERS]
    assert envs[0]["LOCKSTEP_APP_ID"] == envs[1]["LOCKSTEP_APP_ID"] != ""
    volumes = []
    for name, env in zip(WORKERS, envs, strict=True):
        assert services[name]["command"][0] == "worker"
        assert env["LOCKSTEP_WEB_HOST"] == "0.0.0.0"
        (mount,) = services[name]["volumes"]
        source, target = mount.split(":")
        assert target == env["LOCKSTEP_DATA_DIR"]
        assert source in compose["volumes"], "a named volume, declared at the top level"
        volumes.append(source)
    assert len(set(volumes)) == 2


def test_the_page_is_published_on_localhost(compose: dict) -> None:
    host_ports = set()
    for name in WORKERS:
        service = compose["services"][name]
        web_port = service_environment(service)["LOCKSTEP_WEB_PORT"]
        (port,) = service["ports"]
        host_ip, host_port, container_port = port.split(":")
        assert (host_ip, container_port) == ("127.0.0.1", web_port)
        host_ports.add(host_port)
    assert len(host_ports) == 2


def test_health_checks_and_restart_policies(compose: dict) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert service.get("restart") in ("unless-stopped", "always") or re.fullmatch(
            r"on-failure(:\d+)?", service.get("restart", "")), name
    for name in ("kafka", *WORKERS):
        check = services[name]["healthcheck"]
        assert check["test"][0] == "CMD" and check["retries"] >= 1, name
    for name in WORKERS:
        assert "/healthz" in " ".join(services[name]["healthcheck"]["test"])


def test_the_simulator_is_an_optional_profile(compose: dict) -> None:
    simulator = compose["services"]["simulator"]
    assert simulator["profiles"] == ["simulator"]
    assert all("profiles" not in s for n, s in compose["services"].items() if n != "simulator")
    assert "--kafka" in simulator["command"]


@pytest.mark.parametrize("service", ["topic-init", "worker-1", "worker-2", "simulator"])
def test_every_lockstep_command_exists(compose: dict, service: str) -> None:
    """The commands the stack runs parse with the real `lockstep` command line (the image's entry point)."""
    args = build_parser().parse_args(compose["services"][service]["command"])
    assert callable(args.handler)


def test_lockstep_containers_are_locked_down(compose: dict) -> None:
    for name in ("topic-init", *WORKERS, "simulator"):
        service = compose["services"][name]
        assert service["read_only"] is True
        assert service["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in service["security_opt"]
        assert service["build"]["context"] == "."


def test_compose_file_is_the_one_at_the_repository_root() -> None:
    assert COMPOSE.name == "docker-compose.yml" and COMPOSE.parent.joinpath("Dockerfile").is_file()
