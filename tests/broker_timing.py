"""The consumer-group timing of the tests' workers (never production's: models/settings.py keeps its defaults).

Tansu answers a JoinGroup only after about half of the group's session timeout, so every worker start
and every rebalance in a broker test waits that long: 15 s with the default for a configured broker
(30 s), 5 s with :data:`SESSION_TIMEOUT_S`. Lockstep derives the rest from the session
(agents/app.py: heartbeat a tenth of it, rebalance timeout equal to it), so the settings carry only
the session; a test building a Faust app of its own uses :data:`HEARTBEAT_INTERVAL_S` and
:data:`REBALANCE_TIMEOUT_S`, the same derivation.

Shorter is not free: a worker that does not heartbeat for a session is removed from the group, and on a
loaded 2-core machine a busy worker's loop can stall for seconds. With 6 s, a whole-suite run at load
8-12 failed test_a_seed_replay_mixing_real_formats_and_native_samples_gives_the_native_alert (4.8 s loop
stalls in the pytest process, then a partition inactive and read again: LateData; it passes alone), so a
worker in the test process gets 10 s (the embedded broker's default). A worker process
(tests/faults/kit.py) has a loop of its own and keeps :data:`WORKER_PROCESS_SESSION_TIMEOUT_S`, what the
fault tests have run with since the session became configurable.
"""

from __future__ import annotations

#: Consumer-group session timeout of every test worker, in seconds (``kafka_session_timeout_s``).
SESSION_TIMEOUT_S = 10.0
#: The session of a test's worker process (``python -m lockstep.cli worker``).
WORKER_PROCESS_SESSION_TIMEOUT_S = 6.0
#: What agents/app.py derives from :data:`SESSION_TIMEOUT_S`, for tests that build a Faust app directly.
HEARTBEAT_INTERVAL_S = SESSION_TIMEOUT_S / 10
REBALANCE_TIMEOUT_S = SESSION_TIMEOUT_S


def worker_env() -> dict[str, str]:
    """The timing of a worker started as a process, as environment variables."""
    return {"LOCKSTEP_KAFKA_SESSION_TIMEOUT_S": f"{WORKER_PROCESS_SESSION_TIMEOUT_S:g}"}
