"""A job's lifecycle as the scheduler states it: the RUNNING span evidence counts in.

Evidence about a job counts only while the job runs: from its start plus a settling margin (start-up:
compilation, the first data loads) to the moment the scheduler said it no longer runs (COMPLETING,
SUSPENDED, or its end) minus the same margin (the final checkpoint, ranks exiting before the scheduler
notices). Times are the scheduler's own (``JobInfo.start``, ``JobInfo.running_until``)::

    job   RUNNING |......................................| COMPLETING | COMPLETED
    counts        |<-margin->|........................|<-margin->|
"""

from __future__ import annotations

from streams.inventory import JobInfo


def running_end(info: JobInfo) -> float | None:
    """When the job stopped running, as the scheduler said; None while it runs.

    >>> running_end(JobInfo("j", ["n1"], 8, [], 0.0, end=50.0, state="COMPLETED", running_until=40.0))
    40.0
    >>> running_end(JobInfo("j", ["n1"], 8, [], 0.0, end=50.0, state="COMPLETED"))
    50.0
    >>> running_end(JobInfo("j", ["n1"], 8, [], 0.0)) is None
    True
    """
    return info.running_until if info.running_until is not None else info.end


def settled(info: JobInfo, t: float, margin: float) -> bool:
    """Whether evidence at ``t`` counts for the job: at least ``margin`` after its start and more than
    ``margin`` before it stopped running (as far as the scheduler has said).

    >>> job = JobInfo("j", ["n1"], 8, [], 100.0, running_until=200.0)
    >>> [settled(job, t, 10.0) for t in (105.0, 110.0, 189.0, 190.0)]
    [False, True, True, False]
    """
    end = running_end(info)
    return info.start + margin <= t and (end is None or t + margin < end)
