"""Checkpoint-stagger advice end to end: the ``checkpoint-contention`` scenario (train-a and train-b
checkpoint to lustre-a 5 s apart), replayed through the real embedded broker and agents, is read back
from ``GET /advice/checkpoints`` as a training launcher would: the pool, both jobs, the job to move
and by how much, as the alert on the ``alerts`` topic says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.openapi import openapi_document
from agents.topics import TopicCatalogue
from lockstep.broker import EmbeddedBroker
from lockstep.replay import read_topic, write_simulation
from models.timeutil import parse_ts

from .client import get
from .conftest import TOKEN, LiveWorker, _feed_seed_incident, web_settings, worker_in_thread
from .test_web_openapi import conforms

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def contention_worker(web_broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWorker]:
    """A worker with the API, fed the checkpoint-contention scenario the way ``lockstep replay`` feeds it."""
    tmp = tmp_path_factory.mktemp("advice")
    path = tmp / "contention.jsonl"
    write_simulation(path, "checkpoint-contention")
    settings = web_settings(web_broker, tmp, api_token=TOKEN)
    with worker_in_thread("contention-worker",
                          lambda: _feed_seed_incident(settings, web_broker.bootstrap, path)) as (worker, summary, loop):
        yield LiveWorker(worker.web_url, settings, web_broker.bootstrap, loop, worker, summary=summary)


def test_a_launcher_reads_which_job_to_move_and_by_how_much(contention_worker: LiveWorker) -> None:
    w = contention_worker
    alerts = w.call(read_topic(w.settings, w.bootstrap, TopicCatalogue(w.settings).alerts))
    assert [(a["type"], a["status"]) for a in alerts] == [("checkpoint_contention", "firing"),
                                                        ("checkpoint_contention", "resolved")]
    resolved = alerts[-1]
    advice = resolved["details"]["advice"]
    reply = get(w.url, "/advice/checkpoints")
    assert reply.status == 200, reply.body
    d = reply.json
    assert d["window"] == "7d" and d["as_of"] >= parse_ts(resolved["resolved_at"])
    (pool,) = d["pools"]
    assert pool["pool"] == "lustre-a" and pool["state"] == "clear" and pool["contentions"] == 1
    assert pool["latest"] == {"alert_id": resolved["alert_id"], "status": "resolved",
                              "started_at": resolved["started_at"],
                              "overlap_s": resolved["details"]["overlap"]["seconds"], "advice": advice["text"]}
    a, b = pool["jobs"]
    assert (a["job_id"], a["gpus"], a["move"], a["offset_s"]) == ("train-a", 64, False, 0.0)
    assert (b["job_id"], b["gpus"], b["move"], b["offset_s"]) == ("train-b", 32, True, advice["by_seconds"])
    assert advice["move"] == "train-b" and advice["by_seconds"] > 25.0  # after train-a's 30 s write, 5 s later
    # one checkpoint each so far: the starts as observed (train-b 5 s after train-a), no period yet
    assert parse_ts(b["last_write_at"]) - parse_ts(a["last_write_at"]) == pytest.approx(5.0, abs=1.0)
    assert a["writes"] == b["writes"] == 1 and a["period_s"] is None and b["suggested_start_at"] is None
    doc = openapi_document()
    conforms(doc, reply, "/advice/checkpoints")
    assert get(w.url, "/advice/checkpoints?pool=lustre-a").json["pools"] == d["pools"]
    assert get(w.url, "/advice/checkpoints?pool=nfs-home").json["pools"] == []
    for bad, says in [("window=7", "window must be"), ("gpus=8", "unknown query")]:
        err = get(w.url, f"/advice/checkpoints?{bad}")
        assert err.status == 400 and says in err.json["error"], (bad, err.json)
        conforms(doc, err, "/advice/checkpoints")
