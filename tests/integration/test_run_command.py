"""`lockstep run` (the README's first command minus the venv set-up): the seed alert within 60 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.broker


def test_run_shows_the_seed_incident_alert_within_60_seconds(tmp_path: object) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env["LOCKSTEP_DATA_DIR"] = str(tmp_path)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lockstep.cli", "run", "--exit-on", "firing", "--max-seconds", "60"],
                          env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    out = proc.stdout
    assert "embedded Kafka-protocol broker" in out
    assert "FIRING critical · job_slowdown · llm-70b (256 GPUs, 32 nodes)" in out
    assert "cause    network: switch leaf03 port=17 moved first" in out
    timeline = [line.split()[1] for line in out.split("timeline", 1)[1].splitlines()[1:] if line.startswith("    ")]
    assert list(dict.fromkeys(timeline)) == ["switch", "nccl", "gpu", "step"]
    assert elapsed < 60 + 15  # 60 s budget for the alert, plus shutdown
