"""Chaos: live traffic with incidents through a group of worker processes that are killed, stopped,
restarted, added and removed at random, with the input paused now and then; afterwards, what reached the
topics is compared with a fault-free run of the same traffic.

    python -m benchmarks.chaos [--minutes 10] [--rate 10000] [--gpus 256] [--incident-every 60]
                               [--every 30] [--workers 2] [--max-workers 3] [--seed 1] [--carriers all]

Starts the embedded broker, creates the topics, starts ``--workers`` ``lockstep worker`` processes in one
group (each as ``lockstep bench`` spawns it, with the deployment's default ``LOCKSTEP_CARRIER_FORMATS``
unless ``--carriers`` says otherwise) and produces the generated cluster (:mod:`lockstep.loadgen`) at
``--rate`` samples/s with a leaf-port incident every ``--incident-every`` seconds of wall time
(:func:`benchmarks.soak.schedule`). Every ``--every`` seconds (times 0.5-1.5, drawn from ``--seed``) one
action, drawn by weight from :data:`ACTIONS`:

- ``kill``: SIGKILL a worker (no shutdown, no final commit, no flush) and start it again after 0-8 s,
  keeping its data directory half the time (a process restarted on its host) and not the other half
  (a pod rescheduled elsewhere);
- ``term``: SIGTERM a worker (a graceful leave) and start it again after 0-8 s;
- ``join``: start one more worker (up to ``--max-workers``);
- ``leave``: SIGTERM a worker for good (never the last one);
- ``pause``: hold the producer for 5-20 s (input that pauses and resumes; event time goes on where it
  stopped).

The four that change the group's membership wait, by default, until the broker describes the group as
``Stable`` (every member joined and synced; a join also goes into an ``Empty`` group; at most 60 s, else
the action is skipped and said so).
The embedded broker keeps for good a member that dies between its join and its sync as the new
generation's leader, and every worker after it then waits for the group (docs/operations.md, "A worker
waits for its group"); a kill at any moment met that in seeds 5 and 6 and left no verdict on Lockstep.
``--membership-at any`` acts at once, as before (Apache Kafka drops such a member after its timeouts).

Once the last scrape is acknowledged the actions stop, every stopped worker slot keeps at most what runs,
and the run waits up to ``--settle`` seconds for the group to commit every telemetry record and for every
incident to fire and resolve. Then it reads the ``anomalies`` and ``alerts`` topics whole and runs the
same traffic through the pure pipeline (:func:`tests.faults.kit.reference_anomalies`).

Pass (the fault tests' rules, :mod:`tests.faults.test_worker_faults`, over a long random run):

- every anomaly of the fault-free run reached ``anomalies`` and none that it does not give (delivery is
  at least once: a duplicate of a reference anomaly is allowed and counted);
- every incident fired exactly one ``job_slowdown`` alert episode on its job (an alert id with the
  episode's ``started_at``: the id is the same for every episode of one cause on one job), with exactly
  one ``firing`` and one ``resolved`` record; no ``job_slowdown`` episode outside an incident;
- every telemetry record committed by the group at the end.

Writes a JSON document (``--output``): the actions with their times, the readings (lag, workers alive)
every 10 s, the verdict and, on a failure, what was lost or extra by source. Worker logs are in the
run's directory (printed at the start).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.lockbench import Bench, TopicNames
from benchmarks.soak import add_load_arguments, schedule

#: The actions and their weights.
ACTIONS: dict[str, int] = {"kill": 4, "term": 2, "join": 1, "leave": 1, "pause": 2}

#: Readings every this many seconds.
EVERY_S = 10.0


@dataclass
class Slot:
    """One worker's place in the group: its name, data directory and current process (None: stopped)."""

    name: str
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    data_dirs: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Group:
    """The worker processes of the run, started through :class:`benchmarks.lockbench.Bench`."""

    def __init__(self, bench: Bench, settings: Any, carriers: str) -> None:
        self.bench = bench
        self.settings = settings
        self.carriers = carriers
        self.slots: list[Slot] = []

    def start(self, slot: Slot, fresh_dir: bool) -> None:
        if fresh_dir or not slot.data_dirs:
            slot.data_dirs.append(str(self.bench.log_dir / f"{slot.name}-data-{len(slot.data_dirs)}"))
        slot.incarnation += 1
        slot.proc = self.bench.spawn_worker(
            self.settings, f"{slot.name}-{slot.incarnation}",
            extra={"LOCKSTEP_DATA_DIR": slot.data_dirs[-1], "LOCKSTEP_CARRIER_FORMATS": self.carriers,
                   "LOCKSTEP_LOG_LEVEL": "info"})

    def add(self) -> Slot:
        slot = Slot(f"w{len(self.slots)}")
        self.slots.append(slot)
        self.start(slot, fresh_dir=True)
        return slot

    @property
    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.alive]

    @staticmethod
    def kill(slot: Slot) -> None:
        if slot.proc is not None and slot.proc.poll() is None:
            os.kill(slot.proc.pid, signal.SIGKILL)
            slot.proc.wait(timeout=10)

    def term(self, slot: Slot) -> None:
        if slot.proc is not None:
            self.bench.stop(slot.proc)


