"""The worker's HTTP server: the API, the timeline page, ``/healthz``, ``/readyz``, ``/metrics``.

aiohttp on ``LOCKSTEP_WEB_HOST:LOCKSTEP_WEB_PORT`` (port 0 picks a free port; :attr:`WebServer.url`
says which), started by :class:`lockstep.worker.Worker`. Thin wiring: every answer is a pure view
from :mod:`streams.views` over the worker's :class:`~streams.readstore.ReadStore` (kept by
:class:`~agents.readmodel.ReadModel`) and its inventory. The routes and shapes are in
``/openapi.json`` (:mod:`agents.openapi`) and docs/api.md.

Access (docs/api.md "Access"):

- reads are open; writes (``POST /annotations``, ``POST /silences``, ``DELETE /silences/{id}``)
  need ``Authorization: Bearer <LOCKSTEP_API_TOKEN>``; with no token configured every write is
  refused with 403 and says why;
- no CORS headers at all (cross-origin pages cannot read the API; preflights get 405);
- every input is validated; a bad one gets a 4xx JSON body ``{"error": ..., "status": ...}``
  naming the field, nothing is coerced.

Reads cannot starve the agents, which share this event loop (docs/api.md "Reads cannot starve
ingest"): the routes in :data:`HEAVY` are admitted ``web_max_heavy_requests`` at once (one more is a
429 with ``Retry-After``) and computed one at a time, taking at most :data:`READ_SHARE` of the loop;
``/healthz`` and ``/readyz`` never wait for them; ``/metrics`` is made at most once a second
(``web_metrics_cache_s``); every error answer, even one aiohttp gives before routing
(:class:`JsonErrorHandler`), is JSON.

A browser navigating to ``/jobs/{id}``, ``/jobs/{id}/timeline`` or ``/alerts/{id}`` (``Accept:
text/html``) gets the page, which opens that job or alert: the links alerts carry work both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import re
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from pydantic import ValidationError

import lockstep
from agents.metrics import WorkerMetrics
from agents.readmodel import ReadModel, ReadModelMetrics
from agents.topics import TopicCatalogue
from models.errors import ConfigError
from models.operator import AnnotationRequest, SilenceRequest
from models.settings import LockstepSettings
from models.timeutil import format_ts
from streams import before_after, checkpoint_advice, fabric, fabric_health, ledger, views
from streams.inventory import InventoryIndex
from streams.placement import PlacementError
from streams.readstore import ReadStore

log = logging.getLogger("lockstep.web")

#: The page's static files: package data of ``lockstep`` (pyproject: ``lockstep = ["web/**/*"]``).
WEB_ROOT = Path(lockstep.__file__).resolve().parent / "web"
MAX_BODY_BYTES = 64 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Query parameters each route accepts; anything else is a 400 (a typo must not be ignored).
QUERY = {
    "/jobs": set(), "/jobs/{job_id}": {"offset", "limit"}, "/jobs/{job_id}/timeline": {"from", "to", "step", "alert"},
    "/jobs/{job_id}/diagnosis": {"alert"}, "/alerts": {"job", "status", "limit"}, "/alerts/{alert_id}": set(),
    "/fabric/{switch}/{port}": set(), "/annotations": {"job"}, "/silences": {"state"},
    "/silences/{silence_id}": set(),
    "/api/v1/write": set(),
    "/capacity": {"by", "window", "limit"},
    "/api/v1/alertmanager": set(),
    "/fabric/report": set(),
    # fabric health, placement and the fleet page (issue 22; streams/fabric_health.py, docs/capacity.md)
    "/capacity/heatmap": {"by", "window", "bucket", "limit"}, "/fabric/health": {"window", "limit"},
    "/placement": {"gpus", "class"}, "/fleet": {"window"}, "/capacity/effects": {"window", "limit"},
    "/advice/checkpoints": {"window", "pool"},  # checkpoint-stagger advice (streams/checkpoint_advice.py)
}
#: Routes whose answers are computed in the thread pool, at most ``web_max_heavy_requests`` at once
#: (their cost grows with the cluster, the window or the store); everything else is answered on the
#: event loop at once (probes, ``/metrics`` from its cache, single records, the page, writes).
HEAVY = frozenset({"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/timeline", "/jobs/{job_id}/diagnosis", "/alerts",
                   "/fabric/{switch}/{port}", "/silences", "/capacity", "/fabric/report",
                   "/capacity/heatmap", "/fabric/health", "/placement", "/capacity/effects",
                   "/advice/checkpoints"})
#: The most of the event loop's time heavy views take while requests wait for a turn. Measured with
#: tests/faults/test_read_load.py at 20,000 samples/s produced: ingest under read load kept 290/s
#: with no pause between views, 8,600-9,600/s at 1/2, 7,100/s at 1/4 (the 429s cost loop time too).
READ_SHARE = 0.5
#: Jobs whose inventory topology (:func:`streams.views.job_topology`) is kept, per inventory version.
TOPOLOGY_CACHE = 8
#: A query integer: plain ASCII digits; a query time in seconds: ASCII digits with an optional fraction.
ASCII_INT = re.compile(r"[0-9]{1,9}")
ASCII_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
#: Security headers on every response; the page additionally gets a strict CSP (no inline code).
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class WorkerLike(Protocol):
    """What the server needs of :class:`lockstep.worker.Worker`."""

    settings: LockstepSettings
    bootstrap: str
    inventory: InventoryIndex
    metrics: WorkerMetrics
    app: Any
    reader: Any


def port_available(host: str, port: int) -> bool:
    """True if ``host:port`` can be bound right now (``lockstep run`` falls back to a free port)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _exception_classes() -> dict[int, type[web.HTTPException]]:
    out: dict[int, type[web.HTTPException]] = {}
    stack: list[type[web.HTTPException]] = [web.HTTPException]
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        code = getattr(cls, "status_code", -1)
        if code >= 400 and code not in out and cls is not web.HTTPMethodNotAllowed:
            out[code] = cls
    return out


