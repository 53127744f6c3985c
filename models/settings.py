"""The one settings model. Built once at start-up (``LockstepSettings()``) and handed down.

Every field reads ``LOCKSTEP_<FIELD>`` from the environment (or a ``.env`` file). Pure code never
reads the environment: it receives the small config objects derived here.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from models.errors import ConfigError


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


# --- Delivery secrets (issue 6) -------------------------------------------------------------------
class DeliverySecretsSource(PydanticBaseSettingsSource):
    """``LOCKSTEP_SECRET_<NAME>=value`` and ``LOCKSTEP_SECRET_<NAME>_FILE=path`` -> ``delivery_secrets[name]``.

    Names are lower-cased (routes reference ``{secret: slack_oncall}``). A ``_FILE`` variant reads
    the file (trailing newline stripped); an unreadable file fails start-up naming the variable,
    never the value.
    """

    PREFIX = "LOCKSTEP_SECRET_"

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, str] = {}
        for key, value in os.environ.items():
            if not key.upper().startswith(self.PREFIX) or len(key) == len(self.PREFIX):
                continue
            name = key[len(self.PREFIX):]
            if name.upper().endswith("_FILE"):
                name = name[:-5]
                try:
                    value = Path(value).read_text(encoding="utf-8").rstrip("\r\n")
                except OSError as exc:
                    raise ValueError(f"{key}: cannot read the secret file: {exc.strerror}") from None
            found[name.lower()] = value
        return {"delivery_secrets": found} if found else {}


class JsonEnvSource(EnvSettingsSource):
    """pydantic's environment source, except that a JSON value that does not parse (as in
    ``LOCKSTEP_DELIVERY_SECRETS``) raises a one-line :class:`ConfigError` naming the variable and
    the position, never the value (pydantic's own error is a traceback)."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{self.env_prefix}{field_name.upper()}: not valid JSON: {exc.msg} at line "
                              f"{exc.lineno} column {exc.colno} (character {exc.pos})") from None
# --- end of delivery secrets ---------------------------------------------------------------------


