"""What keeps reads from hurting the worker, and the API's error contract, without a broker: the heavy-read
limit (429 + Retry-After), paging, the ``/metrics`` cache, ASCII-only query numbers, JSON for every error
(even the ones aiohttp answers before routing), silences that can match, and the page's escaping."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession, web

from agents.web import HEAVY, WEB_ROOT, Runner, WebServer
from models.inventory import inventory_adapter
from models.operator import SilenceRequest
from streams import views
from streams.lanes import LANE_ORDER
from streams.readstore import ReadStore

from .test_web_access import StubWorker

T0 = 1764502800.0
NODES = 20_000
LANES = {lane: {"n": 2, "p50": 1.0, "p99": 2.0, "min": 0.5, "max": 3.0} for lane in LANE_ORDER}


def big_inventory(worker: StubWorker, nodes: int = NODES) -> None:
    names = [f"n{i:06d}" for i in range(nodes)]
    for i, n in enumerate(names):
        worker.inventory.apply(inventory_adapter.validate_python(
            {"kind": "link", "ts": T0, "node": n, "device": "mlx5_0", "port": "1", "switch": f"leaf{i // 32:04d}",
             "switch_port": str(1 + i % 32), "fabric": "infiniband"}))
    worker.inventory.apply(inventory_adapter.validate_python(
        {"kind": "job", "ts": T0, "job_id": "big", "state": "RUNNING", "nodes": ",".join(names), "gpus_per_node": 8,
         "storage": []}))


def live(check: Callable[[WebServer, str, ClientSession], Awaitable[None]], worker: StubWorker | None = None) -> None:
    """Serve a :class:`WebServer` over real TCP through :class:`Runner` (as the worker does)."""

    async def go() -> None:
        server = WebServer(worker or StubWorker())
        runner = Runner(server.make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with ClientSession(headers={"Accept": "application/json"}) as session:
                await check(server, url, session)
        finally:
            await runner.cleanup()
            if server.pool is not None:
                server.pool.shutdown(wait=True)

    asyncio.run(go())


async def raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


# -- the heavy-read limit -----------------------------------------------------------------------
def test_heavy_reads_beyond_the_limit_get_429_with_retry_after_and_health_answers_meanwhile() -> None:
    worker = StubWorker(web_max_heavy_requests=1, web_retry_after_s=3)
    big_inventory(worker)

    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        async def one(path: str) -> tuple[int, dict[str, str], dict[str, Any]]:
            async with s.get(url + path) as r:
                return r.status, dict(r.headers), orjson.loads(await r.read())

        # The first computes the 20,000-node topology (a tenth of a second or more); the other 19
        # arrive while it does.
        answers = await asyncio.gather(*(one("/jobs/big?limit=5") for _ in range(20)))
        statuses = sorted(a[0] for a in answers)
        assert 200 in statuses and 429 in statuses and set(statuses) == {200, 429}, statuses
        busy = next(a for a in answers if a[0] == 429)
        assert busy[1]["Retry-After"] == "3"
        assert busy[2]["status"] == 429 and busy[2]["retry_after_s"] == 3 and "busy" in busy[2]["error"]
        assert busy[1]["Content-Type"].startswith("application/json")
        assert server._heavy == 0  # every slot given back
        # While a heavy read holds the only slot, /healthz and /readyz answer (not 429, not waiting).
        server._topologies.clear()
        heavy = asyncio.ensure_future(one("/jobs/big?limit=5"))
        await asyncio.sleep(0)
        for path in ("/healthz", "/readyz", "/metrics"):
            async with s.get(url + path) as r:
                assert r.status in (200, 503), path
        await heavy
        refused = server.heavy_refused.labels("/jobs/{job_id}")._value.get()
        assert refused == statuses.count(429)

    live(check, worker)


def test_every_heavy_route_is_limited() -> None:
    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        server._heavy = server.settings.web_max_heavy_requests  # every slot taken
        paths = {"/jobs": "/jobs", "/jobs/{job_id}": "/jobs/j", "/jobs/{job_id}/timeline": "/jobs/j/timeline",
                 "/jobs/{job_id}/diagnosis": "/jobs/j/diagnosis", "/alerts": "/alerts",
                 "/fabric/{switch}/{port}": "/fabric/leaf01/1", "/silences": "/silences",
                 "/capacity": "/capacity", "/capacity/heatmap": "/capacity/heatmap", "/fabric/health": "/fabric/health",
                 "/placement": "/placement?gpus=8", "/capacity/effects": "/capacity/effects"}
        paths["/fabric/report"] = "/fabric/report"
        paths["/advice/checkpoints"] = "/advice/checkpoints"
        assert set(paths) == HEAVY
        for path in paths.values():
            async with s.get(url + path) as r:
                assert r.status == 429 and r.headers["Retry-After"] == "1", path
        for path in ("/healthz", "/alerts/a1", "/silences/s1", "/annotations"):
            async with s.get(url + path) as r:
                assert r.status in (200, 404), path
        server._heavy = 0

    live(check)


# -- paging -------------------------------------------------------------------------------------
def test_a_big_job_is_paged_with_totals() -> None:
    worker = StubWorker()
    big_inventory(worker, 2500)

    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        async with s.get(url + "/jobs/big") as r:
            first = await r.json()
        assert len(first["node_list"]) == views.DEFAULT_PAGE and len(first["gpu_list"]) == 8 * views.DEFAULT_PAGE
        assert first["page"] == {"offset": 0, "limit": 1000, "nodes_total": 2500, "gpus_total": 20000,
                                 "paths_total": 2500, "leaves_total": 79, "next_offset": 1000}
        assert first["nodes"] == 2500 and first["hostlist"] == "n[000000-002499]"
        assert {p["node"] for p in first["paths"]} == set(first["node_list"])
        nodes: list[str] = []
        offset: int | None = 0
        while offset is not None:
            async with s.get(url + f"/jobs/big?offset={offset}&limit=700") as r:
                page = await r.json()
            nodes += page["node_list"]
            offset = page["page"]["next_offset"]
        assert nodes == [f"n{i:06d}" for i in range(2500)]
        for query, fragment in (("limit=0", "limit must be between 1 and 10000"),
                                ("limit=10001", "limit must be between 1 and 10000"),
                                ("offset=-1", "offset must be a whole number")):
            async with s.get(url + f"/jobs/big?{query}") as r:
                assert r.status == 400 and fragment in (await r.json())["error"], query
        async with s.get(url + "/jobs/big?offset=9999") as r:
            past = await r.json()
        assert past["node_list"] == [] and past["page"]["next_offset"] is None

    live(check, worker)


# -- /metrics -----------------------------------------------------------------------------------
def test_metrics_are_made_at_most_once_a_second() -> None:
    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        async with s.get(url + "/metrics") as r:
            first = await r.text()
        server.worker.metrics.samples_in.labels("t", "gpu").inc(5)
        async with s.get(url + "/metrics") as r:
            second = await r.text()
        assert second == first  # the cached exposition (not even the first request's latency is in it)
        server._exposition = None  # as a second later
        async with s.get(url + "/metrics") as r:
            assert 'lockstep_samples_in_total{layer="gpu",topic="t"} 5.0' in await r.text()

    live(check)


def test_a_metrics_cache_of_zero_makes_the_exposition_per_request() -> None:
    """``LOCKSTEP_WEB_METRICS_CACHE_S=0`` (what the bench's workers run with: it times a drain by these
    counters, and a cached exposition made it see a drain up to a second late)."""
    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        async with s.get(url + "/metrics") as r:
            assert 'lockstep_samples_in_total{layer="gpu",topic="t"}' not in await r.text()
        server.worker.metrics.samples_in.labels("t", "gpu").inc(5)
        async with s.get(url + "/metrics") as r:
            assert 'lockstep_samples_in_total{layer="gpu",topic="t"} 5.0' in await r.text()

    live(check, StubWorker(web_metrics_cache_s=0))


# -- query numbers and errors -------------------------------------------------------------------
def test_query_numbers_are_ascii_digits_only() -> None:
    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        for path, fragment in [
            ("/alerts?limit=%EF%BC%91", "limit must be a whole number in ASCII digits"),  # fullwidth 1
            ("/alerts?limit=1_0", "limit must be a whole number in ASCII digits"),
            ("/alerts?limit=%D9%A3", "limit must be a whole number in ASCII digits"),  # Arabic-Indic 3
            ("/jobs/j/timeline?from=1_000&to=2000", "from must be Unix seconds in ASCII digits"),
            ("/jobs/j/timeline?from=1e9", "from must be Unix seconds in ASCII digits"),
            ("/jobs/j/timeline?to=%EF%BC%91%EF%BC%92", "to must be Unix seconds in ASCII digits"),
            ("/jobs/j/timeline?step=%EF%BC%95", "step must be a whole number in ASCII digits"),
        ]:
            async with s.get(url + path) as r:
                body = await r.json()
            assert r.status == 400 and fragment in body["error"] and body["status"] == 400, (path, body)

    live(check)


def test_every_error_is_json_and_client_errors_log_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        for path, status in (("/nope", 404), ("/static/nope.js", 404), ("/static/../agents/web.py", 404),
                             ("/static/", 404), ("/jobs/nope", 404), ("/alerts/nope", 404)):
            async with s.get(url + path) as r:
                assert r.status == status, path
                assert r.headers["Content-Type"].startswith("application/json"), path
                body = await r.json()
                assert body["status"] == status and isinstance(body["error"], str), path
        async with s.get(url + "/static/app.js") as r:
            assert r.status == 200 and "javascript" in r.headers["Content-Type"]
        cases = [b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n",
                 b"NOT-HTTP\r\n\r\n"]
        for request in cases:
            status, headers, body = await raw(url, request)
            assert status == 400 and headers["content-type"].startswith("application/json"), request[:20]
            doc = orjson.loads(body)
            assert doc["status"] == 400 and doc["error"] and "aaaa" not in doc["error"]
            assert headers["x-content-type-options"] == "nosniff"

    live(check)
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# -- silences -----------------------------------------------------------------------------------
def test_a_silence_keeps_its_kind_and_an_unknown_matcher_name_is_refused() -> None:
    req = SilenceRequest.model_validate({"matchers": {"switch": "leaf03"}, "kind": "maintenance", "duration_s": 60,
                                         "created_by": "netops", "comment": "firmware"})
    rec = views.new_silence(req, "s1", T0).model_dump()
    assert rec["kind"] == "maintenance"
    store = ReadStore()
    assert store.apply("silences", rec, "s1")
    assert store.silences["s1"]["kind"] == "maintenance"
    assert views.silence_view(store.silences["s1"], T0)["kind"] == "maintenance"
    bad = SilenceRequest.model_validate({"matchers": {"job_id": "j", "jobid": "j"}, "duration_s": 60,
                                         "created_by": "me", "comment": "typo"})
    with pytest.raises(views.QueryError, match=r"no alert carries the label 'jobid'.*job_id"):
        views.new_silence(bad, "s2", T0)

    async def check(server: WebServer, url: str, s: ClientSession) -> None:
        async with s.post(url + "/silences", json={"matchers": {"rack": "r1"}, "duration_s": 60, "created_by": "me",
                                                  "comment": "c"}, headers={"Authorization": "Bearer tok"}) as r:
            body = await r.json()
        assert r.status == 400 and "'rack'" in body["error"] and "alertname" in body["error"]

    live(check, StubWorker(api_token="tok"))


def test_the_silence_label_names_are_those_alerts_carry() -> None:
    from streams.rules import match_labels

    alert = {"type": "job_slowdown", "severity": "critical", "job_id": "j", "dedup_key": "k",
             "labels": {"alertname": "job_slowdown", "job_id": "j", "domain": "network"},
             "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"}}}
    skew = {"type": "clock_skew", "labels": {"alertname": "clock_skew", "source": "gpu001", "layer": "gpu"},
            "root_cause": {"layer": "storage", "source": "pool-a"}}
    straggler = {"type": "straggler", "labels": {"worker": "3", "lane": "step_time"},
                 "root_cause": {"layer": "gpu", "source": "gpu002"}}
    seen = set().union(*(match_labels(a) for a in (alert, skew, straggler)))
    assert seen == views.SILENCE_LABELS


# -- the page -----------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_page_shows_control_and_bidi_characters_escaped() -> None:
    source = (WEB_ROOT / "app.js").read_text()
    start = source.index("const UNSAFE")
    end = source.index("function el(")
    script = source[start:end] + """
const cases = ["job\\u001b[31mred", "a\\u202eevil", "x\\u2066y\\u2069", "tab\\there", "del\\u007f", "c1\\u009b",
               "plain ü 日本"];
process.stdout.write(JSON.stringify(cases.map(visible)));
"""
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=30).stdout
    assert orjson.loads(out) == ["job\\u001b[31mred", "a\\u202eevil", "x\\u2066y\\u2069", "tab\\u0009here",
                                 "del\\u007f", "c1\\u009b", "plain ü 日本"]
    # Every text the page writes goes through visible(): no raw textContent, text node or title.
    body = source[end:]
    assert "textContent = visible(" in body and "createTextNode(visible(" in body
    assert all(line.split("textContent = ", 1)[1].startswith("visible(")
               for line in body.splitlines() if "textContent = " in line)
    assert "innerHTML" not in source
    assert Path(WEB_ROOT / "index.html").read_text().count('name="kind"') == 2  # silence and annotation forms