EXCEPTIONS = _exception_classes()


def error(status: int, message: str, **extra: Any) -> web.HTTPException:
    """An aiohttp HTTP exception (4xx/5xx) with Lockstep's JSON error body ``{"error", "status"}``."""
    body = error_body(status, message, **extra).decode()
    if status == 405:
        return web.HTTPMethodNotAllowed("", [], text=body, content_type="application/json")
    if status == 413:
        return web.HTTPRequestEntityTooLarge(MAX_BODY_BYTES, 0, text=body, content_type="application/json")
    return EXCEPTIONS.get(status, web.HTTPBadRequest)(text=body, content_type="application/json")


def error_body(status: int, message: str, **extra: Any) -> bytes:
    """The JSON body of every error answer: ``{"error": message, "status": status, ...}``."""
    return orjson.dumps({"error": message, "status": status, **extra})


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering what it cannot parse (a URL or header over 8 KiB, a
    malformed request line) with Lockstep's JSON error body and one log line, not a plain-text body
    and a traceback: a bad request is the client's error, not the worker's."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:
            log.error("HTTP request failed before routing: %s", exc, exc_info=exc)
            text = "internal error (see the worker's log)"
        else:
            reason = getattr(exc, "message", None) or message or "bad request"
            text = str(reason).split(":", 1)[0][:200]  # aiohttp quotes the offending bytes after a colon
            log.info("HTTP %d before routing from %s: %s", status, request.remote, text)
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already being sent; closing the connection")
        resp = web.Response(status=status, body=error_body(status, text), content_type="application/json")
        for k, v in HEADERS.items():
            resp.headers[k] = v
        resp.force_close()
        return resp


