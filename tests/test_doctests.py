"""Docstring examples are tests: every example in the pure packages (and the CLI helpers) runs."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import models
import streams

PACKAGES = [models, streams]
EXTRA = ["lockstep.render", "lockstep.safetext", "lockstep.commands.tail", "lockstep.commands.diagnose",
         "lockstep.commands.capacity",
         "lockstep.commands.schema",
         "lockstep.run", "lockstep.simulate", "lockstep.replay", "lockstep.broker", "lockstep.logs",
         "agents.app", "agents.batching", "agents.deadletters", "agents.ingest", "agents.recovery", "agents.runtime",
         "agents.snapshots", "agents.remote_write", "agents.offsets",
         "agents.carriers", "agents.gaps", "agents.stalls", "agents.topics", "agents.transport",
         "lockstep.commands.bench", "benchmarks.lockbench", "benchmarks.cpulimit", "benchmarks.ablated_worker",
         "benchmarks.soak", "benchmarks.chaos"]


def modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + "."):
            names.append(info.name)
    return sorted(names) + EXTRA


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
