"""Connection settings for every Kafka client Lockstep makes (Faust's and our own aiokafka ones).

One place turns :class:`models.settings.LockstepSettings` into client arguments, so SASL and TLS
apply alike to producers, consumers, admin clients and the Faust app.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from typing import Any

from models.settings import LockstepSettings, SecurityProtocol


def ssl_context(settings: LockstepSettings) -> ssl.SSLContext | None:
    """A TLS context for SSL and SASL_SSL, from the configured CA, certificate and key."""
    if settings.kafka_security_protocol not in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        return None
    ctx = ssl.create_default_context(cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None)
    ctx.check_hostname = settings.kafka_ssl_check_hostname
    if settings.kafka_ssl_certfile:
        password = settings.kafka_ssl_key_password.get_secret_value() if settings.kafka_ssl_key_password else None
        ctx.load_cert_chain(
            str(settings.kafka_ssl_certfile),
            str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
            password=password,
        )
    return ctx


def client_kwargs(settings: LockstepSettings, bootstrap: str) -> dict[str, Any]:
    """Keyword arguments shared by aiokafka producers, consumers and admin clients."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": settings.kafka_security_protocol.value,
    }
    ctx = ssl_context(settings)
    if ctx is not None:
        kwargs["ssl_context"] = ctx
    if settings.kafka_sasl_mechanism is not None:
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism.value
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = (
            settings.kafka_sasl_password.get_secret_value() if settings.kafka_sasl_password else None
        )
    return kwargs


def faust_credentials(settings: LockstepSettings) -> Any:
    """Faust's credentials object for the configured security protocol (None for PLAINTEXT)."""
    from faust.auth import SASLCredentials, SSLCredentials

    proto = settings.kafka_security_protocol
    ctx = ssl_context(settings)
    if proto in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        assert settings.kafka_sasl_mechanism is not None and settings.kafka_sasl_password is not None
        return SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            mechanism=settings.kafka_sasl_mechanism.value,
            ssl_context=ctx,
        )
    if proto is SecurityProtocol.SSL:
        return SSLCredentials(ctx)
    return None


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group as the broker describes it (DescribeGroups): its state (``Stable``, ``Empty``,
    ``PreparingRebalance``, ...), its protocol and its members as ``(member_id, client_id, host,
    has_assignment)``."""

    state: str
    protocol: str
    members: tuple[tuple[str, str, str, bool], ...]


async def describe_group(settings: LockstepSettings, bootstrap: str, group: str,
                         timeout_s: float = 10.0) -> GroupDescription:
    """Ask the broker for consumer group ``group`` (a new admin client, closed after). Raises what the client
    raises (a timeout: TimeoutError)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**client_kwargs(settings, bootstrap))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        (answer,) = await asyncio.wait_for(admin.describe_consumer_groups([group]), timeout_s)
        _error, _name, state, _type, protocol, members = answer.groups[0][:6]
        return GroupDescription(str(state), str(protocol),
                                tuple((str(m[0]), str(m[1]), str(m[2]), bool(m[4])) for m in members))
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


async def start_producer(settings: LockstepSettings, bootstrap: str, **extra: Any) -> Any:
    """A started aiokafka producer with the deployment's security settings."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(**client_kwargs(settings, bootstrap), linger_ms=settings.kafka_producer_linger_ms,
                                max_request_size=8 * 1024 * 1024, **extra)
    await producer.start()
    return producer


async def drain(consumer: Any, tps: list[Any], timeout_s: float, on_batch: Any, max_records: int | None = None) -> None:
    """Read the assigned partitions ``tps`` to their end, handing each fetched batch to ``on_batch``
    (a function of ``{TopicPartition: [records]}``; if it returns an awaitable, that is awaited).

    "The end" of a partition is the high-water mark of the last fetch answer for it, else (no answer yet)
    its end offset, asked at the start and again once fetches come back empty: some Kafka-protocol
    brokers (Tansu) misreport the end offset (ListOffsets) of partitions written in batches, in either
    direction, while their fetch answers carry the right high-water mark. Raises ``TimeoutError``.
    """
    import asyncio
    import inspect

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    end = await consumer.end_offsets(tps)
    quiet = 0
    while True:
        batches = await consumer.getmany(timeout_ms=200, max_records=max_records)
        if any(batches.values()):
            quiet = 0
            done = on_batch(batches)
            if inspect.isawaitable(done):
                await done
        else:
            quiet += 1
        reached = True
        for tp in tps:  # a fetch answer's high-water mark, once there is one, is the true end (not ListOffsets)
            high = consumer.highwater(tp)
            if await consumer.position(tp) < (end[tp] if high is None else high):
                reached = False
                break
        if reached and quiet >= 2:
            # Confirm with the end offsets as they are now: a fetch that came back empty under load, or an
            # end misreported low at the start, must not end the read before the records that are there.
            later = await consumer.end_offsets(tps)
            behind = [tp for tp in tps if await consumer.position(tp) < later[tp] and consumer.highwater(tp) is None]
            if not behind:
                return
            end, quiet = later, 0
        if quiet >= 25:  # 25 empty fetches: ~5 s with nothing new
            return
        if loop.time() > deadline:
            raise TimeoutError(f"could not read {sorted({tp.topic for tp in tps})} to the end in {timeout_s:.0f}s")
