"""Series caps and idle-series eviction in the per-partition pipeline (pure: no broker).

A partition holds at most ``max_series`` series and a source at most ``max_per_source`` of them; a
sample of a new series beyond either is refused (one dead letter per message, with the count), and
samples of known series go on. A series idle for ``idle_s`` of event time is evicted and its id
reused from a clean state; snapshot/restore keeps ids, free ids and the eviction clock.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from streams.detect import DetectorConfig
from streams.inventory import InventoryIndex
from streams.pipeline import Origin, PartitionPipeline, PipelineOutput
from streams.series import REFUSED_PARTITION, REFUSED_SOURCE, SeriesLimits, SeriesRegistry
from streams.snapshot import pack, unpack

T0 = 1764502800.0


def gauge(ts: float, source: str, gpu: int, value: float = 50.0) -> dict[str, Any]:
    return {"ts": ts, "layer": "gpu", "source": source, "metric": "DCGM_FI_DEV_GPU_UTIL", "value": value,
            "labels": {"gpu": str(gpu)}}


def counter(ts: float, source: str, port: int, value: float) -> dict[str, Any]:
    return {"ts": ts, "layer": "switch", "source": source, "metric": "SymbolErrorCounter", "value": value,
            "labels": {"port": str(port), "lane": "0"}}


def pipe(max_series: int = 1000, per_source: int = 1000, idle_s: float = math.inf) -> PartitionPipeline:
    cfg = DetectorConfig(min_samples=5, limits=SeriesLimits(max_series, per_source, idle_s))
    return PartitionPipeline("telemetry.gpu:0", cfg, InventoryIndex())


def send(p: PartitionPipeline, *messages: list[dict[str, Any]], offset: int = 0) -> PipelineOutput:
    return p.process_many([(orjson.dumps(m), Origin("telemetry.gpu", 0, offset + i)) for i, m in enumerate(messages)])


def test_the_partition_cap_refuses_new_series_once_per_message_and_known_series_go_on() -> None:
    p = pipe(max_series=10)
    out = send(p, [gauge(T0, "n1", g) for g in range(15)])
    assert len(p.registry) == 10 and out.samples == 10
    assert out.refused == {"partition": 5} and out.rejected == 5
    [dl] = out.dead_letters
    rec = dl.to_record()
    assert rec["error"] == "SeriesLimitExceeded" and rec["stage"] == "validate" and rec["offset"] == 0
    assert rec["record"] == "samples[10]" and "5 samples of new series refused" in rec["reason"]
    assert "max_series_per_partition (10 series held)" in rec["reason"]
    # A flood of 2,000 new series in 4 messages, each with the 10 known ones: 4 dead letters, not
    # 2,000, and the known series are processed.
    flood = [[gauge(T0 + 1 + m, "n1", g) for g in range(10)] + [gauge(T0 + 1 + m, f"pod{m}", g) for g in range(500)]
             for m in range(4)]
    out = send(p, *flood, offset=1)
    assert out.samples == 40 and len(p.registry) == 10
    assert out.refused == {"partition": 2000}
    assert [(d.origin.offset if d.origin else None, d.record) for d in out.dead_letters] == [
        (1, "samples[10]"), (2, "samples[10]"), (3, "samples[10]"), (4, "samples[10]")]
    assert all("500 samples of new series refused" in d.reason for d in out.dead_letters)


def test_the_source_cap_bounds_one_source_and_leaves_room_for_the_others() -> None:
    p = pipe(max_series=100, per_source=3)
    out = send(p, [gauge(T0, "noisy", g) for g in range(8)] + [gauge(T0, "quiet", g) for g in range(3)])
    assert out.refused == {"source": 5} and out.samples == 6
    assert p.registry.per_source == {"noisy": 3, "quiet": 3}
    assert "5 beyond max_series_per_source (3 per source)" in out.dead_letters[0].reason


def test_registry_admit_says_which_cap_refused_and_registers_nothing() -> None:
    reg = SeriesRegistry(SeriesLimits(max_series=2, max_per_source=1))
    assert reg.admit("gpu", "a", "m", {"gpu": "0"}, None) == 0
    assert reg.admit("gpu", "a", "m", {"gpu": "1"}, None) == REFUSED_SOURCE
    assert reg.admit("gpu", "b", "m", {"gpu": "0"}, None) == 1
    assert reg.admit("gpu", "c", "m", {"gpu": "0"}, None) == REFUSED_PARTITION
    assert len(reg) == 2 and reg.size == 2 and reg.per_source == {"a": 1, "b": 1}
    assert reg.admit("gpu", "a", "m", {"gpu": "0"}, None) == 0  # known series are never refused


def test_an_idle_series_is_evicted_after_idle_s_of_event_time_and_its_id_reused() -> None:
    p = pipe(idle_s=100.0)
    send(p, [gauge(T0, "gone", 0), gauge(T0, "stays", 0)])
    gone = p.registry.lookup_raw(("gpu", "gone", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),)))
    evicted = 0
    for k in range(1, 100):  # never before idle_s
        evicted += send(p, [gauge(T0 + k, "stays", 0)], offset=k).evicted
    assert evicted == 0 and len(p.registry) == 2
    for k in range(100, 120):
        evicted += send(p, [gauge(T0 + k, "stays", 0)], offset=k).evicted
    assert evicted == 1 and len(p.registry) == 1 and p.registry.size == 2
    assert p.registry.lookup_raw(("gpu", "gone", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),))) == -1
    assert p.registry.per_source == {"stays": 1} and "gone" not in p._src_ids
    send(p, [gauge(T0 + 130, "new", 0)], offset=200)
    assert p.registry.lookup_raw(("gpu", "new", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),))) == gone


def test_a_sample_stamped_far_ahead_of_its_arrival_does_not_make_the_other_series_idle() -> None:
    """The eviction clock is the watermark, but never past the Kafka record time of the batch."""
    p = pipe(idle_s=100.0)

    def arrive(k: int, samples: list[dict[str, Any]]) -> PipelineOutput:
        return p.process_many([(orjson.dumps(samples), Origin("telemetry.gpu", 0, k, T0 + k + 0.5))])

    evicted = 0
    for k in range(10):
        evicted += arrive(k, [gauge(T0 + k, "a", 0), gauge(T0 + k, "b", 0)]).evicted
    evicted += arrive(10, [gauge(T0 + 1e6, "liar", 0)]).evicted  # a clock eleven days ahead
    assert p.watermark == T0 + 1e6
    for k in range(11, 60):
        evicted += arrive(k, [gauge(T0 + k, "a", 0), gauge(T0 + k, "b", 0)]).evicted
    assert evicted == 0 and len(p.registry) == 3
    for k in range(60, 180):  # "b" stops: it is evicted after idle_s of arrival-bounded event time
        evicted += arrive(k, [gauge(T0 + k, "a", 0)]).evicted
    assert evicted == 1 and sorted(p.registry.per_source) == ["a", "liar"]


def rows(p: PartitionPipeline, sid: int) -> dict[str, Any]:
    """Every per-series row the pipeline holds for ``sid``."""
    d, sc, sk = p.detector, p.detector.scorer, p.detector.sketch
    out = {f"rates.{k}": getattr(p.rates, k)[sid] for k in ("last_ts", "last_value")}
    out.update({f"detect.{k}": getattr(d, k)[sid] for k in d._FIELDS})
    out.update({f"robust.{k}": getattr(sc, k)[sid] for k in sc._names})
    out.update({f"sketch.{k}": getattr(sk, k)[sid] for k in sk._FIELDS})
    out.update({"lane": p._lane[sid], "jobset": p._jobset[sid], "src": p._src_names[p._src_code[sid]],
                "counter": p.registry.counter[sid], "scale": p.registry.scale[sid]})
    return out


def same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ (NaN equal to NaN)."""
    def eq(x: Any, y: Any) -> bool:
        x, y = np.asarray(x), np.asarray(y)
        return bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
    return [k for k in a if not eq(a[k], b[k])]


