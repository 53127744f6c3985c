"""The delivery service's Prometheus metrics, served on ``/metrics`` (``LOCKSTEP_DELIVERY_METRICS_PORT``).

Read from the workers at scrape time (no second bookkeeping). Labels are receiver names, which the
routing file restricts to ``[A-Za-z0-9_-]``: no URL, no secret can reach a label.

================================================  ====================================================
``lockstep_delivery_accepted_total{receiver}``     notifications the receiver accepted
``lockstep_delivery_parked_total{receiver}``       notifications parked on its retry topic
``lockstep_delivery_retried_total{receiver}``      retries of parked notifications
``lockstep_delivery_dead_letters_total{receiver}`` notifications rejected or given up (to ``dlq``)
``lockstep_delivery_duplicates_total{receiver}``   alerts already delivered (a replay), not sent again
``lockstep_delivery_silenced_total{receiver}``     alert states not notified because a silence muted them
``lockstep_delivery_pending{receiver}``            alerts read but not yet settled
``lockstep_delivery_silences``                     silences known from the ``silences`` topic
================================================  ====================================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("lockstep.delivery")

COUNTERS = {
    "accepted": "Notifications the receiver accepted",
    "parked": "Notifications parked on the receiver's retry topic",
    "retried": "Retries of parked notifications",
    "dead_letters": "Notifications rejected by the receiver or given up, written to dlq",
    "duplicates": "Alerts already delivered (a replay), not sent again",
    "silenced": "Alert states not notified because a silence muted them",
}


class DeliveryCollector(Collector):
    """Every worker's counters, labelled by receiver; ``workers()`` is read at each scrape."""

    def __init__(self, workers: Callable[[], Mapping[str, Any]], silences: Callable[[], int]) -> None:
        self.workers = workers
        self.silences = silences

    def collect(self) -> Iterator[Metric]:
        workers = dict(self.workers())
        for stat, text in COUNTERS.items():
            family = CounterMetricFamily(f"lockstep_delivery_{stat}", text, labels=["receiver"])
            for name, worker in sorted(workers.items()):
                family.add_metric([name], float(worker.stats.get(stat, 0)))
            yield family
        pending = GaugeMetricFamily("lockstep_delivery_pending", "Alerts read but not yet settled", labels=["receiver"])
        for name, worker in sorted(workers.items()):
            pending.add_metric([name], float(worker.tracker.pending))
        yield pending
        yield GaugeMetricFamily("lockstep_delivery_silences", "Silences known from the silences topic",
                                value=float(self.silences()))


class MetricsServer:
    """``GET /metrics`` and ``GET /healthz`` on ``host:port`` (port 0: any free port, logged)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._runner: Any = None

    async def start(self) -> int:
        from aiohttp import web

        async def metrics(request: web.Request) -> web.Response:
            resp = web.Response(body=generate_latest(self.registry))
            resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return resp

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("delivery metrics on http://%s:%d/metrics", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
