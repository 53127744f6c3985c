"""``lockstep.worker.settle_heap``: the worker process's collector after start-up (in a process of its own:
it changes the collector of the process that calls it)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson

PROBE = """
import gc, sys, orjson
from lockstep.worker import settle_heap
before = gc.get_threshold()
kept = [[i] for i in range(1000)]  # alive before: frozen
done = settle_heap(int(sys.argv[1]))
frozen = gc.get_freeze_count()
cycle = []
cycle.append(cycle)  # garbage made after: still collected
del cycle
print(orjson.dumps({"done": done, "before": before, "after": gc.get_threshold(), "frozen": frozen,
                    "collected": gc.collect()}).decode())
"""


def settle(threshold: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(threshold)], capture_output=True, check=True, timeout=120)
    got: dict[str, Any] = orjson.loads(out.stdout)
    return got


def test_a_settled_worker_freezes_its_start_up_heap_and_collects_the_young_less_often() -> None:
    got = settle(10_000)
    assert got["done"] is True
    assert got["frozen"] > 1000  # the probe's own list and every module's objects
    assert got["after"] == [10_000, got["before"][1], got["before"][2]]
    assert got["collected"] >= 1  # a cycle made after the freeze is collected as before


def test_zero_leaves_the_collector_as_python_has_it() -> None:
    got = settle(0)
    assert got["done"] is False and got["frozen"] == 0 and got["after"] == got["before"]