class JsonErrorServer(web.Server):
    """:class:`aiohttp.web.Server` whose connections are :class:`JsonErrorHandler`."""

    def __call__(self) -> RequestHandler:
        return JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    """:class:`aiohttp.web.AppRunner` serving through :class:`JsonErrorServer`."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return JsonErrorServer(plain.request_handler, request_factory=plain.request_factory,
                               handler_cancellation=plain.handler_cancellation, loop=plain._loop, **plain._kwargs)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY), status=status,
                        content_type="application/json")


def wants_html(request: web.Request) -> bool:
    """A browser navigation (Accept lists text/html before any JSON), not an API call."""
    accept = request.headers.get("Accept", "")
    if "text/html" not in accept:
        return False
    json_at = accept.find("application/json")
    return json_at < 0 or accept.find("text/html") < json_at


class WebServer:
    """The HTTP server of one worker (see the module docstring)."""

    def __init__(self, worker: WorkerLike, *, clock: Callable[[], float] = time.time) -> None:
        self.worker = worker
        self.settings = worker.settings
        self.clock = clock
        self.catalogue = TopicCatalogue(self.settings)
        self.store = ReadStore()
        registry = worker.metrics.registry
        self.rm_metrics = ReadModelMetrics(registry)
        self.request_seconds = Histogram(
            "lockstep_http_request_seconds", "HTTP request latency by method, route and status", ["method", "route",
                                                                                                  "status"],
            registry=registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
        self.heavy_in_flight = Gauge("lockstep_http_heavy_in_flight", "Heavy API reads being computed now "
                                     "(at most LOCKSTEP_WEB_MAX_HEAVY_REQUESTS)", registry=registry)
        self.heavy_refused = Counter("lockstep_http_heavy_refused_total", "Heavy API reads answered 429 (the "
                                     "limit was reached)", ["route"], registry=registry)
        self.readmodel = ReadModel(self.settings, worker.bootstrap, self.store, self.rm_metrics, clock=clock)
        self.pool: ThreadPoolExecutor | None = None
        self._heavy = 0
        self._turn: asyncio.Lock | None = None
        self._topologies: OrderedDict[tuple[str, int], asyncio.Future[dict[str, Any]]] = OrderedDict()
        self._exposition: tuple[float, bytes] | None = None
        self._exposing: asyncio.Lock | None = None
        self.runner: web.AppRunner | None = None
        self.producer: Any = None
        self.host = self.settings.web_host
        self.port: int | None = None

    @property
    def url(self) -> str:
        """Where the server listens, as a browser on this machine reaches it (``http://host:port``)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    # -- life cycle -----------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors_and_metrics], client_max_size=MAX_BODY_BYTES)
        r = app.router
        r.add_get("/", self.page)
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/metrics", self.prometheus)
        r.add_get("/openapi.json", self.openapi)
        r.add_get("/jobs", self.jobs)
        r.add_get("/jobs/{job_id}", self.job)
        r.add_get("/jobs/{job_id}/timeline", self.timeline)
        r.add_get("/jobs/{job_id}/diagnosis", self.diagnosis)
        r.add_get("/alerts", self.alerts)
        r.add_get("/alerts/{alert_id}", self.alert)
        r.add_get("/fabric/{switch}/{port}", self.fabric)
        r.add_get("/fabric/report", self.fabric_report)
        r.add_get("/annotations", self.annotations)
        r.add_get("/capacity", self.capacity)
        r.add_get("/capacity/heatmap", self.capacity_heatmap)
        r.add_get("/fabric/health", self.fabric_health)
        r.add_get("/placement", self.placement)
        r.add_get("/capacity/effects", self.capacity_effects)
        r.add_get("/advice/checkpoints", self.advice_checkpoints)
        r.add_get("/fleet", self.fleet_page)
        r.add_post("/annotations", self.annotate)
        r.add_get("/silences", self.silences)
        r.add_post("/silences", self.silence_create)
        r.add_get("/silences/{silence_id}", self.silence)
        r.add_delete("/silences/{silence_id}", self.silence_expire)
        r.add_post("/api/v1/write", self.remote_write)
        r.add_post("/api/v1/alertmanager", self.alertmanager_webhook)
        r.add_get("/static/{name}", self.static)
        return app

    async def start(self) -> str:
        """Start the read model, then listen; return :attr:`url`. A port in use is a ConfigError."""
        await self.readmodel.start()
        self.runner = Runner(self.make_app(), access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.settings.web_port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"cannot serve HTTP on {self.host}:{self.settings.web_port}: the address is in use "
                                  "(set LOCKSTEP_WEB_PORT; 0 picks a free port)") from None
            raise ConfigError(f"cannot serve HTTP on {self.host}:{self.settings.web_port}: {exc.strerror}") from None
        addresses = self.runner.addresses  # the bound socket says which port 0 became
        self.port = int(addresses[0][1]) if addresses else self.settings.web_port
        log.info("HTTP API and timeline page on %s", self.url)
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        await self.readmodel.stop()
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None

    # -- middleware -----------------------------------------------------------------------------
    @web.middleware
    async def _errors_and_metrics(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        status = 500
        try:
            allowed = QUERY.get(route)
            if allowed is not None:
                unknown = sorted(set(request.query) - allowed)
                if unknown:
                    raise error(400, f"unknown query parameter {unknown[0][:40]!r}; this route takes "
                                     f"{', '.join(sorted(allowed)) or 'none'}")
            response = await handler(request)
            status = response.status
            if status >= 400 and response.content_type != "application/json":
                # aiohttp's static files answer a missing file with a bare 404: every error is JSON
                raise EXCEPTIONS.get(status, web.HTTPBadRequest)()
        except web.HTTPException as exc:
            status = exc.status
            if exc.content_type != "application/json":  # aiohttp's own (404 route, 405, 413): JSON too
                plain = exc
                message = f"the body is larger than {MAX_BODY_BYTES // 1024} KiB" if status == 413 else plain.reason
                exc = error(status, message)
                for name in ("Allow", "WWW-Authenticate"):
                    if name in plain.headers:
                        exc.headers[name] = plain.headers[name]
            for k, v in HEADERS.items():
                exc.headers[k] = v
            self._observe(request.method, route, status, started)
            raise exc from None
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            self._observe(request.method, route, 500, started)
            response = _json({"error": "internal error (see the worker's log)", "status": 500}, 500)
            status = 500
        for k, v in HEADERS.items():
            response.headers.setdefault(k, v)
        response.headers.setdefault("Cache-Control", "no-store")
        if status != 500:
            self._observe(request.method, route, status, started)
        return response

    def _observe(self, method: str, route: str, status: int, started: float) -> None:
        self.request_seconds.labels(method if method in ("GET", "POST", "DELETE", "HEAD") else "other", route,
                                    str(status)).observe(time.perf_counter() - started)

    # -- helpers --------------------------------------------------------------------------------
    def _page_response(self) -> web.Response:
        body = (WEB_ROOT / "index.html").read_bytes()
        resp = web.Response(body=body, content_type="text/html", charset="utf-8")
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["Vary"] = "Accept"
        return resp

    def _query(self, request: web.Request, name: str, default: Any = None) -> Any:
        value = request.query.get(name)
        return default if value is None or value == "" else value

    def _int(self, request: web.Request, name: str, default: int | None) -> int | None:
        """A whole number of ASCII digits (``str.isdigit`` and ``int`` also take fullwidth
        digits, and ``int`` takes ``1_000``)."""
        raw = self._query(request, name)
        if raw is None:
            return default
        if not ASCII_INT.fullmatch(raw):
            raise error(400, f"{name} must be a whole number in ASCII digits (at most 9), not {raw[:40]!a}")
        return int(raw)

    def _limit(self, request: web.Request, default: int, most: int) -> int:
        """The ``limit`` parameter, 1 to ``most`` (400 outside)."""
        limit = self._int(request, "limit", default)
        if limit is None or not 1 <= limit <= most:
            raise error(400, f"limit must be 1-{most}")
        return limit

    @staticmethod
    def _window_s(window: str) -> float:
        """A ledger window (``7d``, ``week``) in seconds; a malformed one is the client's error (400)."""
        try:
            return ledger.parse_window(window)
        except ledger.LedgerError as exc:
            raise views.QueryError(str(exc)) from None

    def _time(self, request: web.Request, name: str) -> Any:
        """Unix seconds (ASCII digits, an optional fraction) or an RFC 3339 string for the view to parse;
        anything else (``1_000``, ``1e9``, ``nan``, non-ASCII digits) is a 400."""
        raw = self._query(request, name)
        if raw is None:
            return None
        if ASCII_SECONDS.fullmatch(raw):
            return float(raw)
        if not raw.isascii() or (raw[:1].isdigit() and "-" not in raw):
            raise error(400, f"{name} must be Unix seconds in ASCII digits or an RFC 3339 time, not "
                             f"{raw[:40]!a}")
        return raw  # an RFC 3339 string: the view parses and validates it

    def _require_writer(self, request: web.Request) -> None:
        token = self.settings.api_token
        if token is None or not token.get_secret_value():
            raise error(403, "writes are disabled: this worker has no API token (set LOCKSTEP_API_TOKEN)")
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            exc = error(401, "this write needs 'Authorization: Bearer <token>'")
            exc.headers["WWW-Authenticate"] = 'Bearer realm="lockstep"'
            raise exc
        if not hmac.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
            exc = error(401, "the bearer token is not valid")
            exc.headers["WWW-Authenticate"] = 'Bearer realm="lockstep", error="invalid_token"'
            raise exc

    async def _body(self, request: web.Request) -> Any:
        if request.content_type != "application/json":
            raise error(415, f"send the body as application/json, not {request.content_type[:60]!r}")
        raw = await request.read()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise error(400, f"the body is not JSON: {exc}") from None

    @staticmethod
    def _invalid(what: str, exc: ValidationError) -> web.HTTPException:
        detail = [{"field": ".".join(str(p) for p in e.get("loc", ())) or None, "message": e.get("msg")}
                  for e in exc.errors(include_url=False, include_input=False)]
        first = detail[0]
        where = f"{first['field']}: " if first["field"] else ""
        return error(400, f"invalid {what}: {where}{first['message']}", detail=detail)

    async def _produce(self, topic: str, key: str, value: dict[str, Any]) -> None:
        from agents.kafka import start_producer

        try:
            if self.producer is None:
                self.producer = await start_producer(self.settings, self.worker.bootstrap)
            await self.producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())
        except Exception as exc:
            log.warning("write to %s failed: %s", topic, exc)
            raise error(503, f"could not write to Kafka topic {topic}: {type(exc).__name__}", retryable=True) from None

    async def _produce_all(self, records: list[tuple[str, str | None, bytes]]) -> None:
        """Send ``(topic, key, value)`` records in order, then wait for all acks (one round trip, not one
        per record: the producer keeps the order of each partition)."""
        from agents.kafka import start_producer

        topic = records[0][0] if records else ""
        try:
            if self.producer is None:
                self.producer = await start_producer(self.settings, self.worker.bootstrap)
            acks = []
            for topic, key, value in records:
                acks.append(await self.producer.send(topic, value, key=key.encode() if key is not None else None))
            await asyncio.gather(*acks)
        except Exception as exc:
            log.warning("write to %s failed: %s", topic, exc)
            raise error(503, f"could not write to Kafka topic {topic}: {type(exc).__name__}", retryable=True) from None

    async def _heavy_json(self, request: web.Request, compute: Callable[[], Any],
                          topology_of: str | None = None) -> web.Response:
        """Answer ``compute()`` (a pure view, serialised here) in its turn: one heavy view at a time,
        at most ``web_max_heavy_requests`` admitted (computing or waiting for their turn); one more
        is answered 429 with ``Retry-After`` at once.

        The views run on the event loop, between the agents' steps: measured against computing them
        in a thread pool (tests/faults/test_read_load.py, docs/api.md), a thread holding the GIL for
        pure-Python view code starves the loop far more (each of its returns from I/O waits for the
        GIL: the convoy effect) than one bounded view at a time does. So the views are bounded
        instead (a six-hour timeline is ~16 ms, a job's node list is paged), and a waiting request
        lets the agents' ready steps run before it (the turn is handed over through the loop).
        ``topology_of``: the job whose :meth:`_topology` ``compute`` reads (made ready first).
        """
        limit = self.settings.web_max_heavy_requests
        if self._heavy >= limit:
            route = request.match_info.route.resource
            self.heavy_refused.labels(route.canonical if route is not None else "unmatched").inc()
            retry = self.settings.web_retry_after_s
            exc = error(429, f"busy: {limit} heavy reads are being answered; retry in {retry} s", retry_after_s=retry)
            exc.headers["Retry-After"] = str(retry)
            raise exc
        if self._turn is None:
            self._turn = asyncio.Lock()
        self._heavy += 1
        self.heavy_in_flight.set(self._heavy)
        try:
            if topology_of is not None:
                await self._topology(topology_of)
            async with self._turn:
                await asyncio.sleep(0)  # what became ready meanwhile (the agents' steps) goes first
                started = time.perf_counter()
                try:
                    out = compute()
                    if out is None:
                        raise error(404, "not found")
                    body = orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)
                except views.QueryError as exc:
                    raise error(400, str(exc)) from None
                finally:
                    # The turn is held on before the next heavy view: heavy reads get at most
                    # READ_SHARE of the loop's time, and the loop turns quickly in between (each of
                    # the agents' steps needs a turn of the loop, not merely a share of its time).
                    await asyncio.sleep((time.perf_counter() - started) * (1 / READ_SHARE - 1))
        finally:
            self._heavy -= 1
            self.heavy_in_flight.set(self._heavy)
        return web.Response(body=body, content_type="application/json")

    async def _topology(self, job_id: str) -> dict[str, Any] | None:
        """:func:`views.job_topology` of the job, kept per inventory version: computed in a thread
        (a job of 100,000 nodes takes most of a second, once; requests for it meanwhile wait for the
        same computation), the rest of the answer on the loop."""
        inventory = self.worker.inventory
        info = inventory.job(job_id)
        if info is None:
            return None
        key = (job_id, inventory.version)
        found = self._topologies.get(key)
        if found is None:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockstep-web")
            found = asyncio.get_running_loop().run_in_executor(self.pool, _topology_of, inventory, info)
            self._topologies[key] = found
            while len(self._topologies) > TOPOLOGY_CACHE:
                self._topologies.popitem(last=False)
        try:
            return await asyncio.shield(found)
        except Exception:
            self._topologies.pop(key, None)  # not kept: the next request computes it again
            raise

    def _cached_topology(self, job_id: str) -> dict[str, Any] | None:
        """The topology :meth:`_topology` made ready for this request (None if not in the inventory)."""
        inventory = self.worker.inventory
        found = self._topologies.get((job_id, inventory.version))
        if found is None or not found.done() or found.cancelled() or found.exception() is not None:
            return None  # the inventory moved on meanwhile: the view computes it itself
        return found.result()

    def _known_job(self, job_id: str) -> bool:
        return self.worker.inventory.job(job_id) is not None or job_id in self.store.job_ids()

    # -- handlers: page, probes, metrics --------------------------------------------------------
    async def page(self, request: web.Request) -> web.Response:
        return self._page_response()

    async def static(self, request: web.Request) -> web.FileResponse:
        """The page's files, by name from :data:`WEB_ROOT` (no directories, no index, no symlinks)."""
        name = request.match_info["name"]
        path = WEB_ROOT / name
        if name.startswith(".") or "/" in name or "\\" in name or not path.is_file() or path.is_symlink():
            raise error(404, f"no file {name[:100]!r} in the page's static files")
        return web.FileResponse(path)

    async def healthz(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    def readiness(self) -> dict[str, Any]:
        app = self.worker.app
        reasons: dict[str, str] = {}
        if app is not None and getattr(app, "lockstep_state", None) is not None and app.lockstep_state.correlators:
            stalled = app.lockstep_state.progress.stalled(time.monotonic())
            if stalled is not None:
                reasons["correlation"] = stalled
        watch = getattr(self.worker, "broker", None)  # lockstep.worker.Worker has one (a BrokerWatch)
        broker = watch.unreachable(time.monotonic()) if watch is not None else None
        if broker is not None:
            reasons["broker"] = broker
        group_watch = getattr(self.worker, "group", None)  # lockstep.worker.Worker has one (a GroupWatch)
        group = group_watch.waiting(time.monotonic()) if group_watch is not None else None
        if group is not None:
            reasons["group"] = group
        checks = {
            "broker": broker is None,
            "group": group is None,
            "inventory": self.worker.reader is not None and app is not None,
            "agents": app is not None and app.started and app.state == "running",
            "read_model": self.readmodel.caught_up,
            "correlation": "correlation" not in reasons,
        }
        return {"ready": all(checks.values()), "checks": checks, "reasons": reasons,
                "inventory_jobs": len(self.worker.inventory.jobs),
                "read_model": {"applied": self.store.applied, "rejected": self.store.rejected,
                               "event_time": self.store.event_time, "lag": self.readmodel.lag()}}

    async def readyz(self, request: web.Request) -> web.Response:
        body = self.readiness()
        return _json(body, 200 if body["ready"] else 503)

    async def _agents_lag(self) -> None:
        """Lag of the Faust consumer on the partitions this worker owns (public consumer API)."""
        app = self.worker.app
        # (not before the app has started: Faust makes its consumer on first use)
        consumer = getattr(app, "consumer", None) if app is not None and app.started else None
        if consumer is None:
            return
        with contextlib.suppress(Exception):  # during a rebalance the assignment moves under us
            for tp in consumer.assignment():
                high = consumer.highwater(tp)
                pos = await consumer.position(tp)
                if high is not None and pos is not None:
                    self.rm_metrics.lag.labels("agents", tp.topic, str(tp.partition)).set(max(0, high - pos))

    async def prometheus(self, request: web.Request) -> web.Response:
        """The exposition, made at most once per ``web_metrics_cache_s`` (the agents' lag probe asks the
        consumer per partition; Prometheus scrapes every 15 s or so, a dashboard may ask far more often;
        while one is being made, the previous one is served)."""
        if self._exposing is None:
            self._exposing = asyncio.Lock()
        cached = self._exposition
        cache_s = self.settings.web_metrics_cache_s
        fresh = cached is not None and time.monotonic() - cached[0] < cache_s
        if not fresh and not (self._exposing.locked() and cached is not None):
            async with self._exposing:
                cached = self._exposition
                if cached is None or time.monotonic() - cached[0] >= cache_s:
                    await self._agents_lag()
                    cached = self._exposition = (time.monotonic(), generate_latest(self.worker.metrics.registry))
        assert cached is not None
        resp = web.Response(body=cached[1])
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def openapi(self, request: web.Request) -> web.Response:
        from agents.openapi import openapi_document

        return _json(openapi_document(self.settings.public_url))

    # -- handlers: reads ------------------------------------------------------------------------
    def _no_job(self, job_id: str) -> web.HTTPException:
        return error(404, f"no job {job_id[:100]!r} in the inventory or the read model")

    async def jobs(self, request: web.Request) -> web.Response:
        inventory = self.worker.inventory

        def compute() -> Any:
            return {"jobs": views.job_list(self.store, inventory), "as_of": self.store.event_time}

        return await self._heavy_json(request, compute)

    async def job(self, request: web.Request) -> web.Response:
        if wants_html(request):
            return self._page_response()
        job_id = request.match_info["job_id"]
        offset = self._int(request, "offset", 0) or 0
        limit = self._int(request, "limit", views.DEFAULT_PAGE) or 0
        inventory = self.worker.inventory

        def compute() -> Any:
            return views.job_detail(self.store, inventory, job_id, offset=offset, limit=limit,
                                    topology=self._cached_topology(job_id))

        return await self._found(request, job_id, compute, topology_of=job_id)

    async def _found(self, request: web.Request, job_id: str, compute: Callable[[], Any],
                     topology_of: str | None = None) -> web.Response:
        try:
            return await self._heavy_json(request, compute, topology_of)
        except web.HTTPNotFound:
            raise self._no_job(job_id) from None

    async def timeline(self, request: web.Request) -> web.Response:
        if wants_html(request):
            return self._page_response()
        job_id = request.match_info["job_id"]
        start, end = self._time(request, "from"), self._time(request, "to")
        step, alert = self._int(request, "step", None), self._query(request, "alert")
        fallback_end = float(int(self.clock()))
        inventory = self.worker.inventory

        def compute() -> Any:
            return views.timeline(self.store, inventory, job_id, start, end, step=step,
                                  alert_id=alert, fallback_end=fallback_end)

        return await self._found(request, job_id, compute)

    async def diagnosis(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        alert = self._query(request, "alert")
        inventory = self.worker.inventory

        def compute() -> Any:
            return views.diagnosis(self.store, inventory, job_id, alert, topology=self._cached_topology(job_id))

        return await self._found(request, job_id, compute, topology_of=job_id)

    async def alerts(self, request: web.Request) -> web.Response:
        job, status = self._query(request, "job"), self._query(request, "status")
        limit = self._int(request, "limit", 100) or 0
        now = self.clock()

        def compute() -> Any:
            return {"alerts": views.alert_list(self.store, now, job_id=job, status=status, limit=limit)}

        return await self._heavy_json(request, compute)

    async def alert(self, request: web.Request) -> web.Response:
        if wants_html(request):
            return self._page_response()
        alert_id = request.match_info["alert_id"]
        out = views.alert_detail(self.store, alert_id, self.clock())
        if out is None:
            raise error(404, f"no alert {alert_id[:100]!r} in the read model")
        return _json(out)

    async def fabric(self, request: web.Request) -> web.Response:
        switch, port = request.match_info["switch"], request.match_info["port"]
        inventory = self.worker.inventory
        try:
            return await self._heavy_json(request, lambda: views.fabric_port(self.store, inventory, switch, port))
        except web.HTTPNotFound:
            raise error(404, f"no NIC is cabled to {switch[:100]} port {port[:20]} in the inventory, and no "
                             "switch event describes that port") from None

    async def capacity(self, request: web.Request) -> web.Response:
        """GPU-time lost per entity, job or domain over a window (streams.ledger.report, docs/capacity.md)."""
        by, window = self._query(request, "by", "entity"), self._query(request, "window", "7d")
        limit = self._limit(request, 20, 1000)
        wall = self.clock()

        def compute() -> Any:
            try:
                return ledger.report(self.store.ledger, by, window, limit, self.store.event_time, wall)
            except ledger.LedgerError as exc:
                raise views.QueryError(str(exc)) from None

        return await self._heavy_json(request, compute)

    async def fabric_report(self, request: web.Request) -> web.Response:
        """The six fabric questions (docs/fabric.md), as of the latest event time the read model holds."""
        store, inventory = self.store, self.worker.inventory
        times = [t for t in (store.fabric.latest, store.event_time) if t is not None]
        now = max(times) if times else self.clock()
        return await self._heavy_json(request, lambda: fabric.fabric_report(store.fabric, inventory, store, now))

    # -- handlers: the fleet (issue 22; streams/fabric_health.py, docs/capacity.md) ----------------
    async def fleet_page(self, request: web.Request) -> web.Response:
        resp = web.Response(body=(WEB_ROOT / "fleet.html").read_bytes(), content_type="text/html", charset="utf-8")
        resp.headers["Content-Security-Policy"] = CSP
        return resp

    async def capacity_heatmap(self, request: web.Request) -> web.Response:
        """GPU-hours lost per group and time bucket (streams.ledger.heatmap): the fleet page's grid."""
        by, window = self._query(request, "by", "leaf"), self._query(request, "window", "1d")
        bucket, limit = self._query(request, "bucket", "1h"), self._limit(request, 20, 1000)
        wall = self.clock()

        def compute() -> Any:
            try:
                return ledger.heatmap(self.store.ledger, by, window, bucket, limit, self.store.event_time, wall)
            except ledger.LedgerError as exc:
                raise views.QueryError(str(exc)) from None

        return await self._heavy_json(request, compute)

    async def fabric_health(self, request: web.Request) -> web.Response:
        """Degraded and recovered fabric entities with their evidence, GPU-hours and drain suggestions."""
        window = self._query(request, "window", "1d")
        limit = self._limit(request, 50, 1000)
        wall, inventory = self.clock(), self.worker.inventory

        def compute() -> Any:
            seconds = self._window_s(window)
            now = self._as_of(wall)
            alerts = {k: e.latest for k, e in self.store.alerts.items()}
            out = fabric_health.health(self.store.ledger, alerts, inventory, now, seconds, limit)
            return {"as_of": now, "window": window, **out}

        return await self._heavy_json(request, compute)

    async def placement(self, request: web.Request) -> web.Response:
        """Candidate node sets for ``gpus`` GPUs of ``class`` on the live inventory, away from what the
        ledger's open incidents degrade (streams.fabric_health.placement)."""
        gpus = self._int(request, "gpus", None)
        if gpus is None or not 1 <= gpus <= 1_000_000:
            raise error(400, "gpus is required: a whole number of GPUs, 1-1000000")
        klass = self._query(request, "class", "tightly-coupled")
        wall, inventory = self.clock(), self.worker.inventory

        def compute() -> Any:
            pools = sorted({str(e.latest["root_cause"].get("source")) for e in self.store.alerts.values()
                            if e.latest.get("type") == "checkpoint_contention" and e.latest.get("status") == "firing"
                            and (e.latest.get("root_cause") or {}).get("source")})
            try:
                return fabric_health.placement(inventory, self.store.ledger, gpus, klass, self._as_of(wall), pools)
            except PlacementError as exc:
                raise views.QueryError(str(exc)) from None

        return await self._heavy_json(request, compute)

    async def capacity_effects(self, request: web.Request) -> web.Response:
        """Before and after each recently resolved incident (streams.before_after, issue 22.4)."""
        window = self._query(request, "window", "7d")
        limit = self._limit(request, 20, 200)
        wall = self.clock()

        def compute() -> Any:
            seconds = self._window_s(window)
            out = before_after.effects(self.store, self.store.ledger, self._as_of(wall), seconds, limit,
                                       float(self.settings.annotation_window_s))
            return {"window": window, **out}

        return await self._heavy_json(request, compute)

    async def advice_checkpoints(self, request: web.Request) -> web.Response:
        """Checkpoint-stagger advice per pool, from the checkpoint_contention alerts held: for a training
        launcher (streams.checkpoint_advice, docs/capacity.md)."""
        window, pool = self._query(request, "window", "7d"), self._query(request, "pool")
        wall = self.clock()

        def compute() -> Any:
            seconds = self._window_s(window)
            now = self._as_of(wall)
            pools = checkpoint_advice.checkpoint_advice([e.latest for e in self.store.alerts.values()], now,
                                                        seconds, pool)
            return {"as_of": now, "as_of_iso": format_ts(now), "window": window, "pools": pools}

        return await self._heavy_json(request, compute)

    def _as_of(self, wall: float) -> float:
        """The read model's event time (or the ledger's latest, if later), the wall clock when neither."""
        known = [t for t in (self.store.event_time, self.store.ledger.latest) if t is not None]
        return max(known) if known else wall

    async def annotations(self, request: web.Request) -> web.Response:
        job = self._query(request, "job")
        rows = [n for j, notes in self.store.annotations.items() if job is None or j == job for n in notes.values()]
        rows.sort(key=lambda n: (n["ts"], n["annotation_id"]))
        return _json({"annotations": rows})

    async def silences(self, request: web.Request) -> web.Response:
        state, now = self._query(request, "state"), self.clock()
        def compute() -> Any:
            return {"silences": views.silence_list(self.store, now, state=state)}

        return await self._heavy_json(request, compute)

    async def silence(self, request: web.Request) -> web.Response:
        sid = request.match_info["silence_id"]
        rec = self.store.silences.get(sid)
        if rec is None:
            raise error(404, f"no silence {sid[:100]!r}")
        return _json(views.silence_view(rec, self.clock()))

    # -- handlers: writes -----------------------------------------------------------------------
    async def annotate(self, request: web.Request) -> web.Response:
        self._require_writer(request)
        body = await self._body(request)
        try:
            req = AnnotationRequest.model_validate(body)
        except ValidationError as exc:
            raise self._invalid("annotation", exc) from None
        if not self._known_job(req.job_id):
            raise error(400, f"invalid annotation: job_id: no job {req.job_id[:100]!r} in the inventory or the "
                             "read model")
        now = self.clock()
        rec = views.new_annotation(req, f"ann-{uuid.uuid4().hex[:16]}", now).model_dump()
        await self._produce(self.catalogue.annotations, rec["job_id"], rec)
        self.store.apply("annotations", rec)  # read your own write before the consumer brings it back
        return _json(rec, 201)

    async def silence_create(self, request: web.Request) -> web.Response:
        self._require_writer(request)
        body = await self._body(request)
        try:
            req = SilenceRequest.model_validate(body)
        except ValidationError as exc:
            raise self._invalid("silence", exc) from None
        now = self.clock()
        try:
            rec = views.new_silence(req, str(uuid.uuid4()), now).model_dump()
        except views.QueryError as exc:
            raise error(400, f"invalid silence: {exc}") from None
        await self._produce(self.catalogue.silences, rec["silence_id"], rec)
        self.store.apply("silences", rec, rec["silence_id"])
        return _json(views.silence_view(rec, now), 201)

    async def remote_write(self, request: web.Request) -> web.Response:
        """Prometheus remote-write 1.0 (agents/remote_write.py says what each answer means)."""
        from agents import remote_write as rw
        from agents.deadletters import fit_dead_letter

        self._require_writer(request)
        problem = rw.check_headers(request.headers)
        if problem is not None:
            raise error(problem.status, problem.message)
        if request.content_length is not None and request.content_length > rw.MAX_REMOTE_WRITE_BYTES:
            raise error(413, f"the body is larger than {rw.MAX_REMOTE_WRITE_BYTES // 1024} KiB")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > rw.MAX_REMOTE_WRITE_BYTES:  # a chunked body announces no length
                raise error(413, f"the body is larger than {rw.MAX_REMOTE_WRITE_BYTES // 1024} KiB")
            chunks.append(chunk)
        body = b"".join(chunks)
        if rw.inflates_too_large(body):
            raise error(413, f"the body inflates to more than {rw.MAX_INFLATED_BYTES // 1024 // 1024} MiB")
        now = self.clock()
        out = await asyncio.to_thread(rw.convert_request, body, now,  # off the loop the agents share
                                  keep_unknown=self.settings.remote_write_keep_unknown)
        if rw.is_malformed(out):
            raise error(400, out.rejections[0].reason)
        records: list[tuple[str, str | None, bytes]] = [
            (self.catalogue.telemetry(layer), key, orjson.dumps(batch)) for layer, key, batch in rw.messages(out)]
        dead = rw.dead_letters(out, body, now)
        records += [(self.catalogue.dlq, None, orjson.dumps(fit_dead_letter(rec))) for rec in dead]
        await self._produce_all(records)
        rw.count(out, dead, self.worker.metrics)
        return web.Response(status=204)

    async def alertmanager_webhook(self, request: web.Request) -> web.Response:
        """Alertmanager's webhook (version "4"): each alert an event sample (agents/alert_input.py)."""
        from agents import alert_input as am
        from agents.deadletters import fit_dead_letter

        self._require_writer(request)
        if request.content_type != "application/json":
            raise error(415, f"send the webhook as application/json, not {request.content_type[:60]!r}")
        if request.content_length is not None and request.content_length > am.MAX_BODY_BYTES:
            raise error(413, f"the body is larger than {am.MAX_BODY_BYTES // 1024 // 1024} MiB")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_chunked(64 * 1024):  # past client_max_size, bounded here
            size += len(chunk)
            if size > am.MAX_BODY_BYTES:
                raise error(413, f"the body is larger than {am.MAX_BODY_BYTES // 1024 // 1024} MiB")
            chunks.append(chunk)
        body = b"".join(chunks)
        now = self.clock()
        out = await asyncio.to_thread(am.convert_request, body, now)
        if am.is_malformed(out):
            raise error(400, out.rejections[0].reason)
        records: list[tuple[str, str | None, bytes]] = [
            (self.catalogue.telemetry(layer), key, orjson.dumps(batch)) for layer, key, batch in am.messages(out)]
        dead = am.dead_letters(out, body, now)
        records += [(self.catalogue.dlq, None, orjson.dumps(fit_dead_letter(rec))) for rec in dead]
        await self._produce_all(records)
        am.count(out, dead, self.worker.metrics)
        return _json(am.summary(out))

    async def silence_expire(self, request: web.Request) -> web.Response:
        self._require_writer(request)
        sid = request.match_info["silence_id"]
        current = self.store.silences.get(sid)
        if current is None:
            raise error(404, f"no silence {sid[:100]!r}")
        now = self.clock()
        rec = views.expire_silence(current, now).model_dump()
        if rec != current:
            await self._produce(self.catalogue.silences, sid, rec)
            self.store.apply("silences", rec, sid)
        return _json(views.silence_view(rec, now))


def _topology_of(inventory: InventoryIndex, info: Any) -> dict[str, Any]:
    """:func:`views.job_topology` in the pool. The inventory changes on the loop meanwhile (rarely):
    a dict that changed size under the computation (``RuntimeError``) means computing it again."""
    for attempt in range(3):
        try:
            return views.job_topology(inventory, info)
        except RuntimeError as exc:
            if "during iteration" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("not reached")