def test_a_reused_id_starts_clean_no_rate_baseline_or_sketch_of_the_evicted_series_leaks() -> None:
    p = pipe(idle_s=50.0)
    # A counter series with a learned baseline, percentiles and an open episode, then silence.
    for k in range(40):
        send(p, [counter(T0 + k, "old", 1, 0.0), gauge(T0 + k, "clock", 0)], offset=k)
    send(p, [counter(T0 + 40, "old", 1, 500.0), gauge(T0 + 40, "clock", 0)], offset=40)
    send(p, [counter(T0 + 41, "old", 1, 900.0), gauge(T0 + 41, "clock", 0)], offset=41)
    sid = p.registry.lookup_raw(("switch", "old", "SymbolErrorCounter", (("port", "1"), ("lane", "0"))))
    assert p.detector.in_episode(sid) and p.detector.scorer.count[sid] > 20
    for k in range(42, 110):
        send(p, [gauge(T0 + k, "clock", 0)], offset=k)
    assert p.registry.meta[sid].source == ""  # evicted
    # A new counter series takes the id; its state must be what a fresh pipeline gives it.
    fresh = pipe(idle_s=50.0)
    for k, q in ((120, 7.0), (121, 7.0), (122, 7.0)):
        a = send(p, [counter(T0 + k, "newcomer", 7, q)], offset=k)
        b = send(fresh, [counter(T0 + k, "newcomer", 7, q)], offset=k)
        assert (a.samples, a.anomalies, a.resets) == (b.samples, b.anomalies, b.resets)
    assert p.registry.lookup_raw(("switch", "newcomer", "SymbolErrorCounter", (("port", "7"), ("lane", "0")))) == sid
    assert same(rows(p, sid), rows(fresh, 0)) == []


