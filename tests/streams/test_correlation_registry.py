"""The correlation rules as modules: each is registered once, owns its snapshot keys, and a new rule
needs nothing but its module and its registration (shown here with a rule defined in this test)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from test_correlation_rules import CFG, T, inventory, records

import streams.correlation.rules as rules_package
from models.alerts import Domain
from streams.correlate import Correlator
from streams.correlation.domains import DOMAIN_RULES, Facts, domain_of
from streams.correlation.registry import RULES
from streams.correlation.rule import BaseRule, RuleContext
from streams.correlation.timeline import Episode, JobTimeline, episode_key

OWN_KEYS = {"origin_wm", "eos", "watermark", "finished", "max_event_ts", "late_count", "clock_offsets", "open_alerts",
            "jobs"}
OWN_JOB_KEYS = {"episodes", "fired"}


def test_every_rule_module_is_registered_once() -> None:
    registered = set(RULES)
    for info in pkgutil.iter_modules(rules_package.__path__):
        module = importlib.import_module(f"{rules_package.__name__}.{info.name}")
        classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
                   if issubclass(c, BaseRule) and c is not BaseRule and c.__module__ == module.__name__]
        assert len(classes) == 1, info.name
        assert classes[0] in registered, f"{info.name} is not in streams/correlation/registry.py RULES"
    assert len(RULES) == len(registered) == len(list(pkgutil.iter_modules(rules_package.__path__)))


def test_each_rule_writes_exactly_its_own_snapshot_keys() -> None:
    corr = Correlator(CFG, inventory(), {"o"})
    for rec in records("step n1 step_time_seconds step_time | ....XXXX...."):
        corr.on_record(rec, 0.0)
    snap, job = corr.snapshot(), corr.jobs["j"]
    seen_keys, seen_job_keys = set(OWN_KEYS), set(OWN_JOB_KEYS)
    for rule in corr.correlation_rules:
        assert set(rule.snapshot()) == set(rule.keys) and not seen_keys & set(rule.keys), rule.name
        assert set(rule.snapshot_job(job)) == set(rule.job_keys) and not seen_job_keys & set(rule.job_keys), rule.name
        seen_keys |= set(rule.keys)
        seen_job_keys |= set(rule.job_keys)
    assert set(snap) == seen_keys and set(snap["jobs"]["j"]) == seen_job_keys


@dataclass
class _Seen:
    first: float | None = None


class LongSymptomRule(BaseRule):
    """A rule a newcomer might add: note when each job first had a symptom episode open for 10 s."""

    name = "long_symptom"
    job_keys: ClassVar[tuple[str, ...]] = ("long_symptom_at",)

    def evaluate(self, job: JobTimeline, horizon: float, ctx: RuleContext) -> None:
        seen = job.state(self.name, _Seen)
        if seen.first is None and any(e.role == "symptom" and min(e.end_ts or horizon, horizon) - e.ts >= 10
                                      for e in job.all_episodes()):
            seen.first = horizon

    def snapshot_job(self, job: JobTimeline) -> dict[str, Any]:
        held = job.rule_state.get(self.name)
        return {"long_symptom_at": held.first if isinstance(held, _Seen) else None}

    def restore_job(self, job: JobTimeline, data: dict[str, Any]) -> None:
        job.state(self.name, _Seen).first = data.get("long_symptom_at")


def play(corr: Correlator, diagram: str) -> list[dict[str, Any]]:
    alerts = []
    for rec in records(diagram):
        alerts += corr.on_record(rec, 0.0).alerts
        alerts += corr.on_record({"type": "watermark", "origins": {"o": rec["confirmed_ts"]}}, 0.0).alerts
    return alerts + corr.on_record({"type": "watermark", "origins": {"o": T + 30}}, 0.0).alerts


def test_a_new_rule_is_a_class_and_a_registration() -> None:
    diagram = """
        switch leaf1 SymbolErrorCounter link_errors port=12 | .....XXXXXXXXXXXXXXX.....
        step   n1    step_time_seconds  step_time           | .........XXXXXXXXXXX.....
    """
    corr = Correlator(CFG, inventory(), {"o"}, registry=(*RULES, LongSymptomRule))
    alerts = play(corr, diagram)
    assert [a["type"] for a in alerts] == ["job_slowdown", "job_slowdown"]
    assert alerts == play(Correlator(CFG, inventory(), {"o"}), diagram)  # the existing rules are not disturbed
    snap = corr.snapshot()
    assert snap["jobs"]["j"]["long_symptom_at"] == T + 20  # the first watermark with 10 s of symptom
    copy = Correlator(CFG, corr.inventory, {"o"}, registry=(*RULES, LongSymptomRule))
    copy.restore(snap, 0.0)
    assert copy.snapshot()["jobs"]["j"]["long_symptom_at"] == T + 20


def _episode(layer: str, source: str, meaning: str, ts: float = T, **labels: str) -> Episode:
    rec = {"layer": layer, "source": source, "metric": f"{layer}_{meaning}", "meaning": meaning, "labels": labels,
           "ts": ts, "role": "cause"}
    return Episode(episode_key(rec), rec)


SWITCH = _episode("switch", "leaf1", "link_errors", port="12")
STOR_SWITCH = _episode("switch", "stor1", "drops", port="3")
POOL = _episode("storage", "lustre", "latency")
HOST = _episode("host", "n2", "utilisation")
XID = _episode("gpu", "n4", "gpu_fault", gpu="3")
NCCL = _episode("nccl", "n1", "latency")


@pytest.mark.parametrize(("first", "others", "domain", "row"), [
    (None, [], Domain.UNKNOWN, "nothing moved first"),
    (STOR_SWITCH, [POOL], Domain.NETWORK, "storage via network: a switch on the pool's path first"),
    (SWITCH, [POOL], Domain.NETWORK, "network"),
    (POOL, [STOR_SWITCH], Domain.NETWORK, "storage via network: the pool first, its path erring"),
    (POOL, [SWITCH], Domain.STORAGE, "storage"),
    (XID, [NCCL], Domain.COMPUTE, "compute: a GPU fault"),
    (HOST, [SWITCH], Domain.UNKNOWN, "data preparation, but network or storage moved too"),
    (HOST, [NCCL], Domain.DATALOADER, "dataloader"),
    (NCCL, [], Domain.UNKNOWN, "otherwise"),
])
def test_the_domain_table_first_matching_row_decides(first: Episode | None, others: list[Episode], domain: Domain,
                                                      row: str) -> None:
    facts = Facts(first, [*([first] if first else []), *others], inventory(), "j", T)
    assert domain_of(facts)[0] == domain
    assert next(r.name for r in DOMAIN_RULES if r.when(facts)) == row
