"""Access rules and input validation of the HTTP server, without a broker (nothing here reaches Kafka:
every request below is refused, or answered from the store, before a write would be produced)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from agents.metrics import WorkerMetrics
from agents.web import MAX_BODY_BYTES, WebServer, port_available, wants_html
from models.settings import LockstepSettings
from streams.inventory import InventoryIndex

NOTE = {"job_id": "j1", "text": "x"}
SILENCE = {"matchers": {"job_id": "j1"}, "duration_s": 60, "created_by": "me", "comment": "c"}


class StubWorker:
    def __init__(self, **settings: Any) -> None:
        self.settings = LockstepSettings(_env_file=None, **settings)  # type: ignore[call-arg]
        self.bootstrap = "127.0.0.1:1"
        self.inventory = InventoryIndex()
        self.metrics = WorkerMetrics()
        self.app = None
        self.reader = None


def serve(check: Callable[[TestClient[Any, Any]], Awaitable[None]], **settings: Any) -> None:
    async def go() -> None:
        server = WebServer(StubWorker(**settings))
        async with TestClient(TestServer(server.make_app())) as client:
            await check(client)

    asyncio.run(go())


def test_writes_are_refused_with_403_when_no_token_is_configured() -> None:
    async def check(c: TestClient[Any, Any]) -> None:
        for method, path, body in [("POST", "/annotations", NOTE), ("POST", "/silences", SILENCE),
                                   ("DELETE", "/silences/s1", None)]:
            r = await c.request(method, path, json=body, headers={"Authorization": "Bearer anything"})
            assert r.status == 403
            assert (await r.json())["error"] == ("writes are disabled: this worker has no API token "
                                                 "(set LOCKSTEP_API_TOKEN)")

    serve(check)


def test_writes_need_the_right_bearer_token() -> None:
    async def check(c: TestClient[Any, Any]) -> None:
        r = await c.post("/annotations", json=NOTE)
        assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in (await r.json())["error"]
        for header in ("Bearer wrong", "Basic czNjcjN0", "Bearer"):
            r = await c.post("/silences", json=SILENCE, headers={"Authorization": header})
            assert r.status == 401, header

    serve(check, api_token="s3cr3t")


def test_bad_bodies_get_clear_4xx_answers_and_nothing_is_coerced() -> None:
    auth = {"Authorization": "Bearer s3cr3t"}

    async def check(c: TestClient[Any, Any]) -> None:
        cases: list[tuple[str, dict[str, Any], int, str]] = [
            ("/annotations", {"data": "job_id=j1", "headers": {**auth, "Content-Type": "text/plain"}}, 415,
             "send the body as application/json"),
            ("/annotations", {"data": b"{nope", "headers": {**auth, "Content-Type": "application/json"}}, 400,
             "the body is not JSON"),
            ("/annotations", {"json": {**NOTE, "kind": "oops"}, "headers": auth}, 400, "invalid annotation: kind:"),
            ("/annotations", {"json": {**NOTE, "colour": "red"}, "headers": auth}, 400, "colour: Extra inputs"),
            ("/annotations", {"json": {**NOTE, "ts": "yesterday"}, "headers": auth}, 400, "not RFC 3339"),
            ("/annotations", {"json": {"text": "x"}, "headers": auth}, 400, "job_id: Field required"),
            ("/annotations", {"json": NOTE, "headers": auth}, 400, "no job 'j1' in the inventory"),
            ("/silences", {"json": {**SILENCE, "duration_s": "60"}, "headers": auth}, 400, "duration_s:"),
            ("/silences", {"json": {**SILENCE, "matchers": {}}, "headers": auth}, 400, "matchers:"),
            ("/silences", {"json": {**SILENCE, "ends_at": "2030-01-01T00:00:00Z"}, "headers": auth}, 400,
             "exactly one of ends_at and duration_s"),
            ("/silences", {"json": [SILENCE], "headers": auth}, 400, "invalid silence"),
            ("/silences", {"data": b"x" * (MAX_BODY_BYTES + 1),
                           "headers": {**auth, "Content-Type": "application/json"}}, 413, "larger than 64 KiB"),
        ]
        for path, kw, status, message in cases:
            r = await c.post(path, **kw)
            body = await r.json()
            assert r.status == status, (path, kw.get("json"), body)
            assert message in body["error"] and body["status"] == status, body
        r = await c.delete("/silences/nope", headers=auth)
        assert r.status == 404 and (await r.json())["error"] == "no silence 'nope'"

    serve(check, api_token="s3cr3t")


def test_cors_is_closed_and_every_answer_is_json_with_safe_headers() -> None:
    async def check(c: TestClient[Any, Any]) -> None:
        r = await c.get("/jobs", headers={"Origin": "https://evil.example"})
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Cache-Control"] == "no-store"
        r = await c.options("/annotations", headers={"Origin": "https://evil.example",
                                                     "Access-Control-Request-Method": "POST"})
        assert r.status == 405 and "Access-Control-Allow-Origin" not in r.headers
        assert r.headers["Allow"] and (await r.json())["status"] == 405
        r = await c.get("/nowhere")
        assert r.status == 404 and (await r.json()) == {"error": "Not Found", "status": 404}
        r = await c.get("/jobs?verbose=1")
        assert r.status == 400 and "unknown query parameter 'verbose'" in (await r.json())["error"]
        r = await c.get("/readyz")
        assert r.status == 503 and (await r.json())["checks"] == {"broker": True, "group": True, "inventory": False,
                                                                  "agents": False, "read_model": False,
                                                                  "correlation": True}
        page = await c.get("/jobs/j1/timeline", headers={"Accept": "text/html"})
        assert page.status == 200 and "default-src 'none'" in page.headers["Content-Security-Policy"]
        assert page.headers["Vary"] == "Accept"
        r = await c.get("/jobs/j1/timeline", headers={"Accept": "application/json"})
        assert r.status == 404 and "no job 'j1'" in (await r.json())["error"]

    serve(check)


def test_wants_html_only_for_navigations_and_ports_in_use_are_detected() -> None:
    class R:
        def __init__(self, accept: str) -> None:
            self.headers = {"Accept": accept}

    assert wants_html(R("text/html,application/xhtml+xml,*/*;q=0.8"))  # type: ignore[arg-type]
    assert not wants_html(R("application/json, text/html"))  # type: ignore[arg-type]
    assert not wants_html(R("*/*"))  # type: ignore[arg-type]
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not port_available("127.0.0.1", sock.getsockname()[1])
