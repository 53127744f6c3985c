"""Faust's aiokafka transport with two fixes, registered under the URL scheme ``lockstep://``.

- **A configurable consumer ``fetch_max_wait_ms``.** faust-streaming hard-codes 1500 ms for the worker
  consumer, so on a quiet topic every record can wait up to 1.5 s in the broker's long poll (alert
  latency p99 ~1.7 s). It is set from ``LockstepSettings.kafka_fetch_max_wait_ms``.
- **Commits that do not crawl.** Faust keeps a partition's acknowledged offsets in a list and adds the
  offsets of a gap it saw in the fetched offsets to that list when it commits. When the offsets of the
  gap are also acknowledged (records Faust skipped around a rebalance, read by the agent from the broker
  and acknowledged: agents.gaps), each appears twice, its run of consecutive offsets breaks after every
  offset, and the commit moved one offset per commit interval: a partition of a few hundred records took
  minutes to commit (the leaving-worker fault test, under load). :meth:`LockstepConsumer._new_offset`
  merges the gap without duplicates first.
- **Table recovery to the true end.** Faust recovers a table's changelog partition up to the end offset
  ListOffsets gives; Tansu's can be one short, and the last snapshot written to a partition was then
  never restored. :meth:`FetchTunedConsumerThread._highwaters` takes each end from a fetch answer
  instead (:func:`agents.gaps.fetched_ends`).
- **One task per message less.** Faust's fetcher hands each message to the agents' queues with
  ``Service.wait_first(callback(message), suspend_flow.wait())``: four tasks and an
  ``asyncio.wait`` per message, so that a hand-over blocked on a full queue is abandoned when flow
  control suspends (a rebalance). Measured here: 30-60 us per message, most of what a do-nothing
  Faust agent costs. :meth:`LockstepConsumer._drain_messages` runs the hand-over inline up to its first
  suspension; only one that really blocks (a full queue, a full producer buffer) goes through
  ``wait_first`` as before. Everything else in the loop is Faust's (read offsets, gaps, commits).
- **Commits that do not rebuild the assignment per offset.** Faust's ``AIOKafkaConsumerThread._commit``
  keeps the offsets of assigned partitions with ``tp in self.assignment()`` inside a comprehension:
  the assignment set (every assigned partition converted to a Faust ``TP``) is rebuilt for every
  offset, O(partitions x offsets) per commit; a live worker holding ~110 partitions spent ~5 % of its
  CPU there (py-spy, docs/performance.md). :meth:`FetchTunedConsumerThread._commit` takes the
  assignment once (:func:`assigned_offsets`); the rest is Faust's.
- **Records dropped in a rebalance come again without a commit.** Faust drops a fetch that comes back
  while a rebalance has suspended the flow and seeks back to the group's committed offsets; aiokafka
  does not seek a partition with none, so its dropped records were never delivered (a new group, or
  the group on a rebuilt broker). :meth:`LockstepConsumer.rewind_discarded` seeks those partitions back
  to their first dropped record (:func:`rewind_targets`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Coroutine, Mapping
from time import monotonic
from typing import Any, TypeVar, cast

import aiokafka
from aiokafka.errors import CommitFailedError
from aiokafka.structs import OffsetAndMetadata
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka

K = TypeVar("K")


def assigned_offsets(offsets: Mapping[K, int], assignment: Collection[K]) -> dict[K, int]:
    """The offsets of the partitions in ``assignment`` (taken once by the caller), in ``offsets``' order.

    >>> assigned_offsets({("a", 0): 5, ("a", 1): 7, ("b", 0): 9}, {("a", 1), ("b", 0)})
    {('a', 1): 7, ('b', 0): 9}
    """
    return {tp: offset for tp, offset in offsets.items() if tp in assignment}


#: Longest a rebalance waits for the lanes' batches in processing before committing what was acknowledged.
LANE_IDLE_WAIT_S = 30.0


def lanes_of(app: Any) -> tuple[Any, ...]:
    """The app's lanes (agents.lane; set by agents.app on a worker with a broker), none on a plain Faust app."""
    return tuple(getattr(app, "lockstep_lanes", ()))


class FetchTunedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread with the fetch wait of the settings, fetched end offsets checked, rewinds,
    and a stop that does not wait for a join that does not end.

    aiokafka's consumer, stopping, lets its group coordination finish first, and the coordination does not
    look at the stop while it (re)joins: a group that never completes a rebalance (a member made leader
    that never hands out the assignment: tests/faults/test_group_wait.py) kept a worker asked to stop
    waiting until it was killed. :meth:`on_thread_stop` abandons such a join first."""

    async def on_thread_stop(self) -> None:
        consumer = self._consumer
        coordinator = getattr(consumer, "_coordinator", None)
        routine = getattr(coordinator, "_coordination_task", None)  # aiokafka 0.10-0.14
        subscription = getattr(getattr(consumer, "_subscription", None), "subscription", None)
        if (routine is not None and not routine.done() and subscription is not None
                and coordinator is not None and coordinator.need_rejoin(subscription)):
            self.log.warning("stopping while this worker's join of the consumer group has not completed: the join "
                             "is abandoned")
            routine.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await routine
        await super().on_thread_stop()  # (the consumer's stop: its coordinator then leaves the group at once)

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "lockstep_fetch_max_wait_ms", None)
        if wait_ms is not None:
            # The fetcher is built in start() from this attribute (aiokafka 0.10-0.14).
            consumer._fetch_max_wait_ms = int(wait_ms)
        return consumer

    async def _highwaters(self, partitions: Any) -> Any:
        """Faust's end offsets (ListOffsets), each checked against a fetch answer's high-water mark."""
        from agents.gaps import fetched_ends

        ends = await super()._highwaters(partitions)
        probe = getattr(self.app, "lockstep_end_probe", None)  # (settings, bootstrap), set by agents.app
        if probe is None or self.consumer.in_transaction or not ends:
            return ends
        settings, bootstrap = probe
        return await fetched_ends(settings, bootstrap, ends)

    async def rewind(self, targets: Mapping[Any, int]) -> dict[Any, int]:
        """:func:`rewind_consumer` in the consumer's thread."""
        consumer = self._ensure_consumer()

        async def in_thread() -> dict[Any, int]:
            return rewind_consumer(consumer, targets)

        return cast(dict[Any, int], await self.call_thread(in_thread))

    async def _commit(self, offsets: Mapping[Any, int]) -> bool:  # pragma: no cover (every broker test runs it)
        """Faust's ``AIOKafkaConsumerThread._commit`` (faust-streaming 0.15) with the assignment taken once."""
        consumer = self._ensure_consumer()
        now = monotonic()
        commitable = assigned_offsets(offsets, self.assignment())
        try:
            aiokafka_offsets = {faust_aiokafka.ensure_aiokafka_TP(tp): OffsetAndMetadata(offset, "")
                                for tp, offset in commitable.items()}
            self.tp_last_committed_at.update({tp: now for tp in commitable})
            await consumer.commit(aiokafka_offsets)
        except CommitFailedError as exc:
            if "already rebalanced" in str(exc):
                return False
            self.log.exception("Committing raised exception: %r", exc)
            await self.crash(exc)
            return False
        except Exception as exc:  # IllegalStateError and the rest: Faust logs and crashes on each alike
            self.log.exception("Got exception: %r\nCurrent assignment: %r", exc, self.assignment())
            await self.crash(exc)
            return False
        return True


