"""Prometheus metrics of one worker process (served on ``/metrics``).

Each worker builds one :class:`WorkerMetrics` on its own registry, so tests can run several
workers in one process without metric name clashes.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("lockstep_messages_in_total", "Kafka messages consumed", ["topic"], registry=r)
        self.samples_in = Counter("lockstep_samples_in_total", "Valid samples processed", ["topic", "layer"],
                                  registry=r)
        self.dead_letters = Counter("lockstep_dead_letters_total", "Records sent to the dead-letter topic",
                                    ["stage", "error"], registry=r)
        self.out_of_order = Counter("lockstep_out_of_order_total", "Samples at or before their series' last time",
                                    ["topic"], registry=r)
        self.duplicates = Counter("lockstep_duplicate_samples_total", "Exact duplicate samples dropped",
                                  ["topic"], registry=r)
        # Not "counter_resets": promtool rejects a metric name containing its type ("counter").
        self.counter_resets = Counter("lockstep_series_resets_total", "Resets or wraps of cumulative input series "
                                      "seen", ["topic"], registry=r)
        self.unknown_metrics = Counter("lockstep_unknown_metric_series_total",
                                       "Series whose metric name the catalogue does not know", ["topic"], registry=r)
        self.anomalies = Counter("lockstep_anomalies_total", "Anomaly episode transitions mapped to jobs",
                                 ["layer", "phase"], registry=r)
        self.unmapped = Counter("lockstep_unmapped_anomalies_total",
                                "Anomaly transitions that no job in the inventory could be tied to", registry=r)
        self.late = Counter("lockstep_late_evidence_total",
                            "Anomalies that arrived after the watermark passed them (beyond allowed lateness)",
                            registry=r)
        self.alerts = Counter("lockstep_alerts_total", "Alert records emitted", ["type", "severity", "status"],
                              registry=r)
        self.alerts_recovered = Counter(
            "lockstep_alerts_recovered_total", "Alert records a restored correlation partition's catch-up decided "
            "that the previous owner never sent (sent then; agents.recovery.unsent)", ["type", "status"], registry=r)
        self.inhibited = Counter("lockstep_alerts_inhibited_total",
                                 "Symptom alerts not emitted because a cause alert inhibits them", ["type"], registry=r)
        self.stage_seconds = Histogram(
            "lockstep_stage_seconds", "Processing time per message and stage", ["stage"], registry=r,
            buckets=(1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0))
        self.watermark = Gauge("lockstep_watermark_seconds", "Correlation watermark (event time)", ["partition"],
                               registry=r)
        self.series = Gauge("lockstep_series", "Series held per input partition", ["origin"], registry=r)
        self.late_sources = Gauge("lockstep_late_sources",
                                  "Sources whose samples arrive late against their peers' with unstable delays (late "
                                  "delivery, not a clock skew: never re-timed)", ["origin"], registry=r)
        self.series_refused = Counter(
            "lockstep_series_refused_samples_total", "Samples of new series refused by a series cap "
            "(reason: max_series_per_partition or max_series_per_source); dead-lettered one record per message",
            ["origin", "reason"], registry=r)
        self.series_evicted = Counter("lockstep_series_evicted_total",
                                      "Series evicted after series_idle_s of event time without a sample",
                                      ["origin"], registry=r)
        self.inventory_events = Gauge("lockstep_inventory_events", "Inventory events applied", registry=r)
        self.snapshots = Counter("lockstep_state_snapshots_total", "State snapshots written", ["table"], registry=r)
        self.gaps = Counter("lockstep_input_gaps_total",
                            "Holes in the offsets an agent was handed (records Faust never delivered), read from the "
                            "broker and processed: filled (records found), empty (markers, compaction) or incomplete "
                            "(the broker stopped answering before the hole was read)",
                            ["topic", "outcome"], registry=r)
        self.broker_up = Gauge("lockstep_broker_up", "1 while the broker answers the worker's metadata probe",
                               registry=r)
        self.group_wait = Gauge("lockstep_group_wait_seconds", "Seconds this worker has waited for its consumer "
                                "group to assign it partitions, at start or in a rebalance (0 while it holds an "
                                "assignment)", registry=r)
        self.batch_retries = Counter("lockstep_ingest_batch_retries_total",
                                     "Ingest batches that raised and were retried message by message",
                                     ["topic"], registry=r)
        self.lane_records = Counter(
            "lockstep_lane_records_total", "Records put through a lane (agents.lane: ingest for telemetry, "
            "correlate for anomalies): taken by its agent, or dropped as stale around a rebalance (Faust delivers "
            "them again from the group's commit)", ["lane", "outcome"], registry=r)
        self.stalls = Counter("lockstep_partition_stalls_total",
                              "Input partitions found not delivering with records waiting, resumed and re-read",
                              ["topic"], registry=r)
        self.restores = Counter("lockstep_state_restores_total", "State restored from snapshots", ["table"],
                                registry=r)
