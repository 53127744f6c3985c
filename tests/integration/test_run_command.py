"""`lockstep run` (the README's first command minus the venv set-up): the seed alert within 60 s."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

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
    # The banner names this run's fault time: the time the alert's cause moved first.
    banner = re.search(r"^lockstep: first fault at (\d\d:\d\d:\d\d) UTC event time, in about \d+ s;", out, re.M)
    cause = re.search(r"^  cause    network: switch leaf03 port=17 moved first at (\d\d:\d\d:\d\d)\.\d{3}", out, re.M)
    assert banner and cause, out[:3000]
    assert banner.group(1) == cause.group(1)


def seconds_behind(wall: datetime, clock: str) -> float:
    """How far the time of day ``HH:MM:SS.mmm`` is behind ``wall`` (negative: ahead), across midnight too."""
    h, m, s = clock.split(":")
    of_day = int(h) * 3600 + int(m) * 60 + float(s)
    wall_of_day = wall.hour * 3600 + wall.minute * 60 + wall.second + wall.microsecond / 1e6
    return (wall_of_day - of_day + 43200) % 86400 - 43200


def test_run_never_stamps_an_alert_time_ahead_of_the_wall_clock(tmp_path: Path) -> None:
    """The resolved alert's time (Alertmanager's ``endsAt``) is in the past when it is printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env["LOCKSTEP_DATA_DIR"] = str(tmp_path)
    stderr = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "lockstep.cli", "run", "--exit-on", "resolved",
                             "--max-seconds", "90"], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    times: list[tuple[str, float]] = []  # (what, seconds behind the wall clock when the line arrived)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            wall = datetime.now(UTC)
            lines.append(line)
            for what, pattern in (("started", r"since (\d\d:\d\d:\d\d\.\d{3})"),
                                  ("first mover", r"moved first at (\d\d:\d\d:\d\d\.\d{3})"),
                                  ("resolved", r"^  resolved (\d\d:\d\d:\d\d\.\d{3})")):
                found = re.search(pattern, line)
                if found:
                    times.append((what, seconds_behind(wall, found.group(1))))
        assert proc.wait(timeout=30) == 0, "".join(lines)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    assert [w for w, _ in times if w == "resolved"] == ["resolved"], "".join(lines)[-3000:]
    assert all(behind >= 0 for _, behind in times), times
