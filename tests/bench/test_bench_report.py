"""What ``lockstep bench`` reports from its measurements (no broker: the rate fit, the ratio and noise
rules, the table of a quick run and of a run without the peer frameworks, the peers' own arithmetic)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import peers
from benchmarks.lockbench import Run, coarse, describe, read_progress, slope
from lockstep.commands.bench import _paired, table


def run(sps: float | None, per_cpu: float | None = None, cores: list[float] | None = None,
        **extra: Any) -> dict[str, Any]:
    return {"samples_per_s": sps, "samples_per_cpu_s": per_cpu, "cpu_cores": cores, "rss_mb": [100.0], **extra}


def quick_doc(peer_status: dict[str, str]) -> dict[str, Any]:
    """A document shaped as run_all writes it with quick=True (the rows a quick run measures)."""
    return {
        "commit": "abc", "started": "2026-12-01T00:00:00Z", "quick": True, "wall_s": 95.0, "peers": peer_status,
        "machine": {"cpu": "x", "cores": 2, "python": "3.11"},
        "batched": {"loaded": {"messages": 100, "samples": 2800, "series": 14301}, "cpu_budget": "not run with --quick",
                    "runs": {"bare": run(400_000.0, 1_000_000.0, [0.4], cpu_wait_cores=[0.1]),
                             "faust_stock": run(200_000.0, 300_000.0, [0.7]),
                             "worker": run(100_000.0, 110_000.0, [0.9])}},
        "single": {"loaded": {"messages": 50, "samples": 50},
                   "runs": {"bare": run(None, why="1 progress point(s)"), "faust_stock": run(5000.0, 6000.0, [0.8]),
                            "worker": run(4000.0, 4500.0, [0.9])}},
        "state": {"10000": {"series": 10057, "arrays_and_registry_bytes_per_series": 1875.0,
                            "heap_bytes_per_series": 2689.0, "snapshot_bytes_per_series": 84.0}},
        "latency": {"rate_samples_per_s": 50000.0, "p50_s": 0.5, "p99_s": 0.9, "measured": 6},
    }


def test_a_backlog_drained_within_two_commits_still_gets_a_rate_not_zero() -> None:
    # The single-sample bare consumer at 020ffc4: its first commit at 7 s (start-up), its last at 8 s.
    points = [(0.0, 0), (7.0, 20_000), (8.0, 26_910)]
    assert coarse(points, 26_910)
    assert slope(points, 26_910) == pytest.approx(6_910.0)


def test_the_fit_ignores_the_start_up_before_the_first_commit() -> None:
    points = [(0.0, 0)] + [(10.0 + i, 1000 * (i + 1)) for i in range(8)] + [(19.0, 10_000)]
    assert not coarse(points, 10_000)
    assert slope(points, 10_000) == pytest.approx(1000.0)


def test_a_run_without_a_rate_says_why_instead_of_printing_zero() -> None:
    line = describe("bare", Run("b", 1, 10, 10, why="1 progress point(s)", finished=True, wall_s=2.0))
    assert "n/a (1 progress point(s))" in line
    assert " 0 samples/s" not in line


def test_ratios_carry_their_spread_over_rounds_and_say_when_they_are_noise() -> None:
    worker = {"samples_per_s": 120.0, "rounds": [100.0, 120.0, 140.0], "cpu_rounds": [50.0, 55.0, 60.0]}
    bare = {"samples_per_s": 200.0, "rounds": [200.0, 200.0, 100.0], "cpu_rounds": [500.0, 500.0, 500.0]}
    assert _paired(worker, bare) == "0.60x (0.50-1.40 over 3 rounds; noise: rounds either side of 1)"
    assert _paired(worker, bare, "samples_per_cpu_s") == "0.11x (0.10-0.12 over 3 rounds)"


def test_the_quick_table_says_which_rows_it_did_not_run_and_gives_each_ratio_per_cpu_second() -> None:
    status = {"quix": "quixstreams not installed (pip install -e '.[bench]')", "quix-memory": "x",
              "bytewax": "not run with --quick (add --peers)", "bytewax-recovery": "y"}
    text = table(quick_doc(status))
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("|")}
    batched = next(v for k, v in rows.items() if k.startswith("| batched messages"))
    assert "0.25x (one round)" in batched  # 100k / 400k samples/s
    assert "0.11x (one round)" in batched  # 110k / 1M per CPU-second
    assert "not CPU-bound: ran 0.40 + waited 0.10" in batched  # half its time on fetches
    assert "n/a: quixstreams not installed" in text
    assert "n/a: not run with --quick (add --peers)" in text
    assert "| state per series at ~100,000 series | not run with --quick |" in text
    assert "| scaling, 8 partitions: 2 worker processes vs 1 | not run with --quick |" in text
    assert "(bare n/a (1 progress point(s)))" in text
    assert "95 s" in text.splitlines()[0]


def test_the_latency_goal_is_read_at_80_percent_of_the_maximum_when_that_run_exists() -> None:
    doc = quick_doc({k: "x" for k in ("quix", "quix-memory", "bytewax", "bytewax-recovery")})
    rows = [line for line in table(doc).splitlines() if line.startswith("| alert latency")]
    assert len(rows) == 1 and rows[0].endswith("| p99 < 1 s |")  # without the 80% run: the 50% row is the goal's
    doc["latency_80"] = {"rate_samples_per_s": 80000.0, "p50_s": 0.7, "p99_s": 1.4, "measured": 5, "incidents": 6,
                         "produced": {"samples_per_s": 71000.0}}
    rows = [line for line in table(doc).splitlines() if line.startswith("| alert latency")]
    assert rows[0].endswith("| (reference) |")
    assert "80,000 samples/s (80% of max; sent 71,000)" in rows[1]
    assert "0.7 s / 1.4 s (5 of 6 alerts)" in rows[1] and rows[1].endswith("| p99 < 1 s |")
    doc["live_max"] = {"live_max_samples_per_s": 100000.0, "trials": [
        {"rate_samples_per_s": 70000.0, "kept_up": True, "cpu_cores": 0.6},
        {"rate_samples_per_s": 87500.0, "kept_up": False, "cpu_cores": 0.95}]}
    text = table(doc)
    assert "80% of the live maximum 100,000" in text
    live = next(line for line in text.splitlines() if line.startswith("| highest rate 1 worker sustains live"))
    # the quick doc's worker: 100,000 samples/s from the backlog
    assert "| 100,000 samples/s |" in live and "1.00x" in live and "within 0.5 s" in live
    assert "70,000 kept up (0.6 core); 87,500 behind (0.95 core)" in live
    doc["live_max"].update(incidents={"every_scrapes": 2, "each_s": 40.0}, step_s=10.0, drain_allowed_s=1.0)
    live = next(line for line in table(doc).splitlines() if line.startswith("| highest rate 1 worker sustains live"))
    assert "an incident every 2 scrapes lasting 40 s as in the latency run, 10 s steps" in live
    assert "within 1.0 s" in live
    half = next(line for line in table(doc).splitlines() if line.startswith("| alert latency at 50,000"))
    assert "(half the backlog rate)" in half  # below the live maximum of 100,000: said as it is
    doc["live_max"]["live_max_samples_per_s"] = 40000.0
    half = next(line for line in table(doc).splitlines() if line.startswith("| alert latency at 50,000"))
    assert "above the live maximum 40,000: the worker falls behind" in half


def test_peers_are_reported_missing_when_their_framework_is_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bytewax" else real(name, *a))
    status = peers.available()
    assert status["bytewax"] == status["bytewax-recovery"] == "bytewax not installed (pip install -e '.[bench]')"


def test_progress_files_are_summed_and_a_missing_one_counts_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("3.5 40\n")
    (tmp_path / "b").write_text("torn")
    assert read_progress([tmp_path / "a", tmp_path / "b", tmp_path / "c"]) == (3.5, 40)
    assert read_progress([tmp_path / "c"]) == (None, 0)


def test_the_peers_rolling_baseline_converges_and_scores_an_outlier() -> None:
    state = None
    for i in range(200):
        state, z = peers.update_baseline(state, 10.0 + (i % 2))  # alternates 10, 11: mean 10.5, sd 0.5
    assert state is not None
    assert state[0] == pytest.approx(10.5, abs=0.05)
    assert math.sqrt(state[1]) == pytest.approx(0.5, abs=0.05)
    assert abs(z) < 1.5
    assert peers.update_baseline(state, 20.0)[1] > peers.Z_LIMIT


def test_two_series_that_differ_only_by_a_label_have_different_keys() -> None:
    a = {"metric": "port_xmit_discards", "source": "leaf01", "labels": {"port": "1"}}
    b = {"metric": "port_xmit_discards", "source": "leaf01", "labels": {"port": "2"}}
    assert peers.series_key(a) != peers.series_key(b)
    assert peers.series_key({**a, "labels": {"port": "1", "x": "y"}}) == peers.series_key(
        {**a, "labels": {"x": "y", "port": "1"}})


def test_the_peers_docstring_examples_run() -> None:
    import doctest

    result = doctest.testmod(peers, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


def test_a_full_run_document_renders_every_row_including_scaling_and_the_budget() -> None:
    import orjson

    # A full --repeat 3 run's JSON (before the peers and per-CPU rounds existed): the scaling, budget,
    # 100k-series and reference rows all render, and the missing peers say so instead of failing.
    doc = orjson.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "4ee35a0a9ea2.json").read_bytes())
    text = table(doc)
    assert "| scaling, 8 partitions: 2 worker processes vs 1 | 232,248 |" in text
    assert "1.47x (1.43-1.72 over 3 rounds)" in text
    assert "2.32x (2.20-2.59 over 3 rounds)" in text  # the budgeted 2-vs-1
    assert "state per series at 99,638 series" in text
    assert "n/a: not run" in text  # the peer rows of a run that had none
    assert "not run with --quick" not in text


def test_the_floor_row_gives_the_consume_decode_validate_worker_against_the_bare_consumer() -> None:
    doc = quick_doc({})
    assert "Lockstep's floor" not in table(doc)  # (a quick run does not measure it)
    doc["batched"]["runs"]["worker_floor"] = run(250_000.0, 600_000.0, [0.9])
    row = next(line for line in table(doc).splitlines() if "Lockstep's floor" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "250,000 on 0.90 core = 600,000/CPU-s"
    assert cells[3] == "0.62x (one round)"  # 250k / 400k samples/s
    assert cells[4] == "0.60x (one round)"  # 600k / 1M per CPU-second


# -- the scale run (--scale N) ------------------------------------------------------------------
def scale_doc(**scale: Any) -> dict[str, Any]:
    """A ``--scale-only`` document as run_all writes it (only the scale figures)."""
    spec = {"workers": 4, "cores": 0.3, "partitions": 16, "gpus": 10_000, "load": 0.8}
    return {"commit": "abc", "started": "2026-12-01T00:00:00Z", "wall_s": 300.0,
            "machine": {"cpu": "x", "cores": 2, "python": "3.11"}, "scale": {"spec": spec, **scale}}


def test_the_scale_options_ask_for_four_budgeted_workers_on_sixteen_partitions_and_nothing_by_default() -> None:
    import argparse

    from lockstep.commands.bench import add_arguments, scale_spec

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert scale_spec(p.parse_args([])) is None
    assert scale_spec(p.parse_args(["--quick"])) is None
    spec = scale_spec(p.parse_args(["--scale", "4"]))
    assert (spec.workers, spec.cores, spec.partitions, spec.gpus) == (4, 0.3, 16, 10_000)
    only = p.parse_args(["--scale-only", "--scale-cores", "0.25"])
    assert only.scale_only and scale_spec(only).workers == 4 and scale_spec(only).cores == 0.25
    assert scale_spec(p.parse_args(["--scale", "2", "--scale-load", "0.3"])).load == 0.3


def test_the_live_rate_is_the_clusters_traffic_slowed_to_the_budget_never_faster_than_real_time() -> None:
    from benchmarks.lockbench import live_rate, natural_rate

    natural = natural_rate(10_000)
    assert natural == pytest.approx(139_629.0)  # a scrape a second: one sample per series
    rate, share = live_rate(natural, 120_000.0, 0.8)
    assert rate == pytest.approx(96_000.0) and share == pytest.approx(96_000.0 / natural, abs=1e-3)
    assert live_rate(natural, 400_000.0, 0.8) == (natural, 1.0)


def test_a_scale_only_document_renders_the_scale_rows_with_the_ratio_per_cpu_second_and_the_live_figures() -> None:
    one = run(30_000.0, 100_000.0, [0.3], broker_cores=0.2, cpu_budget=0.3)
    many = run(102_000.0, 85_000.0, [0.3, 0.3, 0.3, 0.3], broker_cores=0.5, cpu_budget=0.3)
    live = {"rate_samples_per_s": 81_600.0, "p50_s": 0.7, "p99_s": 1.4, "measured": 6, "incidents": 6,
            "per_worker_samples_per_s": [20_000.0, 21_000.0, 19_500.0, 21_100.0], "cpu_cores": [0.3, 0.29, 0.3, 0.28],
            "lag_messages": {"max": 900, "median": 120.0, "last": 0, "readings": 70}}
    text = table(scale_doc(cpu_budget=0.3, one=one, many=many, live=live, live_share_of_real_time=0.584))
    assert "(scale run only)" in text
    row = next(line for line in text.splitlines() if "4 worker processes vs 1" in line)
    # per CPU-second: what each worker's CPU-second did, 4 workers against 1 (1.0: nothing lost to scale-out)
    assert "| 3.40x (one round) | 0.85x (one round; noise: within 20% of 1) | >= 3.4x |" in row
    assert "0.3 core each" in row
    assert "81,600 samples/s (58% of the cluster's real time: 80% of what the 4 sustained)" in text
    assert "| 0.7 s / 1.4 s (6 of 6 incidents) |" in text
    assert "| 900 / 120.0 / 0; 20,000, 21,000, 19,500, 21,100 (0.30+0.29+0.30+0.28) |" in text


def test_a_scale_run_without_a_cpu_quota_says_why_and_a_full_document_gains_the_rows(tmp_path: Path) -> None:
    from lockstep.commands.bench import SCALE_BEGIN, SCALE_END, scale_rows, write_docs

    doc = scale_doc(why="no writable cgroup cpu controller under /sys/fs/cgroup")
    assert "not measured: no writable cgroup cpu controller" in scale_rows(doc)[0]
    full = quick_doc({})
    full["scale"] = doc["scale"]
    assert "not measured: no writable cgroup" in table(full)
    # a scale-only document goes between its own markers; the main table is left as it was
    page = tmp_path / "performance.md"
    page.write_text(f"<!-- bench:begin (written by `lockstep bench`) -->\nmain\n<!-- bench:end -->\n"
                    f"{SCALE_BEGIN}\nold\n{SCALE_END}\n")
    assert write_docs(doc, page)
    text = page.read_text()
    assert "\nmain\n" in text and "old" not in text and "scale run only" in text


def test_the_workers_address_and_samples_are_read_from_its_log_and_metrics() -> None:
    from benchmarks.lockbench import lag_summary, metric_total, web_address

    log = ("lockstep worker: consuming from 127.0.0.1:9092 as bench-x; API and page at http://127.0.0.1:40111/\n")
    assert web_address(log) == "http://127.0.0.1:40111"
    assert web_address("still starting\n") is None
    text = ('# TYPE lockstep_samples_in_total counter\n'
            'lockstep_samples_in_total{layer="gpu",topic="t.gpu"} 1200.0\n'
            'lockstep_samples_in_total{layer="nic",topic="t.nic"} 34.0\n'
            'lockstep_samples_in_created{layer="gpu",topic="t.gpu"} 1.7e9\n'
            'lockstep_samples_in_totally 5\n')
    assert metric_total(text, "lockstep_samples_in_total") == 1234.0
    assert lag_summary([5, 0, 300, 0]) == {"max": 300, "median": 2.5, "last": 0, "readings": 4}


def test_a_live_run_whose_alerts_all_came_too_late_says_so_instead_of_printing_nan() -> None:
    one = run(30_000.0, 100_000.0, [0.3])
    many = run(90_000.0, 90_000.0, [0.25] * 4)
    live: dict[str, Any] = {"rate_samples_per_s": 45_000.0, "p50_s": None, "p99_s": None, "measured": 0, "incidents": 6,
            "produced": {"samples_per_s": 44_000.0}, "per_worker_samples_per_s": [], "cpu_cores": [],
            "lag_messages": {"max": None, "median": None, "last": None, "readings": 0}}
    doc = scale_doc(cpu_budget=0.3, one=one, many=many, live=live, live_share_of_real_time=0.322)
    doc["scale"]["spec"]["settle_s"] = 60.0
    text = table(doc)
    assert "n/a: no alert within 60 s of the last scrape (0 of 6 incidents)" in text
    assert "the load generator sent 44,000" in text
    assert "nan" not in text


class Ticks:
    """A progress source on a clock of polls: poll ``n`` is at time ``n`` and has done ``done(n)``; with
    :meth:`patch`, the bench's watch loop polls without sleeping."""

    def __init__(self, done: Any) -> None:
        self.n = 0
        self.done = done

    async def progress(self) -> tuple[float | None, int]:
        t = float(self.n)
        self.n += 1
        return t, int(self.done(t))

    @staticmethod
    def patch(monkeypatch: pytest.MonkeyPatch) -> Any:
        import asyncio

        from benchmarks.lockbench import Bench

        real_sleep = asyncio.sleep

        async def no_wait(_: float) -> None:
            await real_sleep(0)

        monkeypatch.setattr("benchmarks.lockbench.asyncio.sleep", no_wait)
        return Bench("127.0.0.1:1", partitions=1)


