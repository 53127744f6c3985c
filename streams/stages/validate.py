"""``validate``: each decoded record to a sample of a known series, or a dead letter.

A record of a series already held takes the fast path: its key (and so its labels) was validated
when the series was first seen, so only its time, value, kind and ``ingest_ts`` are checked here;
anything else goes through :func:`streams.ingest.validate_record` and is admitted to the series
registry. A sample of a new series that a series cap refuses is dropped and counted
(``out.refused``); each message with such samples gives one ``SeriesLimitExceeded`` dead letter
with the count, and its other samples go on. Dead letters keep message order (a message's
``decode`` refusal among the ``validate`` ones of the others).
"""

from __future__ import annotations

import math

from models.errors import SeriesLimitExceeded, ValidationFailed
from models.samples import MAX_ABS_VALUE
from models.timeutil import MAX_TS, MIN_TS
from streams.ingest import validate_record
from streams.series import REFUSED_PARTITION
from streams.stages.base import Batch, DeadLetterOut

_NO_LABELS: dict[str, str] = {}


class Validate:
    name = "validate"

    def run(self, batch: Batch) -> None:
        part, out, messages = batch.part, batch.out, batch.messages
        reg = part.registry
        known = reg.raw_ids
        ids_l, ts_l, val_l, ing_l, msg_l = batch.ids_l, batch.ts_l, batch.val_l, batch.ing_l, batch.msg_l
        #: message -> [first refused record, refused by the partition cap, by the source cap]
        refusals: dict[int, list[int]] = {}
        nan = math.nan
        for m, records in enumerate(batch.decoded):
            if records is None:
                continue
            if type(records) is DeadLetterOut:
                out.dead_letters.append(records)
                continue
            assert isinstance(records, list)
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
                                msg_l.append(m)
                                continue
                try:
                    s = validate_record(rec)
                except ValueError as exc:
                    raw, origin = messages[m]
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
                msg_l.append(m)
        part.register_new(out)
        if refusals:
            batch.refused = True
            self._refused(batch, refusals)

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