def rewind_targets(discarded: Mapping[K, int], committed: Mapping[K, int | None]) -> dict[K, int]:
    """Where the partitions of a discarded fetch go back to (``discarded``: partition -> its first record
    in the fetch), beyond Faust's seek to the group's committed offsets (``committed``, Faust's view after
    that seek: None for none, as for 0).

    Faust drops a fetch that comes back while flow is suspended (a rebalance under way: Faust's
    ``getmany``, and :meth:`LockstepConsumer._hand_over_fetch` after it) and seeks back to the committed
    offsets so that the records come again. aiokafka's ``seek_to_committed`` seeks only to a committed
    offset above 0: a partition with no commit (a new group, a group on a rebuilt broker) kept its
    position past the records dropped, and they were never delivered. The broker-restart fault test lost
    every record of the recreated topics that way when such a fetch followed the assignment (1 run in
    12-16 under a CPU hog); its one partition that got more records afterwards was handed offset 66
    first. Those partitions go back to their first dropped record; the others were sought to their
    commit.

    >>> rewind_targets({"a": 0, "b": 50, "c": 7}, {"b": 40, "c": None})
    {'a': 0, 'c': 7}
    """
    return {tp: first for tp, first in discarded.items() if not committed.get(tp)}


def rewind_consumer(consumer: Any, targets: Mapping[Any, int]) -> dict[Any, int]:
    """Seek the aiokafka ``consumer``'s partitions back to ``targets`` (Faust ``TP`` -> offset), each only
    if it is assigned and its position is past the target: never forward (a position reset since, by a new
    assignment, is left alone). Runs in the consumer's thread. Returns what was sought."""
    assignment = consumer._subscription.subscription.assignment if consumer._subscription.subscription else None
    sought = {}
    for tp, offset in targets.items():
        ktp = faust_aiokafka.ensure_aiokafka_TP(tp)
        state = assignment.state_value(ktp) if assignment is not None else None
        if state is None or not state.has_valid_position or state.position <= offset:
            continue
        consumer.seek(ktp, offset)
        sought[tp] = offset
    return sought


