"""Shared fixtures. Broker fixtures start the real embedded Tansu broker (never a mock).

Also the order of the suite under pytest-xdist (``--dist loadscope``, what ``python3 dev.py test``
runs): work units longest first (:data:`MODULE_SECONDS`), the web modules that share the
seed-incident worker in one unit (:data:`SHARED_SCOPES`, so it is built on one xdist worker only),
and a few long modules of independent tests split test by test (:data:`SPLIT_MODULES`) so both xdist
workers share them. Only the order and the placement change: every test runs, the tests of a unit in
their own order on one xdist worker, with its module fixtures.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

#: Wall seconds of the long modules, set-up and teardown included (the sum of their tests' phases in a
#: whole-suite run with ``-n 2`` on the 2-core machine, at load 5-9 beside other work, 2026-12-02).
#: They only order the work units: a stale or missing figure makes the run less well balanced, never a
#: result different. Modules not listed count :data:`BROKER_MODULE_SECONDS` if marked ``broker``, else
#: :data:`SECONDS_PER_TEST` a test.
MODULE_SECONDS: dict[str, float] = {
    "tests/streams/test_scenarios_local.py": 370.0,
    "tests/integration/test_scenarios_broker.py": 320.0,
    "tests/web/test_web_api.py": 221.0,
    "tests/web/test_web_browser.py": 6.0,
    "tests/web/test_web_fleet.py": 5.0,
    "tests/web/test_web_fabric_page.py": 4.0,
    "tests/web/test_web_capacity.py": 3.0,
    "tests/web/test_web_openapi.py": 3.0,
    "tests/web/test_web_fabric_health.py": 3.0,
    "tests/streams/test_fabric_publish.py": 125.0,
    "tests/cli/test_demo_clock.py": 107.0,
    "tests/detect/test_seasonality.py": 80.0,
    "tests/detect/test_stats_and_eval.py": 66.0,
    "tests/detect/test_confirm.py": 48.0,
    "tests/deploy/test_prometheus_rules.py": 27.0,
    "tests/detect/test_contract.py": 25.0,
    "tests/deploy/test_kafka_security.py": 22.0,
    "tests/delivery/test_receiver_registry.py": 18.0,
    "tests/streams/test_pipeline.py": 15.0,
    "tests/integration/test_lifecycle_broker.py": 324.0,
    "tests/faults/test_worker_faults.py": 188.0,
    "tests/integration/test_carriers.py": 160.0,
    "tests/faults/test_catch_up_snapshots.py": 87.0,
    "tests/integration/test_kafka_clients.py": 71.0,
    "tests/faults/test_lull.py": 70.0,
    "tests/faults/test_broker_restart.py": 65.0,
    "tests/faults/test_read_load.py": 60.0,
    "tests/faults/test_broker_loss.py": 51.0,
    "tests/faults/test_poison.py": 48.0,
    "tests/integration/test_gaps.py": 44.0,
    "tests/faults/test_cardinality.py": 38.0,
    "tests/faults/test_delivery_trust.py": 29.0,
    "tests/integration/test_alertmanager_input.py": 25.0,
    "tests/faults/test_bad_input.py": 20.0,
    "tests/delivery/test_delivery_broker.py": 20.0,
    "tests/integration/test_batching.py": 17.0,
    "tests/detect/test_peers.py": 11.0,
    "tests/streams/test_series_cap.py": 11.0,
    "tests/formats/test_contract_and_bad_input.py": 11.0,
}
#: The same per test, for the long tests of the split modules (all parameters of a function alike).
TEST_SECONDS: dict[str, float] = {
    "tests/streams/test_scenarios_local.py::test_healthy_cluster_raises_no_alert": 100.0,
    "tests/streams/test_scenarios_local.py::test_seed_incident_gives_one_network_alert_naming_the_switch_port": 57.0,
    "tests/streams/test_scenarios_local.py::test_jobs_starting_and_ending_raise_no_alert": 32.0,
    "tests/streams/test_scenarios_local.py::test_two_jobs_checkpointing_together_raise_one_contention_alert_with_advice":
        25.0,
    "tests/streams/test_scenarios_local.py::test_job_wide_slowdowns_raise_no_straggler": 19.0,
    "tests/streams/test_scenarios_local.py::test_each_fault_scenario_names_its_domain_and_first_mover": 17.0,
    "tests/integration/test_scenarios_broker.py::test_straggler_through_the_broker": 71.0,
    "tests/integration/test_scenarios_broker.py::test_fault_scenario_through_the_broker": 62.0,
    "tests/integration/test_scenarios_broker.py::test_checkpoint_contention_through_the_broker": 40.0,
    "tests/integration/test_scenarios_broker.py::test_clock_skew_through_the_broker": 40.0,
    "tests/cli/test_demo_clock.py::test_no_event_time_is_sent_ahead_of_the_wall_clock": 9.0,
    "tests/integration/test_carriers.py::test_a_seed_replay_mixing_real_formats_and_native_samples_gives_the_native_alert":
        150.0,
    "tests/integration/test_lifecycle_broker.py::test_a_busy_cluster_with_job_churn_raises_nothing_through_the_broker":
        141.0,
    "tests/integration/test_lifecycle_broker.py::test_a_stalled_job_through_the_broker": 104.0,
    "tests/integration/test_lifecycle_broker.py::test_a_healthy_cluster_with_jobs_starting_and_ending_raises_nothing":
        79.0,
    "tests/streams/test_fabric_publish.py::test_the_report_from_published_summaries_is_the_raw_folds": 48.0,
    "tests/streams/test_fabric_publish.py::test_a_restored_partition_publishing_again_adds_nothing_twice": 28.0,
    "tests/streams/test_fabric_publish.py::test_the_load_generators_cluster_gives_the_same_report": 18.0,
    "tests/streams/test_fabric_publish.py::test_a_read_model_starting_late_counts_only_what_it_read": 11.0,
}
BROKER_MODULE_SECONDS = 40.0
SECONDS_PER_TEST = 0.05

#: Modules that use one session fixture worth a minute or more (``seed_worker``, tests/web/conftest.py):
#: one work unit, so that fixture is built on one xdist worker only.
SHARED_SCOPES: dict[str, str] = {m: "seed-worker" for m in (
    "tests/web/test_web_api.py", "tests/web/test_web_browser.py", "tests/web/test_web_capacity.py",
    "tests/web/test_web_fabric_health.py", "tests/web/test_web_fabric_page.py", "tests/web/test_web_fleet.py",
    "tests/web/test_web_openapi.py")}

#: Long modules whose tests are independent: each test (each parameter) is a work unit of its own,
#: except the tests named together (they share a module fixture), which stay one unit.
SPLIT_MODULES: dict[str, tuple[tuple[str, ...], ...]] = {
    "tests/streams/test_scenarios_local.py": (
        ("test_seed_incident_gives_one_network_alert_naming_the_switch_port",
         "test_seed_incident_timeline_runs_switch_nccl_gpu_step",
         "test_seed_incident_resolves_once_with_the_same_identity"),),
    "tests/integration/test_scenarios_broker.py": (),
    "tests/cli/test_demo_clock.py": (),
    "tests/integration/test_carriers.py": (),
    "tests/integration/test_lifecycle_broker.py": (),
    "tests/streams/test_fabric_publish.py": (
        ("test_the_report_from_published_summaries_is_the_raw_folds",
         "test_a_restored_partition_publishing_again_adds_nothing_twice"),),
}


def scope_of(nodeid: str) -> str:
    """The xdist work unit of a test: its module, its module's group (:data:`SHARED_SCOPES`), or in a
    split module (:data:`SPLIT_MODULES`) the test itself or the first test of its group."""
    module, _, rest = nodeid.partition("::")
    if module in SPLIT_MODULES:
        function = rest.split("::")[-1].split("[", 1)[0]
        for together in SPLIT_MODULES[module]:
            if function in together:
                return f"{module}::{together[0]}"
        return nodeid
    return SHARED_SCOPES.get(module, module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _longest_first(items)
    if os.environ.get("LOCKSTEP_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow variant: set LOCKSTEP_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _module_seconds(items: list[pytest.Item]) -> dict[str, tuple[float, int]]:
    """Per module: its estimated seconds and its number of tests."""
    counts: dict[str, int] = {}
    broker: set[str] = set()
    for item in items:
        module = item.nodeid.partition("::")[0]
        counts[module] = counts.get(module, 0) + 1
        if item.get_closest_marker("broker") is not None:
            broker.add(module)
    return {m: (MODULE_SECONDS.get(m, BROKER_MODULE_SECONDS if m in broker else n * SECONDS_PER_TEST), n)
            for m, n in counts.items()}


def _longest_first(items: list[pytest.Item]) -> None:
    """Order the work units by estimated seconds, longest first; stable, so a unit's tests keep their
    order (and a module's units theirs). The xdist scheduler below keeps this order."""
    per_module = _module_seconds(items)
    cost: dict[str, float] = {}
    for item in items:
        module, _, rest = item.nodeid.partition("::")
        seconds, n = per_module[module]
        scope = scope_of(item.nodeid)
        test = TEST_SECONDS.get(f"{module}::{rest.split('::')[-1].split('[', 1)[0]}")
        cost[scope] = cost.get(scope, 0.0) + (seconds / n if test is None else test)
    items.sort(key=lambda item: -cost[scope_of(item.nodeid)])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with the work units of :func:`scope_of`, in collection order (longest first,
    above), each xdist worker given its next unit only when it is on the last test of the one it has."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirstScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # the collection is in the order wanted
            super().schedule()

        def _reschedule(self, node: Any) -> None:
            # xdist hands out the next unit at 2 tests pending: a long unit could then wait behind
            # another long one on one xdist worker while the other runs out of work. A worker holds its
            # last test until it knows the next one (for teardown), so at 1 pending it gets the next unit.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LongestFirstScheduling(config, log)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A new event loop, set as current (Faust's agent test context: tests/agent_context.py)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
