"""What every receiver shares: the context a payload is built in, the sender contract, HTTP.

A receiver turns a :class:`streams.routing.Notification` into its published format with a pure
builder and sends it with :meth:`Receiver.send`, which returns when the receiver accepted it and
raises :class:`~lockstep.delivery.errors.ReceiverUnavailable` (retry later) or
:class:`~lockstep.delivery.errors.ReceiverRejected` (dead letter) otherwise. Nothing else.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar
from urllib.parse import quote

import aiohttp
import orjson

from lockstep import __version__
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.redaction import Redactor, describe_answer
from streams.routing import Notification, ReceiverConfig

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


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``marker`` when cut.

    >>> truncate("abcdef", 4)
    'abc…'
    """
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


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


class Receiver:
    """Base of the senders. ``per_alert`` receivers get one changed alert per notification."""

    kind: ClassVar[str] = ""
    per_alert: ClassVar[bool] = False

    def __init__(self, config: ReceiverConfig, redactor: Redactor) -> None:
        self.config = config
        self.name = config.name
        self.redactor = redactor

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
