"""The HTTP API of a running worker fed the seed incident: every endpoint names the right job, GPUs,
nodes, paths, pool, first mover and domain; writes reach their topics; the OpenAPI document holds."""

from __future__ import annotations

from typing import Any

import pytest

from agents.topics import TopicCatalogue
from lockstep.replay import read_topic
from models.alerts import Alert
from models.timeutil import parse_ts
from streams.lanes import LANE_ORDER

from .client import get, request
from .conftest import LiveWorker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1200)]

JOB = "llm-70b"
HOSTLIST = "gpu[001-020,025-036]"
FAULT = parse_ts("2025-11-30T11:42:10Z")
ONSET = parse_ts("2025-11-30T11:42:18Z")


def assert_first_mover(fm: dict[str, Any]) -> None:
    assert fm["source"] == "leaf03" and fm["labels"] == {"port": "17"}, fm
    assert fm["layer"] == "switch" and fm["domain"] == "network" and fm["lane"] == "fabric_errors"
    assert fm["ts"] == pytest.approx(FAULT, abs=0.5) and fm["where"] == "leaf03 port 17"


def the_alert(w: LiveWorker) -> dict[str, Any]:
    alerts = get(w.url, f"/alerts?job={JOB}").json["alerts"]
    slowdowns = [a for a in alerts if a["type"] == "job_slowdown"]
    assert len(slowdowns) == 1, alerts
    first: dict[str, Any] = slowdowns[0]
    return first


def test_jobs_lists_every_job_with_its_live_status(seed_worker: LiveWorker) -> None:
    r = get(seed_worker.url, "/jobs")
    assert r.status == 200 and r.headers["content-type"].startswith("application/json")
    jobs = {j["job_id"]: j for j in r.json["jobs"]}
    assert set(jobs) == {"llm-70b", "vision-7b", "rec-ft"}
    llm = jobs[JOB]
    assert (llm["gpus"], llm["nodes"], llm["pools"]) == (256, 32, ["lustre-a"])
    assert llm["status"] == "recovered" and llm["alert"]["status"] == "resolved"
    assert llm["alert"]["domain"] == "network"
    assert_first_mover(llm["alert"]["first_mover"])
    assert jobs["vision-7b"]["status"] == "ok" and jobs["vision-7b"]["gpus"] == 64
    assert r.json["jobs"][0]["job_id"] == JOB  # the job that had trouble comes first
    assert llm["step_time"]["ratio"] == pytest.approx(1.0, abs=0.1)  # it recovered


def test_job_detail_gives_gpus_nodes_paths_and_pool(seed_worker: LiveWorker) -> None:
    d = get(seed_worker.url, f"/jobs/{JOB}").json
    assert d["gpus"] == 256 and d["gpus_per_node"] == 8 and len(d["gpu_list"]) == 256
    assert d["gpu_list"][:2] == ["gpu001:0", "gpu001:1"] and len(set(d["gpu_list"])) == 256
    assert d["nodes"] == 32 and len(d["node_list"]) == 32 and d["hostlist"] == HOSTLIST
    assert len(d["paths"]) == 32
    by_node = {p["node"]: p for p in d["paths"]}
    assert by_node["gpu019"] == {"node": "gpu019", "device": "mlx5_0", "port": "1", "switch": "leaf03",
                                 "switch_port": "17", "fabric": "infiniband", "spines": ["spine01", "spine02"]}
    assert [lf["switch"] for lf in d["leaves"]] == ["leaf01", "leaf02", "leaf03", "leaf04", "leaf05"]
    assert d["spines"] == ["spine01", "spine02"] and d["fabrics"] == ["infiniband"]
    assert d["pools"] == ["lustre-a"] and [p["pool"] for p in d["storage"]] == ["lustre-a"]
    assert d["storage"][0]["shared_with"] == [{"job_id": "vision-7b", "gpus": 64}]
    assert get(seed_worker.url, "/jobs/no-such-job").status == 404


