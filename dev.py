#!/usr/bin/env python3
"""Set up and run Lockstep on a fresh machine that has only Python 3.11+ and pip.

    python3 dev.py run      # embedded broker + simulated cluster + live alerts (Ctrl-C to stop)
    python3 dev.py test     # the whole test suite (lint, types, unit, broker, browser) - what CI runs

Both create ``.venv`` and install the project with its dev extras when needed (again only when
pyproject.toml changes). ``test`` also installs Debian's chromium for the browser test when it is
missing and the machine allows it. Anything after the command is passed on (``run --speed 20``,
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


def ensure_chromium() -> None:
    """Debian's chromium for the browser test (installed once, if apt-get is usable)."""
    if shutil.which("chromium") or shutil.which("chromium-browser") or os.environ.get("LOCKSTEP_CHROMIUM"):
        return
    apt = shutil.which("apt-get")
    if apt is None:
        print("note: chromium not found and no apt-get; the browser test will say so", flush=True)
        return
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        print("note: chromium not found and not root; the browser test will say so", flush=True)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if sh(*prefix, apt, "-qq", "update", check=False, env=env) == 0:
        sh(*prefix, apt, "-qq", "install", "-y", "--no-install-recommends", "chromium", check=False, env=env)


def ensure_prometheus() -> None:
    """Debian's prometheus and prometheus-node-exporter for the remote-write test (once, if apt-get is usable)."""
    if shutil.which("prometheus") and shutil.which("prometheus-node-exporter"):
        return
    apt = shutil.which("apt-get")
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if apt is None or prefix is None:
        print("note: prometheus not found and no usable apt-get; the remote-write test will say so", flush=True)
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if sh(*prefix, apt, "-qq", "update", check=False, env=env) == 0:
        sh(*prefix, apt, "-qq", "install", "-y", "--no-install-recommends", "prometheus",
           "prometheus-node-exporter", check=False, env=env)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("run", "test"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv()
    if command == "run":
        os.execv(str(BIN / "lockstep"), [str(BIN / "lockstep"), "run", *rest])
    ensure_chromium()
    ensure_prometheus()
    if not rest:  # the full gate: lint and types first (fast), then every test, one process per core
        sh(BIN / "ruff", "check", ".")
        sh(BIN / "mypy")
        cores = os.cpu_count() or 1
        if cores > 1:
            rest = ["-n", str(min(cores, 4)), "--dist", "loadscope"]
    return sh(BIN / "python", "-m", "pytest", *rest, check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
