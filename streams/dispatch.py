"""The dispatcher: grouping and timing of one receiver's notifications, and the delivery lifecycle.

Grouping and timing (:class:`Dispatcher`) follow Alertmanager's dispatcher and notification log:
an alert goes to the groups of the routes it matches (:mod:`streams.routes`); a new group waits
``group_wait`` before its first flush, then flushes every ``group_interval``; a flush notifies
when the group has news (an alert not yet notified in its current status), or when
``repeat_interval`` has passed since the last notification and something still fires. Notified
resolved alerts leave the group; an empty group is dropped.

Silences (:meth:`Dispatcher.flush`, docs/delivery.md "Silences"): a muted alert is not notified and
does not count for repeats; it stays in its group, so once its silence ends and it still fires it
is news again and notified. A muted alert's resolve is sent only if the receiver was told it fires.

The lifecycle (:func:`lifecycle`) says whether an alert is news for a receiver given what the
delivery ledger says it last accepted, so a replay after a crash never pages twice.

Pure: no I/O, no clock (``now`` is an argument, Unix seconds), no environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from streams.matchers import alert_labels
from streams.routes import Route, RouteOptions, group_key

Lifecycle = Literal["new", "update", "duplicate", "stale"]


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a receiver last accepted for one ``dedup_key`` (a row of the delivery ledger)."""

    receiver: str
    dedup_key: str
    alert_id: str
    status: str
    started_at: str
    ts: float


def lifecycle(prev: Delivered | None, alert: Mapping[str, Any]) -> Lifecycle:
    """Whether ``alert`` is news for a receiver that last accepted ``prev`` for its ``dedup_key``.

    - ``new``: nothing delivered yet, or a later incident (another ``alert_id``, later start) —
      a trigger after a resolve is a new incident;
    - ``update``: the same incident moved on (firing -> resolved);
    - ``duplicate``: exactly this was delivered (a replay after a crash);
    - ``stale``: an older state (a firing replayed after its resolve, or an earlier incident).

    >>> d = Delivered("pd", "k", "a1", "resolved", "2025-11-30T11:42:18Z", 0.0)
    >>> lifecycle(d, {"alert_id": "a1", "status": "firing", "started_at": "2025-11-30T11:42:18Z"})
    'stale'
    >>> lifecycle(d, {"alert_id": "a2", "status": "firing", "started_at": "2025-11-30T12:00:00Z"})
    'new'
    """
    if prev is None:
        return "new"
    if prev.alert_id == alert["alert_id"]:
        if prev.status == alert["status"]:
            return "duplicate"
        return "update" if alert["status"] == "resolved" else "stale"
    return "stale" if str(alert["started_at"]) < prev.started_at else "new"


# --------------------------------------------------------------------------------------------------
# Grouping and timing
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Notification:
    """One flush of one group for one receiver.

    ``alerts`` is every alert of the group (firing, and resolved ones not yet notified);
    ``changed`` those that are news since the group's last notification; ``tokens`` are the opaque
    values passed to :meth:`Dispatcher.add` (Kafka offsets) that this notification settles.
    """

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    alerts: list[dict[str, Any]]
    changed: list[dict[str, Any]]
    repeat: bool
    tokens: list[Any] = field(default_factory=list)

    def split(self) -> list[Notification]:
        """One notification per changed alert, without tokens (per-alert receivers: PagerDuty, OCSF, topics).

        A repeat (nothing changed) splits into one per firing alert, marked ``repeat``.
        """
        targets = self.changed or ([a for a in self.alerts if a["status"] == "firing"] if self.repeat else [])
        return [Notification(self.receiver, self.group_key, self.group_labels, [a], [a], self.repeat)
                for a in targets]


@dataclass
class _Entry:
    alert: dict[str, Any]
    notified: tuple[str, str] | None = None  # (alert_id, status) last notified
    told: str | None = None                  # alert_id the receiver was last told is firing
    suppressed: tuple[str, str] | None = None  # (alert_id, status) last reported as muted


