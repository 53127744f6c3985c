"""The correlator's settings (built from :class:`models.settings.LockstepSettings` by the agents)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CorrelatorConfig:
    allowed_lateness_s: float = 5.0
    grace_s: float = 5.0
    lookback_s: float = 120.0
    resolve_after_s: float = 30.0
    critical_gpus: int = 64
    critical_ratio: float = 2.0
    idle_s: float = 10.0
    orphan_hold_s: float = 60.0
    timeline_limit: int = 40
    public_url: str | None = None
    #: A symptom alert (GPU utilisation) waits this long after it is due for a cause alert to inhibit it.
    symptom_hold_s: float = 10.0
    #: An incident stays firing at least this long; the same cause back within flap_window_s reopens it.
    min_firing_s: float = 30.0
    flap_window_s: float = 120.0
    #: Fraction of a job's GPUs whose utilisation must fall together for a gpu_utilisation alert.
    gpu_fraction: float = 0.25
    #: GPUs that fall idle this close to the job's end (or once it is no longer RUNNING) are the job
    #: ending, not a slowdown: a gpu_utilisation alert waits this long after it is due to know.
    #: Likewise a slowdown (onset within it of the job's start or end) and a stall.
    job_end_margin_s: float = 10.0
    #: A RUNNING job with no step time for this long, and for job_stall_steps of its usual intervals
    #: between step times, is stalled.
    job_stall_s: float = 15.0
    job_stall_steps: float = 5.0
