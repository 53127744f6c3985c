"""The receiver kinds, one module each: its config schema (the routing file's key) paired with its sender.

A module here defines an :class:`~lockstep.delivery.base.IntegrationConfig` subclass and a
:class:`~lockstep.delivery.base.Receiver` subclass naming it (``kind``, ``config_model``,
``from_config``). :data:`RECEIVERS` is built from the modules found in this package, so a new
receiver kind is one new module: the routing file accepts its key, ``lockstep receivers
check|test`` and the delivery service use it, and nothing else names it.

==================  =====================================================================
module              kind
==================  =====================================================================
``slack``           Slack incoming webhook, Block Kit, one message per group
``pagerduty``       PagerDuty Events API v2, one trigger/resolve per alert
``alertmanager``    push to an Alertmanager's ``/api/v2/alerts``
``webhook``         Alertmanager's webhook body (version 4) to any URL
``ocsf``            OCSF Detection Findings on a Kafka topic (for a SIEM)
``syslog``          OCSF or CEF over RFC 5424 syslog (UDP or TCP)
``kafka``           the alert itself on per-type/domain/severity Kafka topics
==================  =====================================================================
"""

from __future__ import annotations

import importlib
import pkgutil

from lockstep.delivery.base import Receiver

#: The kinds the routing file's messages have always listed first, in this order; others follow by name.
_LISTED_FIRST = ("slack", "pagerduty", "alertmanager", "webhook", "ocsf", "syslog", "kafka")


def _discover() -> dict[str, type[Receiver]]:
    found: dict[str, type[Receiver]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Receiver) and value.kind
                    and value.__module__ == module.__name__):
                if value.kind in found:
                    raise RuntimeError(f"receiver kind {value.kind!r} defined twice: "
                                       f"{found[value.kind].__module__} and {module.__name__}")
                found[value.kind] = value
    rank = {kind: i for i, kind in enumerate(_LISTED_FIRST)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


#: Every receiver kind: the routing file's key -> its sender (whose ``config_model`` is its schema).
RECEIVERS: dict[str, type[Receiver]] = _discover()
