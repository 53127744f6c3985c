"""Recovery decisions: what a restored partition does with where Faust resumed it, as pure functions.

A partition's state (an ingest pipeline or a correlation partition) is restored from a snapshot that
holds everything up to input offset ``S`` (and remembers the Kafka time of that record). Faust hands
the agent offset ``F`` first. The group committed ``C`` (the next offset to read), if known. Which
of these facts the agent can learn depends on having a broker to ask (the agent test context has
none: the unknown facts are ``None`` and the decision falls back to carrying on).

    offsets   ... S | S+1 ....... C-1 | C ...... F-1 | F ...
                held  outputs went out  a hole: read   handed over
                      (state only)      by agents.gaps

All of this holds only while the partition is the one the snapshot was taken from. A topic recreated
(a broker that lost its data) and refilled past ``S`` has other records at the same offsets: whatever
``F`` is, the record now at ``S`` then has another Kafka time than the one the state remembers, and the
partition is read from offset 0 instead (``REBUILT_REFILLED``; ``REBUILT`` when ``F <= S``).

The agents carry a :class:`Resume` out; nothing here does I/O or imports Faust. The table-driven
tests are in tests/agents/test_recovery.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agents.gaps import catch_up_until


class Action(Enum):
    #: the usual continuation: process what was handed over
    CONTINUE = "continue"
    #: offsets up to the snapshot's are already in the state: skip them
    SKIP_HELD = "skip_held"
    #: offsets between the snapshot and the commit were processed (outputs out): read them again for state
    CATCH_UP = "catch_up"
    #: the topic was recreated or truncated (a broker that lost its data): keep the learned state and
    #: process everything handed over
    REBUILT = "rebuilt"
    #: recreated and refilled past the snapshot before we resumed: offsets ``0..F`` were never seen by this
    #: state; read them (ingest: state only, the baselines; correlation: with outputs)
    REBUILT_REFILLED = "rebuilt_refilled"


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known when a restored partition receives its first offset."""

    snapshot_offset: int | None  # S
    snapshot_record_ts: float | None  # the Kafka time of the record at S, as the state remembers it
    first_offset: int | None  # F
    first_record_ts: float | None = None  # the Kafka time of the record at F
    committed: int | None = None  # C, the group's committed offset (next to read)
    #: the partition's end offset (None: unknown; only asked when F is not S + 1)
    end: int | None = None
    #: the Kafka time of the record now at offset S on the broker (None: none there, or not read). Read for
    #: the usual continuation (F = S + 1), and for a catch-up or a redelivery (F != S + 1) unless retention
    #: trimmed offset S: records after (or up to) S are only the ones the state continued from if the
    #: record at S is still the one it holds
    broker_ts_at_snapshot: float | None = None
    #: whether a broker could be asked at all (False in the agent test context)
    broker: bool = True
    #: the record at S was asked for but the broker did not answer in time (unknown, not "none there")
    snapshot_record_unread: bool = False
    #: the partition's earliest offset still on the broker (its low-water mark: retention may have trimmed
    #: what is before it); None: unknown, taken as 0 (only asked when a catch-up is likely)
    low: int | None = None


@dataclass(frozen=True, slots=True)
class Resume:
    action: Action
    #: the offsets to read again, ``[start, stop)`` (CATCH_UP, REBUILT_REFILLED)
    start: int | None = None
    stop: int | None = None
    why: str = ""
    #: CATCH_UP: the offsets before ``start`` (from ``skipped_from``) that the state misses but that are not
    #: read: trimmed by retention, or beyond the most a catch-up reads (``decide(..., most=)``)
    skipped_from: int | None = None


#: The snapshot offset of a state that holds no record: an input or correlation partition with no
#: snapshot (a previous owner may have processed and committed records without ever writing one, or
#: the snapshot was lost), so :func:`decide` reads everything the group committed again for state
#: (``CATCH_UP`` from offset 0, or from the partition's low-water mark when retention trimmed it).
NOTHING_HELD = -1

#: Kafka record times are milliseconds: two times closer than this are the same record.
SAME_RECORD_S = 0.001


def needs_broker_ts(snapshot_offset: int | None, first_offset: int | None) -> bool:
    """Whether :func:`decide` needs the record time at the snapshot's offset (the usual continuation)."""
    return snapshot_offset is not None and first_offset is not None and first_offset == snapshot_offset + 1


def another_record_at_snapshot(f: Facts) -> bool:
    """Whether the broker holds another record at the snapshot's offset than the one the state holds there
    (their Kafka times differ); False when either time is unknown.

    >>> another_record_at_snapshot(Facts(9, 100.0, 15, broker_ts_at_snapshot=250.0))
    True
    >>> another_record_at_snapshot(Facts(9, 100.0, 15, broker_ts_at_snapshot=100.0004))
    False
    >>> another_record_at_snapshot(Facts(9, 100.0, 15))  # not read (or none there): nothing to tell
    False
    """
    return f.snapshot_record_ts is not None and f.broker_ts_at_snapshot is not None \
        and abs(f.broker_ts_at_snapshot - f.snapshot_record_ts) >= SAME_RECORD_S