async def group_state(settings: Any, bootstrap: str, group: str) -> str:
    """The consumer group's state as the broker describes it (DescribeGroups), or why it could not say."""
    from agents.kafka import describe_group

    try:
        return (await describe_group(settings, bootstrap, group)).state
    except Exception as exc:  # (a harness reading: a failed one is a state like another)
        return f"unknown ({type(exc).__name__})"


async def until_stable(settings: Any, bootstrap: str, group: str, settled: tuple[str, ...] = ("Stable",),
                       timeout_s: float = 60.0) -> tuple[bool, float, str]:
    """Wait for the group to be in one of the ``settled`` states (``Stable``: every member joined and
    synced): (whether it was, seconds waited, the last state read)."""
    t0 = time.monotonic()
    while True:
        state = await group_state(settings, bootstrap, group)
        waited = time.monotonic() - t0
        if state in settled or waited >= timeout_s:
            return state in settled, round(waited, 1), state
        await asyncio.sleep(0.5)


def group_waits(logs: dict[str, str]) -> list[dict[str, Any]]:
    """The waits for the consumer group that went past the worker's threshold (lockstep.worker's warning),
    from each worker incarnation's log: how often each said so, its first line, and whether it ended.

    >>> said = "WARNING lockstep.worker: no partitions assigned by the consumer group after 31 s; the broker says: x"
    >>> group_waits({"w0-1": said, "w1-1": "quiet"})
    [{'worker': 'w0-1', 'said': 1, 'ended': False,
      'first': 'no partitions assigned by the consumer group after 31 s; the broker says: x'}]
    """
    out = []
    for name, text in sorted(logs.items()):
        lines = [x.split("lockstep.worker: ", 1)[-1] for x in text.splitlines()
                 if "no partitions assigned by the consumer group after" in x]
        if lines:
            ended = re.search(r"(?<!no )partitions assigned by the consumer group after \d+ s of waiting", text)
            out.append({"worker": name, "said": len(lines), "ended": ended is not None, "first": lines[0]})
    return out


@dataclass
class Paced:
    """The producer's pause switch: set while the input is held."""

    held: asyncio.Event = field(default_factory=asyncio.Event)
    paused_s: float = 0.0