def test_timeline_aligns_every_lane_and_marks_first_mover_and_incident(seed_worker: LiveWorker) -> None:
    tl = get(seed_worker.url, f"/jobs/{JOB}/timeline").json
    assert [lane["lane"] for lane in tl["lanes"]] == list(LANE_ORDER)
    n = len(tl["ts"])
    assert n >= 170 and tl["step"] == 1 and tl["ts"][1] - tl["ts"][0] == 1
    for lane in tl["lanes"]:
        assert lane["has_data"], lane["lane"]
        for key in ("p50", "p99", "min", "max", "n"):
            assert len(lane[key]) == n
        assert all(lo is None or hi is None or lo <= hi + 1e-9 for lo, hi in zip(lane["p50"], lane["p99"], strict=True))
    assert_first_mover(tl["first_mover"])
    inc = tl["incident"]
    assert inc["start"] == pytest.approx(FAULT, abs=0.5) and inc["onset"] == pytest.approx(ONSET, abs=0.5)
    assert inc["end"] is not None and inc["end"] > ONSET + 30
    assert inc["domain"] == "network" and inc["status"] == "resolved"
    step = next(lane for lane in tl["lanes"] if lane["lane"] == "step_time")
    during = step["p50"][tl["ts"].index(ONSET + 5)]
    assert during == pytest.approx(2.0, rel=0.15)  # step time doubled in the incident ...
    assert step["baseline"]["p50"] == pytest.approx(1.0, rel=0.1)  # ... against its baseline before it
    firsts: dict[str, dict[str, Any]] = {}
    for m in tl["anomalies"]:
        firsts.setdefault(m["layer"], m)
    assert firsts["switch"]["ts"] == pytest.approx(FAULT, abs=0.5) and firsts["switch"]["lane"] == "fabric_errors"
    assert firsts["switch"]["metric"] == "SymbolErrorCounter"  # the physical signal is named first
    assert firsts["nccl"]["ts"] == pytest.approx(FAULT + 2, abs=0.5) and firsts["nccl"]["lane"] == "collective_time"
    assert firsts["gpu"]["ts"] == pytest.approx(FAULT + 5, abs=0.5) and firsts["gpu"]["entities"] == 256
    assert firsts["step"]["ts"] == pytest.approx(ONSET, abs=0.5) and firsts["step"]["role"] == "symptom"


def test_timeline_windows_and_their_errors(seed_worker: LiveWorker) -> None:
    url = seed_worker.url
    iso = get(url, f"/jobs/{JOB}/timeline?from=2025-11-30T11:42:00Z&to=2025-11-30T11:43:00Z").json
    assert (iso["from"], iso["to"], len(iso["ts"])) == (FAULT - 10, FAULT + 50, 60)
    coarse = get(url, f"/jobs/{JOB}/timeline?from={FAULT - 10:.0f}&to={FAULT + 50:.0f}&step=10").json
    assert coarse["ts"] == [FAULT - 10 + 10 * k for k in range(6)]
    alert = the_alert(seed_worker)
    around = get(url, f"/jobs/{JOB}/timeline?alert={alert['alert_id']}").json
    assert around["from"] == FAULT - 60 and around["incident"]["alert_id"] == alert["alert_id"]
    for query, message in [
        ("from=2025-11-30T11:43:00Z&to=2025-11-30T11:42:00Z", "from must be before to"),
        ("from=yesterday", "not RFC 3339"), ("from=2025-11-30T11:42:00", "no UTC offset"),
        (f"from={FAULT:.0f}&to={FAULT + 86400:.0f}", "at most"), ("step=0", "step must be"),
        ("step=ten", "in ASCII digits"), ("alert=nope", "not an alert of job"), ("bogus=1", "unknown query"),
    ]:
        r = get(url, f"/jobs/{JOB}/timeline?{query}")
        assert r.status == 400 and message in r.json["error"], (query, r.json)
        assert r.json["status"] == 400
    assert get(url, "/jobs/nobody/timeline").status == 404


