"""CPU budgets for benchmark processes (benchmarks.cpulimit): the cgroup files written, on a directory laid
out like /sys/fs/cgroup, and, where this machine has a writable cpu controller, a real process placed in one."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from benchmarks.cpulimit import CpuBudget, budget, cgroup_flavour, enter, remove


def v1_root(tmp_path: Path) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    return tmp_path


def v2_root(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
    return tmp_path


def test_v1_group_gets_a_cfs_quota_of_its_share_of_each_period(tmp_path: Path) -> None:
    root = v1_root(tmp_path)
    assert cgroup_flavour(root) == "v1"
    group = CpuBudget(0.6, "v1", root).create("w0")
    assert group == root / "cpu" / "w0"
    assert (group / "cpu.cfs_period_us").read_text() == "100000"
    assert (group / "cpu.cfs_quota_us").read_text() == "60000"
    enter(group, pid=4242)
    assert (group / "cgroup.procs").read_text() == "4242"


def test_v2_group_gets_cpu_max(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    assert cgroup_flavour(root) == "v2"
    b, why = budget(1.25, root)
    assert b is not None and "cgroup v2" in why
    group = b.create("w1")
    assert (group / "cpu.max").read_text() == "125000 100000"


def test_no_controller_no_budget_and_the_reason(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")  # cpu not delegated
    assert cgroup_flavour(tmp_path) is None
    b, why = budget(0.6, tmp_path)
    assert b is None and str(tmp_path) in why
    with pytest.raises(ValueError, match="positive"):
        CpuBudget(0.0, "v1", v1_root(tmp_path)).create("w")


def test_a_real_process_runs_inside_its_group() -> None:
    flavour = cgroup_flavour()
    if flavour is None:
        pytest.skip("no writable cgroup cpu controller on this machine")
    b = CpuBudget(0.5, flavour)
    group = b.create(f"lockstep-test-{uuid.uuid4().hex[:6]}")
    try:
        proc = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: enter(group))
        try:
            assert str(proc.pid) in (group / "cgroup.procs").read_text().split()
            assert group.name in Path(f"/proc/{proc.pid}/cgroup").read_text()
        finally:
            proc.kill()
            proc.wait()
    finally:
        remove(group)
    assert not group.exists()
