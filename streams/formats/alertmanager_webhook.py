"""Alertmanager's webhook (``version: "4"``) as an input: each alert becomes an event on its node's timeline.

Operators already have Prometheus alerting rules for what breaks under a training job: a node down,
an InfiniBand link down, a filesystem full, a DCGM Xid. Alertmanager posts them, grouped, to a
``webhook_configs`` URL (the worker's ``POST /api/v1/alertmanager``, or a producer onto the carrier
topic ``telemetry.raw.alertmanager-webhook``). Correlation works on samples, so each alert becomes an
**event sample**, the way kernel Xid lines do (:mod:`streams.formats.logs`): a gauge whose catalogue
mode is ``event``, ``1`` from the alert's ``startsAt``; a resolved alert adds ``0`` at its ``endsAt``.
The ingest stage makes the ``1`` an anomaly at once (an event is confirmed by one sample) on every job
the series reaches through the inventory, exactly as for any other sample of that layer and source;
so the alert is a marker on the job's timeline and evidence for its first mover.

**What the alert is about** (:func:`place`), from its labels:

- a ``switch`` label: layer ``switch``, that switch as the source (with ``port``: the jobs behind the port);
- a ``pool`` label: layer ``storage``, that pool;
- else the node: the first of :data:`SOURCE_LABELS` (``instance`` without its port), then the
  ``source`` header, on the layer of the alert's kind (below); with none of them but a ``job_id``
  label, that job id is the source and the ``job_id`` label maps it to the job;
- an alert naming none of these is rejected (its siblings are still used).

**What kind of alert** (:data:`ALERT_KINDS`, the first row whose words occur in ``alertname``, split at
CamelCase and ``_``): Xid, other GPU faults, GPU temperature, link down, link errors, node down,
filesystem, and anything else (``alertmanager_alert``). Each kind is a metric name of the catalogue
(docs/vocabulary.md, fabric ``Alertmanager``) with its operational meaning, so the correlator ranks an
Xid alert like an Xid and an IB-link-down alert like a link going down.

**The series** is the alert's label set (as Alertmanager's fingerprint is), so a re-sent notification
of the same firing alert repeats the same sample (``startsAt``, 1): the pipeline drops it as a
duplicate; an alert that resolves and fires again is a new event (0 then 1). Times: ``startsAt`` and
``endsAt`` are RFC 3339 (Go's nanoseconds allowed); a time after the collection time (the POST's
arrival) is taken as the collection time, so a sender's skewed clock never puts an event in the
future; an ``endsAt`` no later than ``startsAt`` is taken as one millisecond after it, and a resolved
alert without one (Go's zero time) ends at the collection time.

**Bad input**: a body that is not JSON or not a version-4 message is one whole-message rejection
(``DecodeFailed``: the HTTP answer is 400, Alertmanager does not retry a 4xx); an alert that breaks
:class:`models.alertmanager_webhook.WebhookAlert` or names no node is a rejection of ``alerts[i]``
(a dead letter). A message without alerts is skipped and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson
from pydantic import ValidationError

from models.alertmanager_webhook import WebhookAlert, WebhookMessage
from streams.formats.base import Context, parse_time_value, strip_port

FORMAT = "alertmanager-webhook"
SKIP_NO_ALERTS = "Alertmanager webhook message without alerts"
#: Labels naming the node an alert is about, in the order they are asked.
SOURCE_LABELS = ("node", "nodename", "hostname", "Hostname", "host", "instance")
#: ``endsAt`` values that say "no end" (Go's zero time): a resolved alert then ends at the collection time.
_NO_END = frozenset({"", "0001-01-01T00:00:00Z"})


@dataclass(frozen=True, slots=True)
class AlertKind:
    """One row of :data:`ALERT_KINDS`: alerts whose name matches ``words`` become ``metric`` on ``layer``."""

    words: re.Pattern[str]
    layer: str
    metric: str


def _kind(words: str, layer: str, metric: str) -> AlertKind:
    return AlertKind(re.compile(words), layer, metric)


_NET = r"(infiniband|ib|hca|roce|rdma|nic|network|net|link|port|switch|fabric|interface|mlx5?)"
#: The mapping table, read top to bottom over the words of ``alertname`` (lower case, CamelCase and
#: ``_-.:`` split): the first row that matches names the kind. Metric names are in the catalogue.
ALERT_KINDS: tuple[AlertKind, ...] = (
    _kind(r"\bxids?\b", "gpu", "alertmanager_gpu_xid"),
    _kind(r"\bgpus?\b.*\b(temp\w*|therm\w*|hot|overheat\w*)\b|\b(temp\w*|therm\w*)\b.*\bgpus?\b", "gpu",
          "alertmanager_gpu_temperature"),
    _kind(r"\b(gpus?|dcgm|nvlink|ecc|nvidia|cuda)\b", "gpu", "alertmanager_gpu_fault"),
    _kind(rf"\b{_NET}\b.*\b(down|flap\w*|lost|inactive|disabled|degraded)\b|\blinkdown\b", "nic",
          "alertmanager_link_down"),
    _kind(rf"\b{_NET}\b.*\b(err\w*|crc|symbol\w*|drops?|dropped|discards?)\b", "nic", "alertmanager_link_errors"),
    _kind(r"\b(filesystem|fs|disk|disks|inodes?|files|volume|mount\w*|readonly|storage|space|lustre|ost|mdt|nfs|"
          r"gpfs|quota)\b", "host",
          "alertmanager_filesystem"),
    _kind(r"\b(node|host|instance|target|exporter|server|machine)\b.*\b(down|unreachable|unavailable|absent|"
          r"missing|dead)\b|^up$", "host", "alertmanager_node_down"),
)
#: Any other alert: an event of meaning ``latency`` on the node (as an unclassified NCCL WARN).
OTHER = AlertKind(re.compile(""), "host", "alertmanager_alert")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_\-.:/]+")


def alert_words(alertname: str) -> str:
    """``alertname`` as lower-case words (CamelCase, acronyms and ``_-.:/`` split).

    >>> alert_words("NodeInfinibandLinkDown"), alert_words("DCGMXidErrors"), alert_words("node_filesystem_full")
    ('node infiniband link down', 'dcgm xid errors', 'node filesystem full')
    """
    return " ".join(_SEPARATORS.split(_CAMEL.sub(" ", alertname))).strip().lower()


def kind_of(alertname: str) -> AlertKind:
    """The row of :data:`ALERT_KINDS` for an alert name, else :data:`OTHER`.

    >>> [kind_of(n).metric for n in ("DCGMXidErrors", "NodeInfinibandLinkDown", "NodeFilesystemAlmostOutOfSpace",
    ...                              "InstanceDown", "GPUTemperatureHigh", "HighRequestLatency")]
    ['alertmanager_gpu_xid', 'alertmanager_link_down', 'alertmanager_filesystem', 'alertmanager_node_down', \
'alertmanager_gpu_temperature', 'alertmanager_alert']
    """
    words = alert_words(alertname)
    for kind in ALERT_KINDS:
        if kind.words.search(words):
            return kind
    return OTHER


def place(labels: dict[str, str], kind: AlertKind, fallback: str | None) -> tuple[str, str] | str:
    """``(layer, source)`` an alert's series is on, or the reason it names nothing Lockstep can place.

    >>> place({"alertname": "A", "instance": "gpu001:9100"}, OTHER, None)
    ('host', 'gpu001')
    >>> place({"alertname": "A", "switch": "leaf03", "port": "17"}, kind_of("IBPortDown"), None)
    ('switch', 'leaf03')
    >>> place({"alertname": "A", "job_id": "llm-70b"}, OTHER, None)
    ('host', 'llm-70b')
    """
    if labels.get("switch"):
        return "switch", labels["switch"]
    if labels.get("pool"):
        return "storage", labels["pool"]
    for name in SOURCE_LABELS:
        value = labels.get(name)
        if value:
            return kind.layer, strip_port(value) if name == "instance" else value
    if fallback:
        return kind.layer, fallback
    if labels.get("job_id"):
        return kind.layer, labels["job_id"]
    return (f"the alert names no node ({', '.join(SOURCE_LABELS)}), switch, pool or job_id label, and no source "
            "header was given")


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                     for e in exc.errors(include_url=False)[:3])


def _time(text: str, what: str, collected: float | None) -> float:
    ts = parse_time_value(text, what)
    return min(ts, collected) if collected is not None else ts


def convert(raw: bytes, ctx: Context) -> None:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        ctx.reject(None, f"not JSON: {exc}", "DecodeFailed")
        return
    try:
        message = WebhookMessage.model_validate(doc)
    except ValidationError as exc:
        ctx.reject(None, f"not an Alertmanager webhook message (version \"4\"): {_errors(exc)}", "DecodeFailed")
        return
    if not message.alerts:
        ctx.skip(SKIP_NO_ALERTS)
        return
    collected = ctx.collection_ts()
    fallback = ctx.source()
    for i, item in enumerate(message.alerts):
        rec = f"alerts[{i}]"
        try:
            alert = WebhookAlert.model_validate(item)
        except ValidationError as exc:
            ctx.reject(rec, f"not an Alertmanager alert: {_errors(exc)}")
            continue
        name = alert.labels.get("alertname", "")
        kind = kind_of(name)
        placed = place(alert.labels, kind, fallback)
        if isinstance(placed, str):
            ctx.reject(rec, f"{name or 'alert'}: {placed}")
            continue
        layer, source = placed
        try:
            starts = _time(alert.startsAt, "startsAt", collected)
            ends = None
            if alert.status == "resolved":
                ends = collected if alert.endsAt in _NO_END and collected is not None else \
                    _time(alert.endsAt, "endsAt", collected)
        except ValueError as exc:
            ctx.reject(rec, f"{name or 'alert'}: {exc}")
            continue
        if not ctx.sample(rec, starts, layer, source, kind.metric, 1.0, alert.labels):
            continue
        if ends is not None:
            if not ends > starts:
                ends = starts + 0.001
            ctx.sample(rec, ends, layer, source, kind.metric, 0.0, alert.labels)


__all__ = ["ALERT_KINDS", "FORMAT", "OTHER", "SKIP_NO_ALERTS", "SOURCE_LABELS", "AlertKind", "alert_words",
           "convert", "kind_of", "place"]