def episodes(alerts: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The ``job_slowdown`` alerts as episodes: ``(alert_id, started_at)`` (an alert id is the same for
    every episode of one cause on one job; its ``started_at`` tells the episodes apart) -> its job and
    how many ``firing`` and ``resolved`` records it has."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for a in alerts:
        if a.get("type") != "job_slowdown":
            continue
        ep = out.setdefault((str(a.get("alert_id")), str(a.get("started_at"))),
                            {"job": a.get("job_id"), "firing": 0, "resolved": 0})
        status = str(a.get("status"))
        if status in ("firing", "resolved"):
            ep[status] += 1
    return out


def verdict(reference: set[tuple[Any, ...]], anomalies: list[dict[str, Any]], alerts: list[dict[str, Any]],
            incidents: list[Any], lag: int) -> dict[str, Any]:
    """The run's pass rule (the module's docstring) and what broke it.

    >>> from lockstep.loadgen import Incident
    >>> inc = [Incident("job1", 1764502800.0, 1764502840.0, "leaf0", "1"),
    ...        Incident("job1", 1764502900.0, 1764502940.0, "leaf0", "1")]
    >>> a = {"type": "job_slowdown", "job_id": "job1", "alert_id": "x", "started_at": "2025-11-30T11:40:05Z"}
    >>> b = {**a, "started_at": "2025-11-30T11:41:45Z"}
    >>> ok = verdict(set(), [], [{**a, "status": "firing"}, {**a, "status": "resolved"},
    ...                          {**b, "status": "firing"}, {**b, "status": "resolved"}], inc, 0)
    >>> ok["pass"], ok["incidents_fired_once"], ok["incidents_resolved"]
    (True, 2, 2)
    >>> bad = verdict(set(), [], [{**a, "status": "firing"}, {**a, "status": "firing"}], inc, 3)
    >>> bad["pass"], bad["episodes_fired_twice"], bad["incidents_resolved"], bad["lag_messages"]
    (False, [['x', '2025-11-30T11:40:05Z']], 0, 3)
    """
    from models.timeutil import parse_ts
    from tests.faults.kit import anomaly_key

    keys = [anomaly_key(a) for a in anomalies]
    got = set(keys)
    lost, extra = sorted(reference - got), sorted(got - reference)
    eps = episodes(alerts)
    claimed: set[tuple[str, str]] = set()
    per = []
    for inc in incidents:
        mine = [k for k, ep in eps.items() if ep["job"] == inc.job and ep["firing"]
                and inc.start_ts <= parse_ts(k[1]) <= inc.end_ts]
        claimed.update(mine)
        per.append({"job": inc.job, "start_ts": inc.start_ts, "episodes": [list(k) for k in mine],
                    "firing": sum(eps[k]["firing"] for k in mine), "resolved": sum(eps[k]["resolved"] for k in mine)})
    unexpected = [list(k) for k, ep in eps.items() if k not in claimed]
    twice = [list(k) for k, ep in eps.items() if ep["firing"] > 1]
    resolved_twice = [list(k) for k, ep in eps.items() if ep["resolved"] > 1]
    by_source: dict[str, int] = {}
    for what, keys_ in (("lost", lost), ("extra", extra)):
        for k in keys_:
            by_source[f"{what} {k[2]}/{k[3]}"] = by_source.get(f"{what} {k[2]}/{k[3]}", 0) + 1
    once = sum(1 for i in per if len(i["episodes"]) == 1 and i["firing"] == 1)
    resolved = sum(1 for i in per if i["episodes"] and i["resolved"] == 1)
    ok = (not lost and not extra and not twice and not resolved_twice and not unexpected
          and once == len(per) == resolved and lag == 0)
    return {"pass": ok, "reference_anomalies": len(reference), "anomalies_read": len(keys),
            "duplicates": len(keys) - len(got), "lost": len(lost), "extra": len(extra),
            "lost_or_extra_by_source": by_source, "lost_examples": [list(k) for k in lost[:10]],
            "extra_examples": [list(k) for k in extra[:10]],
            "incidents": len(per), "incidents_fired_once": once, "incidents_resolved": resolved,
            "per_incident": per, "unexpected_episodes": unexpected, "episodes_fired_twice": twice,
            "episodes_resolved_twice": resolved_twice, "lag_messages": lag}


async def chaos(minutes: float, rate: float, gpus: int, incident_every_s: float, every_s: float, workers: int,
                max_workers: int, seed: int, carriers: str, settle_s: float,
                nodes_per_job: int = 4, membership_at: str = "stable") -> dict[str, Any]:
    from agents.topics import TopicCatalogue, create_topics
    from lockstep.broker import EmbeddedBroker
    from lockstep.loadgen import LoadGenerator, produce
    from lockstep.replay import read_topic
    from tests.faults.kit import reference_anomalies

    rng = random.Random(seed)
    broker = await EmbeddedBroker().astart()
    bench = Bench(broker.bootstrap, partitions=4)
    print(f"chaos: logs in {bench.log_dir}", flush=True)
    actions: list[dict[str, Any]] = []
    readings: list[dict[str, Any]] = []
    acked: dict[int, float] = {}
    t0 = time.monotonic()

    def say(what: str, **info: Any) -> None:
        entry = {"t": round(time.monotonic() - t0, 1), "action": what, "scrape": max(acked, default=-1), **info}
        actions.append(entry)
        print(orjson.dumps(entry).decode(), flush=True)

    try:
        settings = bench.with_prefix("chaos").model_copy(update={"carrier_formats": carriers})
        wait_s = max(settings.grace_s, settings.job_end_margin_s) + settings.allowed_lateness_s
        spec, scrapes = schedule(minutes, rate, gpus, incident_every_s, wait_s=wait_s)
        spec = dataclasses.replace(spec, nodes_per_job=nodes_per_job)  # several jobs: incidents on each in turn
        gen = LoadGenerator(spec)
        await create_topics(settings, broker.bootstrap)
        group = Group(bench, settings, carriers)
        for _ in range(workers):
            group.add()
        for slot in group.slots:
            assert slot.proc is not None
            await bench.wait_consuming(slot.proc)
        say("started", workers=workers, scrapes=scrapes, incidents=len(gen.incidents))
        paced = Paced()
        producing = asyncio.create_task(produce(settings, broker.bootstrap, spec, rate=rate, scrapes=scrapes,
                                                hold=paced.held,
                                                on_scrape=lambda k, ts, wall: acked.__setitem__(k, wall)))
        topics = TopicNames(settings).telemetry
        restarts: list[asyncio.Task[None]] = []

        async def restart_later(slot: Slot, delay: float, fresh: bool) -> None:
            await asyncio.sleep(delay)
            group.start(slot, fresh_dir=fresh)
            say("restarted", worker=slot.name, incarnation=slot.incarnation, fresh_dir=fresh)

        async def pause_for(seconds: float) -> None:
            paced.held.set()
            await asyncio.sleep(seconds)
            paced.held.clear()
            paced.paused_s += seconds
            say("resumed", after_s=round(seconds, 1))

        async def act() -> None:
            alive = group.alive
            choices = [a for a in ACTIONS
                       if not (a == "join" and len(group.slots) >= max_workers)
                       and not (a == "leave" and len(alive) <= 1)
                       and not (a in ("kill", "term", "leave") and not alive)
                       and not (a == "pause" and paced.held.is_set())]
            if not choices:  # every worker between a stop and its restart, the input held, no room to join
                return
            what = rng.choices(choices, weights=[ACTIONS[a] for a in choices])[0]
            if what != "pause" and membership_at == "stable":
                # (a join may also go into an Empty group; a stop waits for every member to have synced, the
                # one just restarted included: an Empty group may have one about to join)
                settled = ("Stable", "Empty") if what == "join" else ("Stable",)
                stable, waited, state = await until_stable(settings, broker.bootstrap, settings.app_id, settled)
                if not stable:
                    say("skipped", skipped=what, reason=f"group not Stable after {waited:.0f} s", state=state)
                    return
                alive = group.alive  # (what the wait changed: a restart came up, a worker exited)
                if what in ("kill", "term", "leave") and len(alive) <= (1 if what == "leave" else 0):
                    return
            if what == "join":
                slot = group.add()
                say("join", worker=slot.name)
            elif what == "pause":
                seconds = rng.uniform(5.0, 20.0)
                say("pause", seconds=round(seconds, 1))
                restarts.append(asyncio.create_task(pause_for(seconds)))
            else:
                slot = rng.choice(alive)
                if what == "kill":
                    group.kill(slot)
                else:
                    await asyncio.to_thread(group.term, slot)
                say(what, worker=slot.name, incarnation=slot.incarnation)
                if what != "leave":
                    delay, fresh = rng.uniform(0.0, 8.0), rng.random() < 0.5
                    restarts.append(asyncio.create_task(restart_later(slot, delay, fresh)))

        async def read_lag() -> int:
            try:
                return await bench.lag(settings.app_id, topics)
            except Exception:  # the group coordinator between generations: try again at the next reading
                return -1

        next_action = time.monotonic() + every_s * rng.uniform(0.5, 1.5)
        next_reading = time.monotonic() + EVERY_S
        while not producing.done():
            await asyncio.sleep(0.2)
            now = time.monotonic()
            if now >= next_action:
                await act()
                next_action = now + every_s * rng.uniform(0.5, 1.5)
            if now >= next_reading:
                readings.append({"t": round(now - t0, 1), "lag_messages": await read_lag(),
                                 "alive": [s.name for s in group.alive], "scrape": max(acked, default=-1)})
                print(orjson.dumps(readings[-1]).decode(), flush=True)
                next_reading = now + EVERY_S
        produced = producing.result()
        await asyncio.gather(*restarts)
        say("input done", produced=produced)
        # settle: everything committed, every incident fired and resolved
        cat_alerts = TopicNames(settings).alerts
        deadline = time.monotonic() + settle_s
        lag = -1
        alerts: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            lag = await read_lag()
            alerts = await read_topic(settings, broker.bootstrap, cat_alerts)
            now_ = verdict(set(), [], alerts, gen.incidents, lag)
            if lag == 0 and now_["incidents_resolved"] == now_["incidents"]:
                break
            await asyncio.sleep(2.0)
        say("settled", lag=lag, waited_s=round(settle_s - max(0.0, deadline - time.monotonic()), 1))
        await asyncio.sleep(3.0)  # the last alerts' resolutions and anomalies flushed
        alerts = await read_topic(settings, broker.bootstrap, cat_alerts)
        anomalies = [r for r in await read_topic(settings, broker.bootstrap, TopicCatalogue(settings).anomalies)
                     if r.get("type") == "anomaly"]
        lag = await read_lag()
        await bench.close_readers()
    finally:
        bench.stop_all()
        broker.stop()
    waits = group_waits({p.stem: p.read_text(errors="replace") for p in bench.log_dir.glob("w*-*.log")})
    print("chaos: the fault-free reference run ...", flush=True)
    reference = await asyncio.to_thread(reference_anomalies, spec, scrapes)
    out = verdict(reference, anomalies, alerts, gen.incidents, lag)
    return {"minutes": minutes, "rate": rate, "gpus": gpus, "seed": seed, "carriers": carriers,
            "every_s": every_s, "workers": workers, "max_workers": max_workers, "scrapes": scrapes,
            "membership_at": membership_at,
            "produced": produced, "paused_s": round(paced.paused_s, 1), "log_dir": str(bench.log_dir),
            "actions": actions, "readings": readings, "group_waits": waits, **out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_arguments(p, minutes=10.0, rate=10_000.0, gpus=256, incident_every=60.0)
    p.add_argument("--nodes-per-job", type=int, default=4, help="nodes a job (8 GPUs a node; default 4)")
    p.add_argument("--every", type=float, default=30.0, help="mean seconds between actions")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-workers", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--carriers", default="all", help="LOCKSTEP_CARRIER_FORMATS of the workers (default all)")
    p.add_argument("--settle", type=float, default=180.0)
    p.add_argument("--membership-at", choices=("stable", "any"), default="stable",
                   help="when kill, term, join and leave act: once the group is Stable (default) or at once")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/chaos.json"))
    args = p.parse_args()
    out = asyncio.run(chaos(args.minutes, args.rate, args.gpus, args.incident_every, args.every, args.workers,
                            args.max_workers, args.seed, args.carriers, args.settle, args.nodes_per_job,
                            args.membership_at))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    kinds: dict[str, int] = {}
    for a in out["actions"]:
        kinds[a["action"]] = kinds.get(a["action"], 0) + 1
    print(f"chaos: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}; anomalies {out['anomalies_read']} "
          f"read for {out['reference_anomalies']} of the reference ({out['lost']} lost, {out['extra']} extra, "
          f"{out['duplicates']} duplicates); incidents {out['incidents_fired_once']}/{out['incidents']} fired once, "
          f"{out['incidents_resolved']} resolved; episodes fired twice {out['episodes_fired_twice']}, unexpected "
          f"{out['unexpected_episodes']}; lag "
          f"{out['lag_messages']}; pass={out['pass']}; wrote {args.output}")
    for wait in out["group_waits"]:  # (a worker the consumer group kept waiting: docs/operations.md)
        print(f"chaos: {wait['worker']} waited for its group past the threshold ({wait['said']} warnings, "
              f"{'ended' if wait['ended'] else 'never ended'}): {wait['first']}")
    sys.exit(0 if out["pass"] else 1)


if __name__ == "__main__":
    main()
