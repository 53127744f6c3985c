"""The consumer-group timing of the tests' workers (never production's: models/settings.py keeps its defaults).

Tansu answers a JoinGroup only after about half of the group's session timeout, so every worker start
and every rebalance in a broker test waits that long: 15 s with the default for a configured broker
(30 s), 3 s with :data:`SESSION_TIMEOUT_S`. Lockstep derives the rest from the session
(agents/app.py: heartbeat a tenth of it, rebalance timeout equal to it), so the settings carry only
the session; a test building a Faust app of its own uses :data:`HEARTBEAT_INTERVAL_S` and
:data:`REBALANCE_TIMEOUT_S`, the same derivation.

Shorter is not free: a worker that does not heartbeat for a session is removed from the group, and on a
loaded 2-core machine a busy worker's loop can stall for seconds. 6 s is what the fault tests' worker
processes (tests/faults/kit.py) have run with since they were written.
"""

from __future__ import annotations

#: Consumer-group session timeout of every test worker, in seconds (``kafka_session_timeout_s``).
SESSION_TIMEOUT_S = 6.0
#: What agents/app.py derives from :data:`SESSION_TIMEOUT_S`, for tests that build a Faust app directly.
HEARTBEAT_INTERVAL_S = SESSION_TIMEOUT_S / 10
REBALANCE_TIMEOUT_S = SESSION_TIMEOUT_S


def worker_env() -> dict[str, str]:
    """The same timing as environment variables, for a worker started as a process."""
    return {"LOCKSTEP_KAFKA_SESSION_TIMEOUT_S": f"{SESSION_TIMEOUT_S:g}"}