def decide(f: Facts, most: int | None = None) -> Resume:
    """The recovery decision for a restored partition. ``most``: the most offsets a catch-up reads (the
    last ones before its stop; None: no bound); what it leaves out is ``skipped_from..start-1``.

    >>> decide(Facts(9, 100.0, 10, broker_ts_at_snapshot=100.0)).action
    <Action.CONTINUE: 'continue'>
    >>> decide(Facts(9, 100.0, 4, first_record_ts=90.0, end=20)).action
    <Action.SKIP_HELD: 'skip_held'>
    >>> r = decide(Facts(9, 100.0, 15, committed=13, end=20)); r.action, r.start, r.stop
    (<Action.CATCH_UP: 'catch_up'>, 10, 13)
    >>> r = decide(Facts(NOTHING_HELD, None, 12, committed=10)); r.action, r.start, r.stop  # no snapshot
    (<Action.CATCH_UP: 'catch_up'>, 0, 10)
    >>> decide(Facts(NOTHING_HELD, None, 0, committed=0)).action  # no snapshot, nothing committed: carry on
    <Action.CONTINUE: 'continue'>
    >>> r = decide(Facts(NOTHING_HELD, None, 90, committed=90, low=30)); r.start, r.stop, r.skipped_from  # trimmed
    (30, 90, 0)
    >>> r = decide(Facts(NOTHING_HELD, None, 90, committed=90), most=50); r.start, r.stop, r.skipped_from  # bounded
    (40, 90, 0)
    """
    s, first = f.snapshot_offset, f.first_offset
    if s is None or first is None:
        return Resume(Action.CONTINUE, why="nothing restored, or no offset to compare")
    if first == s + 1:
        if f.snapshot_record_ts is None or not f.broker:
            return Resume(Action.CONTINUE, why="the next offset after the snapshot")
        if f.broker_ts_at_snapshot is not None and abs(f.broker_ts_at_snapshot - f.snapshot_record_ts) < SAME_RECORD_S:
            return Resume(Action.CONTINUE, why="the next offset after the snapshot (its record checked)")
        if f.snapshot_record_unread:
            return Resume(Action.CONTINUE, why="the next offset after the snapshot (its record could not be read: "
                                               "the broker did not answer; taken as the usual continuation)")
        return Resume(Action.REBUILT_REFILLED, 0, first,
                      why=f"the record at the snapshot's input offset {s} is not the one the restored state holds: "
                          "the topic was recreated or truncated (a broker that lost its data?)")
    if f.end is not None and s >= f.end:
        return Resume(Action.REBUILT, why=f"the snapshot's input offset {s} is at or beyond the partition's end "
                                          f"{f.end}: the topic was recreated or truncated (a broker that lost its "
                                          "data?)")
    if f.broker and another_record_at_snapshot(f):
        # The offsets around S are another topic's (rebuilt and refilled past S): reading S+1..F-1 "state only"
        # (or skipping up to S) would fold the new records into the old state as if they followed it, and
        # nothing before them would ever be read.
        if first > s:
            return Resume(Action.REBUILT_REFILLED, 0, first,
                          why=f"the record at the snapshot's input offset {s} is not the one the restored state "
                              f"holds (Kafka time {f.broker_ts_at_snapshot:.3f}, the state's "
                              f"{f.snapshot_record_ts:.3f}): the topic was recreated or truncated (a broker that "
                              "lost its data?) and refilled past it")
        return Resume(Action.REBUILT, why=f"the record at the snapshot's input offset {s} is not the one the restored "
                                          "state holds: the topic was recreated or truncated (a broker that lost "
                                          "its data?)")
    if first <= s and f.first_record_ts is not None and f.snapshot_record_ts is not None \
            and f.first_record_ts > f.snapshot_record_ts:
        return Resume(Action.REBUILT, why=f"offset {first} was written after the restored state's last record "
                                          f"(offset {s}): the topic was recreated or truncated (a broker that lost "
                                          "its data?)")
    if first <= s:
        return Resume(Action.SKIP_HELD, why=f"offsets up to {s} are already in the restored state")
    if not f.broker:
        return Resume(Action.CONTINUE, why=f"{first - s - 1} messages between the snapshot ({s}) and the commit "
                                           f"({first}) cannot be read here")
    # Up to the group's commit the outputs went out before (state only); a hole between the commit and
    # ``first`` is processed in full by the agent (agents.gaps).
    upto = catch_up_until(s, f.committed, first)
    start, why = s + 1, "the restored state misses offsets the group committed"
    if f.low is not None and f.low > start:
        start = min(f.low, upto)
        why += f" (offsets {s + 1}..{start - 1} are no longer on the broker: retention trimmed them)"
    if most is not None and upto - start > most:
        why += f" (offsets {start}..{upto - most - 1} not read: more than the {most} a catch-up reads)"
        start = upto - most
    return Resume(Action.CATCH_UP, start, upto, why=why, skipped_from=s + 1 if start > s + 1 else None)


