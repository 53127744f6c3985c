"""The Prometheus remote-write receiver behind ``POST /api/v1/write`` (docs/api.md "Remote write").

Protocol: remote-write 1.0 (https://prometheus.io/docs/specs/prw/remote_write_spec/). The body is a
snappy-compressed protobuf ``WriteRequest`` with ``Content-Encoding: snappy``, ``Content-Type:
application/x-protobuf`` and ``X-Prometheus-Remote-Write-Version: 0.1.0``. Answers:

- ``204`` when the request was taken: every sample converted was written to the native telemetry
  topics, and every record that could not be used is a dead letter (a sample without a source,
  say) -- retrying it would not help, so the sender must not;
- ``400`` when the body is not snappy or not a ``WriteRequest``, or a header says another encoding
  or version (malformed: the spec's "MUST NOT retry");
- ``401`` / ``403`` as every write endpoint (``LOCKSTEP_API_TOKEN`` bearer);
- ``413`` for a body over :data:`MAX_REMOTE_WRITE_BYTES` compressed or
  :data:`models.samples.MAX_MESSAGE_BYTES` uncompressed (checked from snappy's length preamble
  before inflating);
- ``503`` with ``Retry-After`` when Kafka did not take the records (retryable: Prometheus retries
  5xx and 429 with back-off).

Scrape noise: a sender ships every series it scraped; those whose names the catalogue does not know
are not converted but counted (``lockstep_carrier_skipped_total{format="prometheus-remote-write"}``,
reason :data:`streams.formats.remote_write.SKIP_UNKNOWN`), so they never become series in a worker's
state; ``LOCKSTEP_REMOTE_WRITE_KEEP_UNKNOWN=true`` keeps them (meaning ``unknown``).

Where the samples go: converted here by the ``prometheus-remote-write`` adapter (the same
:func:`streams.formats.convert` the carrier agents run) and produced to ``telemetry.<layer>``,
grouped and keyed exactly as the carrier path keys them (:func:`agents.carriers.route_samples`:
the source, or the job for ``step``), so one series always lands on one partition in the order
Prometheus sent it. Rejections become ``dlq`` records through the one dead-letter builder, stage
``convert``, with the request body as the original. Converting here rather than producing the raw
body to a carrier topic keeps that ordering: one request holds many sources, and any single key for
it would either pin all remote-write traffic to one partition or scatter a series over several.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.carriers import MAX_DEAD_LETTERS_PER_MESSAGE, carrier_metrics, route_samples
from agents.metrics import WorkerMetrics
from models.deadletter import dead_letter_record
from models.errors import error_class
from models.samples import MAX_MESSAGE_BYTES
from streams.formats import Converted, convert
from streams.formats.remote_write import HEADER_KEEP_UNKNOWN, snappy_length

FORMAT = "prometheus-remote-write"
#: Largest compressed body taken (Prometheus sends at most a few hundred KiB per request).
MAX_REMOTE_WRITE_BYTES = 2 * 1024 * 1024
#: Largest body once inflated (the limit of every carrier message).
MAX_INFLATED_BYTES = MAX_MESSAGE_BYTES
#: The protocol version this receiver speaks (1.0 sends "0.1.0").
VERSION = "0.1.0"
DLQ_TOPIC_NAME = "http:POST /api/v1/write"


@dataclass(frozen=True, slots=True)
class HeaderProblem:
    status: int
    message: str


def check_headers(headers: Any) -> HeaderProblem | None:
    """What is wrong with a request's remote-write headers, or None (pure).

    >>> check_headers({"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
    ...                "X-Prometheus-Remote-Write-Version": "0.1.0"}) is None
    True
    >>> check_headers({"Content-Encoding": "gzip", "Content-Type": "application/x-protobuf"}).status
    400
    """
    encoding = (headers.get("Content-Encoding") or "").strip().lower()
    if encoding != "snappy":
        return HeaderProblem(400, f"remote write needs 'Content-Encoding: snappy', got {encoding[:40]!r}")
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != "application/x-protobuf":
        return HeaderProblem(415, f"remote write needs 'Content-Type: application/x-protobuf', got {ctype[:60]!r}")
    version = (headers.get("X-Prometheus-Remote-Write-Version") or VERSION).strip()
    if not version.startswith("0.1."):
        return HeaderProblem(400, f"X-Prometheus-Remote-Write-Version {version[:20]!r} is not supported "
                                  f"(this receiver speaks {VERSION}, remote-write 1.0)")
    return None


def convert_request(body: bytes, ingest_ts: float, *, keep_unknown: bool = False) -> Converted:
    """The samples and rejections of one request body (pure; ``ingest_ts`` is stamped on every sample).

    Series whose names the catalogue does not know are skipped and counted (scrape noise:
    :func:`streams.formats.remote_write.known_to_lockstep`) unless ``keep_unknown``
    (``LOCKSTEP_REMOTE_WRITE_KEEP_UNKNOWN``)."""
    headers = {HEADER_KEEP_UNKNOWN: "true"} if keep_unknown else None
    return convert(FORMAT, body, ingest_ts=ingest_ts, headers=headers)


def inflates_too_large(body: bytes) -> bool:
    """True when the snappy preamble announces more than :data:`MAX_INFLATED_BYTES` (413, nothing inflated).

    >>> inflates_too_large(bytes([0x80, 0x80, 0x80, 0x04]) + b"..."), inflates_too_large(b"\\x05hello")
    (True, False)
    """
    try:
        return snappy_length(body) > MAX_INFLATED_BYTES
    except ValueError:
        return False  # no preamble: malformed, the adapter says so (400)


def is_malformed(out: Converted) -> bool:
    """True when the whole body could not be read (the answer is 400, nothing is written)."""
    return any(r.record is None and r.error == "DecodeFailed" for r in out.rejections)


def messages(out: Converted) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``(layer, key, batch)`` native telemetry messages, keyed like the carrier path."""
    return route_samples(out.samples)


