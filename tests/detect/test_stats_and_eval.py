"""The per-job stats summariser and the ``lockstep eval`` commands (small data, real code paths)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lockstep.cli import main
from streams.stats import JobStatsSummariser, StatsConfig

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_summary_records_at_a_fixed_event_time_cadence_with_tail_percentiles() -> None:
    s = JobStatsSummariser(StatsConfig(cadence_s=60.0, windows=(60.0, 300.0)))
    rng = np.random.default_rng(0)
    recs = []
    for t in range(0, 600):
        s.add("j1", "step_time", float(t), 1.0 + rng.exponential(0.05))
        s.add("j1", "gpu_utilisation", float(t), 90.0)
        if t % 45 == 0:  # the watermark moves now and then; every boundary is emitted once
            recs += s.advance(float(t))
    recs += s.advance(600.0)
    assert [r["ts"] for r in recs] == [60.0 * k for k in range(11)]
    m = recs[-1]["metrics"]
    st = m["step_time"]["300"]
    assert st["p50"] <= st["p90"] <= st["p99"] <= st["p99.9"]
    assert 1.0 < st["p50"] < 1.1 and st["count"] == pytest.approx(300, abs=2)
    assert m["gpu_utilisation"]["60"]["p50"] == pytest.approx(90.0, rel=0.03)
    assert recs[-1]["type"] == "stats" and recs[-1]["job_id"] == "j1" and recs[-1]["interval_s"] == 60.0


def test_summariser_snapshot_round_trip() -> None:
    a = JobStatsSummariser()
    for t in range(100):
        a.add("j", "collective_time", float(t), 0.01 * (1 + t % 7))
    arrays, meta = a.snapshot()
    b = JobStatsSummariser()
    b.restore(arrays, json.loads(json.dumps(meta)))
    assert a.advance(120.0) == b.advance(120.0)


def write_nab(tmp: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    (tmp / "data" / "synthetic").mkdir(parents=True)
    rows = ["timestamp,value"]
    for i in range(1200):
        v = 10 + rng.normal(0, 0.5) + (25 if i == 900 else 0)
        rows.append(f"2015-01-{1 + i // 288:02d} {(i % 288) * 5 // 60:02d}:{(i % 288) * 5 % 60:02d}:00,{v}")
    (tmp / "data" / "synthetic" / "one.csv").write_text("\n".join(rows) + "\n")
    start, end = rows[1 + 880].split(",")[0], rows[1 + 940].split(",")[0]
    labels = tmp / "labels.json"
    labels.write_text(json.dumps({"synthetic/one.csv": [[start + ".000000", end + ".000000"]]}))
    return tmp / "data", labels


def test_eval_nab_runs_the_detector_and_finds_the_labelled_spike(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    data, labels = write_nab(tmp_path)
    assert main(["eval", "nab", str(data), str(labels), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["standard"]["score"] > 90
    assert set(doc["totals"]) == {"standard", "reward_low_FP_rate", "reward_low_FN_rate"}
    assert doc["points"] == 1200 and doc["points_per_second"] > 0
    assert doc["files"]["synthetic/one.csv"]["standard"]["tp"] >= 1


def test_eval_nab_scores_precomputed_results_in_nab_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, labels = write_nab(tmp_path)
    res = tmp_path / "results" / "synthetic"
    res.mkdir(parents=True)
    src = (data / "synthetic" / "one.csv").read_text().splitlines()
    out = ["timestamp,value,anomaly_score,label"]
    for i, line in enumerate(src[1:]):
        out.append(f"{line},{1.0 if i == 880 else 0.0},0")
    (res / "perfect_one.csv").write_text("\n".join(out) + "\n")
    assert main(["eval", "nab", str(data), str(labels), "--scores", str(tmp_path / "results"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["standard"]["score"] == pytest.approx(100.0)
    assert doc["points_per_second"] is None


def test_eval_stragglers_flags_the_slow_worker_and_not_the_steadily_different_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(2)
    lines = [",worker,gpu,time,batch_time_norm"]
    k = 0
    for it in range(1, 301):
        for w in range(6):
            v = 700 * (1.1 if w == 1 else 1.0) * (1.4 if (w == 4 and it >= 150) else 1.0) + rng.normal(0, 10)
            lines.append(f"{k},{w},50,{it},{int(v)}")
            k += 1
    f = tmp_path / "job.csv"
    f.write_text("\n".join(lines) + "\n")
    assert main(["eval", "stragglers", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["flagged"] == ["4"]
    assert 150 <= doc["per_worker"]["4"]["onset"] <= 156


@pytest.mark.skipif(not (DATA / "stragglers" / "job_2_norm.csv").exists(), reason="shared data not present")
def test_publisher_described_stragglers_on_the_alibaba_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    flagged = {}
    for job in (2, 3, 4):
        assert main(["eval", "stragglers", str(DATA / "stragglers" / f"job_{job}_norm.csv"), "--json"]) == 0
        flagged[job] = json.loads(capsys.readouterr().out)["flagged"]
    assert flagged[2] == []  # steady differences only
    assert len(flagged[3]) >= 2 and len(flagged[4]) >= 2  # several stragglers


def write_categories(tmp: Path) -> tuple[Path, Path]:
    """Three categories of two files each: a spike (or, in ``quiet``, nothing) in Gaussian noise."""
    rng = np.random.default_rng(3)
    labels: dict[str, list[list[str]]] = {}
    for cat, spike in (("alpha", 25.0), ("beta", 8.0), ("quiet", 0.0)):
        (tmp / "data" / cat).mkdir(parents=True)
        for f in range(2):
            rows = ["timestamp,value"]
            for i in range(1200):
                v = 10 + rng.normal(0, 0.5) + (spike if i == 900 + 10 * f else 0)
                rows.append(f"2015-01-{1 + i // 288:02d} {(i % 288) * 5 // 60:02d}:{(i % 288) * 5 % 60:02d}:00,{v}")
            (tmp / "data" / cat / f"f{f}.csv").write_text("\n".join(rows) + "\n")
            labels[f"{cat}/f{f}.csv"] = ([[rows[1 + 880].split(",")[0] + ".000000",
                                           rows[1 + 940].split(",")[0] + ".000000"]] if spike else [])
    (tmp / "labels.json").write_text(json.dumps(labels))
    return tmp / "data", tmp / "labels.json"


def test_eval_nab_cv_holds_each_category_out_and_tunes_only_on_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lockstep.commands.eval import NAB_TUNING_GRID

    data, labels = write_categories(tmp_path)
    assert main(["eval", "nab", str(data), str(labels), "--cv", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cats = doc["categories"]
    assert set(cats) == {"alpha", "beta", "quiet"}
    assert all(c["files"] == 2 and c["tuned_on_others"] in NAB_TUNING_GRID for c in cats.values())
    assert cats["quiet"]["held_out"]["score"] is None and cats["quiet"]["held_out"]["windows"] == 0
    assert cats["alpha"]["held_out"]["score"] > 75  # a gross spike is found whatever was tuned
    # A category scored by the configuration chosen on all is its in-sample score; the pooled held-out
    # raw score is the sum of the categories' held-out ones (one corpus, NAB's rules per file).
    for c in cats.values():
        if c["tuned_on_others"] == doc["in_sample_choice"]:
            assert c["held_out"] == c["in_sample"]
    assert doc["held_out"]["raw"] == pytest.approx(sum(c["held_out"]["raw"] for c in cats.values()))
    assert doc["in_sample"]["raw"] >= doc["untuned"]["raw"] - 1e-9
    assert main(["eval", "nab", str(data), str(labels), "--cv"]) == 0
    out = capsys.readouterr().out
    assert "held-out" in out and "overall" in out and "beta" in out


def test_eval_nab_grid_prints_the_configurations_cv_chooses_from(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from lockstep.commands.eval import NAB_TUNING_GRID

    data, labels = write_categories(tmp_path)
    assert main(["eval", "nab", str(data), str(labels), "--grid"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(NAB_TUNING_GRID) and lines[0] == "0  untuned"
    assert [json.loads(line.split("  ", 1)[1]) for line in lines[1:]] == list(NAB_TUNING_GRID[1:])
    assert {"novelty_value_weight": 0.35} in NAB_TUNING_GRID  # a weaker lone sample is a CV choice


def test_eval_nab_runs_another_scorer_on_the_output_asked_for(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--scorer hst --output score`` runs HalfSpaceTrees through the same bank (its novelty is always 0)."""
    data, labels = write_nab(tmp_path)
    assert main(["eval", "nab", str(data), str(labels), "--scorer", "hst", "--json"]) == 0
    novelty = json.loads(capsys.readouterr().out)
    assert novelty["detector"] == "lockstep (hst, novelty)"
    assert novelty["files"]["synthetic/one.csv"]["standard"]["tp"] == 0  # no novelty: nothing detected
    assert main(["eval", "nab", str(data), str(labels), "--scorer", "hst", "--output", "score", "--json"]) == 0
    score = json.loads(capsys.readouterr().out)
    assert score["detector"] == "lockstep (hst, score)" and score["points"] == 1200
    # HST's score does fire at the production threshold (here falsely: its calibration is young), where
    # its novelty cannot.
    assert score["files"]["synthetic/one.csv"]["standard@threshold"]["fp"] > 0
    assert score["totals"]["standard"]["at_threshold_raw"] < novelty["totals"]["standard"]["at_threshold_raw"]
    assert main(["eval", "nab", str(data), str(labels), "--scorer", "nope"]) == 2


