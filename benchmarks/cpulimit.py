"""A fixed CPU budget per benchmark process: a Linux cgroup with a CFS quota (cgroup v1 ``cpu`` or v2).

Why: "2 workers give 1.7x one worker *where the machine has the cores*". On a 2-core machine two
workers and the broker want more than 2 cores, so the plain 2-vs-1 ratio measures the machine. With a
budget of, say, 0.6 core per worker process, one worker gets 0.6 core and two get 0.6 each while the
broker keeps what it needs: the ratio then shows what partitioned scale-out costs (rebalance,
per-worker fixed work, inventory held by every worker), as it would on a machine with a core each.

Needs a writable cgroup ``cpu`` controller (root, or a delegated subtree); :func:`cgroup_flavour`
says whether one is there and the bench prints ``n/a`` otherwise. Nothing here runs in CI's
pass/fail; the file handling is unit-tested on a directory laid out like ``/sys/fs/cgroup``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def cgroup_flavour(root: Path = CGROUP_ROOT) -> str | None:
    """``"v1"`` (a ``cpu`` hierarchy at ``root/cpu``), ``"v2"`` (unified, ``cpu`` delegated to children),
    or None when neither is writable here."""
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return "v1"
    controllers = root / "cgroup.subtree_control"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(root, os.W_OK):
        return "v2"
    return None


@dataclass(frozen=True)
class CpuBudget:
    """``cores`` of CPU time per period for each process placed in one of its groups."""

    cores: float
    flavour: str
    root: Path = CGROUP_ROOT

    def create(self, name: str) -> Path:
        """Make the group ``name`` with this budget; returns its directory (give it to :func:`enter`)."""
        if self.cores <= 0:
            raise ValueError(f"a CPU budget must be positive, not {self.cores}")
        quota = max(1000, round(self.cores * PERIOD_US))
        if self.flavour == "v1":
            group = self.root / "cpu" / name
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        elif self.flavour == "v2":
            group = self.root / name
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            raise ValueError(f"unknown cgroup flavour {self.flavour!r}")
        return group


def enter(group: Path, pid: int | None = None) -> None:
    """Move ``pid`` (default: this process) into ``group``; meant for ``Popen(preexec_fn=...)``, so the
    process runs within its budget from its first instruction."""
    (group / "cgroup.procs").write_text(str(pid if pid is not None else os.getpid()))


def remove(group: Path) -> None:
    """Delete an emptied group (its processes have exited); a group still in use is left alone."""
    with contextlib.suppress(OSError):
        group.rmdir()


def budget(cores: float | None, root: Path = CGROUP_ROOT) -> tuple[CpuBudget | None, str]:
    """The budget to use, or None and why not (printed by the bench).

    >>> budget(None)
    (None, 'no CPU budget asked for')
    """
    if cores is None:
        return None, "no CPU budget asked for"
    flavour = cgroup_flavour(root)
    if flavour is None:
        return None, f"no writable cgroup cpu controller under {root}"
    return CpuBudget(cores, flavour, root), f"{cores:g} core per worker (cgroup {flavour} CFS quota)"
