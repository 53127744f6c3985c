"""Silences in delivery (streams/dispatch.py ``Dispatcher`` with a mute rule, lockstep/delivery/silences.py).

Pure: time is an argument. The decisions (docs/delivery.md "Silences")::

    silence           [======== m1 ========)
    a1 firing   t=0 ──muted (reported once)──┤ t=100 notified (news again)
    a1 resolved                                  sent: the receiver was told it fires

    b1 fired and notified t=0, silenced t=50 (repeats muted), resolves t=80 muted: resolve sent
    c1 fires and resolves inside the window: never notified, never resolved
"""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.delivery.config import load_routing
from lockstep.delivery.silences import KnownSilences, muted_by
from models.operator import SilenceRecord
from streams.dispatch import Dispatcher, stamped_silences
from streams.matchers import equality_matchers
from streams.rules import Silence

ROUTES = """
route:
  receiver: r
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 10s
  repeat_interval: 1m
receivers:
  - name: r
    webhook: {url: "http://x"}
"""


def alert(dedup: str, status: str = "firing", silenced_by: list[str] | None = None, job: str = "llm") -> dict[str, Any]:
    return {"alert_id": f"id-{dedup}", "dedup_key": dedup, "type": "job_slowdown", "status": status,
            "severity": "critical", "job_id": job, "started_at": "2025-11-30T11:42:18Z",
            "root_cause": {"domain": "network", "layer": "switch", "source": "leaf03", "labels": {"port": "17"}},
            "labels": {}, "summary": dedup, "silenced_by": list(silenced_by or [])}


class Window:
    """A mute rule for tests: ``ids`` mute every alert of ``dedups`` while ``start <= now < end``."""

    def __init__(self, dedups: set[str], start: float, end: float, ids: tuple[str, ...] = ("m1",)) -> None:
        self.dedups, self.start, self.end, self.ids = dedups, start, end, ids

    def __call__(self, a: Any, now: float) -> list[str]:
        return list(self.ids) if a["dedup_key"] in self.dedups and self.start <= now < self.end else []


def flush(d: Dispatcher, now: float) -> list[tuple[str, str]]:
    """Flush, settle (accepted) at once, return ``(dedup_key, status)`` of what was notified."""
    out = []
    for n in d.flush(now):
        out += [(a["dedup_key"], a["status"]) for a in (n.changed or n.alerts)]
        d.settle(n, now)
    return out


def test_stamped_silence_mutes_until_the_correlator_re_emits_the_alert_unmuted() -> None:
    d = Dispatcher(load_routing(ROUTES).root, "r")                          # default rule: silenced_by
    d.add(alert("a1", silenced_by=["m1"]), 0.0, token="o1")
    assert flush(d, 0.0) == [] and d.take_settled() == ["o1"]          # settled: its offset commits
    [s] = d.take_suppressed()
    assert (s.receiver, s.alert["dedup_key"], s.alert["status"], s.silenced_by) == ("r", "a1", "firing", ("m1",))
    assert flush(d, 10.0) == [] and d.take_suppressed() == []          # reported once per state
    d.add(alert("a1"), 20.0)                                           # the window ended: re-emitted
    assert flush(d, 20.0) == [("a1", "firing")]


def test_a_firing_alert_whose_silence_ends_is_notified_at_the_next_flush() -> None:
    d = Dispatcher(load_routing(ROUTES).root, "r", muted=Window({"a1"}, 0.0, 100.0))
    d.add(alert("a1"), 0.0)
    assert [flush(d, t) for t in (0.0, 10.0, 90.0)] == [[], [], []]
    assert len(d.take_suppressed()) == 1
    assert flush(d, 100.0) == [("a1", "firing")]
    d.add(alert("a1", "resolved"), 120.0)
    assert flush(d, 120.0) == [("a1", "resolved")]
    assert d.groups == {}


def test_silence_after_firing_mutes_repeats_and_the_end_notifies_again() -> None:
    d = Dispatcher(load_routing(ROUTES).root, "r", muted=Window({"b1"}, 50.0, 200.0))
    d.add(alert("b1"), 0.0)
    assert flush(d, 0.0) == [("b1", "firing")]
    assert flush(d, 60.0) == [] and flush(d, 190.0) == []             # repeat_interval passed, but muted
    assert [s.alert["status"] for s in d.take_suppressed()] == ["firing"]
    assert flush(d, 200.0) == [("b1", "firing")]                      # silence over, still firing: told again