def test_eval_nab_windows_lists_where_the_score_comes_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """``--windows``: each window's first detection and each row detected outside, whose worths add up to
    the file's score at the fixed threshold (the same rows NAB's sweep counts)."""
    data, labels = write_categories(tmp_path)
    assert main(["eval", "nab", str(data), str(labels), "--windows", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    windows = json.loads(labels.read_text())
    detected = 0
    for name, f in doc["files"].items():
        d = f["detections"]
        worth = sum(w["worth"] for w in d["windows"]) + sum(x["worth"] for x in d["false_positives"])
        assert worth == pytest.approx(f["standard@threshold"]["score"], abs=1e-12), name
        assert len(d["windows"]) == len(windows[name])
        assert all(x["score"] >= 0.5 for x in d["false_positives"])
        for w in d["windows"]:
            assert w["first_row"] <= w["peak_row"] <= w["last_row"]
            if w["detected"] is None:
                assert w["peak"] < 0.5 and w["worth"] == -1.0
            else:
                detected += 1
                assert w["first_row"] <= w["detected"] <= w["last_row"] and 0 < w["worth"] <= 1.0
    assert detected > 0
    assert main(["eval", "nab", str(data), str(labels), "--windows"]) == 0
    out = capsys.readouterr().out
    assert "window rows" in out and "detected at" in out
    # the shortfall table: its overall raw is the standard profile's raw score at the threshold
    overall = next(line.split() for line in out.splitlines() if line.startswith("overall "))
    assert float(overall[-1]) == pytest.approx(doc["totals"]["standard"]["at_threshold_raw"], abs=1e-3)
    assert int(overall[1]) == sum(len(v) for v in windows.values())
