"""Silences in delivery: which silences mute an alert when a receiver would be notified of it.

Two sources, one matcher: the ``silenced_by`` the correlator stamped on the alert (silences of the
rules file and of the ``silences`` topic, active at the alert's event time), and the silences the
delivery service reads itself from the ``silences`` topic (:class:`KnownSilences`, the same
:class:`streams.rules.Rules` and :func:`streams.rules.match_labels` the correlator uses). The second
catches a silence created after its alert fired (its repeats are muted) and one expired early with
``DELETE /silences/{id}`` (its alert is notified at once, without waiting for the correlator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.settings import LockstepSettings
from streams.rules import Rules, Silence, match_labels


def muted_by(alert: Mapping[str, Any], silences: Mapping[str, Silence], now: float) -> list[str]:
    """Ids of the silences muting ``alert`` at ``now`` (Unix seconds, wall clock), sorted; empty: notify.

    A stamped silence counts unless delivery knows it and it is not active at ``now`` (it ended or
    was expired); a known silence active at ``now`` whose matchers match the alert counts too.

    >>> from streams.matchers import Matcher
    >>> known = {"m1": Silence("m1", (Matcher.parse('job_id="j"'),), 0.0, 100.0)}
    >>> muted_by({"job_id": "j", "silenced_by": []}, known, 50.0)
    ['m1']
    >>> muted_by({"job_id": "j", "silenced_by": ["m1"]}, known, 150.0)   # it ended: notify
    []
    >>> muted_by({"job_id": "k", "silenced_by": ["file-silence"]}, known, 150.0)  # unknown here: trust the stamp
    ['file-silence']
    """
    out = {str(s) for s in alert.get("silenced_by") or [] if (k := silences.get(str(s))) is None or k.active(now)}
    if silences:
        labels = match_labels(alert)
        out.update(sid for sid, s in silences.items() if s.active(now) and s.matches(labels))
    return sorted(out)


class KnownSilences:
    """The ``silences`` topic as delivery knows it, read like the workers read it (every partition, no group)."""

    def __init__(self) -> None:
        self.rules = Rules()
        self._reader: Any = None

    def muted_by(self, alert: Mapping[str, Any], now: float) -> list[str]:
        """The :data:`streams.dispatch.MuteRule` every receiver's dispatcher uses."""
        return muted_by(alert, self.rules.silences, now)

    def __len__(self) -> int:
        return len(self.rules.silences)

    async def start(self, settings: LockstepSettings, bootstrap: str, topic: str) -> int:
        """Read ``topic`` to its end, then follow it; return how many records were applied."""
        from agents.inventory_reader import SilenceReader

        self._reader = SilenceReader(settings, bootstrap, topic, self.rules)
        applied = int(await self._reader.load())
        self._reader.follow()
        return applied

    async def stop(self) -> None:
        if self._reader is not None:
            await self._reader.stop()
