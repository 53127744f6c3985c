"""``lockstep deliver``: route alerts to Slack, PagerDuty, Alertmanager, webhooks, SIEM and topics."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from lockstep.logs import setup_logging
from models.errors import ConfigError, LockstepError
from models.settings import LockstepSettings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("deliver", help="run the delivery service (reads the alerts topic, one worker per receiver)",
                       description=__doc__)
    p.add_argument("--routes", type=Path, default=None, help="routing file (default LOCKSTEP_DELIVERY_ROUTES_FILE)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lockstep.delivery.service import DeliveryService, load_routing_file

    settings = LockstepSettings()
    setup_logging(settings.log_level)
    if settings.kafka_bootstrap_servers is None:
        print("lockstep deliver: set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS to the cluster the workers use",
              file=sys.stderr)
        return 2
    routes = args.routes or settings.delivery_routes_file
    try:
        load_routing_file(settings, routes)
    except ConfigError as exc:
        print(f"lockstep deliver: {exc}", file=sys.stderr)
        return 2
    service = DeliveryService(settings, settings.kafka_bootstrap_servers, routes_file=routes)
    try:
        asyncio.run(service.run())
    except LockstepError as exc:
        print(f"lockstep deliver: {service.redactor.text(str(exc))}", file=sys.stderr)
        return 1
    return 0