class LockstepSettings(BaseSettings):
    """All of Lockstep's configuration. See docs/operations.md for each knob's effect."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_", env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    # --- Kafka -------------------------------------------------------------------------------
    kafka_bootstrap_servers: str | None = Field(
        default=None,
        description="Comma-separated host:port list. Unset means: start the embedded Tansu broker.",
    )
    kafka_security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    kafka_sasl_mechanism: SaslMechanism | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: SecretStr | None = None
    kafka_ssl_check_hostname: bool = True
    kafka_replication_factor: int = Field(default=1, ge=1, le=7)
    kafka_fetch_max_wait_ms: int = Field(
        default=100, ge=1, le=5000, description="Consumer long-poll wait; bounds idle-time alert latency"
    )
    kafka_producer_linger_ms: int = Field(default=5, ge=0, le=1000)
    recovery_fetch_ends: bool = Field(
        default=True, description="Table recovery reads each changelog partition to a fetch answer's end instead "
        "of ListOffsets' (Tansu's can be one short: a partition's last snapshot is then not restored); one fetch "
        "round per recovery (docs/operations.md)"
    )
    kafka_session_timeout_s: float | None = Field(
        default=None, ge=3, le=300, description="Consumer-group session timeout; unset: 10 s with the embedded "
        "broker, 30 s otherwise. A dead worker's partitions move after about this long")

    # --- Topics ------------------------------------------------------------------------------
    topic_prefix: str = Field(default="lockstep.", max_length=100, pattern=r"^[A-Za-z0-9._-]*$")
    partitions: int = Field(default=8, ge=1, le=1024, description="Partitions of telemetry and anomalies")
    inventory_partitions: int = Field(default=1, ge=1, le=64, description="Partitions of the small topics: "
                                      "inventory and its carriers, annotations, silences, dlq")
    alerts_partitions: int = Field(default=1, ge=1, le=64)
    telemetry_retention_ms: int = Field(default=6 * 3600 * 1000, ge=60_000)
    alerts_retention_ms: int = Field(default=30 * 24 * 3600 * 1000, ge=60_000)

    # --- Worker ------------------------------------------------------------------------------
    app_id: str = Field(default="lockstep", pattern=r"^[A-Za-z0-9._-]+$")
    data_dir: Path = Path("./lockstep-data")
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=6066, ge=0, le=65535)
    log_level: str = Field(default="info", pattern=r"^(debug|info|warn|error|crit)$")
    snapshot_interval_s: float = Field(default=10.0, gt=0, description="Event-time seconds between state snapshots")
    snapshot_wall_floor_s: float = Field(
        default=10.0, ge=0, description="Wall seconds of a cell (shifted per partition) in which an input "
        "partition's state (and a correlation partition's, besides the snapshots its alerts make) is snapshotted "
        "at most once: a catch-up runs event time many times faster than wall time; live the event-time "
        "interval decides. 0: the event-time interval alone (docs/performance.md)"
    )
    watermark_interval_s: float = Field(
        default=0.2, gt=0, description="Wall seconds between the watermark timer's turns (a heartbeat every "
        "second; each ingest batch sends its own progress at its end)")
    ingest_catch_up_max_messages: int = Field(
        default=20_000, ge=0, description="Most messages of one input partition read back for state only after "
        "a restore (the offsets its snapshot misses up to the group's commit; all it retained when it has no "
        "snapshot): the last ones before the commit; what is left out is logged. 20,000 is about 22 minutes of "
        "a 1,024-GPU cluster's partition at 8 partitions, 40 s to read back (docs/operations.md)"
    )
    gc_young_threshold: int = Field(
        default=10_000, ge=0, le=1_000_000, description="A worker process freezes its start-up heap (gc.freeze: "
        "modules, the app) once it consumes, so that full collections no longer scan it, and collects its "
        "youngest generation every this many allocations (Python's default 700). 0 leaves Python's collector "
        "as it is (docs/performance.md)"
    )
    ingest_batch_messages: int = Field(
        default=4000, ge=1, le=100_000, description="Most messages (all input partitions) the ingest agent "
        "processes as one batch"
    )
    ingest_lane: bool = Field(
        default=True, description="Telemetry records go from the consumer's fetch loop to the ingest agent a "
        "fetch at a time (agents.lane), not through Faust's per-message hand-over; off only to compare the two"
    )
    correlate_lane: bool = Field(
        default=True, description="Anomalies records go from the consumer's fetch loop to the correlate agent a "
        "fetch at a time (agents.lane), taken all at once when the agent gets the loop; off, through Faust's "
        "stream one record each time the loop comes round (behind a busy ingest agent, seconds of alert latency: "
        "docs/performance.md); off only to compare the two"
    )
    correlate_batch_records: int = Field(
        default=2000, ge=1, le=100_000, description="Most anomalies records the correlate agent takes from its "
        "lane at once"
    )
    ingest_batch_within_s: float = Field(
        default=0.2, gt=0, le=5, description="Cadence of the ingest agent's batches (wall seconds "
        "from one batch to the next; a batch that took longer is followed at once by what queued up); shorter "
        "lowers alert latency but costs throughput (each batch pays a fixed cost per input partition)"
    )
    watermark_idle_s: float = Field(
        default=10.0, gt=0, description="An input partition with no new data this long (wall time) stops holding "
        "watermarks"
    )
    watermark_orphan_hold_s: float = Field(
        default=60.0, gt=0, description="An input partition without a live worker (a crash, a rebalance) holds "
        "watermarks this long before correlation goes on without it"
    )
    broker_probe_interval_s: float = Field(
        default=2.0, gt=0, description="How often a worker asks the broker for its metadata; no answer within "
        "twice this makes the worker not ready and logs one line until the broker answers again"
    )
    group_wait_warn_s: float | None = Field(
        default=None, ge=1, le=3600, description="A worker that has waited this long for its consumer group to "
        "assign it partitions (at start or in a rebalance) logs the group's state as the broker describes it, "
        "every minute until assigned, and is not ready meanwhile; unset: 3x the session timeout (30 s with the "
        "embedded broker, 90 s otherwise)"
    )
    job_end_margin_s: float = Field(
        default=10.0, ge=0, description="Evidence this close to a job's start or to the scheduler's end of its "
        "RUNNING span is the job starting or ending: no gpu_utilisation, job_slowdown or job_stalled alert "
        "(they wait this long after they are due, to know)"
    )
    job_stall_s: float = Field(
        default=15.0, gt=0, description="A RUNNING job that sent no step times for this long (or for "
        "job_stall_steps of its usual intervals between step times, if longer) is a job_stalled alert; at most "
        "grace_s + symptom_hold_s, the stall is known before its GPUs' gpu_utilisation alert, which it inhibits"
    )
    job_stall_steps: float = Field(
        default=5.0, ge=0, description="A job_stalled alert needs at least this many of the job's usual "
        "intervals between step times without one (so a job with slow steps is not a stall)"
    )
    correlation_stall_s: float = Field(
        default=60.0, gt=0, description="/readyz fails when ingest has processed samples for this long (wall time) "
        "while no correlation watermark of the worker moved"
    )

    # --- Detection ---------------------------------------------------------------------------
    baseline_window: int = Field(default=120, ge=16, le=4096, description="Samples in each series' baseline")
    baseline_min_samples: int = Field(default=20, ge=4)
    score_threshold: float = Field(
        default=0.5, gt=0, lt=1, description="Calibrated score at which a sample is anomalous"
    )
    z_threshold: float = Field(default=6.0, gt=0, description="Robust z-score that maps to score 0.5")
    confirm_samples: int = Field(default=2, ge=1, le=30, description="Bad samples among the last "
                                 "confirm_window_samples that start an anomaly episode (k of n)")
    confirm_window_samples: int = Field(default=3, ge=1, le=30, description="The n of the k-of-n episode "
                                        "confirmation (at most 30; equal to confirm_samples: consecutive samples)")
    clear_samples: int = Field(default=5, ge=1, le=1000)
    min_relative_change: float = Field(default=0.2, ge=0, description="Ignore moves smaller than this fraction of p50")
    scorer: str = Field(default="robust", min_length=1, description="The per-series scorer the detector runs: robust "
                        "(seasonal robust z-scores, vectorised) or hst (river's HalfSpaceTrees per series, per-sample "
                        "Python: for small deployments and evaluation)")
    slot_scale: bool = Field(default=False, description="A robust scale per time-of-day slot (robust scorer): "
                             "turn on for series with a daily cycle whose noise differs by time of day (storage "
                             "or request demand); costs 192 B of state a series (48 slots: 385 -> 577 B) and "
                             "~10 % more time a scoring call; most cluster telemetry has no daily cycle")

    # --- Series state (docs/operations.md, "Size") -------------------------------------------
    max_series_per_partition: int = Field(
        default=50_000, ge=1, le=10_000_000, description="Series one input partition holds; a sample of a new "
        "series beyond it is refused and dead-lettered (SeriesLimitExceeded). Costs about 2.3 KB of memory a series")
    max_series_per_source: int = Field(
        default=20_000, ge=1, le=10_000_000, description="Series one source holds within a partition (one "
        "exporter's label explosion cannot take the partition's whole cap)")
    series_idle_s: float = Field(
        default=3600.0, gt=0, description="A series with no sample for this much event time is evicted (its "
        "baseline forgotten) and its slot reused, so short-lived series (pods, jobs, ports) do not accumulate")

    # --- Correlation -------------------------------------------------------------------------
    allowed_lateness_s: float = Field(default=5.0, ge=0)
    grace_s: float = Field(default=5.0, ge=0, description="Watermark must pass onset + grace before a verdict")
    lookback_s: float = Field(default=120.0, gt=0, description="How far before the onset a first mover may be")
    resolve_after_s: float = Field(default=30.0, ge=0, description="Symptom clear this long -> resolved")
    critical_gpus: int = Field(default=64, ge=1)
    critical_ratio: float = Field(default=2.0, gt=1)
    clock_skew_tolerance_s: float = Field(default=0.25, gt=0)
    rules_file: Path | None = Field(default=None, description="YAML: inhibition rules, silences, maintenance windows")
    annotation_window_s: float = Field(default=300.0, gt=0, description="Step time compared this long before "
                                       "and after an operator annotation")
    symptom_hold_s: float = Field(default=10.0, ge=0, description="A symptom alert waits this long for a cause "
                                  "alert that would inhibit it")
    straggler_bucket_s: float = Field(default=5.0, gt=0, description="Peer comparison step: each worker's median "
                                      "step time over this much event time")
    straggler_idle_s: float = Field(default=300.0, gt=0, description="A job without per-worker step times this "
                                    "long ends its straggler alerts (no_data) and drops its peer state")

    # --- Operator surface --------------------------------------------------------------------
    api_token: SecretStr | None = Field(default=None, description="Bearer token for write endpoints")
    public_url: str | None = Field(default=None, description="Base URL used in alert links")
    web_max_heavy_requests: int = Field(
        default=8, ge=1, le=64,
        description="Heavy API reads (job list and detail, timeline, diagnosis, fabric, alert and silence "
                    "lists) admitted at once: computed one at a time between the agents' steps, the others "
                    "waiting their turn; one more is answered 429 with Retry-After")
    web_retry_after_s: int = Field(default=1, ge=1, le=600, description="Retry-After of a 429 (seconds)")
    web_metrics_cache_s: float = Field(
        default=1.0, ge=0, le=60,
        description="Seconds /metrics serves the same exposition (made with the agents' lag probe, which asks the "
                    "consumer per partition): a scraper asking more often reads counters up to this old; 0 makes "
                    "one per request (a benchmark that times progress by the counters)")
    carrier_formats: str = Field(
        default="all", max_length=2000, pattern=r"^[A-Za-z0-9_, -]*$",
        description="The real formats read from carrier topics: all, none, or a comma-separated list of format "
                    "names (lockstep topics list prints them; dcgm-exporter and node-exporter scrapes ride "
                    "prometheus). A worker creates and subscribes to only these carrier topics; every idle "
                    "topic it subscribes to is listed in each of its fetch requests")
    remote_write_keep_unknown: bool = Field(
        default=False, description="POST /api/v1/write keeps series whose names the metric catalogue does not "
                                   "know (meaning unknown); by default they are scrape noise: skipped and counted")
    fabric_report: bool = Field(
        default=True, description="Each input partition folds its NIC and switch samples into a per-port rollup "
                                  "and publishes it to fabric-rollup, which every worker's read model merges for "
                                  "/fabric/report (docs/fabric.md); false leaves the report without counters")
    fabric_publish_interval_s: float = Field(
        default=5.0, gt=0, le=300, description="Event-time seconds between an input partition's fabric summaries "
        "(the report's counters lag the telemetry by up to this much; shorter costs every read model more)")

    # --- Delivery (issue 6; docs/delivery.md) ------------------------------------------------
    delivery_routes_file: Path | None = Field(
        default=None, description="Routing tree and receivers (YAML, deploy/routes.example.yaml)")
    delivery_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Secrets that routes reference as {secret: NAME}: a JSON object here, or one "
                    "LOCKSTEP_SECRET_<NAME> / LOCKSTEP_SECRET_<NAME>_FILE per secret, or files in "
                    "delivery_secrets_dir")
    delivery_secrets_dir: Path | None = Field(
        default=None,
        description="Directory of secret files (file name = secret name), e.g. a Kubernetes secret volume")
    delivery_reload_interval_s: float = Field(
        default=5.0, gt=0, description="How often the routing file is checked for changes (SIGHUP reloads at once)")
    delivery_offset_reset: Literal["earliest", "latest"] = Field(
        default="latest", description="Where a receiver without a committed offset starts reading alerts")
    delivery_max_pending: int = Field(
        default=1000, ge=1, le=100_000,
        description="Alerts read but not yet settled per receiver before reading pauses")
    delivery_metrics_port: int | None = Field(
        default=None, ge=0, le=65535,
        description="Port of the delivery service's /metrics and /healthz on web_host (0: any free port); "
                    "unset: not served")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = env_settings
        if isinstance(env_settings, EnvSettingsSource):
            env = JsonEnvSource(settings_cls, case_sensitive=env_settings.case_sensitive,
                                env_prefix=env_settings.env_prefix,
                                env_nested_delimiter=env_settings.env_nested_delimiter,
                                env_ignore_empty=env_settings.env_ignore_empty,
                                env_parse_none_str=env_settings.env_parse_none_str,
                                env_parse_enums=env_settings.env_parse_enums)
        return (init_settings, env, DeliverySecretsSource(settings_cls), dotenv_settings, file_secret_settings)

    @model_validator(mode="before")
    @classmethod
    def _delivery_secrets(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = data.get("delivery_secrets") or {}
        # Refused here, not by the field: pydantic's own error would print the value.
        if not isinstance(given, dict):
            raise ConfigError("LOCKSTEP_DELIVERY_SECRETS: must be a JSON object {\"name\": \"value\"}, "
                              f"not a JSON {type(given).__name__}")
        for name, value in given.items():
            if not isinstance(value, str | SecretStr):
                raise ConfigError(f"LOCKSTEP_DELIVERY_SECRETS: the value of {str(name)[:64]!r} must be a string, "
                                  f"not a JSON {type(value).__name__}")
        secrets = {str(k).lower(): v for k, v in given.items()}
        folder = data.get("delivery_secrets_dir")
        if folder:
            path = Path(folder)
            if not path.is_dir():
                raise ValueError(f"delivery_secrets_dir {path} is not a directory")
            for item in sorted(path.iterdir()):
                if item.is_file() and not item.name.startswith("."):
                    secrets.setdefault(item.name.lower(), item.read_text(encoding="utf-8").rstrip("\r\n"))
        return {**data, "delivery_secrets": secrets}
    # --- end of Delivery ---------------------------------------------------------------------

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _servers(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"bootstrap server {server!r} is not host:port")
        return value

    @model_validator(mode="after")
    def _security(self) -> LockstepSettings:
        sasl = self.kafka_security_protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
        if sasl and (self.kafka_sasl_mechanism is None or not self.kafka_sasl_username or not self.kafka_sasl_password):
            raise ValueError("SASL needs kafka_sasl_mechanism, kafka_sasl_username and kafka_sasl_password")
        if self.baseline_min_samples > self.baseline_window:
            raise ValueError("baseline_min_samples must not exceed baseline_window")
        return self

    @property
    def embedded_broker(self) -> bool:
        """True when no bootstrap servers are configured: Lockstep starts its own broker."""
        return self.kafka_bootstrap_servers is None

    @property
    def session_timeout_s(self) -> float:
        """The consumer-group session timeout in force (``kafka_session_timeout_s`` or its default)."""
        return self.kafka_session_timeout_s or (10.0 if self.embedded_broker else 30.0)

    @property
    def group_wait_warn_after_s(self) -> float:
        """``group_wait_warn_s`` in force: set, or 3x the session timeout."""
        return self.group_wait_warn_s or 3 * self.session_timeout_s
