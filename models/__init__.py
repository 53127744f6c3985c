"""Lockstep's data contracts (pydantic) and its one settings model."""

from models.alerts import Alert, AlertStatus, Domain, RootCause, Severity, Symptom, TimelineEntry
from models.inventory import JobEvent, JobState, LinkEvent, PoolEvent, SwitchEvent, inventory_adapter
from models.records import AnomalyRecord, DeadLetter, WatermarkRecord
from models.samples import Layer, MetricKind, TelemetrySample
from models.settings import LockstepSettings

__all__ = [
    "Alert",
    "AlertStatus",
    "AnomalyRecord",
    "DeadLetter",
    "Domain",
    "JobEvent",
    "JobState",
    "Layer",
    "LinkEvent",
    "LockstepSettings",
    "MetricKind",
    "PoolEvent",
    "RootCause",
    "Severity",
    "SwitchEvent",
    "Symptom",
    "TelemetrySample",
    "TimelineEntry",
    "WatermarkRecord",
    "inventory_adapter",
]
