"""Delivery's topics (its own catalogue additions) and the receivers that write to Kafka.

=====================================  ==========  =========================================
topic (``topic_prefix`` applied)       partitions  purpose
=====================================  ==========  =========================================
``delivery.retry.<receiver>``          1           parked notifications of one receiver, in order
``delivery.ledger``                    1           compacted: (receiver, dedup_key) -> last accepted
``alerts.ocsf`` (per ``ocsf`` recv.)   alerts'     OCSF Detection Findings for the SIEM
``<kafka receiver topic>``             alerts'     enriched alerts per type/domain/severity
=====================================  ==========  =========================================

They are created (idempotently) by :func:`create_delivery_topics` when the delivery service
starts, and on reload for receivers that appear. A ``kafka`` receiver's ``{type}``, ``{domain}``
and ``{severity}`` placeholders are expanded over every value the alert contract allows, so every
topic it may write exists before the first alert.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, get_args

import orjson

from agents.topics import TopicCatalogue, TopicSpec
from lockstep.delivery.base import DeliveryContext, Receiver
from lockstep.delivery.errors import ReceiverUnavailable
from lockstep.delivery.redaction import Redactor
from lockstep.delivery.siem import ocsf_finding
from models.alerts import AlertType, Domain, Severity
from models.settings import LockstepSettings
from streams.routing import KafkaConfig, Notification, ReceiverConfig, RoutingConfig

log = logging.getLogger("lockstep.delivery")

WEEK_MS = 7 * 24 * 3600 * 1000


class DeliveryTopics:
    """Names of delivery's own topics for one deployment."""

    def __init__(self, settings: LockstepSettings) -> None:
        self.settings = settings
        self.catalogue = TopicCatalogue(settings)

    def name(self, suffix: str) -> str:
        return f"{self.settings.topic_prefix}{suffix}"

    def retry(self, receiver: str) -> str:
        return self.name(f"delivery.retry.{receiver}")

    @property
    def ledger(self) -> str:
        return self.name("delivery.ledger")

    def kafka_topics(self, cfg: KafkaConfig) -> list[str]:
        """Every topic a ``kafka`` receiver may write (placeholders expanded)."""
        values = {"type": list(get_args(AlertType)), "domain": [d.value for d in Domain],
                  "severity": [s.value for s in Severity]}
        used = [k for k in values if "{" + k + "}" in cfg.topic]
        names = {cfg.topic.format(**dict(zip(used, combo, strict=True)))
                 for combo in itertools.product(*(values[k] for k in used))}
        return sorted(self.name(n) for n in names)

    def specs(self, routing: RoutingConfig) -> list[TopicSpec]:
        s = self.settings
        specs = [TopicSpec(self.ledger, 1, "receiver\\x1fdedup_key", "what each receiver last accepted per dedup_key",
                           compact=True)]
        for rc in routing.receivers.values():
            specs.append(TopicSpec(self.retry(rc.name), 1, "receiver", f"parked notifications of {rc.name}", WEEK_MS))
            if rc.ocsf is not None:
                specs.append(TopicSpec(self.name(rc.ocsf.topic), s.alerts_partitions, "job_id",
                                       "OCSF Detection Findings (class 2004)", s.alerts_retention_ms))
            if rc.kafka is not None:
                specs += [TopicSpec(t, s.alerts_partitions, "job_id", f"enriched alerts ({rc.name})",
                                    s.alerts_retention_ms) for t in self.kafka_topics(rc.kafka)]
        return list({sp.name: sp for sp in specs}.values())


async def create_delivery_topics(settings: LockstepSettings, bootstrap: str, routing: RoutingConfig) -> list[str]:
    """Create the delivery topics that do not exist yet; return the names created."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from agents.kafka import client_kwargs

    specs = DeliveryTopics(settings).specs(routing)
    admin = AIOKafkaAdminClient(**client_kwargs(settings, bootstrap))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [sp for sp in specs if sp.name not in existing]
        if missing:
            await admin.create_topics([NewTopic(sp.name, sp.partitions, settings.kafka_replication_factor,
                                                topic_configs=sp.topic_config()) for sp in missing])
            log.info("created delivery topics: %s", ", ".join(sp.name for sp in missing))
        return [sp.name for sp in missing]
    finally:
        await admin.close()


class _ProducerReceiver(Receiver):
    per_alert = True

    def __init__(self, config: ReceiverConfig, redactor: Redactor, producer: Any, topics: DeliveryTopics) -> None:
        super().__init__(config, redactor)
        self.producer = producer
        self.topics = topics

    async def _produce(self, topic: str, key: str | None, value: bytes) -> None:
        from aiokafka.errors import KafkaError

        try:
            await self.producer.send_and_wait(topic, value=value, key=key.encode() if key else None)
        except KafkaError as exc:
            raise ReceiverUnavailable(f"{self.name}: producing to {topic} failed ({type(exc).__name__})") from None


class KafkaTopicReceiver(_ProducerReceiver):
    """The alert itself (the ``alerts`` contract) on a per-type/domain/severity topic."""

    kind = "kafka"

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        cfg = self.config.kafka
        assert cfg is not None
        for alert in notification.changed:
            topic = self.topics.name(cfg.topic.format(
                type=alert["type"], domain=(alert.get("root_cause") or {}).get("domain") or "unknown",
                severity=alert["severity"]))
            await self._produce(topic, alert.get("job_id"), orjson.dumps(alert))


class OcsfTopicReceiver(_ProducerReceiver):
    """One OCSF Detection Finding per alert state change on the SIEM topic."""

    kind = "ocsf"

    async def send(self, notification: Notification, ctx: DeliveryContext) -> None:
        cfg = self.config.ocsf
        assert cfg is not None
        for alert in notification.changed:
            await self._produce(self.topics.name(cfg.topic), alert.get("job_id"),
                                orjson.dumps(ocsf_finding(alert, ctx, notification.repeat)))
