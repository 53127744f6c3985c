"""One receiver's delivery worker: its own consumers, its own offsets, its own retry topic.

Stages (names used in logs and dead letters, ``deliver.<receiver>``)::

    alerts ──read──> decode ──lifecycle──> group (Dispatcher) ──flush──> send ──accepted──> ledger
                        │          │ dup/stale: settle     │ silenced: log    │ unavailable -> park
                        └─bad: dlq └───────────────────────┴── + count ───────┴ rejected -> dlq
    delivery.retry.<receiver> ──head of line──> wait (backoff, Retry-After) ──> send ──> ledger | dlq

At-least-once: an ``alerts`` offset is committed only when every alert before it is *settled* —
routed elsewhere, a duplicate, muted by a silence, accepted (and in the ledger), parked on the
retry topic (acked by the broker), or dead-lettered. A retry record is committed only once it is accepted or given up.
While anything is parked, new notifications are parked behind it, so a receiver sees each
``dedup_key``'s states in order. In flight per receiver: at most ``max_in_flight`` sends and
``delivery_max_pending`` unsettled alerts; a slow receiver only slows its own worker.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from lockstep.delivery.base import DeliveryContext, Receiver
from lockstep.delivery.config import RoutingConfig
from lockstep.delivery.errors import ReceiverRejected, ReceiverUnavailable
from lockstep.delivery.ledger import Ledger
from lockstep.delivery.redaction import Redactor
from lockstep.delivery.retry import backoff_delay, park_record, unpark
from models.alerts import Alert
from models.errors import DeliveryError, LockstepError, ValidationFailed
from models.records import DeadLetter
from streams.dispatch import Dispatcher, MuteRule, Notification, lifecycle, stamped_silences

log = logging.getLogger("lockstep.delivery")


def delivery_dead_letter(stage: str, reason: str, error: type[LockstepError], original: bytes, redactor: Redactor, *,
                         now: float, topic: str | None, partition: int | None, offset: int | None,
                         key: bytes | str | None, record: str | None = None, retryable: bool = False) -> dict[str, Any]:
    """The ``dlq`` record of what a receiver worker could not use or deliver, as a :class:`DeadLetter`.

    ``error`` is the class from the error tree (a refusal, ``ValidationFailed`` for an unusable
    record); ``original`` the alert, notification or retry record as read. Every string in it,
    the original included, has its secrets masked before it leaves the process (a notification
    may carry a URL the receiver echoed back).

    >>> dl = delivery_dead_letter("deliver.pd", "not an alert", ValidationFailed, b"{}", Redactor(), now=1.0,
    ...                           topic="alerts", partition=0, offset=7, key=b"k")
    >>> dl["error"], dl["original"], dl["original_size"], dl["key"]
    ('ValidationFailed', 'e30=', 2, 'k')
    """
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    raw = redactor.text(original.decode("utf-8", "replace")).encode()
    letter = DeadLetter(stage=stage, reason=reason, error=error.__name__, topic=topic, partition=partition,
                        offset=offset, record=record, original=base64.b64encode(raw).decode("ascii"),
                        original_size=len(raw), key=key, ts=now, retryable=retryable)
    return dict(redactor.record(letter.model_dump(mode="json")))


class OffsetTracker:
    """Per-partition offsets read but not settled; what may be committed is below the lowest open one."""

    def __init__(self) -> None:
        self.open: dict[Any, set[int]] = {}
        self.next: dict[Any, int] = {}
        self.committed: dict[Any, int] = {}

    def add(self, tp: Any, offset: int) -> None:
        self.open.setdefault(tp, set()).add(offset)
        self.next[tp] = max(self.next.get(tp, 0), offset + 1)

    def settle(self, token: tuple[Any, int]) -> None:
        tp, offset = token
        self.open.get(tp, set()).discard(offset)

    @property
    def pending(self) -> int:
        return sum(len(v) for v in self.open.values())

    def committable(self) -> dict[Any, int]:
        """Partitions whose commit point moved: ``{tp: offset}`` (the next offset to read)."""
        out = {}
        for tp, nxt in self.next.items():
            point = min(self.open[tp]) if self.open.get(tp) else nxt
            if point > self.committed.get(tp, -1):
                out[tp] = point
        return out


class ReceiverWorker:
    """Delivers the ``alerts`` topic to one receiver (see the module docstring)."""

    def __init__(self, receiver: Receiver, routing: RoutingConfig, *, alerts_topic: str, retry_topic: str,
                 group_id: str, consumer_factory: Callable[..., Any], producer: Any, ledger: Ledger,
                 redactor: Redactor, dead_letter: Callable[[dict[str, Any]], Any], public_url: str | None,
                 hostname: str, max_pending: int, offset_reset: str, seed: int | None = None,
                 muted: MuteRule = stamped_silences) -> None:
        self.receiver = receiver
        self.name = receiver.name
        self.alerts_topic = alerts_topic
        self.retry_topic = retry_topic
        self.group_id = group_id
        self.consumer_factory = consumer_factory
        self.producer = producer
        self.ledger = ledger
        self.redactor = redactor
        self.dead_letter = dead_letter
        self.public_url = public_url
        self.hostname = hostname
        self.max_pending = max_pending
        self.offset_reset = offset_reset
        self.rng = random.Random(seed)
        self.dispatcher = Dispatcher(routing.root, self.name, send_resolved=receiver.config.integration.send_resolved,
                                     muted=muted)
        self.tracker = OffsetTracker()
        self.backlog = False        # something is parked: new notifications queue behind it
        self._parking = 0           # parks whose produce has not been acknowledged yet
        self._last_parked = -1      # offset of the last park this process made
        self._last_seen = -1        # offset of the last retry record taken
        self.stats = {"accepted": 0, "parked": 0, "retried": 0, "dead_letters": 0, "duplicates": 0, "silenced": 0}
        self._sem = asyncio.Semaphore(receiver.config.max_in_flight)
        self._group_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._main: Any = None
        self._retry: Any = None
        self._stopping = asyncio.Event()
        self._progress = asyncio.Event()

    @property
    def stage(self) -> str:
        return f"deliver.{self.name}"

    def ctx(self) -> DeliveryContext:
        return DeliveryContext(now=time.time(), public_url=self.public_url, hostname=self.hostname)

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Rebuild groups from the ledger, open both consumers at their committed offsets, start the loops."""
        from aiokafka import TopicPartition

        for (receiver, _), alert in self.ledger.firing.items():
            if receiver == self.name:
                row = self.ledger.get(receiver, alert["dedup_key"])
                self.dispatcher.restore(alert, row.ts if row else time.time())
        self._main = self.consumer_factory(group_id=self.group_id, auto_offset_reset=self.offset_reset)
        await self._main.start()
        await self._main.topics()  # metadata of every topic, so the partitions below are known
        parts = self._main.partitions_for_topic(self.alerts_topic) or {0}
        self._main.assign([TopicPartition(self.alerts_topic, p) for p in sorted(parts)])
        self._retry = self.consumer_factory(group_id=f"{self.group_id}-retry", auto_offset_reset="earliest")
        await self._retry.start()
        rtp = TopicPartition(self.retry_topic, 0)
        self._retry.assign([rtp])
        committed = await self._retry.committed(rtp)
        if committed is None:
            committed = (await self._retry.beginning_offsets([rtp]))[rtp]
        end = (await self._retry.end_offsets([rtp]))[rtp]
        # Only "anything left?" is asked of the offsets (some brokers report the end of the last
        # batch); the retry loop clears the flag when it finds the topic drained.
        self.backlog = end > committed
        if self.backlog:
            log.info("%s: parked notifications to retry (from offset %d)", self.stage, committed)
        self._loops = [asyncio.create_task(self._main_loop(), name=f"{self.stage}.main"),
                       asyncio.create_task(self._retry_loop(), name=f"{self.stage}.retry")]

    async def stop(self) -> None:
        """Stop reading, let sends in flight finish (bounded), commit what is settled, close."""
        self._stopping.set()
        self._progress.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.receiver.config.integration.timeout + 1)
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self._commit()
        for consumer in (self._main, self._retry):
            if consumer is not None:
                with contextlib.suppress(Exception):
                    await consumer.stop()

    async def reload(self, routing: RoutingConfig, receiver: Receiver | None = None) -> None:
        """New routes for alerts read from now on; a changed receiver definition replaces the sender."""
        if receiver is not None:
            old, self.receiver = self.receiver, receiver
            await old.close()
        self.dispatcher.reload(routing.root, send_resolved=self.receiver.config.integration.send_resolved)

    # -- the alerts topic ------------------------------------------------------------------------
    async def _main_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._main_step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: delivery step failed; retrying in 1s", self.stage)
                await asyncio.sleep(1.0)

    async def _main_step(self) -> None:
        if self.tracker.pending >= self.max_pending:
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), 0.5)
            self._flush(time.time())
            await self._commit()
            return
        due = self.dispatcher.next_due()
        wait_ms = 200 if due is None else int(min(200, max(5.0, (due - time.time()) * 1000)))
        batch = await self._main.getmany(timeout_ms=wait_ms, max_records=200)
        now = time.time()
        for tp, msgs in batch.items():
            for msg in msgs:
                self.tracker.add(tp, msg.offset)
                await self._take(tp, msg, now)
        for token in self.dispatcher.take_settled():
            self.tracker.settle(token)
        self._flush(time.time())
        await self._commit()

    async def _take(self, tp: Any, msg: Any, now: float) -> None:
        token = (tp, msg.offset)
        try:
            raw = orjson.loads(msg.value)
            if not isinstance(raw, dict):
                raise TypeError("an alert is a JSON object")
            # The contract says fields may be added: check the ones we know, deliver the record whole.
            Alert.model_validate({k: v for k, v in raw.items() if k in Alert.model_fields})
            alert = raw
        except (orjson.JSONDecodeError, ValidationError, TypeError) as exc:
            reason = f"not an alert: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            await self.dead_letter(self._dead_letter_record(
                reason, ValidationFailed, msg.value or b"", topic=tp.topic, partition=tp.partition, offset=msg.offset,
                key=msg.key))
            self.tracker.settle(token)
            return
        state = lifecycle(self.ledger.get(self.name, alert["dedup_key"]), alert)
        if state in ("duplicate", "stale"):
            self.stats["duplicates"] += 1
            self.tracker.settle(token)
            return
        self.dispatcher.add(alert, now, token)

    def _flush(self, now: float) -> None:
        for notification in self.dispatcher.flush(now):
            task = asyncio.create_task(self._deliver(notification))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for muted in self.dispatcher.take_suppressed():
            self.stats["silenced"] += 1
            a = muted.alert
            log.info("%s: %s %s (%s) not notified: silenced by %s", self.stage, a["status"], a["alert_id"],
                     a["dedup_key"], ", ".join(muted.silenced_by))

    async def _deliver(self, n: Notification) -> None:
        try:
            await self._deliver_unguarded(n)
        except Exception as exc:
            if self._stopping.is_set():
                return  # its offsets stay open: read again after the restart
            log.exception("%s: delivery of %s failed unexpectedly; parking it", self.stage, n.group_key)
            try:
                await self._park(n, f"unexpected {type(exc).__name__}", None)
            except Exception:
                log.exception("%s: could not park %s; its alerts are read again after a restart",
                              self.stage, n.group_key)
                return
            self.dispatcher.settle(n, time.time())
            for token in n.tokens:
                self.tracker.settle(token)
            self._progress.set()

    async def _deliver_unguarded(self, n: Notification) -> None:
        lock = self._group_locks.setdefault(n.group_key, asyncio.Lock())
        async with lock, self._sem:
            units = n.split() if self.receiver.per_alert else [n]
            i = 0
            while i < len(units) and not self._stopping.is_set():
                unit = units[i]
                if self.backlog:
                    await self._park(unit, "parked behind earlier notifications", None)
                    i += 1
                    continue
                try:
                    await self._send(unit)
                except ReceiverUnavailable as exc:
                    await self._park(unit, self.redactor.text(str(exc)), exc.retry_after)
                except ReceiverRejected as exc:
                    await self._reject(unit, exc, source=self.alerts_topic)
                except DeliveryError as exc:  # any other refusal from a sender: never lose it
                    await self._park(unit, self.redactor.text(str(exc)), None)
                i += 1
            if i < len(units):
                return  # stopping: leave the offsets open, they are read again after the restart
            self.dispatcher.settle(n, time.time())
            for token in n.tokens:
                self.tracker.settle(token)
            self._progress.set()

    async def _send(self, unit: Notification) -> None:
        await self.receiver.send(unit, self.ctx())
        now = time.time()
        for alert in unit.changed:
            await self._ledger_write(alert, now)
        self.stats["accepted"] += 1

    async def _ledger_write(self, alert: dict[str, Any], now: float) -> None:
        delay = 0.1
        while True:
            try:
                await self.ledger.record(self.name, alert, now)
                return
            except Exception as exc:  # broker trouble: the receiver has it, keep trying to note it
                if self._stopping.is_set():
                    raise
                log.warning("%s: ledger write failed (%s); retrying", self.stage, type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _park(self, unit: Notification, error: str, retry_after: float | None) -> None:
        now = time.time()
        wait = backoff_delay(0, self.receiver.config.retry, self.rng, retry_after)
        value = orjson.dumps(park_record(unit, first_failed=now, not_before=now + wait, attempts=1,
                                         last_error=error))
        delay = 0.1
        self.backlog = True  # before the await: later notifications queue behind this one
        self._parking += 1
        try:
            while True:
                try:
                    meta = await self.producer.send_and_wait(self.retry_topic, key=self.name.encode(), value=value)
                    self._last_parked = max(self._last_parked, meta.offset)
                    break
                except Exception as exc:
                    if self._stopping.is_set():
                        raise
                    log.warning("%s: parking failed (%s); retrying", self.stage, type(exc).__name__)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._parking -= 1
        self.stats["parked"] += 1
        log.info("%s: parked %s (%s)", self.stage, unit.group_key, error)

    async def _reject(self, unit: Notification, exc: ReceiverRejected, *, source: str,
                      partition: int | None = None, offset: int | None = None) -> None:
        said = str(exc).removeprefix(f"{self.name}: ")
        reason = self.redactor.text(f"rejected by {self.name}: {said}")
        original = orjson.dumps({"receiver": self.name, "group_key": unit.group_key, "alerts": unit.changed
                                 or unit.alerts})
        key = (unit.changed or unit.alerts)[0]["dedup_key"] if (unit.changed or unit.alerts) else None
        await self.dead_letter(self._dead_letter_record(reason, type(exc), original, topic=source, partition=partition,
                                                        offset=offset, key=key, record=unit.group_key))
        self.stats["dead_letters"] += 1
        log.warning("%s: dead-lettered %s: %s", self.stage, unit.group_key, self.redactor.text(str(exc)))

    def _dead_letter_record(self, reason: str, error: type[LockstepError], original: bytes, *, topic: str | None,
                            partition: int | None, offset: int | None, key: bytes | str | None,
                            record: str | None = None, retryable: bool = False) -> dict[str, Any]:
        return delivery_dead_letter(self.stage, reason, error, original, self.redactor, now=time.time(), topic=topic,
                                    partition=partition, offset=offset, key=key, record=record, retryable=retryable)

    async def _commit(self) -> None:
        points = self.tracker.committable()
        if not points:
            return
        await self._main.commit(points)
        self.tracker.committed.update(points)

    # -- the retry topic ---------------------------------------------------------------------------
    async def _retry_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                batch = await self._retry.getmany(timeout_ms=500, max_records=1)
                for tp, msgs in batch.items():
                    for msg in msgs:
                        await self._retry_one(tp, msg)
                        await self._retry.commit({tp: msg.offset + 1})
                        self._last_seen = msg.offset
                        self._progress.set()
                if not batch and self._parking == 0 and self._last_seen >= self._last_parked:
                    self.backlog = False  # drained: deliver directly again
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: retry step failed; retrying in 1s", self.stage)
                await asyncio.sleep(1.0)

    async def _retry_one(self, tp: Any, msg: Any) -> None:
        try:
            rec = orjson.loads(msg.value)
            unit = unpark(rec)
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            await self.dead_letter(self._dead_letter_record(
                f"unusable retry record: {type(exc).__name__}", ValidationFailed, msg.value or b"", topic=tp.topic,
                partition=tp.partition, offset=msg.offset, key=msg.key))
            return
        attempts = int(rec.get("attempts", 1))
        not_before = float(rec.get("not_before", 0.0))
        first_failed = float(rec.get("first_failed", time.time()))
        cfg = self.receiver.config.retry
        while True:
            now = time.time()
            if not_before > now:
                await asyncio.sleep(min(not_before - now, 0.5))
                if self._stopping.is_set():
                    raise asyncio.CancelledError
                continue
            fresh = [a for a in unit.changed
                     if lifecycle(self.ledger.get(self.name, a["dedup_key"]), a) not in ("duplicate", "stale")]
            if not fresh and not unit.repeat:
                self.stats["duplicates"] += 1
                return
            unit = Notification(unit.receiver, unit.group_key, unit.group_labels, unit.alerts, fresh, unit.repeat)
            try:
                self.stats["retried"] += 1
                await self._send(unit)
                return
            except ReceiverRejected as exc:
                await self._reject(unit, exc, source=tp.topic, partition=tp.partition, offset=msg.offset)
                return
            except DeliveryError as exc:
                retry_after = exc.retry_after if isinstance(exc, ReceiverUnavailable) else None
                if now - first_failed >= cfg.max_age:
                    reason = f"gave up after {attempts} attempts: {self.redactor.text(str(exc))}"
                    original = orjson.dumps(rec)
                    await self.dead_letter(self._dead_letter_record(
                        reason, type(exc), original, topic=tp.topic, partition=tp.partition, offset=msg.offset,
                        key=self.name, record=unit.group_key, retryable=True))
                    self.stats["dead_letters"] += 1
                    return
                not_before = time.time() + backoff_delay(attempts, cfg, self.rng, retry_after)
                attempts += 1
                log.info("%s: retry %d of %s failed (%s)", self.stage, attempts - 1, unit.group_key,
                         self.redactor.text(str(exc)))
