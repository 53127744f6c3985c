"""The topic catalogue: every topic Lockstep reads or writes, in one place.

Each entry says its partitions, what the record key is, and its retention or compaction. Topics are
created explicitly (``lockstep topics create``, idempotent) before any worker starts: a topic a
broker auto-creates gets the broker's default partition count, and Faust refuses a table whose
changelog partition count differs from its source.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from models.samples import Layer
from models.settings import LockstepSettings

log = logging.getLogger("lockstep.topics")

#: Largest record Lockstep produces (dead letters carry a message of up to 4 MB, base64-encoded).
MAX_RECORD_BYTES = 8 * 1024 * 1024

#: Faust tables (their changelogs are ``<app_id>-<table>-changelog``).
DETECTOR_STATE_TABLE = "detector_state"
CORRELATOR_STATE_TABLE = "correlator_state"

# -- carriers (issue 3): real formats on input topics of their own; agents/carriers.py converts them --
#: Tables of the ``convert`` agents (AdapterState per carrier partition).
CARRIER_STATE_TABLE = "carrier_state"
INVENTORY_CARRIER_STATE_TABLE = "inventory_carrier_state"
#: Exporter names in ``streams.formats.FORMATS`` that are Prometheus scrapes: they ride the
#: ``prometheus`` carrier (the adapter picks their profile from the metric names), no topic of their own.
CARRIED_AS = {"dcgm-exporter": "prometheus", "node-exporter": "prometheus", "nccl-prometheus": "prometheus"}


@dataclass(frozen=True, slots=True)
class CarrierTopic:
    """One carrier input topic: the real format its messages are in, and what they become."""

    format: str
    topic: str
    partitions: int
    produces: str  # "samples" (-> telemetry.<layer>) or "inventory" (-> inventory)


def carrier_formats() -> dict[str, str]:
    """Every format with a carrier topic of its own -> what it produces (``samples`` or ``inventory``)."""
    from streams.formats import FORMATS

    return {name: a.produces for name, a in FORMATS.items() if name not in CARRIED_AS}


def enabled_carrier_formats(spec: str) -> dict[str, str]:
    """The carrier formats ``LOCKSTEP_CARRIER_FORMATS`` enables -> what each produces, in registry order.

    ``all`` (the default) is every format with a carrier topic, ``none`` (or an empty value) none of
    them, anything else a comma-separated list of format names. An unknown name, or an exporter
    that rides another carrier, is a :class:`models.errors.ConfigError` that says what to write
    instead: a typo must not leave a carrier topic silently unread.

    >>> enabled_carrier_formats("none"), enabled_carrier_formats(" "), enabled_carrier_formats("None")
    ({}, {}, {})
    >>> enabled_carrier_formats("ufm, prometheus,prometheus")
    {'prometheus': 'samples', 'ufm': 'samples'}
    >>> enabled_carrier_formats("slurm-squeue")
    {'slurm-squeue': 'inventory'}
    >>> len(enabled_carrier_formats("all")) == len(carrier_formats())
    True
    >>> enabled_carrier_formats("dcgm-exporter")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    models.errors.ConfigError: LOCKSTEP_CARRIER_FORMATS: 'dcgm-exporter' scrapes ride the 'prometheus' ...
    >>> enabled_carrier_formats("prometheus,promethues")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    models.errors.ConfigError: LOCKSTEP_CARRIER_FORMATS: unknown format 'promethues'; all, none, or some of: ...
    """
    from models.errors import ConfigError

    known = carrier_formats()
    words = [w.strip() for w in spec.split(",") if w.strip()]
    keyword = words[0].lower() if len(words) == 1 else None
    if keyword == "all":
        return known
    if not words or keyword == "none":
        return {}
    for word in words:
        if word in CARRIED_AS:
            raise ConfigError(f"LOCKSTEP_CARRIER_FORMATS: {word!r} scrapes ride the {CARRIED_AS[word]!r} carrier: "
                              f"list {CARRIED_AS[word]}")
        if word not in known:
            raise ConfigError(f"LOCKSTEP_CARRIER_FORMATS: unknown format {word[:64]!r}; all, none, or some of: "
                              f"{', '.join(sorted(known))}")
    chosen = set(words)
    return {name: produces for name, produces in known.items() if name in chosen}
# -- end carriers --


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    key: str
    purpose: str
    retention_ms: int | None = None
    compact: bool = False
    config: dict[str, str] = field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        cfg = {"cleanup.policy": "compact" if self.compact else "delete"}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        cfg.update(self.config)
        return cfg


@dataclass(frozen=True)
class TopicCatalogue:
    """Topic names for one deployment (``topic_prefix`` applied)."""

    settings: LockstepSettings

    def _n(self, name: str) -> str:
        return f"{self.settings.topic_prefix}{name}"

    def telemetry(self, layer: Layer | str) -> str:
        return self._n(f"telemetry.{Layer(layer).value}")

    @property
    def telemetry_topics(self) -> list[str]:
        return [self.telemetry(layer) for layer in Layer]

    @property
    def inventory(self) -> str:
        return self._n("inventory")

    @property
    def anomalies(self) -> str:
        return self._n("anomalies")

    @property
    def alerts(self) -> str:
        return self._n("alerts")

    @property
    def dlq(self) -> str:
        return self._n("dlq")

    @property
    def stats(self) -> str:
        return self._n("stats")

    @property
    def timelines(self) -> str:
        return self._n("timelines")

    @property
    def annotations(self) -> str:
        return self._n("annotations")

    @property
    def silences(self) -> str:
        return self._n("silences")

    @property
    def capacity(self) -> str:
        """GPU-time lost per incident (issue 22; streams/ledger.py, docs/capacity.md)."""
        return self._n("capacity")

    @property
    def fabric_health(self) -> str:
        """Degraded and recovered fabric entities, one record per incident version (issue 22;
        streams/fabric_health.py, docs/capacity.md)."""
        return self._n("fabric-health")

    @property
    def fabric_rollup(self) -> str:
        """Per-port NIC and switch summaries, published by each input partition's ingest (issue 23;
        streams/fabric_publish.py, docs/contracts.md) and merged by every read model."""
        return self._n("fabric-rollup")

    def changelog(self, table: str) -> str:
        return f"{self.settings.app_id}-{table}-changelog"

    def telemetry_origins(self) -> set[str]:
        """Every input partition (``topic:partition``) whose progress drives the watermarks."""
        return {f"{t}:{p}" for t in self.telemetry_topics for p in range(self.settings.partitions)}

    def carrier_topics(self) -> list[CarrierTopic]:
        """Input topics of the real formats (issue 3; agents/carriers.py, docs/contracts.md).

        ``telemetry.raw.<format>`` has the telemetry partition count (key: the source, so one source
        keeps its order and its derived-ratio state on one partition); ``inventory.raw.<format>`` has
        ``inventory_partitions`` (one by default: scheduler dumps and pod events are read in order, and a
        job's pods meet in one state).

        Only the formats ``carrier_formats`` enables (:func:`enabled_carrier_formats`): the catalogue,
        ``topics create`` and the worker's subscriptions all follow it.
        """
        return [CarrierTopic(name, self._n(f"telemetry.raw.{name}"), self.settings.partitions, produces)
                if produces == "samples" else CarrierTopic(name, self._n(f"inventory.raw.{name}"),
                                                             self.settings.inventory_partitions, produces)
                for name, produces in enabled_carrier_formats(self.settings.carrier_formats).items()]

    def specs(self) -> list[TopicSpec]:
        s = self.settings
        p = s.partitions
        specs = [
            TopicSpec(self.telemetry(layer), p, "job_id" if layer is Layer.STEP else "source",
                      f"{layer.value} samples (one or a batch per message)", s.telemetry_retention_ms)
            for layer in Layer
        ]
        specs += [
            TopicSpec(self.inventory, s.inventory_partitions, "job:<id> | link:<node>:<dev>:<port> | switch:<name> "
                      "| pool:<name>", "jobs, links, switch tiers, pools (latest per key is current)", compact=True),
            TopicSpec(self.anomalies, p, "job_id", "anomaly episodes per job, and watermarks", 24 * 3600 * 1000),
            TopicSpec(self.alerts, s.alerts_partitions, "job_id", "enriched alerts (firing/resolved)",
                      s.alerts_retention_ms),
            TopicSpec(self.stats, s.alerts_partitions, "job_id", "per-job percentile summaries for capacity teams",
                      s.alerts_retention_ms),
            TopicSpec(self.timelines, p, "job_id", "per-job, per-second lane aggregates (the timeline page)",
                      s.telemetry_retention_ms),
            TopicSpec(self.capacity, s.alerts_partitions, "alert_id", "GPU-seconds lost per incident, by root-cause "
                      "entity (docs/capacity.md)", s.alerts_retention_ms),
            TopicSpec(self.fabric_health, s.alerts_partitions, "kind:id", "degraded/recovered fabric entities with "
                      "their evidence (docs/capacity.md)", s.alerts_retention_ms),
            TopicSpec(self.fabric_rollup, p, "input topic:partition", "per-port NIC and switch summaries for "
                      "/fabric/report (docs/contracts.md)", s.telemetry_retention_ms),
            TopicSpec(self.annotations, s.inventory_partitions, "job_id", "operator annotations (a fix, a change) "
                      "for before/after comparisons (docs/api.md)", s.alerts_retention_ms),
            TopicSpec(self.silences, s.inventory_partitions, "silence_id",
                      "alert silences (docs/api.md; latest per id is current)", compact=True),
            TopicSpec(self.dlq, s.inventory_partitions, "original key",
                      "dead letters: reason, original bytes, where they came from",
                      7 * 24 * 3600 * 1000, config={"max.message.bytes": str(MAX_RECORD_BYTES)}),
            TopicSpec(self.changelog(DETECTOR_STATE_TABLE), p, "topic:partition",
                      "snapshots of per-partition detector state", compact=True,
                      config={"max.message.bytes": str(MAX_RECORD_BYTES)}),
            TopicSpec(self.changelog(CORRELATOR_STATE_TABLE), p, "partition",
                      "snapshots of per-partition correlation state", compact=True,
                      config={"max.message.bytes": str(MAX_RECORD_BYTES)}),
        ]
        # carriers (issue 3): real-format input topics and the convert agents' state
        carriers = self.carrier_topics()
        specs += [TopicSpec(c.topic, c.partitions, "source" if c.produces == "samples" else "any",
                            f"{c.format} messages as exporters ship them (converted by the convert agents)",
                            s.telemetry_retention_ms, config={"max.message.bytes": str(MAX_RECORD_BYTES)})
                  for c in carriers]
        # the convert agents' tables exist only with a carrier of their kind enabled (agents/carriers.py)
        if any(c.produces == "samples" for c in carriers):
            specs.append(TopicSpec(self.changelog(CARRIER_STATE_TABLE), p, "topic:partition",
                                   "snapshots of per-partition real-format adapter state", compact=True,
                                   config={"max.message.bytes": str(MAX_RECORD_BYTES)}))
        if any(c.produces == "inventory" for c in carriers):
            specs.append(TopicSpec(self.changelog(INVENTORY_CARRIER_STATE_TABLE), s.inventory_partitions,
                                   "topic:partition", "snapshots of the inventory carriers' adapter state",
                                   compact=True, config={"max.message.bytes": str(MAX_RECORD_BYTES)}))
        return specs


def unread_carrier_topics(settings: LockstepSettings, existing: set[str]) -> list[str]:
    """The carrier topics among ``existing`` whose formats ``settings.carrier_formats`` leaves out.

    >>> s = LockstepSettings(_env_file=None, carrier_formats="prometheus")  # type: ignore[call-arg]
    >>> unread_carrier_topics(s, {"lockstep.telemetry.raw.prometheus", "lockstep.telemetry.raw.ufm",
    ...                           "lockstep.inventory.raw.slurm-squeue", "lockstep.alerts"})
    ['lockstep.inventory.raw.slurm-squeue', 'lockstep.telemetry.raw.ufm']
    """
    everything = TopicCatalogue(settings.model_copy(update={"carrier_formats": "all"})).carrier_topics()
    enabled = {c.topic for c in TopicCatalogue(settings).carrier_topics()}
    return sorted(c.topic for c in everything if c.topic in existing and c.topic not in enabled)


async def create_topics(settings: LockstepSettings, bootstrap: str) -> list[str]:
    """Create every catalogue topic that does not exist yet; return the names created.

    Idempotent. An existing topic with a different partition count is an error (Faust would
    refuse it later, less clearly).
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from agents.kafka import client_kwargs
    from models.errors import ConfigError

    specs = TopicCatalogue(settings).specs()
    admin = AIOKafkaAdminClient(**client_kwargs(settings, bootstrap))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        unread = unread_carrier_topics(settings, existing)
        if unread:
            log.warning("carrier topics exist that LOCKSTEP_CARRIER_FORMATS=%s does not read (anything written "
                        "there waits unconverted): %s", settings.carrier_formats, ", ".join(unread))
        missing = [s for s in specs if s.name not in existing]
        present = [s for s in specs if s.name in existing]
        if present:
            described = await admin.describe_topics([s.name for s in present])
            counts = {d["topic"]: len(d["partitions"]) for d in described}
            for spec in present:
                have = counts.get(spec.name)
                if have is not None and have != spec.partitions:
                    raise ConfigError(
                        f"topic {spec.name} has {have} partitions, the catalogue says {spec.partitions}: "
                        "set LOCKSTEP_PARTITIONS to match or recreate the topic"
                    )
        if missing:
            await admin.create_topics([
                NewTopic(s.name, s.partitions, settings.kafka_replication_factor, topic_configs=s.topic_config())
                for s in missing
            ])
            log.info("created topics: %s", ", ".join(s.name for s in missing))
        return [s.name for s in missing]
    finally:
        await admin.close()
