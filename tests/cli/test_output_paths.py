"""Every CLI output path escapes what comes from outside: diagnose (over HTTP), tail, alerts."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lockstep.cli import main
from lockstep.commands.tail import render, render_message
from lockstep.render import render_alert
from lockstep.safetext import UNSAFE

EVIL = "x\x1b[2J\x1b]52;c;aGk=\x07\u202egpj\x9b\x7f\nforged"
SHOWN = "x\\x1b[2J\\x1b]52;c;aGk=\\x07\\u202egpj\\x9b\\x7f\\nforged"


def raw_unsafe(text: str) -> list[str]:
    """Unsafe characters in printed text, ignoring the renderer's own line breaks."""
    return [hex(ord(ch)) for ch in text if ord(ch) in UNSAFE and ch != "\n"]


def diagnosis() -> dict[str, Any]:
    return {"job_id": EVIL, "name": "pretrain " + EVIL, "status": "degraded", "alert_id": EVIL, "as_of_iso": None,
            "answers": [{"n": 1, "question": "Which GPUs take part in the job?", "answer": f"8 GPUs on {EVIL}"}]}


@pytest.fixture
def worker_api() -> Iterator[str]:
    """A local HTTP server answering /jobs/{id}/diagnosis with hostile strings (a worker's API shape)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/jobs/missing"):
                body, code = json.dumps({"error": f"no job {EVIL}"}).encode(), 404
            else:
                body, code = json.dumps(diagnosis(), ensure_ascii=False).encode(), 200
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("as_json", [False, True])
def test_diagnose_prints_no_raw_control_or_bidi_character(worker_api: str, as_json: bool,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["diagnose", "llm-70b", "--url", worker_api] + (["--json"] if as_json else [])
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert raw_unsafe(out) == []
    if as_json:
        assert json.loads(out) == diagnosis()  # escaped, yet the same data
    else:
        assert out.splitlines()[0].startswith(f"━━ {SHOWN} (pretrain {SHOWN}) · degraded · alert {SHOWN}")
        assert f"8 GPUs on {SHOWN}" in out


def test_diagnose_escapes_the_apis_error_message(worker_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "missing", "--url", worker_api]) == 1
    err = capsys.readouterr().err
    assert err == f"lockstep diagnose: 404: no job {SHOWN}\n"


def alert() -> dict[str, Any]:
    return {"status": "firing", "severity": "critical", "type": "job_slowdown", "job_id": EVIL, "gpus": 16,
            "nodes": ["a"], "summary": EVIL, "started_at": "2025-11-30T11:42:18.000Z",
            "symptom": {"metric": EVIL, "ratio": 2.0, "baseline": 1.0, "value": 2.0,
                        "onset": "2025-11-30T11:42:18.000Z"},
            "root_cause": {"domain": "network", "layer": "switch", "source": EVIL, "labels": {"port": EVIL},
                           "first_seen": "2025-11-30T11:42:10.000Z", "metric": EVIL, "meaning": EVIL},
            "other_jobs": [{"job_id": EVIL, "gpus": 8, "relation": EVIL}],
            "timeline": [{"ts": "2025-11-30T11:42:10.000Z", "layer": "switch", "source": EVIL,
                          "labels": {"port": EVIL}, "metric": EVIL, "value": 32.0, "p50": 0.0}]}


def test_alert_block_escapes_every_field() -> None:
    text = render_alert(alert())
    assert raw_unsafe(text) == []
    assert text.count(SHOWN[:20]) >= 8  # job, symptom, cause, other job, timeline, summary
    assert text.splitlines()[-1] == f"  {SHOWN}"


def anomaly(**over: Any) -> dict[str, Any]:
    rec = {"type": "anomaly", "phase": "start", "job_id": "llm-70b", "ts": 1764502930.0, "layer": "switch",
           "source": "leaf03", "labels": {"port": "17"}, "metric": "SymbolErrorCounter", "value": 32.0,
           "p50": 0.0, "score": 8.25}
    rec.update(over)
    return rec


@pytest.mark.parametrize(("rec", "printed"), [
    (anomaly(), "start llm-70b switch/leaf03 SymbolErrorCounter {'port': '17'} value=32.0 p50=0.0 score=8.25 "
                "at 11:42:10.000"),
    ({"type": "points", "job_id": "llm-70b", "origins": ["telemetry.gpu:0", "telemetry.step:1"],
      "lanes": {"step_time": [[1764502930.0, [1.0, 1.1]]], "gpu_util": [[1764502930.0, [90.0]],
                                                                         [1764502931.0, [91.0, 92.0, 93.0]]]},
      "workers": {"step_time": [[1764502930.0, [1.0], ["gpu001/rank0"]]]}},
     "points    llm-70b: gpu_util 4 values in 2 s 11:42:10.000-11:42:11.000, step_time 2 values in 1 s "
     "at 11:42:10.000; workers for step_time (from telemetry.gpu:0, telemetry.step:1)"),
    ({"type": "points", "job_id": "j", "lanes": {"step_time": [[1764502930.0, [1.0]]]},
      "origins": [f"telemetry.gpu:{i}" for i in range(6)]},
     "points    j: step_time 1 value in 1 s at 11:42:10.000 (from telemetry.gpu:0, telemetry.gpu:1, telemetry.gpu:2, "
     "telemetry.gpu:3, +2 more)"),
    ({"type": "points", "job_id": "j", "lanes": {}, "origins": []},
     "points    j: no lanes (from -)"),
    ({"type": "watermark", "origins": {"telemetry.gpu:0": 1764502930.0, "telemetry.nic:2": 1764502935.25},
      "eos": ["telemetry.nic:2"]},
     "watermark of 2 input partitions, event time 11:42:10.000 (slowest) to 11:42:15.250, 1 at end of input"),
    ({"type": "watermark", "origins": {}, "eos": []}, "watermark of 0 input partitions, 0 at end of input"),
    ({"type": "clock", "phase": "start", "source": "gpu005", "layer": "host", "ts": 1764502930.0, "offset": -6.0,
      "uncertainty": 0.1, "origin": "telemetry.host:1"},
     "clock start host/gpu005 offset -6.0 s (+/- 0.1) at 11:42:10.000"),
    ({"type": "annotation", "annotation_id": "a1", "job_id": "llm-70b", "ts": 1764502930.0, "kind": "config",
      "text": "batch 512\u202e", "author": "ops", "created_at": 1764502931.0},
     "annotation llm-70b config at 11:42:10.000: batch 512\\u202e (ops)"),
    ({"type": "timeline\x1b[2J", "x": 1}, "record of type 'timeline\\\\x1b[2J': "
                                         '{"type":"timeline\\\\x1b[2J","x":1}'),
    (anomaly(job_id=EVIL, score="high"), f"start {SHOWN} switch/leaf03 SymbolErrorCounter {{'port': '17'}} "
                                         "value=32.0 p50=0.0 score=high at 11:42:10.000"),
])
def test_tail_anomalies_prints_each_record_type_readably(rec: dict[str, Any], printed: str) -> None:
    assert render("anomalies", rec) == printed


def test_tail_dlq_escapes_the_original_and_says_when_it_is_empty() -> None:
    rec = {"stage": "ingest", "error": "DecodeFailed", "topic": "telemetry.gpu", "partition": 3, "offset": 17,
           "record": None, "reason": f"not JSON: {EVIL}", "original": base64.b64encode(EVIL.encode()).decode(),
           "original_size": len(EVIL.encode())}
    text = render("dlq", rec)
    assert raw_unsafe(text) == []
    assert text.splitlines() == ["DEAD LETTER ingest/DecodeFailed telemetry.gpu[3]@17 ",
                                 f"  reason   not JSON: {SHOWN}", f"  original {SHOWN} (33 bytes)"]
    empty = render("dlq", {**rec, "original": "", "original_size": 0, "reason": "tombstone"})
    assert empty.splitlines()[-1] == "  original (empty) (0 bytes)"


@pytest.mark.parametrize(("value", "as_json", "printed"), [
    (None, False, "tombstone (a record with no value)"),
    (b"\x1b[2Jnot json", False, "not JSON (12 bytes): \\x1b[2Jnot json"),
    (json.dumps({"type": "watermark", "origins": {}, "eos": [], "x": "\u202e\x7f"}, ensure_ascii=False).encode(),
     True, '{"type":"watermark","origins":{},"eos":[],"x":"\\u202e\\u007f"}'),
    (b"[1, 2]", False, "not a record object: [1,2]"),
])
def test_tail_message_lines(value: bytes | None, as_json: bool, printed: str) -> None:
    assert render_message("anomalies", value, as_json) == printed


def test_tail_alerts_says_when_a_record_is_not_an_alert() -> None:
    line = render_message("alerts", b'{"status": "firing", "job_id": "j\\u001b"}', as_json=False)
    assert line == """malformed record (KeyError('severity')): {"status":"firing","job_id":"j\\u001b"}"""
