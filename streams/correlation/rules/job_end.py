"""Job end: the series of a job that ended leave it, so their episodes end with the job.

A job's series (its GPUs, its ranks' steps and collectives, its NICs) stop describing it when the
scheduler releases its nodes (``JobInfo.end``: COMPLETED, CANCELLED, FAILED, ...). An episode of such a
series still open then would never end in this job's timeline (the series' next samples belong to no
job, or to the next job on the node), and every alert built on it would stay open forever: judged
first, this rule ends them at the job's end, once the horizon has passed it::

    gpu  n1 gpu0  DCGM_FI_DEV_GPU_UTIL  ....XXXXXXXXXXXXXXXXXXXX      (the series leaves the job)
    job  j        scheduler             RUNNING..|COMPLETED at E
    timeline      gpu n1 gpu0 episode   ....XXXXXX|                  ends at E
"""

from __future__ import annotations

from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import JobTimeline


class JobEndRule(BaseRule):
    name = "job_end"

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        info = ctx.inventory.job(job.job_id)
        if info is None or info.end is None or horizon < info.end:
            return
        end = info.end
        for episodes in job.episodes.values():
            for ep in episodes:
                if ep.end_ts is None and ep.ts < end:
                    ep.end_ts = end