def test_a_churn_of_short_lived_series_stays_bounded() -> None:
    """Pods that live 10 s each, 20 new a second, for 1,000 s: 20,000 series seen, a few hundred held."""
    p = pipe(max_series=2000, idle_s=60.0)
    refused = 0
    for t in range(1000):
        # pod ``j`` lives from second j // 20 for 10 s
        live = range(max(0, (t - 9) * 20), (t + 1) * 20)
        out = send(p, [gauge(T0 + t, f"pod{j}", 0) for j in live], offset=t)
        refused += sum(out.refused.values())
    assert refused == 0
    most = (60 + 60 / 8 + 10 + 1) * 20  # idle span, sweep step, lifetime: series that can be held at once
    assert len(p.registry) <= most and p.registry.size <= most
    assert len(p._src_names) <= most and len(p.clocks.sources) <= most


def test_snapshot_round_trip_keeps_ids_free_ids_and_the_eviction_clock() -> None:
    p = pipe(max_series=50, idle_s=30.0)
    for t in range(100):
        msg = [gauge(T0 + t, "node", g, 40.0 + g + t % 3) for g in range(4)]
        msg += [gauge(T0 + t, f"pod{(t // 10) * 3 + j}", 0, 10.0) for j in range(3)]  # 3 pods per 10 s
        send(p, msg, offset=t)
    assert p.registry.free, "the run evicted series"
    q = pipe(max_series=50, idle_s=30.0)
    q.restore(p.snapshot())
    assert q.registry.snapshot() == p.registry.snapshot()
    assert (len(q.registry), q.registry.size, q.registry.per_source) == (len(p.registry), p.registry.size,
                                                                         p.registry.per_source)
    assert np.array_equal(q.registry.live, p.registry.live) and q._swept == p._swept
    for t in range(100, 160):  # both go on alike: new series take the same ids, evictions at the same times
        msg = [gauge(T0 + t, "node", g, 40.0 + g + t % 3 + (30.0 if t > 150 else 0.0)) for g in range(4)]
        msg += [gauge(T0 + t, f"pod{(t // 10) * 3 + j}", 0, 10.0) for j in range(3)]
        a, b = send(p, msg, offset=t), send(q, msg, offset=t)
        assert (a.samples, a.evicted, a.anomalies, a.refused) == (b.samples, b.evicted, b.anomalies, b.refused)
    assert q.registry.snapshot() == p.registry.snapshot()
    for sid in np.flatnonzero(p.registry.live[: p.registry.size]).tolist():
        assert same(rows(p, sid), rows(q, sid)) == [], sid