def test_a_group_is_fitted_from_when_it_settled_not_over_its_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    # Four workers joining one by one: 100 samples/s while the group rebalances, 300/s once it is
    # stable with all four. The fit (and measure_s) start at the settle, so the rate is the group's
    # steady one, and the run says when it settled.
    import asyncio

    bench = Ticks.patch(monkeypatch)
    ticks = Ticks(lambda t: 100 * t if t <= 10 else 1000 + 300 * (t - 10))

    async def settled() -> bool:
        return ticks.n > 10

    total = 1000 + 300 * 40
    fitted = asyncio.run(bench.watch(Run("many", 4, total, total), ticks.progress, [], timeout_s=60, measure_s=15,
                                     settled=settled))
    assert fitted.settled_s is not None
    assert fitted.samples_per_s == pytest.approx(300.0)
    # measured for 15 s of progress after the settle, not 15 s after the first commit
    assert 25 <= ticks.n <= 30
    ticks.n = 0
    unsettled = asyncio.run(bench.watch(Run("many", 4, total, total), ticks.progress, [], timeout_s=60, measure_s=15))
    assert unsettled.settled_s is None and unsettled.samples_per_s is not None
    assert unsettled.samples_per_s < 250


def test_a_run_is_fitted_from_the_sample_another_run_began_its_window_at(monkeypatch: pytest.MonkeyPatch) -> None:
    # One worker reading the same backlog as a group before it: one stretch at 300 samples/s, then one at
    # 100/s (the backlog's small topics and its GPU messages cost a sample differently). Fitted from sample
    # 3,000 (where the group's window began), the rate is the later stretch's alone.
    import asyncio

    bench = Ticks.patch(monkeypatch)
    ticks = Ticks(lambda t: 300 * t if t <= 10 else 3000 + 100 * (t - 10))
    total = 3000 + 100 * 60
    late = asyncio.run(bench.watch(Run("one", 1, total, total), ticks.progress, [], timeout_s=200, fit_from=3000))
    assert late.samples_per_s == pytest.approx(100.0)
    assert late.fit_base_samples is not None and 3000 <= late.fit_base_samples <= 3100
    ticks.n = 0
    whole = asyncio.run(bench.watch(Run("one", 1, total, total), ticks.progress, [], timeout_s=200))
    assert whole.samples_per_s is not None and whole.samples_per_s > 105  # both stretches in one slope
    assert whole.fit_base_samples == 300
