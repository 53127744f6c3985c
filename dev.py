#!/usr/bin/env python3
"""Set up and run Lockstep on a fresh machine that has only Python 3.11+ and pip.

    python3 dev.py run      # embedded broker + simulated cluster + live alerts (Ctrl-C to stop)
    python3 dev.py test     # the whole test suite (lint, types, unit, broker, browser) - what CI runs

Both create ``.venv`` and install the project with its dev extras when needed (again only when
pyproject.toml changes). ``test`` also installs the Debian packages the tests use (chromium,
prometheus-alertmanager, prometheus: ``APT_PACKAGES``) when they are missing and the machine
allows it. Anything after the command is passed on (``run --speed 20``,
``test -k replay``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".lockstep-installed"


def sh(*cmd: str | Path, check: bool = True, **kw: object) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=check, cwd=ROOT, **kw).returncode  # type: ignore[call-overload]


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs before the venv exists, on any python3
        sys.exit(f"Lockstep needs Python >= 3.11 (this is {sys.version.split()[0]})")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest and (BIN / "lockstep").exists():
        return
    if not (BIN / "python").exists():
        print(f"creating virtualenv {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    sh(BIN / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    sh(BIN / "python", "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(digest)


#: Debian packages the tests use, each with the command that shows it is installed: the browser test
#: (chromium), the Alertmanager test (alertmanager, amtool), the promtool and Prometheus tests.
APT_PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chromium", ("chromium", "chromium-browser")),
    ("prometheus-alertmanager", ("prometheus-alertmanager",)),
    ("prometheus", ("prometheus",)),
    ("prometheus-node-exporter", ("prometheus-node-exporter",)),
)


def ensure_apt_packages(packages: tuple[tuple[str, tuple[str, ...]], ...] = APT_PACKAGES) -> None:
    """Install, once and if apt-get is usable, the Debian packages whose commands are all missing.

    Without apt-get or root, nothing is installed and each test that needs a package skips saying so.
    ``LOCKSTEP_CHROMIUM`` names a browser to use instead of Debian's.
    """
    missing = [name for name, commands in packages
               if not any(shutil.which(c) for c in commands)
               and not (name == "chromium" and os.environ.get("LOCKSTEP_CHROMIUM"))]
    if not missing:
        return
    apt = shutil.which("apt-get")
    if apt is None:
        print(f"note: {', '.join(missing)} not found and no apt-get; the tests that need them will say so", flush=True)
        return
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        print(f"note: {', '.join(missing)} not found and not root; the tests that need them will say so", flush=True)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if sh(*prefix, apt, "-qq", "update", check=False, env=env) == 0:
        sh(*prefix, apt, "-qq", "install", "-y", "--no-install-recommends", *missing, check=False, env=env)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("run", "test"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv()
    if command == "run":
        os.execv(str(BIN / "lockstep"), [str(BIN / "lockstep"), "run", *rest])
    ensure_apt_packages()
    if not rest:  # the full gate: lint and types first (fast), then every test, one process per core
        sh(BIN / "ruff", "check", ".")
        sh(BIN / "mypy")
        cores = os.cpu_count() or 1
        if cores > 1:
            rest = ["-n", str(min(cores, 4)), "--dist", "loadscope", "--durations=20"]
    return sh(BIN / "python", "-m", "pytest", *rest, check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
