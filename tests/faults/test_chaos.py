"""A short chaos run (benchmarks.chaos) as a test: live traffic with incidents through two workers that are
killed, stopped, restarted, added and removed at random, the input paused; what reached ``anomalies``
and ``alerts`` must be what a fault-free run gives (every anomaly, none extra; one alert episode an
incident, fired and resolved once) and the group must commit everything.

On demand (``LOCKSTEP_SLOW_TESTS=1``, about 5 minutes): the fault tests beside it take each fault on its
own, deterministically; this one mixes them at random over a longer stretch, as a cluster would.
``python -m benchmarks.chaos`` runs it longer and with other seeds (docs/performance.md, "Chaos runs").
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.chaos import chaos

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_a_random_mix_of_faults_loses_nothing_and_alerts_once_an_incident() -> None:
    out = asyncio.run(chaos(minutes=3.0, rate=8_000.0, gpus=256, incident_every_s=40.0, every_s=12.0, workers=2,
                            max_workers=3, seed=3, carriers="all", settle_s=180.0))
    done = [a["action"] for a in out["actions"]]
    assert sum(1 for a in done if a in ("kill", "term", "leave", "join", "pause")) >= 5, done
    assert out["incidents"] >= 3, out["per_incident"]
    assert out["pass"], {k: out[k] for k in ("lost", "extra", "lost_or_extra_by_source", "per_incident",
                                            "unexpected_episodes", "episodes_fired_twice", "lag_messages",
                                            "log_dir")}