@dataclass(frozen=True, slots=True)
class Suppressed:
    """An alert state a receiver was not notified of, and the silences that muted it."""

    receiver: str
    alert: dict[str, Any]
    silenced_by: tuple[str, ...]


#: Which silences mute an alert at a time: ``(alert, now) -> silence ids`` (empty: not muted).
MuteRule = Callable[[Mapping[str, Any], float], Sequence[str]]


def stamped_silences(alert: Mapping[str, Any], now: float) -> list[str]:
    """The default :data:`MuteRule`: the silences the correlator stamped on the alert (``silenced_by``).

    >>> stamped_silences({"silenced_by": ["maint-1"]}, 0.0), stamped_silences({}, 0.0)
    (['maint-1'], [])
    """
    return [str(s) for s in alert.get("silenced_by") or []]


@dataclass
class Group:
    key: str
    labels: dict[str, str]
    options: RouteOptions
    next_flush: float
    alerts: dict[str, _Entry] = field(default_factory=dict)
    last_notified: float | None = None
    tokens: list[Any] = field(default_factory=list)
    in_flight: bool = False


class Dispatcher:
    """Groups alerts for one receiver and says when to notify (time is always an argument).

    ``add`` routes an alert and files it in its groups; ``flush(now)`` returns the notifications
    due; ``settle`` records that a notification was handed over (accepted, or parked for retry),
    which is what later flushes compare against. A group with a notification in flight is not
    flushed again until that one is settled. ``tokens`` of alerts that need no notification
    are returned by ``flush`` in :attr:`settled_tokens` so the caller can commit them.

    ``muted(alert, now)`` names the silences muting an alert at flush time (default: the
    ``silenced_by`` the correlator stamped). At each flush, a muted alert is left out of the
    notification (not news, no repeat, not listed) and reported once per state in
    :attr:`suppressed`; a firing one stays in its group and becomes news again, so it is notified
    at the first flush after its silence ends; a resolved one is dropped — unless the receiver was
    told it fires, since a resolve closes what the receiver shows (and never pages).
    """

    def __init__(self, root: Route, receiver: str, *, send_resolved: bool = True,
                 muted: MuteRule = stamped_silences) -> None:
        self.root = root
        self.receiver = receiver
        self.send_resolved = send_resolved
        self.muted = muted
        self.groups: dict[str, Group] = {}
        self.settled_tokens: list[Any] = []
        self.suppressed: list[Suppressed] = []

    def reload(self, root: Route, *, send_resolved: bool | None = None) -> None:
        """Use the tree ``root`` for alerts added from now on; existing groups keep their options."""
        self.root = root
        if send_resolved is not None:
            self.send_resolved = send_resolved

    def _routes(self, alert: Mapping[str, Any]) -> list[Route]:
        return [r for r in self.root.match(alert_labels(alert)) if r.options.receiver == self.receiver]

    def add(self, alert: dict[str, Any], now: float, token: Any = None) -> bool:
        """File ``alert`` in every group of this receiver it routes to; False if it routes to none.

        A token of an alert that routes nowhere is settled at once (see :attr:`settled_tokens`).
        """
        routes = self._routes(alert)
        if not routes:
            if token is not None:
                self.settled_tokens.append(token)
            return False
        labels = alert_labels(alert)
        for i, route in enumerate(routes):
            key, glabels = group_key(route, labels)
            group = self.groups.get(key)
            if group is None:
                group = Group(key, glabels, route.options, now + route.options.group_wait)
                self.groups[key] = group
            entry = group.alerts.get(alert["dedup_key"])
            if entry is None:
                group.alerts[alert["dedup_key"]] = _Entry(alert)
            else:
                entry.alert = alert
            if token is not None and i == 0:
                group.tokens.append(token)
        return True

    def restore(self, alert: dict[str, Any], notified_at: float) -> None:
        """Re-file a firing alert the ledger says was notified (after a restart): not news."""
        for route in self._routes(alert):
            key, glabels = group_key(route, alert_labels(alert))
            group = self.groups.setdefault(
                key, Group(key, glabels, route.options, notified_at + route.options.group_interval))
            group.alerts[alert["dedup_key"]] = _Entry(alert, (alert["alert_id"], alert["status"]), alert["alert_id"])
            group.last_notified = max(group.last_notified or notified_at, notified_at)

    def next_due(self) -> float | None:
        """The earliest time a group wants flushing (None when none does; groups in flight wait)."""
        return min((g.next_flush for g in self.groups.values() if not g.in_flight), default=None)

    def flush(self, now: float) -> list[Notification]:
        """Notifications due at ``now``; groups with nothing to say settle their tokens."""
        out = []
        for key in list(self.groups):
            group = self.groups[key]
            if group.next_flush > now or group.in_flight:
                continue  # a group waits for its notification in flight, as Alertmanager's does
            group.next_flush = now + group.options.group_interval
            if not self.send_resolved:
                for dk in [dk for dk, e in group.alerts.items() if e.alert["status"] == "resolved"]:
                    del group.alerts[dk]
            shown = self._unmuted(group, now)
            changed = [e.alert for e in shown if e.notified != (e.alert["alert_id"], e.alert["status"])]
            firing = [e.alert for e in shown if e.alert["status"] == "firing"]
            repeat = (not changed and bool(firing) and group.last_notified is not None
                      and now - group.last_notified >= group.options.repeat_interval)
            tokens, group.tokens = group.tokens, []
            if changed or repeat:
                group.in_flight = True
                out.append(Notification(self.receiver, key, dict(group.labels),
                                        [e.alert for e in shown], changed, repeat, tokens))
            else:
                self.settled_tokens.extend(tokens)
                if not group.alerts:
                    del self.groups[key]
        return out

    def _unmuted(self, group: Group, now: float) -> list[_Entry]:
        """The group's entries to show at ``now``; muted ones are reported and held (or dropped)."""
        shown = []
        for dk, e in list(group.alerts.items()):
            alert = e.alert
            if alert["status"] == "resolved" and e.told == alert["alert_id"]:
                shown.append(e)  # the receiver shows it firing: closing it never pages
                continue
            by = self.muted(alert, now)
            if not by:
                shown.append(e)
                continue
            state = (alert["alert_id"], alert["status"])
            if e.suppressed != state:
                e.suppressed = state
                self.suppressed.append(Suppressed(self.receiver, alert, tuple(by)))
            if alert["status"] == "resolved":
                del group.alerts[dk]  # never told it fired: nothing to close
            else:
                e.notified = None  # news again once the silence ends
        return shown

    def settle(self, notification: Notification, now: float) -> None:
        """Record that ``notification`` was handed over at ``now``; drop notified resolved alerts."""
        group = self.groups.get(notification.group_key)
        if group is None:
            return
        group.last_notified = now
        group.in_flight = False
        for alert in notification.changed or notification.alerts:
            entry = group.alerts.get(alert["dedup_key"])
            if entry is None or entry.alert["alert_id"] != alert["alert_id"]:
                continue
            if entry.alert["status"] != alert["status"]:
                continue  # a newer state arrived meanwhile: still news
            entry.notified = (alert["alert_id"], alert["status"])
            entry.suppressed = None  # a later silence is reported again
            if alert["status"] == "firing":
                entry.told = alert["alert_id"]
            if alert["status"] == "resolved":
                del group.alerts[alert["dedup_key"]]
        if not group.alerts and not group.tokens:
            del self.groups[notification.group_key]

    def take_settled(self) -> list[Any]:
        """Tokens settled without a notification since the last call."""
        out, self.settled_tokens = self.settled_tokens, []
        return out

    def take_suppressed(self) -> list[Suppressed]:
        """Alert states left out because a silence muted them, since the last call (once per state)."""
        out, self.suppressed = self.suppressed, []
        return out
