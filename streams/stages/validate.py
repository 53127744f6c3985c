"""``validate``: each decoded record to a sample of a known series, or a dead letter.

Typed rows (the decode stage's fast path, :class:`streams.ingest.Row`) of series already held take the
fastest path: each row's series is found by its raw key (layer, source, the labels' JSON bytes: an entry
of :attr:`PartitionPipeline.row_ids`, then the metric: its position in the entry's shared layout,
``entry[entry[0][metric]]``; the entry looked up once per run of rows with the same labels, source and
layer), and the message's times and values are checked at once. A row's raw key
is indexed the first time its labels are found among the series the general path validated (a
message's new keys at once, :meth:`PartitionPipeline.index_rows`), so a row it finds is of a series
whose identity the general path checked. A message with a row of a
series not held yet, or any value the checks refuse, goes through the general path instead, as if the
fast path had not looked at it.

The general path: a record of a series already held takes the record fast path: its key (and so its
labels) was validated when the series was first seen, so only its time, value, kind and ``ingest_ts``
are checked here; anything else goes through :func:`streams.ingest.validate_record` and is admitted to
the series registry. A sample of a new series that a series cap refuses is dropped and counted
(``out.refused``); each message with such samples gives one ``SeriesLimitExceeded`` dead letter with the
count, and its other samples go on. Dead letters keep message order (a message's ``decode`` refusal
among the ``validate`` ones of the others).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from models.errors import SeriesLimitExceeded, ValidationFailed
from models.samples import MAX_ABS_VALUE
from models.timeutil import MAX_TS, MIN_TS
from streams.ingest import Row, validate_record
from streams.series import REFUSED_PARTITION, raw_key
from streams.stages.base import Batch, DeadLetterOut
from streams.stages.decode import decode_message

_NO_LABELS: dict[str, str] = {}


class Validate:
    name = "validate"

    def run(self, batch: Batch) -> None:
        part, out = batch.part, batch.out
        #: message -> [first refused record, refused by the partition cap, by the source cap]
        refusals: dict[int, list[int]] = {}
        for m, item in enumerate(batch.decoded):
            if type(item) is list and item and type(item[0]) is Row:
                if self._rows(batch, m, item):
                    continue
                raw, origin = batch.messages[m]
                item = decode_message(raw, origin, out)  # the general path, as if the fast one had not looked
            if item is None:
                continue
            if type(item) is DeadLetterOut:
                out.dead_letters.append(item)
                continue
            assert isinstance(item, list)
            self._records(batch, m, item, refusals)
        part.register_new(out)
        if refusals:
            batch.refused = True
            self._refused(batch, refusals)

    def _rows(self, batch: Batch, m: int, rows: list[Row]) -> bool:
        """Message ``m``'s typed rows as samples, if every row is of a series held and in range; False
        (nothing added) sends the message down the general path."""
        index = batch.part.row_ids
        if len(rows) == 1:  # (a host's or a collective's one gauge a message: no lists to build)
            r = rows[0]
            one = index.get((r.layer, r.source, bytes(r.labels)))
            pos = None if one is None else one[0].get(r.metric)
            if one is not None and pos is not None:
                return self._one_row(batch, m, r, one[pos])
        sids: list[int] = []
        append = sids.append
        # A scrape lists a label set's metrics one after another (a GPU's dozen, a port's counters): the
        # entry is looked up again only when the row's labels, source or layer differ from the row before
        # (the raw labels compared as bytes, without the copy and hash the look-up needs).
        labels: Any = None
        source = layer = ""
        e: Any = None
        try:
            for r in rows:
                if r.labels != labels or r.source != source or r.layer != layer:
                    labels, source, layer = r.labels, r.source, r.layer
                    e = index[(layer, source, bytes(labels))]
                append(e[e[0][r.metric]])
        except KeyError:
            found = self._index_rows(batch, rows)
            if found is None:
                return False
            sids = found
        ts = [r.ts for r in rows]
        values = [r.value for r in rows]
        # JSON has no NaN and msgspec refuses a number beyond a double, so min and max see every value.
        # The value bounds are exclusive here: a value on a bound (or an integer that rounds to one) is
        # the general path's to judge exactly.
        low = min(values)
        if not (min(ts) >= MIN_TS and max(ts) < MAX_TS and low > -MAX_ABS_VALUE and max(values) < MAX_ABS_VALUE):
            return False
        if low < 0 and any(r.kind == "counter" and r.value < 0 for r in rows):
            return False
        n = len(rows)
        ingest = [r.ingest_ts for r in rows]
        if ingest.count(None) != n:
            present = [t for t in ingest if t is not None]
            if not (min(present) >= MIN_TS and max(present) < MAX_TS):
                return False
            batch.ing_at.append((len(batch.ids_l), [math.nan if t is None else t for t in ingest]))
        batch.ids_l.extend(sids)
        batch.ts_l.extend(ts)
        batch.val_l.extend(values)
        batch.run_msg.append(m)
        batch.run_len.append(n)
        return True

    @staticmethod
    def _one_row(batch: Batch, m: int, r: Row, sid: int) -> bool:
        """:meth:`_rows` for a message of one row, of series ``sid``: the same checks on one value."""
        ts, value, ingest = r.ts, r.value, r.ingest_ts
        if not (MIN_TS <= ts < MAX_TS and -MAX_ABS_VALUE < value < MAX_ABS_VALUE):
            return False
        if value < 0 and r.kind == "counter":
            return False
        if ingest is not None:
            if not MIN_TS <= ingest < MAX_TS:
                return False
            batch.ing_at.append((len(batch.ids_l), [ingest]))
        batch.ids_l.append(sid)
        batch.ts_l.append(ts)
        batch.val_l.append(value)
        batch.run_msg.append(m)
        batch.run_len.append(1)
        return True

    @staticmethod
    def _index_rows(batch: Batch, rows: list[Row]) -> list[int] | None:
        """The series ids of ``rows``, indexing the raw key of each row whose labels are those of a
        series held; None when one is not (a new series, labels in an order not seen, or labels that are
        not an object of strings): the general path validates and admits it."""
        part = batch.part
        reg = part.registry
        index = part.row_ids
        sids = []
        found: list[tuple[int, bytes]] = []
        for r in rows:
            labels_raw = bytes(r.labels)
            entry = index.get((r.layer, r.source, labels_raw))
            if entry is not None:
                pos = entry[0].get(r.metric)
                if pos is not None:
                    sids.append(entry[pos])
                    continue
            try:
                labels = orjson.loads(labels_raw)
            except orjson.JSONDecodeError:
                labels = None
            sid = reg.lookup_raw(raw_key(r.layer, r.source, r.metric, labels)) if type(labels) is dict else -1
            if sid < 0:
                part.index_rows(found)  # the rows found before this one are indexed all the same
                return None
            found.append((sid, labels_raw))
            sids.append(sid)
        part.index_rows(found)
        return sids

    def _records(self, batch: Batch, m: int, records: list[Any], refusals: dict[int, list[int]]) -> None:
        """The general path for message ``m``'s decoded records."""
        part, out = batch.part, batch.out
        reg = part.registry
        known = reg.raw_ids
        ids_l, ts_l, val_l = batch.ids_l, batch.ts_l, batch.val_l
        first = len(ids_l)
        ing_l: list[float] = []  # the arrival time of each sample kept, NaN where it has none
        nan = math.nan
        for i, rec in enumerate(records):
            if type(rec) is dict:
                try:
                    labels = rec.get("labels", _NO_LABELS)
                    sid = known[(rec["layer"], rec["source"], rec["metric"], tuple(labels.items()))]
                    ts = rec["ts"]
                    value = rec["value"]
                except (KeyError, TypeError, AttributeError):
                    sid = -1
                if sid >= 0:
                    tt = type(ts)
                    tv = type(value)
                    if ((tt is float or tt is int) and MIN_TS <= ts < MAX_TS
                            and (tv is float or tv is int) and -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE):
                        kind = rec.get("kind")
                        ingest = rec.get("ingest_ts")
                        ti = type(ingest)
                        if ((kind is None or kind == "gauge" or (kind == "counter" and value >= 0))
                                and (ingest is None or ((ti is float or ti is int) and MIN_TS <= ingest < MAX_TS))):
                            ids_l.append(sid)
                            ts_l.append(ts)
                            val_l.append(value)
                            ing_l.append(nan if ingest is None else ingest)
                            continue
            try:
                s = validate_record(rec)
            except ValueError as exc:
                raw, origin = batch.messages[m]
                out.dead_letters.append(DeadLetterOut(self.name, str(exc), ValidationFailed.__name__,
                                                      f"samples[{i}]", raw, origin))
                out.rejected += 1
                continue
            sid = reg.admit(s.layer, s.source, s.metric, s.labels, s.kind)
            if sid < 0:
                refused = refusals.get(m)
                if refused is None:
                    refused = refusals[m] = [i, 0, 0]
                refused[1 if sid == REFUSED_PARTITION else 2] += 1
                continue
            ids_l.append(sid)
            ts_l.append(s.ts)
            val_l.append(s.value)
            ing_l.append(nan if s.ingest_ts is None else s.ingest_ts)
        if ing_l:
            batch.run_msg.append(m)
            batch.run_len.append(len(ing_l))
            if ing_l.count(nan) != len(ing_l):  # (the NaNs are all ``nan`` itself: counted by identity)
                batch.ing_at.append((first, ing_l))

    def _refused(self, batch: Batch, refusals: dict[int, list[int]]) -> None:
        """One dead letter per message whose new series a cap refused, with how many samples and why."""
        out = batch.out
        lim = batch.part.config.limits
        for m, (first, by_partition, by_source) in refusals.items():
            why = []
            if by_partition:
                why.append(f"{by_partition} beyond max_series_per_partition ({lim.max_series} series held)")
                out.refused["partition"] = out.refused.get("partition", 0) + by_partition
            if by_source:
                why.append(f"{by_source} beyond max_series_per_source ({lim.max_per_source} per source)")
                out.refused["source"] = out.refused.get("source", 0) + by_source
            n = by_partition + by_source
            out.rejected += n
            raw, origin = batch.messages[m]
            out.dead_letters.append(DeadLetterOut(
                self.name, f"series cap: {n} samples of new series refused: " + "; ".join(why),
                SeriesLimitExceeded.__name__, f"samples[{first}]", raw, origin))