def test_diagnosis_gives_the_seven_answers_with_evidence(seed_worker: LiveWorker) -> None:
    d = get(seed_worker.url, f"/jobs/{JOB}/diagnosis").json
    assert (d["job_id"], d["gpus"], d["nodes"], d["pools"], d["domain"]) == (JOB, 256, 32, ["lustre-a"], "network")
    assert_first_mover(d["first_mover"])
    answers = {a["key"]: a for a in d["answers"]}
    assert [a["n"] for a in d["answers"]] == [1, 2, 3, 4, 5, 6, 7]
    assert answers["gpus"]["answer"].startswith("256 GPUs: 8 on each of 32 nodes")
    assert HOSTLIST in answers["nodes"]["answer"] and len(answers["nodes"]["evidence"]["nodes"]) == 32
    paths = answers["paths"]
    assert "leaf03 port 17 carries the links of gpu019" in paths["answer"]
    assert len(paths["evidence"]["paths"]) == 32 and paths["evidence"]["spines"] == ["spine01", "spine02"]
    assert answers["storage"]["answer"].startswith("lustre-a")
    change = answers["change"]
    assert "first leaf03 port 17 SymbolErrorCounter at 11:42:10" in change["answer"]
    assert [s["layer"] for s in change["evidence"]["sequence"]][:1] == ["switch"]
    offsets = {s["layer"]: s["offset_s"] for s in change["evidence"]["sequence"]}
    assert [round(offsets[layer]) for layer in ("nccl", "gpu", "step")] == [2, 5, 8]
    lanes = {lane["lane"]: lane for lane in change["evidence"]["lanes"]}
    assert lanes["step_time"]["ratio"] == pytest.approx(2.0, rel=0.15)
    assert lanes["gpu_util"]["ratio"] < 0.7
    assert answers["domain"]["answer"].startswith("network:")
    assert answers["domain"]["evidence"]["order"] == ["switch", "nccl", "gpu", "step"]
    after = answers["after_fix"]
    assert after["answer"].startswith("resolved at") and "back to" in after["answer"], after
    assert after["evidence"]["recovered"] is True
    assert get(seed_worker.url, "/jobs/nobody/diagnosis").status == 404
    quiet = get(seed_worker.url, "/jobs/vision-7b/diagnosis").json
    assert quiet["domain"] is None and quiet["gpus"] == 64 and quiet["pools"] == ["lustre-a"]


def test_alerts_with_their_lifecycle(seed_worker: LiveWorker) -> None:
    a = the_alert(seed_worker)
    assert (a["job_id"], a["gpus"], a["nodes"], a["domain"], a["status"]) == (JOB, 256, 32, "network", "resolved")
    assert_first_mover(a["first_mover"])
    assert [e["status"] for e in a["lifecycle"]] == ["firing", "resolved"]
    assert a["lifecycle"][0]["at"] == a["detected_at"] and a["lifecycle"][1]["at"] == a["resolved_at"]
    detail = get(seed_worker.url, f"/alerts/{a['alert_id']}").json
    Alert.model_validate(detail["alert"])  # the record itself, as on the alerts topic
    assert detail["firing"]["status"] == "firing" and detail["alert"]["status"] == "resolved"
    assert detail["alert"]["root_cause"]["source"] == "leaf03"
    assert get(seed_worker.url, "/alerts?status=firing").json["alerts"] == []
    assert get(seed_worker.url, "/alerts?status=maybe").status == 400
    assert get(seed_worker.url, "/alerts?limit=0").status == 400
    assert get(seed_worker.url, "/alerts/does-not-exist").status == 404


def test_fabric_port_says_who_is_behind_it(seed_worker: LiveWorker) -> None:
    f = get(seed_worker.url, "/fabric/leaf03/17").json
    assert [n["node"] for n in f["nodes"]] == ["gpu019"]
    assert f["jobs"] == [{"job_id": JOB, "name": "llm-70b-pretrain", "gpus_total": 256, "gpus_behind_port": 8,
                          "nodes_behind_port": ["gpu019"]}]
    assert f["gpus_behind_port"] == 8 and f["uplinks"] == ["spine01", "spine02"]
    assert {j["job_id"]: j["gpus"] for j in f["switch_jobs"]} == {JOB: 256, "vision-7b": 64}
    assert {a["metric"] for a in f["anomalies"]} >= {"SymbolErrorCounter"}
    assert [a["job_id"] for a in f["alerts"]] == [JOB]
    assert (f["peer"], f["speed_gbps"]) == (None, 200.0)  # a host's port: its link's line rate
    r = get(seed_worker.url, "/fabric/leaf03/99")
    assert r.status == 404 and "no NIC is cabled to leaf03 port 99" in r.json["error"]


