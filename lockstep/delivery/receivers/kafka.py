"""Kafka topics: the alert itself (the ``alerts`` contract) on a topic per type, domain or severity.

``topic`` may hold ``{type}``, ``{domain}`` and ``{severity}``; they are expanded over every value
the alert contract allows (:meth:`KafkaConfig.output_topics`), so every topic the receiver may
write is created before its first alert (``topic_prefix`` applied).
"""

from __future__ import annotations

import itertools
import re
from typing import Any, get_args

import orjson
from pydantic import Field, field_validator

from lockstep.delivery.base import DeliveryContext, IntegrationConfig, ProducerReceiver
from models.alerts import AlertType, Domain, Severity
from streams.dispatch import Notification

PLACEHOLDERS: dict[str, list[str]] = {"type": list(get_args(AlertType)), "domain": [d.value for d in Domain],
                                      "severity": [s.value for s in Severity]}


class KafkaConfig(IntegrationConfig):
    """``kafka:`` the topic (pattern) the alerts go to."""

    topic: str = Field(pattern=r"^[A-Za-z0-9._{}-]+$",
                       description="topic_prefix applied; {type}, {domain}, {severity} are substituted")

    @field_validator("topic")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        unknown = set(re.findall(r"{([^}]*)}", value)) - set(PLACEHOLDERS)
        if unknown:
            raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}} (use {{type}}, {{domain}}, {{severity}})")
        return value

    def topic_for(self, alert: dict[str, Any]) -> str:
        """The topic (without ``topic_prefix``) ``alert`` goes to."""
        return self.topic.format(type=alert["type"], domain=(alert.get("root_cause") or {}).get("domain") or "unknown",
                                 severity=alert["severity"])

    def output_topics(self, receiver: str) -> list[tuple[str, str]]:
        used = [k for k in PLACEHOLDERS if "{" + k + "}" in self.topic]
        names = {self.topic.format(**dict(zip(used, combo, strict=True)))
                 for combo in itertools.product(*(PLACEHOLDERS[k] for k in used))}
        return [(name, f"enriched alerts ({receiver})") for name in sorted(names)]


class KafkaTopicReceiver(ProducerReceiver):
    """The alert itself (the ``alerts`` contract) on a per-type/domain/severity topic."""

    kind = "kafka"
    config_model = KafkaConfig

    def record(self, alert: dict[str, Any], notification: Notification, ctx: DeliveryContext) -> tuple[str, bytes]:
        return self.config.integration_as(KafkaConfig).topic_for(alert), orjson.dumps(alert)