def rebuild_range(snapshot_offset: int | None, last: int | None) -> tuple[int, int] | None:
    """After processing raised half-way: the offsets ``[start, stop)`` to read again for state only, from the
    last snapshot written up to ``last`` (the last offset processed before the failure); None when there
    is nothing to rebuild from (no snapshot, nothing processed, or a snapshot newer than ``last``).

    >>> rebuild_range(10, 25), rebuild_range(10, 10), rebuild_range(None, 25), rebuild_range(30, 25)
    ((11, 26), (11, 11), None, None)
    """
    if snapshot_offset is None or last is None or snapshot_offset > last:
        return None
    return snapshot_offset + 1, last + 1


def stall_reread(processed: int | None, committed: int | None) -> tuple[str, int] | None:
    """What the stall watch does with a partition it suspects: ``("reread", offset)`` to read again from
    the commit at once (the commit is stuck behind what was processed: a message was never
    acknowledged), ``("probe", offset)`` to check whether a record waits at ``offset`` first, or None.

    >>> stall_reread(10, 4), stall_reread(10, 11), stall_reread(None, 7), stall_reread(None, None)
    (('reread', 4), ('probe', 11), ('probe', 7), None)
    """
    if processed is not None and committed is not None and committed < processed:
        return "reread", committed
    if processed is not None:
        return "probe", processed + 1
    if committed is not None:
        return "probe", committed  # at most one message read twice (a duplicate)
    return None


def held(offset: int | None, last_offset: int | None, same_topic: bool | None, ts: float | None,
         last_ts: float | None) -> bool:
    """Whether a record handed over again (a seek back to the commit, a stall re-read) is already in the state.

    ``same_topic``: whether the record now at ``last_offset`` is the one the state processed there (its
    Kafka time matches), if that could be checked. Then offsets alone decide. Unchecked (no broker), the
    record's own time decides: one written after the last record processed is taken as new (a topic
    rebuilt under us), which can take a redelivered record for new when producers' clocks disagree.

    >>> held(5, 9, True, 130.0, 120.0), held(5, 9, False, 100.0, 120.0), held(10, 9, True, 1.0, 120.0)
    (True, False, False)
    >>> held(5, 9, None, 130.0, 120.0), held(5, 9, None, 100.0, 120.0)
    (False, True)
    """
    if offset is None or last_offset is None or offset > last_offset:
        return False
    if same_topic is not None:
        return same_topic
    return ts is None or last_ts is None or ts <= last_ts


def alert_key(alert: Mapping[str, Any]) -> tuple[str, str, str]:
    """What tells one alert record from another on the ``alerts`` topic: its id (the cause on the job), its
    status and its episode's start.

    >>> alert_key({"alert_id": "a1", "status": "firing", "started_at": "2025-11-30T11:40:48.000Z", "x": 1})
    ('a1', 'firing', '2025-11-30T11:40:48.000Z')
    """
    return str(alert.get("alert_id")), str(alert.get("status")), str(alert.get("started_at"))


def unsent(decided: list[dict[str, Any]], sent: set[tuple[str, str, str]] | None) -> list[dict[str, Any]]:
    """The alert records a state-only catch-up decided (``decided``, in order) that the ``alerts`` topic does
    not hold (``sent``: :func:`alert_key` of what it holds from before the caught-up records on; None: it
    could not be read, and every one is sent again, since a duplicate is dropped by delivery's ledger and a
    lost page is not recovered by anything).

    A catch-up reads the records the previous owner processed, so its alerts went out then, when its
    verdicts were the same. They need not be: the watermark also moves on wall time (an input whose
    worker fell silent holds it for ``orphan_hold_s``, one reported idle does not), and a catch-up folds
    minutes of records in milliseconds. Seen in a chaos run (benchmarks/chaos.py): the previous owner
    held the watermark for a dead worker's inputs and never fired; the new owner's catch-up found them
    idle, fired state-only, and later resolved an alert nobody had been paged for.

    >>> a = {"alert_id": "a1", "status": "firing", "started_at": "t0"}
    >>> r = {**a, "status": "resolved"}
    >>> unsent([a, r], {("a1", "firing", "t0")}) == [r]
    True
    >>> unsent([a, r], set()) == [a, r], unsent([a], None) == [a], unsent([a], {alert_key(a)})
    (True, True, [])
    """
    if sent is None:
        return list(decided)
    seen = set(sent)
    out: list[dict[str, Any]] = []
    for alert in decided:
        key = alert_key(alert)
        if key not in seen:
            out.append(alert)
            seen.add(key)  # a state decided twice in the catch-up is sent once
    return out
