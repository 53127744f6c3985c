"""SASL (PLAIN, SCRAM) and TLS reach every Kafka client Lockstep makes: producer, consumer, admin and
the Faust app — first by inspecting the arguments each client gets, then end to end through a TLS +
SASL gateway in front of the real embedded broker."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from agents.kafka import client_kwargs, faust_credentials, ssl_context, start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import free_port, tansu_binary
from lockstep.replay import replay
from models.settings import LockstepSettings

from .sasl_gateway import SaslGateway

TLS = Path(__file__).resolve().parent / "fixtures" / "tls"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
CASES = [("PLAINTEXT", None), ("SSL", None)] + [(p, m) for p in ("SASL_PLAINTEXT", "SASL_SSL") for m in MECHANISMS]
SECURITY_KEYS = ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password")


def make_settings(protocol: str, mechanism: str | None, **extra: Any) -> LockstepSettings:
    fields: dict[str, Any] = {"kafka_bootstrap_servers": "127.0.0.1:9092", "kafka_security_protocol": protocol}
    if protocol.startswith("SASL"):
        fields |= {"kafka_sasl_mechanism": mechanism, "kafka_sasl_username": "lockstep",
                   "kafka_sasl_password": "s3cret"}
    if protocol.endswith("SSL"):
        fields |= {"kafka_ssl_cafile": TLS / "ca.crt"}
    return LockstepSettings(_env_file=None, **(fields | extra))


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
def test_every_client_accepts_the_security_arguments(protocol: str, mechanism: str | None) -> None:
    settings = make_settings(protocol, mechanism)
    kwargs = client_kwargs(settings, "127.0.0.1:9092")
    assert kwargs["security_protocol"] == protocol
    assert ("ssl_context" in kwargs) == protocol.endswith("SSL")
    if mechanism:
        assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
            mechanism, "lockstep", "s3cret")

    async def construct() -> None:  # aiokafka validates these in its constructors (no connection yet)
        producer, consumer = AIOKafkaProducer(**kwargs), AIOKafkaConsumer(**kwargs)
        admin = AIOKafkaAdminClient(**kwargs)
        try:
            for inner in (producer.client, consumer._client, admin._client):
                assert inner._security_protocol == protocol
                assert (inner._ssl_context is not None) == protocol.endswith("SSL")
                if mechanism:
                    assert (inner._sasl_mechanism, inner._sasl_plain_username) == (mechanism, "lockstep")
        finally:
            await producer.stop()
            await consumer.stop()
            await admin.close()

    asyncio.run(construct())


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
def test_faust_gets_the_same_credentials_as_our_own_clients(protocol: str, mechanism: str | None) -> None:
    settings = make_settings(protocol, mechanism)
    ours = client_kwargs(settings, "127.0.0.1:9092")
    faust = dict(credentials_to_aiokafka_auth(faust_credentials(settings)))
    for key in SECURITY_KEYS:
        assert faust.get(key) == ours.get(key), key
    assert (faust.get("ssl_context") is not None) == ("ssl_context" in ours)


def test_tls_context_verifies_the_broker_and_presents_a_client_certificate() -> None:
    ctx = ssl_context(make_settings("SSL", None, kafka_ssl_certfile=TLS / "client.crt",
                                    kafka_ssl_keyfile=TLS / "client.key",
                                    kafka_ssl_key_password="test-key-password"))
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert any(c["subject"] == ((("commonName", "lockstep-test-ca"),),) for c in ctx.get_ca_certs())
    relaxed = ssl_context(make_settings("SSL", None, kafka_ssl_check_hostname=False))
    assert relaxed is not None and relaxed.verify_mode == ssl.CERT_REQUIRED and not relaxed.check_hostname
    with pytest.raises(ssl.SSLError):
        ssl_context(make_settings("SSL", None, kafka_ssl_certfile=TLS / "client.crt",
                                  kafka_ssl_keyfile=TLS / "client.key", kafka_ssl_key_password="wrong"))
    assert ssl_context(make_settings("SASL_PLAINTEXT", "PLAIN")) is None


def test_sasl_without_credentials_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="SASL needs"):
        LockstepSettings(_env_file=None, kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="PLAIN")


# --- end to end --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker_behind_gateway() -> Iterator[tuple[int, int]]:
    """A real embedded broker that advertises the gateway's port: (broker port, gateway port)."""
    broker_port, gateway_port = free_port(), free_port()
    proc = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{broker_port}",
         "--advertised-listener-url", f"tcp://127.0.0.1:{gateway_port}", "--storage-engine", "memory://tansu/",
         "--cluster-id", "lockstep-security"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        asyncio.run(_bootstraps(f"127.0.0.1:{broker_port}"))
        yield broker_port, gateway_port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _bootstraps(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Wait until the broker answers a bootstrap metadata request (its advertised port is not up yet)."""
    from aiokafka import AIOKafkaClient

    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await client.bootstrap()
            return
        except KafkaError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)
        finally:
            await client.close()


def secure_settings(gateway_port: int, mechanism: str, password: str = "s3cret", **extra: Any) -> LockstepSettings:
    run = uuid.uuid4().hex[:8]
    return LockstepSettings(
        _env_file=None, kafka_bootstrap_servers=f"127.0.0.1:{gateway_port}", kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism=mechanism, kafka_sasl_username="lockstep", kafka_sasl_password=password,
        kafka_ssl_cafile=TLS / "ca.crt", topic_prefix=f"sec{run}.", app_id=f"lockstep-sec-{run}", partitions=2,
        data_dir=f"/tmp/lockstep-sec-{run}", **extra)


async def with_gateway(ports: tuple[int, int], body: Any) -> SaslGateway:
    gateway = SaslGateway(("127.0.0.1", ports[0]), "lockstep", "s3cret", str(TLS / "server.crt"),
                          str(TLS / "server.key"), port=ports[1])
    await gateway.start()
    try:
        await asyncio.wait_for(body(), timeout=240)
    finally:
        await gateway.stop()
    return gateway


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_admin_producer_and_consumer_log_in(broker_behind_gateway: tuple[int, int], mechanism: str) -> None:
    settings = secure_settings(broker_behind_gateway[1], mechanism)
    bootstrap = settings.kafka_bootstrap_servers
    assert bootstrap is not None
    topic = TopicCatalogue(settings).dlq

    async def body() -> None:
        created = await create_topics(settings, bootstrap)
        assert topic in created
        producer = await start_producer(settings, bootstrap)
        await producer.send_and_wait(topic, b'{"hello": "tls"}')
        await producer.stop()
        consumer = AIOKafkaConsumer(topic, **client_kwargs(settings, bootstrap), group_id=None,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=10_000)
        finally:
            await consumer.stop()
        assert [m.value for msgs in batches.values() for m in msgs] == [b'{"hello": "tls"}']

    gateway = asyncio.run(with_gateway(broker_behind_gateway, body))
    assert gateway.logins and all(login.ok and login.mechanism == mechanism for login in gateway.logins)
    assert not gateway.refused


@pytest.mark.broker
def test_a_wrong_password_gets_nothing_through(broker_behind_gateway: tuple[int, int]) -> None:
    settings = secure_settings(broker_behind_gateway[1], "SCRAM-SHA-512", password="not-it")

    async def body() -> None:
        with pytest.raises((KafkaError, KafkaConnectionError)):
            await create_topics(settings, str(settings.kafka_bootstrap_servers))

    gateway = asyncio.run(with_gateway(broker_behind_gateway, body))
    assert gateway.logins and not any(login.ok for login in gateway.logins)


@pytest.mark.broker
def test_plaintext_clients_cannot_reach_a_tls_listener(broker_behind_gateway: tuple[int, int]) -> None:
    settings = LockstepSettings(_env_file=None, kafka_bootstrap_servers=f"127.0.0.1:{broker_behind_gateway[1]}")

    async def body() -> None:
        admin = AIOKafkaAdminClient(**client_kwargs(settings, str(settings.kafka_bootstrap_servers)),
                                    request_timeout_ms=3000)
        with pytest.raises(KafkaConnectionError):
            await admin.start()
        await admin.close()

    gateway = asyncio.run(with_gateway(broker_behind_gateway, body))
    assert not gateway.logins


def tiny_cluster(path: Path) -> Path:
    """One job on two nodes and a minute of GPU utilisation and step time: enough to run every stage."""
    t0 = 1_764_500_000
    lines = [{"kind": "job", "ts": t0, "job_id": "j1", "state": "RUNNING", "nodes": "gpu[001-002]",
              "gpus_per_node": 1}]
    for i in range(60):
        for node in ("gpu001", "gpu002"):
            lines.append({"ts": t0 + i, "layer": "gpu", "source": node, "metric": "DCGM_FI_DEV_GPU_UTIL",
                          "value": 95.0 + (i % 3), "labels": {"gpu": "0"}})
        lines.append({"ts": t0 + i, "layer": "step", "source": "gpu001", "metric": "step_time_seconds",
                      "value": 1.0 + (i % 2) / 100, "labels": {"job_id": "j1", "rank": "0"}})
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    return path


@pytest.mark.broker
def test_the_whole_pipeline_with_faust_runs_over_sasl_ssl(broker_behind_gateway: tuple[int, int],
                                                           tmp_path: Path) -> None:
    """`lockstep replay` against the gateway: admin (topics), producer, the Worker (inventory consumer,
    Faust consumer and producer, changelogs), and the alerts reader — every connection logs in."""
    settings = secure_settings(broker_behind_gateway[1], "SCRAM-SHA-512")
    source = tiny_cluster(tmp_path / "tiny.jsonl")
    out = (tmp_path / "alerts.jsonl").open("w")
    summary: dict[str, Any] = {}

    async def body() -> None:
        summary.update(await replay(settings, source, out, timeout_s=180))

    gateway = asyncio.run(with_gateway(broker_behind_gateway, body))
    out.close()
    assert summary["samples"] == 180 and summary["inventory"] == 1 and summary["bad_lines"] == 0
    assert not gateway.refused
    assert all(login.ok and login.mechanism == "SCRAM-SHA-512" for login in gateway.logins)
    client_ids = {login.client_id.split("-")[0] for login in gateway.logins}
    assert {"aiokafka", "faust"} <= client_ids, client_ids
