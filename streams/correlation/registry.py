"""The correlation rules, in the order they judge each job. A new rule is a module and one line here."""

from __future__ import annotations

from collections.abc import Callable

from streams.correlation.rule import Rule
from streams.correlation.rules.clock_skew import ClockSkewRule
from streams.correlation.rules.contention import ContentionRule
from streams.correlation.rules.gpu_idle import GpuIdleRule
from streams.correlation.rules.job_end import JobEndRule
from streams.correlation.rules.job_stalled import JobStalledRule
from streams.correlation.rules.slowdown import SlowdownRule
from streams.correlation.rules.straggler import StragglerRule

#: Each entry makes one rule's state for one correlator. Order matters where rules meet: a slowdown
#: judged first fires the cause alert that inhibits the GPU symptom judged after it; the job end is
#: judged before all, so the others see the episodes of series that left the job ended.
RULES: tuple[Callable[[], Rule], ...] = (
    JobEndRule,
    SlowdownRule,
    ContentionRule,
    GpuIdleRule,
    ClockSkewRule,
    StragglerRule,
    JobStalledRule,
)
