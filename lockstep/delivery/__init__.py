"""Delivery: route alerts to receivers (Slack, PagerDuty, Alertmanager, webhooks, SIEM, topics).

One module per receiver kind in :mod:`lockstep.delivery.receivers` (its config schema, a pure
payload builder, a thin sender); the routing file is :mod:`lockstep.delivery.config`; the pure
parts are in ``streams/``: matchers (:mod:`streams.matchers`), the route tree
(:mod:`streams.routes`) and grouping and timing (:mod:`streams.dispatch`).
:mod:`lockstep.delivery.service` is the consumer service (``lockstep deliver``). docs/delivery.md
says what is guaranteed and why.
"""
