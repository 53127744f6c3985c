"""``lockstep replay`` of simulated scenarios through the real broker and the real Faust agents."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.topics import TopicCatalogue
from lockstep.replay import read_topic, replay, write_simulation
from models.settings import LockstepSettings

pytestmark = pytest.mark.broker

MALFORMED = [
    b"{this is not json",
    b'{"ts": 1764502900, "layer": "moon", "source": "x", "metric": "m", "value": 1}',
    b'{"ts": 1764502900, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL"}',
    b'{"ts": 1764502900, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": "97"}',
    b'{"ts": 12, "layer": "gpu", "source": "gpu001", "metric": "DCGM_FI_DEV_GPU_UTIL", "value": 97}',
    b'{"ts": 1764502900, "layer": "gpu", "source": "' + b"x" * 300 + b'", "metric": "m", "value": 1}',
    b'{"kind": "job", "ts": 1764502900, "job_id": "bad", "state": "RUNNING", "nodes": "gpu[1-", "gpus_per_node": 8}',
    b'{"hello": "world"}',
    b"[1, 2, 3]",
]
REASONS = ["not JSON", "unknown layer", "missing field 'value'", "value must be a number", "outside 2000-01-01",
           "source must be a string", "bad hostlist", "neither a sample", "expected a JSON object"]


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "seed.jsonl"
    write_simulation(path, "seed-incident")
    return path


def firing_and_resolved(alerts: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    return [(a["status"], a["job_id"], a["dedup_key"]) for a in alerts]


@pytest.fixture(scope="module")
def cli_replay(seed_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], str]:
    """`lockstep replay` as a user runs it: a subprocess, no Kafka configured (embedded broker)."""
    out = tmp_path_factory.mktemp("cli") / "alerts.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    proc = subprocess.run([sys.executable, "-m", "lockstep.cli", "replay", "--input", str(seed_file), "--output",
                           str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [orjson.loads(line) for line in out.read_text().splitlines()], proc.stderr


def test_cli_replay_of_the_seed_incident_gives_one_alert_and_its_resolution(
        cli_replay: tuple[list[dict[str, Any]], str]) -> None:
    alerts, stderr = cli_replay
    assert firing_and_resolved(alerts) == [
        ("firing", "llm-70b", "job_slowdown/llm-70b/network/switch/leaf03/port=17"),
        ("resolved", "llm-70b", "job_slowdown/llm-70b/network/switch/leaf03/port=17"),
    ]
    firing = alerts[0]
    assert firing["gpus"] == 256 and len(firing["nodes"]) == 32
    assert firing["root_cause"]["domain"] == "network"
    assert firing["root_cause"]["source"] == "leaf03" and firing["root_cause"]["labels"] == {"port": "17"}
    assert list(dict.fromkeys(e["layer"] for e in firing["timeline"])) == ["switch", "nccl", "gpu", "step"]
    assert "0 bad lines" in stderr


def test_malformed_lines_are_reported_and_every_good_line_still_processed(
        seed_file: Path, tmp_path: Path, settings: LockstepSettings,
        cli_replay: tuple[list[dict[str, Any]], str]) -> None:
    lines = seed_file.read_bytes().splitlines()
    mixed: list[bytes] = []
    bad_numbers = []
    for i, line in enumerate(lines):
        if i % 40_000 == 1000 and len(bad_numbers) < len(MALFORMED):
            mixed.append(MALFORMED[len(bad_numbers)])
            bad_numbers.append(len(mixed))
        mixed.append(line)
    # An operator's fix when the step time recovers: the stats report step time before and after it.
    mixed.append(orjson.dumps({"type": "annotation", "job_id": "llm-70b", "ts": "2025-11-30T11:43:13Z",
                               "kind": "fix", "text": "drained leaf03 port 17", "author": "netops"}))
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(mixed) + b"\n")
    out, err = io.StringIO(), io.StringIO()
    settings = settings.model_copy(update={"annotation_window_s": 40.0})
    summary = asyncio.run(replay(settings, path, out, stderr=err))
    assert summary["bad_lines"] == len(MALFORMED)
    reported = err.getvalue().splitlines()
    for number, reason, line in zip(bad_numbers, REASONS, reported, strict=True):
        assert line.startswith(f"{path}:{number}: ") and reason in line, line
    alerts = [orjson.loads(line) for line in out.getvalue().splitlines()]
    # Same input (the bad lines aside) -> exactly the same alert records as the clean run, ids included.
    assert alerts == cli_replay[0]
    assert summary["samples"] == sum(1 for line in lines if b'"layer"' in line)
    # Every bad line is on the dead-letter topic with its reason and original bytes.
    replay_settings = settings.model_copy(update={"topic_prefix": settings.topic_prefix})
    dlq = _replay_dlq(replay_settings)
    assert sorted(d["record"] for d in dlq) == sorted(f"line {n}" for n in bad_numbers)
    import base64
    assert {base64.b64decode(d["original"]) for d in dlq} == set(MALFORMED)
    # Question 7, "what happened after the fix?": step time p50 before and after the annotation.
    assert summary["annotations"] == 1
    stats = asyncio.run(read_topic(settings, settings.kafka_bootstrap_servers or "",
                                   TopicCatalogue(settings.model_copy(
                                       update={"topic_prefix": summary["topic_prefix"]})).stats))
    [effect] = [s for s in stats if s["type"] == "annotation_effect"]
    assert effect["job_id"] == "llm-70b" and effect["text"] == "drained leaf03 port 17"
    assert 1.8 < effect["before"]["p50"] < 2.3 and 0.9 < effect["after"]["p50"] < 1.1
    assert effect["p50_ratio"] < 0.6
    assert any(s["type"] == "stats" and "step_time" in s["metrics"] for s in stats)


def _replay_dlq(settings: LockstepSettings) -> list[dict[str, Any]]:
    """The replay ran under its own topic prefix (prefix + 'replay-<id>.'); find that dlq."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def go() -> list[dict[str, Any]]:
        assert settings.kafka_bootstrap_servers
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            topics = [t for t in await admin.list_topics()
                      if t.startswith(settings.topic_prefix + "replay-") and t.endswith(".dlq")]
        finally:
            await admin.close()
        assert len(topics) == 1, topics
        prefix = topics[0][: -len("dlq")]
        cat = TopicCatalogue(settings.model_copy(update={"topic_prefix": prefix}))
        return await read_topic(settings, settings.kafka_bootstrap_servers, cat.dlq)

    return asyncio.run(go())
