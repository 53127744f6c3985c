"""The Faust app of one worker, assembled in one place: topics, tables, the agents and their timers.

    telemetry.raw.<format> --convert--> telemetry.<layer> --ingest--> anomalies --correlate--> alerts
                                                                                  timelines, stats
    annotations --forward_annotations--> anomalies;  every stage --> dlq

The agents are thin (agents.ingest, agents.correlating, agents.carriers); what they decide lives in
:mod:`streams` (the stages), in agents.recovery (restores, rebuilds, stalls) and agents.gaps; what
they share is one :class:`agents.runtime.Runtime`: the two output paths (``send``, ``dead_letter``
through one :class:`agents.sink.Sink`), the snapshot writer, and the broker access (None in Faust's
agent test context). Bad input never stops an agent: it becomes a dead letter on ``dlq``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import faust

from agents import transport
from agents.carriers import attach_carriers
from agents.correlating import Correlate
from agents.ingest import Ingest
from agents.kafka import faust_credentials
from agents.lane import BatchLane
from agents.metrics import WorkerMetrics
from agents.offsets import Offsets
from agents.runtime import LockstepApp, Runtime, Topics, WorkerState, never_raises
from agents.sink import CallbackSink, Emit, FaustSink, Sink
from agents.snapshots import SnapshotWriter
from agents.topics import CORRELATOR_STATE_TABLE, DETECTOR_STATE_TABLE, MAX_RECORD_BYTES, TopicCatalogue
from models.errors import ConfigError
from models.settings import LockstepSettings
from streams.correlate import CorrelatorConfig
from streams.detect import SCORERS, DetectorConfig
from streams.health import ProgressWatch
from streams.inventory import InventoryIndex
from streams.lanes import SignalsConfig
from streams.rules import Rules
from streams.series import SeriesLimits

__all__ = ["LockstepApp", "WorkerState", "build_app", "correlator_config", "detector_config", "signals_config"]


def detector_config(settings: LockstepSettings) -> DetectorConfig:
    if settings.scorer not in SCORERS:
        raise ConfigError(f"LOCKSTEP_SCORER={settings.scorer!r}: not a scorer; one of {', '.join(sorted(SCORERS))}")
    return DetectorConfig(
        scorer=settings.scorer,
        window=settings.baseline_window, min_samples=settings.baseline_min_samples,
        z_threshold=settings.z_threshold, score_threshold=settings.score_threshold,
        confirm=settings.confirm_samples, confirm_window=settings.confirm_window_samples, clear=settings.clear_samples,
        min_relative_change=settings.min_relative_change, slot_scale=settings.slot_scale,
        limits=SeriesLimits(settings.max_series_per_partition, settings.max_series_per_source, settings.series_idle_s),
    )


def correlator_config(settings: LockstepSettings) -> CorrelatorConfig:
    return CorrelatorConfig(
        allowed_lateness_s=settings.allowed_lateness_s, grace_s=settings.grace_s, lookback_s=settings.lookback_s,
        resolve_after_s=settings.resolve_after_s, critical_gpus=settings.critical_gpus,
        critical_ratio=settings.critical_ratio, idle_s=settings.watermark_idle_s, public_url=settings.public_url,
        orphan_hold_s=settings.watermark_orphan_hold_s,
        symptom_hold_s=settings.symptom_hold_s, job_end_margin_s=settings.job_end_margin_s,
        job_stall_s=settings.job_stall_s, job_stall_steps=settings.job_stall_steps,
    )


def signals_config(settings: LockstepSettings) -> SignalsConfig:
    return SignalsConfig(allowed_lateness_s=settings.allowed_lateness_s,
                         annotation_window_s=settings.annotation_window_s,
                         peer_bucket_s=settings.straggler_bucket_s, peer_idle_s=settings.straggler_idle_s)


def build_app(
    settings: LockstepSettings,
    bootstrap: str,
    inventory: InventoryIndex,
    *,
    metrics: WorkerMetrics | None = None,
    expected_origins: set[str] | None = None,
    on_finished: Callable[[int], None] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    emit: Emit | None = None,
    rules: Rules | None = None,
) -> tuple[LockstepApp, WorkerState]:
    """Build the Faust app and register its agents: the whole worker in one place.

    ``expected_origins`` (replay) makes correlation wait for every input partition instead of
    skipping idle ones, and ``on_finished(partition)`` is called once a correlation partition has
    seen the end of every input. ``emit(topic_name, key, value, partition)`` replaces sending to
    Kafka (Faust's agent test context uses it; production leaves it None): then there is no broker
    to read offsets from, and the recovery decisions carry on with what Faust hands over.
    """
    transport.register()
    cat = TopicCatalogue(settings)
    metrics = metrics or WorkerMetrics()
    state = WorkerState(inventory, progress=ProgressWatch(settings.correlation_stall_s), anomalies_topic=cat.anomalies)
    app = _faust_app(settings, bootstrap, loop)

    def topic(name: str | tuple[str, ...], partitions: int) -> Any:
        names = (name,) if isinstance(name, str) else name
        return app.topic(*names, key_serializer="raw", value_serializer="raw", partitions=partitions)

    topics = Topics(
        telemetry=topic(tuple(cat.telemetry_topics), settings.partitions),
        anomalies=topic(cat.anomalies, settings.partitions),
        alerts=topic(cat.alerts, settings.alerts_partitions),
        dlq=topic(cat.dlq, settings.inventory_partitions),
        stats=topic(cat.stats, settings.alerts_partitions),
        timelines=topic(cat.timelines, settings.partitions),
        annotations=topic(cat.annotations, settings.inventory_partitions),
    )
    raw_schema: Any = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    sink: Sink = FaustSink(app) if emit is None else CallbackSink(emit)
    rt = Runtime(
        settings=settings, app=app, catalogue=cat, topics=topics,
        detector_table=app.Table(DETECTOR_STATE_TABLE, default=None, partitions=settings.partitions,
                                 schema=raw_schema, key_type=bytes, value_type=bytes),
        correlator_table=app.Table(CORRELATOR_STATE_TABLE, default=None, partitions=settings.partitions,
                                   schema=raw_schema, key_type=bytes, value_type=bytes),
        state=state, metrics=metrics, sink=sink,
        offsets=Offsets(app, settings, bootstrap, metrics) if emit is None else None,
        snapshots=SnapshotWriter(sink, metrics), inventory=inventory,
        detector=detector_config(settings), correlator=correlator_config(settings), signals=signals_config(settings),
        rules=rules, expected_origins=expected_origins, on_finished=on_finished,
    )
    ingest, correlate = Ingest(rt), Correlate(rt)

    # The pipeline, stage by stage (docs/architecture.md): real formats -> native samples (convert),
    # samples -> episodes, points and progress (ingest), episodes -> alerts, timelines, stats (correlate).
    carriers = attach_carriers(app, settings, cat, rt.send, rt.dead_letter, metrics, to_kafka=emit is None,
                               offsets=rt.offsets, stalls=state.stalls)
    state.relay_last_offset = carriers.last_offset
    lanes: list[BatchLane] = []

    def lane(name: str, topic_names: Any, capacity: int) -> BatchLane:
        """agents.lane: an agent's records a fetch at a time, cleared with the agents' queues on a rebalance."""
        made = BatchLane(topic_names, capacity, app.flow_control.is_active, lambda: app.consumer_generation_id,
                         lambda outcome, n: metrics.lane_records.labels(name, outcome).inc(n), name=name)
        app.flow_control.manage_queue(made)  # type: ignore[arg-type]
        lanes.append(made)
        return made

    if emit is None and settings.ingest_lane:
        ingest.lane = lane("ingest", cat.telemetry_topics, 2 * settings.ingest_batch_messages)
    if emit is None and settings.correlate_lane:
        correlate.lane = lane("correlate", (cat.anomalies,), 4 * settings.correlate_batch_records)
    if ingest.lane is not None and correlate.lane is not None:  # downstream first (agents.lane), for a cadence at most
        ingest.lane.downstream, ingest.lane.downstream_wait_s = correlate.lane, settings.ingest_batch_within_s
    app.lockstep_lanes = tuple(lanes)
    app.agent(topics.telemetry, name="ingest")(ingest.run)
    app.agent(topics.annotations, name="forward_annotations")(correlate.forward_annotations)
    app.agent(topics.anomalies, name="correlate")(correlate.run)
    # Timers: progress to correlation, idle partitions advanced, stalled partitions re-read.
    app.timer(settings.watermark_interval_s, name="broadcast_watermarks")(
        never_raises("broadcast_watermarks")(ingest.watermark_tick))
    app.timer(1.0, name="tick_correlators")(never_raises("tick_correlators")(correlate.tick))
    if rt.offsets is not None:
        offsets = rt.offsets
        watched = {*cat.telemetry_topics, cat.anomalies, cat.annotations, *(c.topic for c in cat.carrier_topics())}

        async def heal_stalls() -> None:
            await offsets.heal_stalls(watched, state)

        app.timer(5.0, name="stall_watch")(never_raises("stall_watch")(heal_stalls))

    async def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        for tp in revoked:
            state.forget(tp.topic, tp.partition)

    app.on_partitions_revoked.connect(on_revoked)
    app.lockstep_state = state
    app.lockstep_metrics = metrics
    app.lockstep_runtime = rt
    app.lockstep_correlate = correlate  # (its tick, for tests that drive the timer themselves)
    return app, state


def _faust_app(settings: LockstepSettings, bootstrap: str, loop: asyncio.AbstractEventLoop | None) -> LockstepApp:
    """The Faust app with Lockstep's transport and the client settings that matter (docs/architecture.md)."""
    session = settings.session_timeout_s
    servers = [b.strip() for b in bootstrap.split(",") if b.strip()]
    app = LockstepApp(
        settings.app_id,
        broker=[f"lockstep://{server}" for server in servers],
        broker_credentials=faust_credentials(settings),
        store="memory://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.kafka_replication_factor,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        producer_linger_ms=settings.kafka_producer_linger_ms,
        broker_session_timeout=session,
        broker_heartbeat_interval=session / 10,
        broker_rebalance_timeout=session,
        broker_request_timeout=max(90.0, session * 3),
        broker_commit_interval=1.0,
        producer_max_request_size=MAX_RECORD_BYTES,
        web_enabled=False,
        table_cleanup_interval=3600.0,
        loop=loop,
    )
    app.lockstep_fetch_max_wait_ms = settings.kafka_fetch_max_wait_ms  # read by agents.transport
    if settings.recovery_fetch_ends:  # agents.transport: table recovery's true ends
        app.lockstep_end_probe = (settings, bootstrap)
    return app