def test_fabric_port_of_a_leaf_spine_link_names_the_jobs_crossing_it(seed_worker: LiveWorker) -> None:
    """leaf03's uplink port 1 (to spine01) and spine01's port 3 (to leaf03) are one cable: the jobs behind
    leaf03 that span leaves cross it, with their nodes there; leaf06's uplink carries no job's traffic
    (rec-ft sits on leaf06 alone)."""
    want = {JOB: (32, ["gpu017", "gpu018", "gpu019", "gpu020"]),
            "vision-7b": (32, ["gpu021", "gpu022", "gpu023", "gpu024"])}
    for path, peer in (("/fabric/leaf03/1", "spine01"), ("/fabric/spine01/3", "leaf03")):
        f = get(seed_worker.url, path).json
        assert (f["peer"], f["speed_gbps"], f["nodes"]) == (peer, 400.0, []), path
        assert {j["job_id"]: (j["gpus_behind_port"], j["nodes_behind_port"]) for j in f["jobs"]} == want, path
        assert f["gpus_behind_port"] == 64
    quiet = get(seed_worker.url, "/fabric/leaf06/1").json
    assert (quiet["peer"], quiet["jobs"], quiet["gpus_behind_port"]) == ("spine01", [], 0)
    assert [j["job_id"] for j in quiet["switch_jobs"]] == ["rec-ft"]


def test_probes_and_metrics(seed_worker: LiveWorker) -> None:
    assert get(seed_worker.url, "/healthz").json == {"status": "ok"}
    ready = get(seed_worker.url, "/readyz")
    assert ready.status == 200 and ready.json["ready"] is True
    assert ready.json["checks"] == {"broker": True, "group": True, "inventory": True, "agents": True,
                                    "read_model": True, "correlation": True}
    assert get(seed_worker.url, f"/jobs/{JOB}").status == 200  # so the route's latency is recorded
    text = get(seed_worker.url, "/metrics", headers={"Accept": "text/plain"}).body.decode()
    cat = TopicCatalogue(seed_worker.settings)
    assert f'lockstep_consumer_lag_records{{consumer="readmodel",partition="0",topic="{cat.timelines}"}} 0.0' in text
    assert 'lockstep_consumer_lag_records{consumer="agents"' in text
    assert 'lockstep_http_request_seconds_count{method="GET",route="/jobs/{job_id}",status="200"}' in text
    assert 'lockstep_readmodel_records_total{result="applied",topic="timelines"}' in text
    assert "lockstep_samples_in_total" in text and "lockstep_alerts_total" in text  # the worker's own


def test_writes_need_the_token_and_reach_their_topics(seed_worker: LiveWorker) -> None:
    url, token = seed_worker.url, seed_worker.token
    note = {"job_id": JOB, "kind": "fix", "text": "reseated the cable on leaf03 port 17", "ts": "2025-11-30T11:43:05Z",
            "author": "netops"}
    assert request(url, "/annotations", method="POST", body=note).status == 401
    assert request(url, "/annotations", method="POST", body=note, token="wrong").status == 401
    r = request(url, "/annotations", method="POST", body=note, token=token)
    assert r.status == 201, r.json
    written = r.json
    assert written["ts"] == parse_ts("2025-11-30T11:43:05Z") and written["annotation_id"].startswith("ann-")
    listed = get(url, f"/annotations?job={JOB}").json["annotations"]
    assert [n["annotation_id"] for n in listed] == [written["annotation_id"]]
    after = next(a for a in get(url, f"/jobs/{JOB}/diagnosis").json["answers"] if a["key"] == "after_fix")
    assert after["answer"].startswith("fix at 11:43:05 (reseated the cable"), after["answer"]
    assert request(url, "/annotations", method="POST", body={**note, "job_id": "nobody"}, token=token).status == 400

    silence = {"matchers": {"job_id": JOB, "domain": "network"}, "duration_s": 3600, "comment": "cable swap",
               "created_by": "netops"}
    r = request(url, "/silences", method="POST", body=silence, token=token)
    assert r.status == 201 and r.json["state"] == "active", r.json
    sid = r.json["silence_id"]
    assert [s["silence_id"] for s in get(url, "/silences?state=active").json["silences"]] == [sid]
    assert get(url, f"/silences/{sid}").json["matchers"] == silence["matchers"]
    assert the_alert(seed_worker)["matching_silences"] == [sid]
    assert request(url, f"/silences/{sid}", method="DELETE").status == 401
    gone = request(url, f"/silences/{sid}", method="DELETE", token=token)
    assert gone.status == 200 and gone.json["state"] == "expired"
    assert get(url, "/silences?state=active").json["silences"] == []
    assert request(url, "/silences/nope", method="DELETE", token=token).status == 404

    cat = TopicCatalogue(seed_worker.settings)
    notes = seed_worker.call(read_topic(seed_worker.settings, seed_worker.bootstrap, cat.annotations))
    assert notes == [written]
    records = seed_worker.call(read_topic(seed_worker.settings, seed_worker.bootstrap, cat.silences))
    assert [s["silence_id"] for s in records] == [sid, sid]
    assert records[-1]["ends_at"] <= gone.json["updated_at"] and records[0]["ends_at"] > records[-1]["ends_at"]


