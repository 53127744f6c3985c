"""Alertmanager's webhook as an input, behind ``POST /api/v1/alertmanager`` (docs/api.md "Alertmanager webhook").

Point a ``webhook_configs`` receiver at a worker::

    receivers:
      - name: lockstep
        webhook_configs:
          - url: http://<worker>:6066/api/v1/alertmanager
            send_resolved: true
            http_config: {authorization: {credentials: <LOCKSTEP_API_TOKEN>}}

Each alert of a message becomes an event sample (the ``alertmanager-webhook`` adapter,
:mod:`streams.formats.alertmanager_webhook`: the same :func:`streams.formats.convert` the carrier
agents run on ``telemetry.raw.alertmanager-webhook``), produced to ``telemetry.<layer>`` keyed by
source like every carrier (:func:`agents.carriers.route_samples`), before the answer. Answers:

- ``200`` with ``{"events", "rejected"}`` when the message was taken (alerts that could not
  be used are ``dlq`` records, stage ``convert``, topic :data:`DLQ_TOPIC_NAME`, the body as the
  original: a retry would not fix them);
- ``400`` when the body is not JSON or not a version-4 webhook message (Alertmanager does not retry a
  4xx), ``415`` for a body that is not ``application/json``, ``413`` over :data:`MAX_BODY_BYTES`;
- ``401`` / ``403`` as every write endpoint (``LOCKSTEP_API_TOKEN`` bearer);
- ``503`` when Kafka did not take the records (Alertmanager retries a 5xx).

The time of arrival is the collection time: an alert stamped later than it is taken as of its arrival.
"""

from __future__ import annotations

from typing import Any

from agents import remote_write
from agents.carriers import route_samples
from agents.metrics import WorkerMetrics
from models.samples import MAX_MESSAGE_BYTES
from streams.formats import Converted, convert
from streams.formats.alertmanager_webhook import FORMAT

DLQ_TOPIC_NAME = "http:POST /api/v1/alertmanager"
#: Largest body taken: a carrier message's limit (a group of a few thousand alerts).
MAX_BODY_BYTES = MAX_MESSAGE_BYTES


def convert_request(body: bytes, now: float) -> Converted:
    """The event samples and rejections of one webhook body (pure; ``now`` is the collection time and
    the ``ingest_ts`` of every sample)."""
    return convert(FORMAT, body, ts=now, ingest_ts=now)


def is_malformed(out: Converted) -> bool:
    """True when the whole body could not be read (the answer is 400, nothing is written)."""
    return any(r.record is None and r.error == "DecodeFailed" for r in out.rejections)


def messages(out: Converted) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``(layer, key, batch)`` native telemetry messages, keyed like the carrier path."""
    return route_samples(out.samples)


def dead_letters(out: Converted, body: bytes, now: float) -> list[dict[str, Any]]:
    """``dlq`` records for the alerts that could not be used (bounded as a carrier message's)."""
    return remote_write.dead_letters(out, body, now, fmt=FORMAT, topic=DLQ_TOPIC_NAME)


def count(out: Converted, dead: list[dict[str, Any]], metrics: WorkerMetrics) -> None:
    """``lockstep_carrier_*{format="alertmanager-webhook"}`` and the dead-letter counter."""
    remote_write.count(out, dead, metrics, fmt=FORMAT)


def summary(out: Converted) -> dict[str, int]:
    """The answer's body: event samples written (a resolved alert is two: 1 at its start, 0 at its end)
    and alerts rejected (each a dead letter)."""
    return {"events": len(out.samples), "rejected": len(out.rejections)}


__all__ = ["DLQ_TOPIC_NAME", "FORMAT", "MAX_BODY_BYTES", "convert_request", "count", "dead_letters",
           "is_malformed", "messages", "summary"]
