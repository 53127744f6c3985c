"""``lockstep run``: the whole thing on a laptop — embedded broker, a worker, a simulated cluster.

The simulator plays a scenario (default ``seed-incident``) at ``speed`` times real time, then keeps
the cluster running healthily in real time until Ctrl-C. Each alert is printed as a readable block.

No event time is ever ahead of the wall clock (a resolved alert's ``endsAt`` in the future would
keep it active in Alertmanager): :func:`demo_start` anchors the scenario far enough in the past
that playing it fast only catches up with the wall clock, and :func:`send_at` never sends a second
of the scenario before it is over on the wall clock, so once caught up the play is real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import signal
import sys
import time
from typing import Any, TextIO

import orjson
from pydantic import SecretStr

from agents.kafka import client_kwargs, start_producer
from agents.topics import TopicCatalogue, create_topics
from agents.web import port_available
from lockstep.broker import EmbeddedBroker
from lockstep.render import render_alert
from lockstep.replay import message_key
from lockstep.simulate import SCENARIOS, Scenario, Simulator
from lockstep.worker import Worker, settle_heap, start_unless_stopped
from models.inventory import inventory_adapter, inventory_key
from models.settings import LockstepSettings
from models.timeutil import format_ts

log = logging.getLogger("lockstep.run")

#: How far behind the wall clock the scenario's event times still are at the end of a fast play.
DEMO_MARGIN_S = 5.0


def demo_start(now: float, duration: float, speed: float, margin: float = DEMO_MARGIN_S) -> float:
    """The scenario start (Unix s, whole seconds) for a play begun at wall time ``now``.

    Played at ``speed`` x real time, second ``rel`` is sent at ``now + rel / speed`` while its event
    time is ``start + rel``; starting ``duration * (1 - 1/speed) + margin`` before ``now`` keeps every
    event time of the scenario at least ``margin`` behind the wall clock, the whole scenario still
    plays at ``speed``, and at its end the event times are ``margin`` behind the wall clock (the play
    goes on at ``speed`` until they are one second behind, then in real time: :func:`send_at`).

    >>> now = 1764502930.5
    >>> now - demo_start(now, duration=180.0, speed=10.0)  # 162 s of catching up, 5 s of margin
    167.5
    >>> now - demo_start(now, duration=180.0, speed=1.0), now - demo_start(now, duration=180.0, speed=0.5)
    (5.5, 5.5)
    """
    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed:g}")
    lead = duration * (1.0 - 1.0 / speed) if speed > 1.0 else 0.0
    return float(math.floor(now - lead - margin))


def send_at(rel: float, *, start_ts: float, wall0: float, speed: float) -> float:
    """The wall time (Unix s) to send second ``rel`` of a scenario that starts at ``start_ts``.

    ``speed`` x real time from ``wall0``, but never before second ``rel`` is over on the wall clock
    (``start_ts + rel + 1``): no event time is sent ahead of the wall clock, whatever the anchor,
    and a play that has caught up with the wall clock goes on in real time.

    >>> [send_at(r, start_ts=1000.0, wall0=1100.0, speed=10.0) for r in (0, 100, 110, 120)]
    [1100.0, 1110.0, 1111.0, 1121.0]
    """
    return max(wall0 + rel / speed, start_ts + rel + 1.0)


def fault_banner(scenario: Scenario, start_ts: float, now: float, speed: float) -> str:
    """What the banner says about the scenario's first fault: its event time and when it plays.

    >>> from lockstep.simulate import SCENARIOS
    >>> fault_banner(SCENARIOS["seed-incident"], 1764502930.0 - 70.0, now=1764502930.0 - 70.0 + 167.0, speed=10.0)
    'first fault at 11:42:10 UTC event time, in about 7 s'
    >>> fault_banner(SCENARIOS["healthy"], 1764502930.0, now=1764502930.0, speed=10.0)
    'no fault'
    """
    offset = scenario.fault_offset
    if offset is None:
        return "no fault"
    due = send_at(offset, start_ts=start_ts, wall0=now, speed=speed)
    return f"first fault at {format_ts(start_ts + offset)[11:19]} UTC event time, in about {due - now:.0f} s"


def demo_token(settings: LockstepSettings) -> tuple[LockstepSettings, str | None]:
    """The settings the demo's worker gets, with an API token, and the token to print.

    Without ``LOCKSTEP_API_TOKEN`` the page's write buttons (Silence, Annotate) would answer 403, so
    the demo makes a random token for this run and returns it to print; a token that is set is used
    as it is and not printed (None).

    >>> s, token = demo_token(LockstepSettings(_env_file=None))
    >>> len(token), s.api_token.get_secret_value() == token
    (24, True)
    >>> demo_token(LockstepSettings(_env_file=None, api_token="mine"))[1] is None
    True
    """
    if settings.api_token is not None:
        return settings, None
    token = secrets.token_hex(12)  # hex: never starts with "-", pastes as one word
    return settings.model_copy(update={"api_token": SecretStr(token)}), token


def next_steps(bootstrap: str, web_url: str, scenario: str = "seed-incident") -> str:
    """What to type in a second terminal, with this run's broker address and web URL, about the job
    the scenario's faults hit and the component they start on.

    >>> print(next_steps("127.0.0.1:40123", "http://127.0.0.1:6066"), end="")
    lockstep: in another terminal (with lockstep on PATH):
      export LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:40123
      lockstep tail alerts --from-beginning
      lockstep diagnose llm-70b --url http://127.0.0.1:6066
      lockstep annotate --job llm-70b "replaced the optics of leaf03 port 17"
    >>> print(next_steps("127.0.0.1:40123", "http://127.0.0.1:6066", "uplink-errors").splitlines()[-2:])
    ['  lockstep diagnose wide --url http://127.0.0.1:6066', '  lockstep annotate --job wide "replaced the optics \
of leaf01 port 1"']
    >>> next_steps("b", "u", "clock-skew").splitlines()[-1]
    '  lockstep annotate --job llm-70b "replaced the optics of leaf03 port 17"'
    >>> next_steps("b", "u", "healthy").splitlines()[-1]
    '  lockstep annotate --job llm-70b "a note on llm-70b"'
    """
    job, fix = _hint(SCENARIOS[scenario])
    return ("lockstep: in another terminal (with lockstep on PATH):\n"
            f"  export LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS={bootstrap}\n"
            "  lockstep tail alerts --from-beginning\n"
            f"  lockstep diagnose {job} --url {web_url}\n"
            f'  lockstep annotate --job {job} "{fix}"\n')


def _hint(scenario: Scenario) -> tuple[str, str]:
    """The job to ask about (the first a fault names, else the cluster's first) and an operator's note
    on fixing the first fault's component."""
    # (a standing condition, such as a skewed clock, is not a fault that happens: as fault_offset)
    faults = sorted((f for f in scenario.faults if math.isfinite(f.end)), key=lambda f: f.start)
    job = next((f.job for f in faults if f.job), scenario.cluster.jobs[0].job_id)
    first = faults[0] if faults else None
    if first is not None and first.target == "switch_port":
        return job, f"replaced the optics of {first.switch} port {first.port}"
    if first is not None and first.target in ("nic", "loader", "cpu", "xid", "gpu_util") and first.node:
        return job, f"drained {first.node} for a look"
    if first is not None and first.target == "storage" and first.pool:
        return job, f"failed {first.pool} over to its standby servers"
    return job, f"a note on {job}"


async def play(settings: LockstepSettings, bootstrap: str, scenario: str, speed: float, seed: int,
               stop: asyncio.Event, start_ts: float, realtime_after: bool = True) -> None:
    """Produce the scenario to the telemetry topics: ``speed`` x real time while its event times are
    behind the wall clock, real time once they have caught up (:func:`send_at`)."""
    cat = TopicCatalogue(settings)
    sim = Simulator(SCENARIOS[scenario], start_ts=start_ts, seed=seed)
    producer = await start_producer(settings, bootstrap)
    try:
        wall0 = time.time()  # the wall clock, not a monotonic one: event times are compared with it
        rel = 0
        duration = sim.scenario.duration
        while not stop.is_set():
            if rel >= duration and not realtime_after:
                break
            delay = send_at(rel, start_ts=start_ts, wall0=wall0, speed=speed) - time.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                if stop.is_set():
                    break
            for msg in sim.tick(float(rel)):
                if msg.topic == "inventory":
                    event = inventory_adapter.validate_python(msg.value)
                    await producer.send(cat.inventory, event.model_dump_json().encode(),
                                        key=inventory_key(event).encode())
                    continue
                key = message_key(msg.value[0]) if msg.value else msg.key
                await producer.send(cat.telemetry(msg.topic), orjson.dumps(msg.value), key=key.encode())
            rel += 1
    finally:
        await producer.stop()


async def print_alerts(settings: LockstepSettings, bootstrap: str, out: TextIO, stop: asyncio.Event,
                       on_alert: Any = None) -> None:
    """Follow the alerts topic and print each record as a block."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(TopicCatalogue(settings).alerts, **client_kwargs(settings, bootstrap), group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for msgs in batches.values():
                for m in msgs:
                    alert = orjson.loads(m.value)
                    out.write("\n" + render_alert(alert) + "\n")
                    out.flush()
                    if on_alert is not None:
                        on_alert(alert)
    finally:
        await consumer.stop()


async def run(settings: LockstepSettings, *, scenario: str = "seed-incident", speed: float = 10.0, seed: int = 7,
              exit_on: str | None = None, max_seconds: float | None = None, out: TextIO = sys.stdout) -> int:
    """Run until Ctrl-C, ``max_seconds``, or the first alert with status ``exit_on``.

    Returns 0, or 1 if ``exit_on`` was given and no such alert came before ``max_seconds``.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    broker = None
    worker = None
    tasks: list[asyncio.Task[None]] = []
    seen: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        bootstrap = settings.kafka_bootstrap_servers
        if bootstrap is None:
            broker = await EmbeddedBroker(log_dir=settings.data_dir).astart()
            bootstrap = broker.bootstrap
            out.write(f"lockstep: embedded Kafka-protocol broker (Tansu, pid {broker.pid}) on {bootstrap}\n")
        await create_topics(settings, bootstrap)
        # Inventory first, so the worker starts with the cluster's jobs and topology loaded.
        sc = SCENARIOS[scenario]
        anchor = demo_start(time.time(), sc.duration, speed)
        sim = Simulator(sc, start_ts=anchor, seed=seed)
        producer = await start_producer(settings, bootstrap)
        cat = TopicCatalogue(settings)
        for msg in sim.inventory():
            event = inventory_adapter.validate_python(msg.value)
            await producer.send(cat.inventory, event.model_dump_json().encode(), key=inventory_key(event).encode())
        await producer.stop()
        if settings.web_port and not port_available(settings.web_host, settings.web_port):
            out.write(f"lockstep: port {settings.web_port} is in use; the page goes on a free port instead\n")
            settings = settings.model_copy(update={"web_port": 0})
        settings, token = demo_token(settings)
        worker = Worker(settings, bootstrap, serve_web=True)
        if not await start_unless_stopped(worker, stop):
            out.write("lockstep: stopped during start-up\n")
            return 0
        settle_heap(settings.gc_young_threshold)
        out.write(f"lockstep: worker up; simulating {len(sim.nodes)} nodes x {sim.cluster.gpus_per_node} GPUs, "
                  f"{len(sim.cluster.jobs)} jobs; scenario {scenario} at {speed:g}x ({sc.description})\n")
        out.write(f"lockstep: {fault_banner(sc, anchor, time.time(), speed)}; event times run behind the wall "
                  "clock until the scenario has played\n")
        out.write(f"lockstep: timeline page at {worker.web_url}/\n")
        if token is not None:
            out.write(f"lockstep: API token {token} (the page asks for it on Silence and Annotate; "
                      "set LOCKSTEP_API_TOKEN to choose it)\n")
        else:
            out.write("lockstep: API token from LOCKSTEP_API_TOKEN\n")
        out.write(next_steps(bootstrap, str(worker.web_url), scenario))
        out.write("lockstep: waiting for alerts (Ctrl-C to stop)\n")
        out.flush()

        def on_alert(alert: dict[str, Any]) -> None:
            seen.append(alert)
            if exit_on is not None and alert["status"] == exit_on:
                stop.set()

        tasks.append(loop.create_task(play(settings, bootstrap, scenario, speed, seed, stop, anchor)))
        tasks.append(loop.create_task(print_alerts(settings, bootstrap, out, stop, on_alert)))
        if max_seconds is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, max_seconds - (time.monotonic() - started)))
        else:
            await stop.wait()
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=5)
        if worker is not None:
            await worker.stop()
        if broker is not None:
            broker.stop()
    if exit_on is not None and not any(a["status"] == exit_on for a in seen):
        return 1
    return 0