def test_browser_navigation_gets_the_page_and_api_calls_get_json(seed_worker: LiveWorker) -> None:
    html = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    alert = the_alert(seed_worker)
    aid = alert["alert_id"]
    for path in ("/", f"/jobs/{JOB}", f"/jobs/{JOB}/timeline?alert={aid}", f"/alerts/{aid}"):
        r = get(seed_worker.url, path, headers=html)
        assert r.status == 200 and r.headers["content-type"].startswith("text/html"), path
        assert b'<script src="/static/app.js"' in r.body
        assert "script-src 'self'" in r.headers["content-security-policy"]
    js = get(seed_worker.url, "/static/app.js", headers={"Accept": "*/*"})
    assert js.status == 200 and b"first-mover" in js.body
    assert get(seed_worker.url, "/static/../agents/web.py").status == 404


def test_lockstep_diagnose_prints_the_seven_answers(seed_worker: LiveWorker,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from lockstep.cli import main

    assert main(["diagnose", JOB, "--url", seed_worker.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("━━ llm-70b (llm-70b-pretrain) · recovered · alert ")
    for n, text in [(1, "256 GPUs: 8 on each of 32 nodes"), (2, HOSTLIST), (3, "leaf03 port 17 carries"),
                    (4, "lustre-a"), (5, "SymbolErrorCounter at 11:42:10"), (6, "network: switch leaf03 port 17"),
                    (7, "step time back to")]:
        block = out.split(f"  {n}. ", 1)[1].split(f"  {n + 1}. ", 1)[0]
        assert text in " ".join(block.split()), (n, block)
    assert main(["diagnose", "nobody", "--url", seed_worker.url]) == 1
    assert "404: no job 'nobody'" in capsys.readouterr().err
    assert main(["diagnose", JOB, "--url", "http://127.0.0.1:9", "--timeout", "2"]) == 2
    assert "no worker answers at http://127.0.0.1:9" in capsys.readouterr().err


def test_any_worker_answers_for_any_job(seed_worker: LiveWorker) -> None:
    """A second worker's HTTP side (its own read model and inventory, no partition of its own) gives
    the same answers as the worker that correlated the job: they come from the topics, not from
    whichever worker owns the job's partition."""
    from dataclasses import dataclass, field

    from agents.inventory_reader import InventoryReader
    from agents.metrics import WorkerMetrics
    from agents.web import WebServer
    from models.settings import LockstepSettings
    from streams.inventory import InventoryIndex

    from .conftest import read_model_caught_up

    @dataclass
    class OtherWorker:
        settings: LockstepSettings
        bootstrap: str
        inventory: InventoryIndex = field(default_factory=InventoryIndex)
        metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
        app: Any = None
        reader: Any = None
        web: Any = None

    other = OtherWorker(seed_worker.settings, seed_worker.bootstrap)

    async def start() -> str:
        other.reader = InventoryReader(other.settings, other.bootstrap, TopicCatalogue(other.settings).inventory,
                                       other.inventory)
        await other.reader.load()
        other.web = WebServer(other)
        url: str = await other.web.start()
        await read_model_caught_up(other)
        return url

    async def stop() -> None:
        if other.web is not None:
            await other.web.stop()
        if other.reader is not None:
            await other.reader.stop()

    try:
        url = seed_worker.call(start())
        assert url != seed_worker.url
        for path in ("/jobs", f"/jobs/{JOB}", f"/jobs/{JOB}/timeline", f"/jobs/{JOB}/diagnosis", "/alerts",
                     "/fabric/leaf03/17", "/annotations", "/jobs/vision-7b/diagnosis"):
            assert get(url, path).json == get(seed_worker.url, path).json, path
    finally:
        seed_worker.call(stop())