def test_the_resolve_of_an_alert_the_receiver_was_told_of_is_sent_even_while_muted() -> None:
    d = Dispatcher(load_routing(ROUTES).root, "r", muted=Window({"b1"}, 50.0, 200.0))
    d.add(alert("b1"), 0.0)
    assert flush(d, 0.0) == [("b1", "firing")]
    d.add(alert("b1", "resolved", silenced_by=["m1"]), 80.0)
    assert flush(d, 80.0) == [("b1", "resolved")]                     # closes the incident it shows
    assert d.groups == {} and d.take_suppressed() == []


def test_an_alert_that_fires_and_resolves_inside_the_window_is_never_notified() -> None:
    d = Dispatcher(load_routing(ROUTES).root, "r", muted=Window({"c1"}, 0.0, 100.0))
    d.add(alert("c1"), 0.0, token="o1")
    assert flush(d, 0.0) == []
    d.add(alert("c1", "resolved"), 30.0, token="o2")
    assert flush(d, 30.0) == [] and d.groups == {}                    # nothing to close: dropped
    assert flush(d, 100.0) == []                                      # and not notified after the window
    assert [(s.alert["status"]) for s in d.take_suppressed()] == ["firing", "resolved"]
    assert d.take_settled() == ["o1", "o2"]


def test_a_muted_alert_is_left_out_of_its_groups_notification() -> None:
    cfg = load_routing(ROUTES.replace("group_by: [dedup_key]", "group_by: [job]"))
    d = Dispatcher(cfg.root, "r", muted=Window({"m"}, 0.0, 100.0))
    d.add(alert("m"), 0.0)
    d.add(alert("u"), 0.0)
    [n] = d.flush(0.0)
    assert [a["dedup_key"] for a in n.alerts] == ["u"] and [a["dedup_key"] for a in n.changed] == ["u"]


def test_the_default_rule_is_the_stamp() -> None:
    assert stamped_silences(alert("a", silenced_by=["x", "y"]), 0.0) == ["x", "y"]


def silence(sid: str, start: float, end: float, **matchers: str) -> Silence:
    return Silence(sid, equality_matchers(matchers), start, end)


@pytest.mark.parametrize(("stamp", "known", "now", "expected"), [
    ([], {}, 50.0, []),                                                          # nothing silences it
    (["file-1"], {}, 50.0, ["file-1"]),                                          # stamped, unknown here: trusted
    (["m1"], {"m1": silence("m1", 0, 100, job_id="llm")}, 50.0, ["m1"]),         # stamped and active
    (["m1"], {"m1": silence("m1", 0, 100, job_id="llm")}, 100.0, []),            # stamped but ended: notify
    (["m1"], {"m1": silence("m1", 0, 40, job_id="llm")}, 50.0, []),              # expired early (DELETE)
    ([], {"m2": silence("m2", 0, 100, job_id="llm")}, 50.0, ["m2"]),             # created after it fired
    ([], {"m2": silence("m2", 0, 100, job_id="other")}, 50.0, []),               # does not match
    ([], {"m2": silence("m2", 60, 100, job_id="llm")}, 50.0, []),                # not started yet
    ([], {"m3": silence("m3", 0, 100, switch="leaf03", port="17")}, 50.0, ["m3"]),  # where the root cause is
    (["m1"], {"m2": silence("m2", 0, 100, job_id="llm")}, 50.0, ["m1", "m2"]),
])
def test_muted_by(stamp: list[str], known: dict[str, Silence], now: float, expected: list[str]) -> None:
    assert muted_by(alert("a", silenced_by=stamp), known, now) == expected


def test_known_silences_fold_topic_records_with_the_correlators_code() -> None:
    known = KnownSilences()
    rec = SilenceRecord(silence_id="s1", matchers={"job_id": "llm"}, kind="maintenance", starts_at=0.0,
                        ends_at=100.0, created_by="me", comment="c", created_at=0.0, updated_at=0.0)
    known.rules.apply_record(rec.model_dump())
    assert known.muted_by(alert("a"), 50.0) == ["s1"] and len(known) == 1
    known.rules.apply_record(rec.model_copy(update={"ends_at": 40.0}).model_dump())   # expired at 40
    assert known.muted_by(alert("a"), 50.0) == []