def dead_letters(out: Converted, body: bytes, now: float, *, fmt: str = FORMAT,
                 topic: str = DLQ_TOPIC_NAME) -> list[dict[str, Any]]:
    """``dlq`` records for a request's rejections (bounded like a carrier message's; the body is the original).

    ``fmt`` / ``topic``: the format and the ``http:...`` topic name of another HTTP input using the same
    rules (agents/alert_input.py)."""
    recs: list[dict[str, Any]] = []
    rejections = out.rejections
    limit = MAX_DEAD_LETTERS_PER_MESSAGE
    shown = rejections if len(rejections) <= limit else rejections[: limit - 1]
    for i, rej in enumerate(shown):
        f = rej.dead_letter_fields()
        recs.append(dead_letter_record(stage=f["stage"], error=error_class(f["error"]), reason=f["reason"],
                                       original=body, topic=topic, partition=None, offset=None,
                                       ts=now, record=f["record"], include_original=i == 0))
    if len(rejections) > limit:
        rest = rejections[limit - 1:]
        recs.append(dead_letter_record(stage="convert", error=error_class(rest[0].error),
                                       reason=f"{fmt}: {len(rest)} more records rejected, the first of them: "
                                              f"{rest[0].reason}", original=body, topic=topic,
                                       partition=None, offset=None, ts=now, record=rest[0].record,
                                       include_original=False))
    return recs


def count(out: Converted, dead: list[dict[str, Any]], metrics: WorkerMetrics, *, fmt: str = FORMAT) -> None:
    """The carrier counters (``lockstep_carrier_*{format="prometheus-remote-write"}``, or ``fmt``) and the
    dead-letter counter, as the convert agents count a carrier message."""
    cm = carrier_metrics(metrics)
    cm.messages.labels(fmt).inc()
    layers: dict[str, int] = {}
    for s in out.samples:
        layers[s["layer"]] = layers.get(s["layer"], 0) + 1
    for layer, n in layers.items():
        cm.samples.labels(fmt, layer).inc(n)
    for rej in out.rejections:
        cm.rejections.labels(fmt, rej.error).inc()
    if out.unknown_metrics:
        cm.unknown.labels(fmt).inc(out.unknown_metrics)
    for reason, n in out.skipped.items():
        cm.skipped.labels(fmt, reason).inc(n)
    for rec in dead:
        metrics.dead_letters.labels(rec["stage"], rec["error"]).inc()


__all__ = ["FORMAT", "MAX_INFLATED_BYTES", "MAX_REMOTE_WRITE_BYTES", "VERSION", "check_headers", "convert_request",
           "count", "dead_letters", "inflates_too_large", "is_malformed", "messages"]
