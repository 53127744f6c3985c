"""``lockstep eval``: measure the detectors on public labelled data (pure Python, no broker).

- ``lockstep eval nab DATA_DIR LABELS.json [--json]``: run Lockstep's detector (the same
  :class:`streams.detect.DetectorBank` the agents run, all files as series of one bank, one sample
  per series per call) over NAB-format CSVs and score it by NAB's rules (:mod:`streams.nab`): the
  three profiles at NAB's swept threshold and at Lockstep's production threshold, per file and total,
  and points scored per second.
- ``lockstep eval nab DATA_DIR LABELS.json --cv``: leave-one-category-out cross-validation. Each
  configuration of :data:`NAB_TUNING_GRID` is run once; for every category, the configuration scoring
  best on the *other* categories (standard profile, at the production threshold) scores the held-out
  one. Prints per category and overall the held-out score next to the in-sample score (the
  configuration chosen on every category, the way a developer tunes on what they see).
- ``--grid`` prints the configurations ``--cv`` chooses from, one a line (the first is the untuned one).
- ``--scorer NAME`` runs another per-series scorer of :data:`streams.detect.SCORERS` (``hst``) and
  ``--output score`` scores the per-row ``score`` instead of ``novelty`` (HalfSpaceTrees has no novelty).
- ``--windows`` adds, per file, where its score at the fixed threshold comes from (standard profile):
  each labelled window's first detection (row, worth) or its highest score if missed, and every row
  detected outside the windows (row, score, cost) (:func:`streams.nab.detections`), and per category
  and overall where the points short of perfect go: missed windows, lateness, false-positive rows
  (:func:`streams.nab.losses`).
- ``lockstep eval nab DATA_DIR LABELS.json --scores RESULTS_DIR``: score precomputed outputs in NAB's
  results layout (``RESULTS_DIR/<category>/<detector>_<file>.csv`` with an ``anomaly_score`` column)
  instead of running the detector.
- ``lockstep eval stragglers FILE.csv [--json]``: per-worker mini-batch times (Alibaba PAI format:
  ``,worker,gpu,time,batch_time_norm``) through :class:`streams.peers.PeerComparator` (the class the
  streaming path runs); prints per worker its onset iteration and its episodes (onset, confirmed,
  end, reason).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import defaultdict
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="measure the detectors on labelled public data (NAB, stragglers)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ev = p.add_subparsers(dest="eval_command", metavar="BENCHMARK")
    n = ev.add_parser("nab", help="NAB scores (standard, reward_low_FP_rate, reward_low_FN_rate)")
    n.add_argument("data_dir", type=Path, help="NAB data directory: <category>/<file>.csv")
    n.add_argument("labels", type=Path, help="NAB combined_windows.json")
    n.add_argument("--scores", type=Path, default=None, metavar="RESULTS_DIR",
                   help="score precomputed results (<category>/<detector>_<file>.csv) instead of running")
    n.add_argument("--detector", default=None, help="with --scores: the detector name in the file names")
    n.add_argument("--threshold", type=float, default=None,
                   help="the fixed threshold to report besides the swept one (default: Lockstep's production one)")
    n.add_argument("--cv", action="store_true",
                   help="leave-one-category-out cross-validation: held-out score per category next to in-sample")
    n.add_argument("--grid", action="store_true",
                   help="print the configurations --cv may choose from (NAB_TUNING_GRID) and exit")
    n.add_argument("--scorer", default=None, metavar="NAME",
                   help="the per-series scorer to run (streams.detect.SCORERS; default: the production one)")
    n.add_argument("--output", choices=("novelty", "score"), default="novelty",
                   help="which per-row output NAB scores (default novelty; HalfSpaceTrees has only score)")
    n.add_argument("--windows", action="store_true",
                   help="per file, at the fixed threshold (standard profile): each window's first detection "
                        "and highest score, and the rows detected outside every window")
    n.add_argument("--json", action="store_true", help="one JSON object: totals and per-file results")
    n.set_defaults(handler=run_nab)
    s = ev.add_parser("stragglers", help="per-worker straggler flags on a job's mini-batch times")
    s.add_argument("file", type=Path, help="CSV with columns worker, time (iteration), batch_time_norm")
    s.add_argument("--json", action="store_true", help="one JSON object: totals and per-worker results")
    s.set_defaults(handler=run_stragglers)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


# -- NAB ------------------------------------------------------------------------------------------
#: The detector configuration evaluated on NAB: the production defaults, except that NAB's series
#: have no catalogue entry (both directions are bad) and no operational "too small to matter" floor.
def nab_detector_config() -> Any:
    from streams.detect import DetectorConfig

    return replace(DetectorConfig(), window=100, min_samples=150, min_relative_change=0.0)


#: What ``--cv`` may tune: overrides of :func:`nab_detector_config` (the first is the untuned one, and
#: wins ties). Small on purpose: each point is one full run of the corpus, and a grid large enough to
#: fit each category would be the per-category constant the cross-validation is there to expose.
#: ``novelty_value_weight``: how much a lone sample beyond its remembered range counts against a mean
#: beyond its range (1 in the untuned configuration); chosen, like the rest, on the training categories only.
#: ``slot_scale``: the robust scorer's scale per time-of-day slot (off in the untuned configuration, as in
#: production).
NAB_TUNING_GRID: tuple[dict[str, Any], ...] = (
    {},
    {"window": 50},
    {"window": 200},
    {"min_samples": 300},
    {"novelty_value_weight": 0.35},
    {"novelty_value_weight": 0.5},
    {"slot_scale": True},
    {"slot_scale": True, "novelty_value_weight": 0.35},
    {"slot_scale": True, "novelty_value_weight": 0.5},
)


def _parse_ts(text: str) -> int:
    """NAB timestamps (``YYYY-MM-DD HH:MM:SS[.ffffff]``, UTC) to integer microseconds."""
    dt = datetime.fromisoformat(text.strip()).replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


def read_nab_csv(path: Path, column: str = "value") -> tuple[list[int], np.ndarray]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "timestamp" not in reader.fieldnames or column not in reader.fieldnames:
            raise ValueError(f"{path}: needs columns timestamp and {column}")
        ts, vals = [], []
        for row in reader:
            ts.append(_parse_ts(row["timestamp"]))
            vals.append(float(row[column]))
    return ts, np.asarray(vals, dtype=np.float64)


def run_detector(series: list[tuple[list[int], np.ndarray]], overrides: dict[str, Any] | None = None,
                 output: str = "novelty") -> tuple[list[np.ndarray], float]:
    """Lockstep's detector over every series at once; returns the scores (``output``: the ``novelty``
    or the ``score`` of :attr:`streams.detect.DetectorBank.last_scores`) and points/second.

    ``overrides`` replace fields of :func:`nab_detector_config` (the tuning grid of ``--cv``; ``scorer``
    picks the per-series scorer).
    """
    from streams.catalogue import Direction, Mode
    from streams.detect import DetectorBank

    bank = DetectorBank(replace(nab_detector_config(), **(overrides or {})))
    for sid in range(len(series)):
        bank.register(sid, Mode.LEVEL, Direction.BOTH)
    lengths = np.array([len(v) for _, v in series])
    ts_all = [np.asarray(t, dtype=np.float64) / 1e6 for t, _ in series]
    out = [np.zeros(n) for n in lengths]
    longest = int(lengths.max()) if lengths.size else 0
    points = 0
    t0 = time.perf_counter()
    for k in range(longest):
        ids = np.flatnonzero(lengths > k)
        ts = np.fromiter((ts_all[i][k] for i in ids), dtype=np.float64, count=ids.size)
        x = np.fromiter((series[i][1][k] for i in ids), dtype=np.float64, count=ids.size)
        bank.update(ids, ts, x)
        nov = getattr(bank.last_scores, output)
        for j, i in enumerate(ids):
            out[i][k] = nov[j]
        points += ids.size
    elapsed = time.perf_counter() - t0
    return out, points / elapsed if elapsed > 0 else float("inf")


def _find_result(results: Path, rel: str, detector: str | None) -> Path:
    category, name = rel.split("/", 1)
    if detector:
        path = results / category / f"{detector}_{name}"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no results for {rel}")
        return path
    found = sorted((results / category).glob(f"*_{name}"))
    if len(found) != 1:
        raise FileNotFoundError(f"{results / category}: expected one *_{name}, found {len(found)} (use --detector)")
    return found[0]


def run_nab(args: argparse.Namespace) -> int:
    from streams.nab import FileInput, score_corpus

    if args.grid:
        for k, overrides in enumerate(NAB_TUNING_GRID):
            print(f"{k}  {json.dumps(overrides) if overrides else 'untuned'}")
        return 0
    labels: dict[str, list[list[str]]] = json.loads(args.labels.read_text())
    rels = sorted(str(p.relative_to(args.data_dir)).replace("\\", "/") for p in args.data_dir.glob("*/*.csv"))
    missing = [r for r in rels if r not in labels]
    if missing:
        print(f"lockstep eval nab: no labels for {missing[0]} (and {len(missing) - 1} more)", file=sys.stderr)
        return 2
    series = [read_nab_csv(args.data_dir / r) for r in rels]
    threshold = args.threshold if args.threshold is not None else nab_detector_config().score_threshold
    from streams.detect import SCORERS

    if args.scorer is not None and args.scorer not in SCORERS:
        print(f"lockstep eval nab: unknown scorer {args.scorer!r}: one of {', '.join(sorted(SCORERS))}",
              file=sys.stderr)
        return 2
    chosen = {} if args.scorer is None else {"scorer": args.scorer}
    if args.cv:
        if args.scores is not None:
            print("lockstep eval nab: --cv runs the detector; it cannot score precomputed results", file=sys.stderr)
            return 2
        windows = [[(_parse_ts(a), _parse_ts(b)) for a, b in labels[r]] for r in rels]
        cv = cross_validate(rels, series, windows, threshold, chosen, args.output)
        if args.json:
            print(json.dumps(cv, indent=2))
        else:
            print_cv(cv)
        return 0
    rate: float | None = None
    if args.scores is not None:
        scores = []
        for r, (ts, _) in zip(rels, series, strict=True):
            rts, s = read_nab_csv(_find_result(args.scores, r, args.detector), "anomaly_score")
            if rts != ts:
                print(f"lockstep eval nab: {r}: results rows differ from the data rows", file=sys.stderr)
                return 2
            scores.append(s)
        source = str(args.scores)
    else:
        scores, rate = run_detector(series, chosen, args.output)
        plain = not chosen and args.output == "novelty"
        source = "lockstep" if plain else f"lockstep ({args.scorer or 'robust'}, {args.output})"
    files = [FileInput(r, ts, [(_parse_ts(a), _parse_ts(b)) for a, b in labels[r]], s)
             for r, (ts, _), s in zip(rels, series, scores, strict=True)]
    results = score_corpus(files, fixed_threshold=threshold)
    doc = _nab_document(results, source, rate, sum(len(v) for _, v in series))
    found = _detections(files, threshold) if args.windows else {}
    for name, d in found.items():
        doc["files"][name]["detections"] = {
            "windows": [asdict(w) for w in d.windows],
            "false_positives": [{"row": r, "score": s, "worth": w} for r, s, w in d.false_positives]}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    std = results["standard"]
    print(f"{'file':58s} {'standard':>9s} {'tp':>4s} {'fp':>4s} {'fn':>4s}   at {threshold:g}")
    for name, row in std.per_file.items():
        fixed = std.at_threshold_per_file[name] if std.at_threshold_per_file else row
        print(f"{name:58s} {row.score:9.3f} {row.tp:4d} {row.fp:4d} {row.fn:4d}   {fixed.score:8.3f}")
    for name, d in found.items():
        if not d.windows and not d.false_positives:
            continue
        print(f"\n{name}")
        for w in d.windows:
            what = (f"detected at {w.detected} ({w.worth:+.3f})" if w.detected is not None
                    else f"missed ({w.worth:+.3f}), highest {w.peak:.3f} at {w.peak_row}")
            print(f"  window rows {w.first_row}-{w.last_row}: {what}")
        if d.false_positives:
            print("  outside the windows: " + ", ".join(f"{r} ({s:.2f}, {w:+.3f})" for r, s, w in d.false_positives))
    if found:
        _print_losses(found)
    print()
    for name, res in results.items():
        print(f"{name:20s} {res.normalised:7.2f}  (raw {res.raw:.3f}, threshold {res.threshold:.6g}; "
              f"at {threshold:g}: {res.at_threshold_normalised:.2f})")
    if rate is not None:
        print(f"points scored per second: {rate:,.0f}")
    return 0


def _print_losses(found: dict[str, Any]) -> None:
    """Per category and overall, where the score at the fixed threshold falls short of perfect."""
    from streams.nab import PROFILES, Losses, losses

    cost = PROFILES["standard"]
    by_cat: dict[str, Losses] = {}
    for name, d in found.items():
        cat = name.split("/", 1)[0]
        by_cat[cat] = by_cat.get(cat, Losses()) + losses(d, cost)
    by_cat["overall"] = sum(by_cat.values(), Losses())
    print(f"\n{'short of perfect (standard)':28s} {'windows':>7s} {'missed':>6s} {'miss cost':>9s} {'lateness':>8s} "
          f"{'FP rows':>7s} {'FP cost':>7s} {'raw':>8s}")
    for cat, lo in by_cat.items():
        print(f"{cat:28s} {lo.windows:7d} {lo.missed:6d} {lo.miss_cost:9.3f} {lo.late:8.3f} {lo.fp_rows:7d} "
              f"{lo.fp_cost:7.3f} {lo.raw:8.3f}")


def _detections(files: list[Any], threshold: float) -> dict[str, Any]:
    """Per file, :func:`streams.nab.detections` at ``threshold`` under the standard profile."""
    from streams.nab import PROFILES, detections, window_geometry

    return {f.name: detections(window_geometry(f.timestamps, f.windows), f.scores, threshold, PROFILES["standard"])
            for f in files}


def _standard_at(files: list[Any], threshold: float) -> dict[str, Any]:
    """The standard profile at ``threshold`` over ``files``: normalised (None without any window), raw,
    the rows detected outside every window (``fp``) and the labelled windows."""
    from streams.nab import PROFILES, score_corpus

    res = score_corpus(files, profiles={"standard": PROFILES["standard"]}, fixed_threshold=threshold)["standard"]
    rows = (res.at_threshold_per_file or {}).values()
    return {"score": res.at_threshold_normalised if res.perfect else None, "raw": res.at_threshold_raw,
            "fp": sum(r.fp for r in rows), "windows": int(res.perfect)}


def cross_validate(rels: list[str], series: list[tuple[list[int], np.ndarray]],
                   windows: list[list[tuple[int, int]]], threshold: float, base: dict[str, Any] | None = None,
                   output: str = "novelty") -> dict[str, Any]:
    """Leave-one-category-out cross-validation of :data:`NAB_TUNING_GRID` (module docstring), each grid
    point on top of ``base`` (e.g. ``{"scorer": "hst"}``), scoring ``output``.

    A category's held-out score comes from the grid point chosen without it; the overall held-out
    score pools every file's held-out scores and scores the corpus once. The in-sample score is the
    grid point best on the whole corpus. Categories without labelled windows have no normalised score
    (NAB's normalisation divides by their windows): their raw score (false positives only) counts.
    """
    from streams.nab import FileInput

    runs = [run_detector(series, {**(base or {}), **o}, output)[0] for o in NAB_TUNING_GRID]
    category = [r.split("/", 1)[0] for r in rels]
    cats = sorted(set(category))

    def files(g: int, keep: set[str]) -> list[Any]:
        return [FileInput(r, ts, w, s) for r, (ts, _), w, s, c in zip(rels, series, windows, runs[g], category,
                                                                       strict=True) if c in keep]

    def best(keep: set[str]) -> int:
        raws = [_standard_at(files(g, keep), threshold)["raw"] for g in range(len(runs))]
        return int(np.argmax(raws))  # raw, not normalised: comparable however many windows are kept

    every = set(cats)
    chosen_all = best(every)
    pooled: list[Any] = []
    per_cat: dict[str, Any] = {}
    for c in cats:
        g = best(every - {c}) if len(cats) > 1 else chosen_all
        held = files(g, {c})
        pooled += held
        per_cat[c] = {"files": len(held), "in_sample": _standard_at(files(chosen_all, {c}), threshold),
                      "held_out": _standard_at(held, threshold), "tuned_on_others": NAB_TUNING_GRID[g]}
    untuned = _standard_at(files(0, every), threshold)
    return {"benchmark": "nab-cv", "profile": "standard", "threshold": threshold, "grid": list(NAB_TUNING_GRID),
            "in_sample_choice": NAB_TUNING_GRID[chosen_all], "untuned": untuned,
            "in_sample": _standard_at(files(chosen_all, every), threshold),
            "held_out": _standard_at(pooled, threshold), "categories": per_cat}


def print_cv(cv: dict[str, Any]) -> None:
    def fig(r: dict[str, Any]) -> str:
        s = "n/a" if r["score"] is None else f"{r['score']:.2f}"
        return f"{s:>7s} (raw {r['raw']:7.3f}, {r['fp']:3d} fp rows)"

    print(f"leave-one-category-out, NAB standard profile at threshold {cv['threshold']:g}")
    print(f"{'category':24s} {'files':>5s}  {'in-sample':>30s}  {'held-out':>30s}  tuned on the others")
    for c, r in cv["categories"].items():
        print(f"{c:24s} {r['files']:5d}  {fig(r['in_sample']):>30s}  {fig(r['held_out']):>30s}  "
              f"{r['tuned_on_others'] or 'untuned'}")
    print(f"{'overall':24s} {sum(r['files'] for r in cv['categories'].values()):5d}  {fig(cv['in_sample']):>30s}  "
          f"{fig(cv['held_out']):>30s}")
    print(f"in-sample choice: {cv['in_sample_choice'] or 'untuned'}; untuned: {fig(cv['untuned'])}")


def _nab_document(results: dict[str, Any], source: str, rate: float | None, points: int) -> dict[str, Any]:
    def row(r: Any) -> dict[str, Any]:
        return {"score": r.score, "tp": r.tp, "tn": r.tn, "fp": r.fp, "fn": r.fn, "threshold": r.threshold}

    totals = {}
    per_file: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, res in results.items():
        totals[name] = {"score": res.normalised, "raw": res.raw, "threshold": res.threshold, "null": res.null,
                        "perfect": res.perfect, "at_threshold": res.at_threshold,
                        "at_threshold_score": res.at_threshold_normalised, "at_threshold_raw": res.at_threshold_raw}
        for f, r in res.per_file.items():
            per_file[f][name] = row(r)
            if res.at_threshold_per_file:
                per_file[f][f"{name}@threshold"] = row(res.at_threshold_per_file[f])
    return {"benchmark": "nab", "detector": source, "points": points, "points_per_second": rate,
            "totals": totals, "files": per_file}


# -- stragglers -----------------------------------------------------------------------------------
def read_steps(path: Path) -> dict[float, dict[str, float]]:
    """Per iteration, each worker's mini-batch time."""
    steps: dict[float, dict[str, float]] = defaultdict(dict)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        names = reader.fieldnames or []
        for col in ("worker", "time", "batch_time_norm"):
            if col not in names:
                raise ValueError(f"{path}: missing column {col}")
        for r in reader:
            steps[float(r["time"])][r["worker"]] = float(r["batch_time_norm"])
    return dict(sorted(steps.items()))


def evaluate_stragglers(steps: dict[float, dict[str, float]]) -> dict[str, Any]:
    from streams.peers import PeerComparator

    pc = PeerComparator()
    episodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    workers: set[str] = set()
    for step, vals in steps.items():
        names = sorted(vals, key=lambda w: (len(w), w))
        workers.update(names)
        for tr in pc.update("job", step, names, [vals[w] for w in names]):
            if tr.phase == "start":
                episodes[tr.worker].append({"onset": tr.onset_step, "confirmed": tr.step, "end": None,
                                            "reason": tr.reason, "ratio": round(tr.ratio, 3),
                                            "usual": round(tr.usual, 3)})
            elif episodes[tr.worker]:
                episodes[tr.worker][-1]["end"] = tr.step
    per_worker = {}
    for w in sorted(workers, key=lambda w: (len(w), w)):
        eps = episodes.get(w, [])
        onset = eps[0]["onset"] if eps else None
        per_worker[w] = {"flagged": bool(eps), "onset": onset, "from_iteration": onset, "episodes": eps}
    flagged = [w for w, r in per_worker.items() if r["flagged"]]
    return {"benchmark": "stragglers", "iterations": len(steps), "workers": len(per_worker),
            "flagged": flagged, "per_worker": per_worker}


def run_stragglers(args: argparse.Namespace) -> int:
    try:
        steps = read_steps(args.file)
    except (OSError, ValueError) as exc:
        print(f"lockstep eval stragglers: {exc}", file=sys.stderr)
        return 2
    doc = evaluate_stragglers(steps)
    doc["file"] = str(args.file)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{args.file}: {doc['iterations']} iterations, {doc['workers']} workers, "
          f"{len(doc['flagged'])} flagged")
    for w, r in doc["per_worker"].items():
        if r["flagged"]:
            spans = ", ".join(f"{e['onset']:g}-{'' if e['end'] is None else format(e['end'], 'g')} ({e['reason']})"
                              for e in r["episodes"])
            print(f"  worker {w:>4s}: straggler, onset iteration {r['onset']:g}; episodes [{spans}]")
        else:
            print(f"  worker {w:>4s}: not flagged")
    return 0
