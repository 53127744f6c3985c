"""What every receiver shares: its config's base, the sender contract, the context payloads are built in, HTTP, Kafka.

A receiver kind is one module of :mod:`lockstep.delivery.receivers` with an
:class:`IntegrationConfig` (the schema of its key in the routing file) and a :class:`Receiver`
naming it as ``config_model``. The sender turns a :class:`streams.dispatch.Notification` into its
published format with a pure builder and sends it with :meth:`Receiver.send`, which returns when
the receiver accepted it and raises :class:`~lockstep.delivery.errors.ReceiverUnavailable`
(retry later) or :class:`~lockstep.delivery.errors.ReceiverRejected` (dead letter) otherwise.
Nothing else.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict

from lockstep import __version__
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.redaction import Redactor, SecretRef, SecretResolver, describe_answer
from models.errors import ConfigError
from streams.dispatch import Notification
from streams.routes import Duration, Route

if TYPE_CHECKING:
    from lockstep.delivery.config import ReceiverConfig
    from lockstep.delivery.topics import DeliveryTopics

ANSWER_READ_MAX = 64 * 1024  # of a refusal, read for its reason, size and hash; never kept


@dataclass(frozen=True)
class DeliveryContext:
    """Inputs of the payload builders besides the alert: where links point, and the time."""

    now: float
    public_url: str | None = None
    hostname: str = "lockstep"
    version: str = __version__

    def alert_url(self, alert: dict[str, Any]) -> str | None:
        """The alert's page (``<public_url>/alerts/<alert_id>``), or None without a public URL."""
        if not self.public_url:
            return None
        return f"{self.public_url.rstrip('/')}/alerts/{quote(str(alert['alert_id']), safe='')}"

    def timeline_url(self, alert: dict[str, Any]) -> str | None:
        """The job's timeline page around the incident, or None without a public URL or job."""
        if not self.public_url or not alert.get("job_id"):
            return None
        job = quote(str(alert["job_id"]), safe="")
        return f"{self.public_url.rstrip('/')}/jobs/{job}/timeline?alert={quote(str(alert['alert_id']), safe='')}"


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), None if absent/bad.

    >>> retry_after_seconds("3", 0.0)
    3.0
    >>> retry_after_seconds("Thu, 01 Jan 1970 00:00:10 GMT", 4.0)
    6.0
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class IntegrationConfig(BaseModel):
    """The options every receiver kind has; a kind's config adds its own (its key in the routing file).

    Two hooks a kind may override, so that nothing outside its module knows its options:
    :meth:`output_topics` (the topics it writes, created before it starts) and
    :meth:`route_problem` (a rule between its options and a route that uses it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    send_resolved: bool = True
    timeout: Duration = 10.0

    def output_topics(self, receiver: str) -> list[tuple[str, str]]:
        """``(topic without topic_prefix, purpose)`` of every topic this receiver writes alerts to."""
        return []

    def route_problem(self, route: Route) -> tuple[str, str] | None:
        """``(option, message)`` when this receiver cannot serve ``route`` as configured, else None."""
        return None


@dataclass(frozen=True)
class SenderDeps:
    """What building a sender may take besides its config: secret values, and Kafka for topic receivers."""

    secrets: SecretResolver
    producer: Any = None
    topics: DeliveryTopics | None = None

    @property
    def redactor(self) -> Redactor:
        return self.secrets.redactor

    def secret(self, ref: str | SecretRef) -> str:
        """The value of a literal or a ``{secret: NAME}`` reference."""
        value = self.secrets.value(ref)
        assert value is not None
        return value


class Receiver:
    """Base of the senders. ``per_alert`` receivers get one changed alert per notification.

    A concrete sender names its ``kind`` (the routing file's key), its ``config_model`` and says
    whether it ``needs_kafka``; :meth:`from_config` builds it from a receiver definition.
    """

    kind: ClassVar[str] = ""
    config_model: ClassVar[type[IntegrationConfig]] = IntegrationConfig
    per_alert: ClassVar[bool] = False
    needs_kafka: ClassVar[bool] = False

    def __init__(self, config: ReceiverConfig, redactor: Redactor) -> None:
        self.config = config
        self.name = config.name
        self.redactor = redactor

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> Receiver:
        """The sender for ``config`` (of this kind), its secrets resolved through ``deps``."""
        raise NotImplementedError

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class HttpReceiver(Receiver):
    """A receiver that POSTs JSON; one aiohttp session, closed with the receiver."""

    def __init__(self, config: ReceiverConfig, redactor: Redactor) -> None:
        super().__init__(config, redactor)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post_json(self, url: str, payload: Any, *, accept: frozenset[int], now: float,
                        headers: dict[str, str] | None = None) -> int:
        """POST ``payload``; return the status when it is in ``accept``, else raise.

        429, 408, 5xx, timeouts and connection errors raise ReceiverUnavailable (with Retry-After);
        other statuses raise ReceiverRejected. Messages never carry the URL nor the answer's body:
        only its status, a short sanitised reason, its size and hash (:func:`describe_answer`), as
        a receiver may echo the request path, which holds the secret of a webhook URL.
        """
        timeout = aiohttp.ClientTimeout(total=self.config.integration.timeout)
        data = orjson.dumps(payload)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        try:
            async with self.session().post(url, data=data, headers=hdrs, timeout=timeout) as resp:
                status = resp.status
                retry_after = retry_after_seconds(resp.headers.get("Retry-After"), now)
                body = b"" if status in accept else await resp.content.read(ANSWER_READ_MAX)
        except TimeoutError:
            raise ReceiverUnavailable(f"{self.name}: no answer within {self.config.integration.timeout:g}s") from None
        except aiohttp.ClientConnectionError as exc:
            raise ReceiverUnavailable(f"{self.name}: connection failed ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:
            raise ReceiverUnavailable(f"{self.name}: request failed ({type(exc).__name__})") from None
        except asyncio.CancelledError:
            raise
        if status in accept:
            return status
        answer = describe_answer(status, body, self.redactor)
        if status in (408, 429) or status >= 500:
            raise ReceiverUnavailable(f"{self.name}: {answer}", status=status, retry_after=retry_after)
        raise ReceiverRejected(f"{self.name}: {answer}", status=status)


class ProducerReceiver(Receiver):
    """A receiver that writes each changed alert to a Kafka topic with the service's producer (keyed by job).

    A kind says what to write with :meth:`record`.
    """

    per_alert = True
    needs_kafka = True

    def __init__(self, config: ReceiverConfig, redactor: Redactor, producer: Any, topics: DeliveryTopics) -> None:
        super().__init__(config, redactor)
        self.producer = producer
        self.topics = topics

    @classmethod
    def from_config(cls, config: ReceiverConfig, deps: SenderDeps) -> Receiver:
        if deps.producer is None or deps.topics is None:
            raise ConfigError(f"receiver {config.name}: a {config.kind} receiver needs Kafka")
        return cls(config, deps.redactor, deps.producer, deps.topics)

    def record(self, alert: dict[str, Any], notification: Notification, ctx: DeliveryContext) -> tuple[str, bytes]:
        """``(topic without topic_prefix, value)`` to write for one changed alert."""
        raise NotImplementedError

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        for alert in notification.changed:
            topic, value = self.record(alert, notification, ctx)
            await self._produce(self.topics.name(topic), alert.get("job_id"), value)

    async def _produce(self, topic: str, key: str | None, value: bytes) -> None:
        from aiokafka.errors import KafkaError

        try:
            await self.producer.send_and_wait(topic, value=value, key=key.encode() if key else None)
        except KafkaError as exc:
            raise ReceiverUnavailable(f"{self.name}: producing to {topic} failed ({type(exc).__name__})") from None