def test_a_snapshot_whose_highest_ids_are_free_restores_and_goes_on() -> None:
    p = pipe(idle_s=10.0)
    send(p, [gauge(T0, "stays", g) for g in range(200)] + [gauge(T0, "gone", g) for g in range(100)])
    for k in range(1, 20):
        send(p, [gauge(T0 + k, "stays", g) for g in range(200)], offset=k)
    assert sorted(p.registry.free) == list(range(200, 300)) and len(p.registry) == 200
    q = pipe(idle_s=10.0)
    q.restore(p.snapshot())
    assert (q.registry.size, q.registry.free, len(q.registry)) == (300, p.registry.free, 200)
    for r in (p, q):
        out = send(r, [gauge(T0 + 40, "stays", 0)], offset=40)
        assert out.samples == 1 and out.evicted == 199  # the other "stays" series went idle in turn
        reused = r.registry.free[-1]  # the most recently freed id goes first
        out = send(r, [gauge(T0 + 41, "stays", 0), gauge(T0 + 41, "new", 0)], offset=41)
        assert r.registry.lookup_raw(("gpu", "new", "DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),))) == reused
        out = send(r, [gauge(T0 + 80, "new", 0)], offset=42)
        assert out.evicted == 1 and len(r.registry) == 1 and r.registry.size == 300


def test_a_snapshot_with_more_series_than_a_lowered_cap_keeps_them_and_refuses_new_ones() -> None:
    p = pipe()
    send(p, [gauge(T0, "n1", g) for g in range(20)])
    q = pipe(max_series=10)
    q.restore(p.snapshot())
    assert len(q.registry) == 20
    out = send(q, [gauge(T0 + 1, "n1", g) for g in range(21)], offset=1)
    assert out.samples == 20 and out.refused == {"partition": 1}


def test_a_snapshot_from_before_id_reuse_restores() -> None:
    p = pipe()
    send(p, [gauge(T0, "n1", g) for g in range(5)])
    arrays, meta = unpack(p.snapshot())
    meta["series"] = meta["series"]["rows"]  # the plain row list older workers wrote
    del meta["swept"]
    q = pipe()
    q.restore(pack(arrays, meta))
    assert len(q.registry) == 5 and q.registry.free == [] and q._swept is None
    assert send(q, [gauge(T0 + 1, "n1", g) for g in range(6)], offset=1).samples == 6


def test_refusals_do_not_depend_on_how_messages_are_batched() -> None:
    msgs = [[gauge(T0 + m, f"n{m % 3}", g) for g in range(7)] for m in range(6)]
    batched, single = pipe(max_series=10, per_source=5), pipe(max_series=10, per_source=5)
    a = send(batched, *msgs)
    b = [send(single, m, offset=i) for i, m in enumerate(msgs)]
    assert a.refused == {"partition": 20, "source": 2}
    assert a.refused == {cap: sum(o.refused.get(cap, 0) for o in b) for cap in ("partition", "source")}
    assert [(d.reason, d.origin) for d in a.dead_letters] == [(d.reason, d.origin) for o in b for d in o.dead_letters]
