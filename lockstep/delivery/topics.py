"""Delivery's topics: its own catalogue additions, and the topics its receivers write to.

=====================================  ==========  =========================================
topic (``topic_prefix`` applied)       partitions  purpose
=====================================  ==========  =========================================
``delivery.retry.<receiver>``          1           parked notifications of one receiver, in order
``delivery.ledger``                    1           compacted: (receiver, dedup_key) -> last accepted
``alerts.ocsf`` (per ``ocsf`` recv.)   alerts'     OCSF Detection Findings for the SIEM
``<kafka receiver topic>``             alerts'     enriched alerts per type/domain/severity
=====================================  ==========  =========================================

They are created (idempotently) by :func:`create_delivery_topics` when the delivery service
starts, and on reload for receivers that appear. A receiver's topics are what its config says it
writes (:meth:`lockstep.delivery.base.IntegrationConfig.output_topics`: a ``kafka`` receiver's
placeholders expanded over every value the alert contract allows), so every topic it may write
exists before the first alert.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents.topics import TopicCatalogue, TopicSpec
from models.settings import LockstepSettings

if TYPE_CHECKING:
    from lockstep.delivery.config import RoutingConfig

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

    def specs(self, routing: RoutingConfig) -> list[TopicSpec]:
        s = self.settings
        specs = [TopicSpec(self.ledger, 1, "receiver\\x1fdedup_key", "what each receiver last accepted per dedup_key",
                           compact=True)]
        for rc in routing.receivers.values():
            specs.append(TopicSpec(self.retry(rc.name), 1, "receiver", f"parked notifications of {rc.name}", WEEK_MS))
            specs += [TopicSpec(self.name(topic), s.alerts_partitions, "job_id", purpose, s.alerts_retention_ms)
                      for topic, purpose in rc.integration.output_topics(rc.name)]
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