async def finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro`` to its end after it was run by hand (``coro.send(None)``) up to its first
    suspension, where it yielded ``yielded`` (an asyncio future it waits on, or None for a bare
    yield): what an asyncio Task would have done. Cancelling this cancels the awaited future and
    throws the cancellation into ``coro``, as a Task does.

    >>> async def two_steps(q):
    ...     await asyncio.sleep(0)
    ...     return await q.get()
    >>> async def demo():
    ...     q = asyncio.Queue()
    ...     coro = two_steps(q)
    ...     first = coro.send(None)  # runs up to asyncio.sleep(0)
    ...     q.put_nowait("value")
    ...     return await finish(coro, first)
    >>> asyncio.run(demo())
    'value'
    """
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                yielded._asyncio_future_blocking = False
                await asyncio.wait([yielded])
        except asyncio.CancelledError as exc:
            if yielded is not None:
                yielded.cancel()
            coro.throw(exc)  # lets the coroutine clean up; it re-raises the cancellation
            raise
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


class LockstepConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return FetchTunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _new_offset(self, tp: Any) -> int | None:
        """The offset to commit for ``tp``, as Faust computes it, with each acknowledged offset counted once.

        Faust's own merges the gap ranges below the highest acknowledged offset into the list of
        acknowledged offsets with ``extend``; an offset both in a gap and acknowledged is then listed twice
        and Faust's run of consecutive offsets ends after the first one. Here the gap is merged first
        (same ranges, same chop) and duplicates are dropped; Faust's method then finds no gap to merge.
        """
        acked = self._acked[tp]
        if acked:
            gaps = self._gap[tp]
            highest = max(acked)
            spans = gaps.overlap(0, highest) if gaps else set()
            if spans:
                acked.extend(o for span in spans for o in range(span.begin, span.end))
                gaps.chop(0, max(max(span.end for span in spans) - 1, highest + 1))
            unique = set(acked)
            if len(unique) != len(acked):
                acked[:] = sorted(unique)
        return super()._new_offset(tp)

    def ack_offsets(self, tp: Any, offsets: list[int]) -> None:
        """Acknowledge ``offsets`` of ``tp`` (records taken from a lane, agents.lane) as
        ``Consumer.ack`` acknowledges a message each, in one step under the same lock."""
        from faust.types.tuples import ack_lock
        from mode.utils.futures import notify

        if not self.app.topics.acks_enabled_for(tp.topic):
            return
        with ack_lock:
            committed = self._committed_offset[tp]
            index = self._acked_index[tp]
            acked = self._acked[tp]
            n = 0
            for offset in offsets:
                if (committed is None or offset >= committed) and offset not in index:
                    index.add(offset)
                    acked.append(offset)
                    n += 1
            self._n_acked += n
            notify(self._waiting_for_ack)

    async def wait_empty(self) -> None:
        """Faust's, after every lane's batch in processing (if any) is done: a rebalance or a stop commits
        what it acknowledged, never less."""
        lanes = lanes_of(self.app)
        # Only for a rebalance, and bounded: a stop commits what was acknowledged (the batch in processing
        # is read again by the next owner; acknowledgements come only after a batch is handled), and a batch
        # that cannot finish (its agent stopped or stuck) must not hold a stop or a rebalance for ever.
        deadline = monotonic() + LANE_IDLE_WAIT_S
        for lane in lanes:
            while (not lane.idle() and not self.should_stop and not self.app.should_stop
                   and monotonic() < deadline):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lane.wait_idle(), 1.0)
            if not lane.idle():
                self.log.warning("%s lane: a batch still in processing; committing what was acknowledged", lane.name)
        await super().wait_empty()

    async def rewind_discarded(self, records: Mapping[Any, list[Any]]) -> dict[Any, int]:
        """After a fetch taken while flow was suspended (a rebalance under way) was discarded and Faust sought
        back to the group's committed offsets: the partitions Faust's seek left where the fetch put them (no
        commit, :func:`rewind_targets`) go back to their first discarded record, so it is fetched again.
        Returns the partitions sought back, and where to."""
        targets = rewind_targets({tp: recs[0].offset for tp, recs in records.items() if recs},
                                 self._committed_offset)
        if not targets:
            return {}
        try:
            sought = await cast(FetchTunedConsumerThread, self._thread).rewind(targets)
        except Exception as exc:  # said: those partitions' discarded records may never be delivered
            self.log.warning("could not seek back %d partitions without a committed offset whose fetched records "
                             "were discarded during a rebalance (they may never be delivered): %r", len(targets), exc)
            return {}
        if sought:
            self.log.info("a fetch of %d records came while a rebalance had suspended the flow and was discarded; "
                          "%d partitions without a committed offset sought back to their first discarded record "
                          "(else never delivered): %s", sum(len(r) for r in records.values()), len(sought),
                          ", ".join(f"{tp.topic}:{tp.partition}@{o}" for tp, o in sorted(sought.items())))
        return sought

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover (every broker test runs it)
        """Faust's ``Consumer._drain_messages`` (faust-streaming 0.15) with the hand-over run inline, and
        the lanes' topics handed over a fetch at a time (:meth:`_hand_over_fetch`)."""
        from faust.transport.consumer import CONSUMER_FETCHING
        from mode import Service

        lanes = {topic: lane for lane in lanes_of(self.app) for topic in lane.topics}
        for lane in lanes.values():
            lane.acker = self
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = cast(Service, self)._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        suspend_flow = self.suspend_flow
        yield_every = 100
        num_since_yield = 0
        sleep = asyncio.sleep

        async def hand_over(tp: Any, message: Any) -> None:
            """One message to Faust's conductor, as Faust's loop does, the hand-over run inline."""
            nonlocal num_since_yield
            num_since_yield += 1
            if num_since_yield > yield_every:
                await sleep(0)
                num_since_yield = 0
            offset = message.offset
            r_offset = get_read_offset(tp)
            if r_offset is None or offset >= r_offset:
                gap = offset - (r_offset or 0)
                if gap > 1 and r_offset and acks_enabled_for(message.topic):
                    await self._add_gap(tp, r_offset + 1, offset)
                if commit_every is not None and self._n_acked >= commit_every:
                    self._n_acked = 0
                    await self.commit()
                handover = cast(Coroutine[Any, Any, Any], callback(message))
                if suspend_flow.is_set() or not asyncio.iscoroutine(handover):
                    # Flow is suspended: as Faust does, race the hand-over against it.
                    await self.wait_first(handover, suspend_flow.wait())
                else:
                    try:
                        yielded = handover.send(None)
                    except StopIteration:
                        pass  # handed over without suspending: nothing could interleave
                    else:
                        await self.wait_first(finish(handover, yielded), suspend_flow.wait())
                set_read_offset(tp, offset)

        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                if not lanes:
                    ait = getmany(timeout=1.0)
                    await self.sleep(0)
                    if not self.should_stop:
                        async for tp, message in ait:
                            await hand_over(tp, message)
                else:
                    await self._hand_over_fetch(lanes, hand_over)
                unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _hand_over_fetch(self, lanes: Mapping[str, Any], hand_over: Any) -> None:  # pragma: no cover
        """One fetch, as Faust's ``Consumer.getmany`` takes it (flow, generation, active partitions, a seek
        back to the committed offsets while flow is suspended), with the records of each lane's topics
        (``lanes``: topic -> lane) put in their lane a partition at a time (every broker test runs this)
        and the others handed to Faust's conductor one by one (in
        Faust's round-robin order). Read offsets and gaps are kept as Faust keeps them per message."""
        records, active = await self._wait_next_records(1.0)
        await self.sleep(0)
        if records is None or self.should_stop:
            return
        if not self.flow_active:
            try:
                await self.perform_seek()
            except Exception as ex:
                self.log.warning(f"exception performing seek when flow not active {ex}")
            await self.rewind_discarded(records)
            return
        app = self.app
        generation = app.consumer_generation_id
        read_offset = self._read_offset
        acks_enabled_for = app.topics.acks_enabled_for
        others: dict[Any, list[Any]] = {}
        handed: list[tuple[Any, Any, list[Any], int | None]] = []  # (lane, tp, records, read offset)
        for tp, recs in records.items():
            if not self.flow_active or app.consumer_generation_id != generation:
                return
            if not (active is None or tp in active or tp in self._buffered_partitions):
                continue
            lane = lanes.get(tp.topic)
            if lane is None:
                others[tp] = recs
                continue
            app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            r_offset = read_offset[tp]
            kept = []
            for rec in recs:
                offset = rec.offset
                if r_offset is None or offset >= r_offset:
                    gap = offset - (r_offset or 0)
                    if gap > 1 and r_offset and acks_enabled_for(tp.topic):
                        await self._add_gap(tp, r_offset + 1, offset)
                    kept.append(rec)
                    r_offset = offset
            if not kept:
                continue
            handed.append((lane, tp, kept, r_offset))
        handed.sort(key=lambda h: h[0].full())  # a full lane's records last: the other lanes' go without waiting
        for lane, tp, kept, r_offset in handed:
            if lane.full():  # backpressure: wait for the lane's agent (or a rebalance)
                await self.wait_first(lane.wait_room(), self.suspend_flow.wait())
                if not self.flow_active or app.consumer_generation_id != generation:
                    return
            lane.put(tp, kept, generation)
            read_offset[tp] = r_offset
        if self._commit_every is not None and self._n_acked >= self._commit_every:
            self._n_acked = 0
            await self.commit()
        if others:
            to_message = self._to_message
            for tp, record in self.scheduler.iterate(others):
                if not self.flow_active or app.consumer_generation_id != generation:
                    return
                app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                await hand_over(tp, to_message(tp, record))


class Transport(faust_aiokafka.Transport):
    Consumer = LockstepConsumer


def register() -> None:
    """Make ``lockstep://host:port`` resolve to this transport (idempotent)."""
    drivers.TRANSPORTS.aliases["lockstep"] = f"{__name__}:Transport"
