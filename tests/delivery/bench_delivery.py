"""Benchmark (not a test): delivery latency and outage catch-up through the embedded broker.

    PYTHONPATH=. python tests/delivery/bench_delivery.py [N]

Latency: N firing alerts produced 20 ms apart to ``alerts``; time until the fake PagerDuty and
webhook accepted each (group_wait 0s, group_by dedup_key). Catch-up: N alerts while PagerDuty
answers 500, then the time from its recovery until every one is delivered (parked, retried in
order).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

from agents.kafka import start_producer
from agents.topics import TopicCatalogue, create_topics
from lockstep.broker import EmbeddedBroker
from lockstep.delivery.sample import sample_alert
from lockstep.delivery.service import DeliveryService
from models.settings import LockstepSettings
from tests.delivery.servers import FakePagerDuty, FakeWebhook

KEY = "c1b2c3d4e5f60718293a4b5c6d7e8f90"


async def main(n: int) -> None:
    async with EmbeddedBroker() as broker:
        pd, hook = FakePagerDuty(KEY), FakeWebhook()
        await pd.start()
        await hook.start()
        seen: dict[str, float] = {}
        orig = pd.accept

        def accept(body):  # type: ignore[no-untyped-def]
            seen.setdefault("pd:" + body["dedup_key"], time.perf_counter())
            return orig(body)

        pd.accept = accept  # type: ignore[method-assign]
        horig = hook.accept

        def haccept(body):  # type: ignore[no-untyped-def]
            for a in body["alerts"]:
                seen.setdefault("hook:" + a["labels"]["dedup_key"], time.perf_counter())
            return horig(body)

        hook.accept = haccept  # type: ignore[method-assign]
        routes = Path(tempfile.mkdtemp()) / "routes.yaml"
        routes.write_text(f"""
route:
  receiver: pd
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 100ms
  routes:
    - receiver: pd
      continue: true
    - receiver: hook
receivers:
  - name: pd
    pagerduty: {{routing_key: {{secret: pd_key}}, url: "{pd.url}"}}
    retry: {{initial: 100ms, max: 1s}}
    max_in_flight: 8
  - name: hook
    webhook: {{url: "{hook.url}"}}
    max_in_flight: 8
""")
        run = uuid.uuid4().hex[:6]
        s = LockstepSettings(_env_file=None, kafka_bootstrap_servers=broker.bootstrap,  # type: ignore[call-arg]
                             topic_prefix=f"b{run}.", app_id=f"b{run}", partitions=1, delivery_routes_file=routes,
                             delivery_secrets={"pd_key": KEY}, delivery_offset_reset="latest")
        await create_topics(s, broker.bootstrap)
        producer = await start_producer(s, broker.bootstrap)
        service = DeliveryService(s, broker.bootstrap)
        await service.start()
        await asyncio.sleep(1.0)
        cat = TopicCatalogue(s)
        sent: dict[str, float] = {}
        for i in range(n):
            a = sample_alert(1_764_503_000.0, tag=f"lat{i}")
            sent[a["dedup_key"]] = time.perf_counter()
            await producer.send_and_wait(cat.alerts, orjson.dumps(a))
            await asyncio.sleep(0.02)
        while len(seen) < 2 * n:
            await asyncio.sleep(0.05)
        for kind in ("pd", "hook"):
            lat = sorted((seen[f"{kind}:{k}"] - t) * 1000 for k, t in sent.items())
            print(f"{kind:5s} latency ms: p50 {statistics.median(lat):.1f}  p99 {lat[int(0.99 * (n - 1))]:.1f}  "
                  f"max {lat[-1]:.1f}  (n={n})")
        pd.down = True
        for i in range(n):
            await producer.send_and_wait(cat.alerts, orjson.dumps(sample_alert(1_764_503_000.0, tag=f"out{i}")))
        while service.workers["pd"].stats["parked"] < n:
            await asyncio.sleep(0.05)
        pd.down = False
        t0 = time.perf_counter()
        while len([k for k in seen if k.startswith("pd:") and "/out" in k]) < n:
            await asyncio.sleep(0.02)
        print(f"catch-up after outage: {n} parked alerts delivered in {time.perf_counter() - t0:.2f} s "
              f"({len(pd.incidents)} incidents, violations {len(pd.violations)})")
        await service.stop()
        await producer.stop()
        await pd.stop()
        await hook.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
