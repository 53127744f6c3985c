"""Delivery: route alerts to receivers (Slack, PagerDuty, Alertmanager, webhooks, SIEM, topics).

Pure payload builders live next to their thin senders (one module per receiver kind); routing and
grouping are in :mod:`streams.routing`; :mod:`lockstep.delivery.service` is the consumer service
(``lockstep deliver``). docs/delivery.md says what is guaranteed and why.
"""
