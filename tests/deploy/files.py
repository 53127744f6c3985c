"""Read the deployment files the way their tools would, for the tests in this folder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from models.settings import LockstepSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
KUBERNETES = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
OPERATIONS = ROOT / "docs" / "operations.md"

#: Every kustomization a user may apply.
KUSTOMIZATIONS = sorted(p.parent for p in KUBERNETES.rglob("kustomization.yaml"))

_INTERPOLATION = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
_LOCKSTEP_VAR = re.compile(r"\bLOCKSTEP_[A-Z0-9_]+\b")


def setting_variables() -> set[str]:
    """The environment variable of every field of the settings model."""
    prefix = LockstepSettings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in LockstepSettings.model_fields}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?err}`` / ``${VAR?err}``. Raises ValueError on a malformed or unset-and-required variable."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group("plain"):
            return env.get(m.group("plain"), "")
        expr = m.group("braced")
        name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", expr)
        if name is None:
            raise ValueError(f"bad interpolation ${{{expr}}}")
        var, rest = name.group(0), expr[name.end():]
        if rest == "":
            return env.get(var, "")
        for op in (":-", "-", ":?", "?"):
            if rest.startswith(op):
                arg = rest[len(op):]
                unset = var not in env or (op.startswith(":") and env[var] == "")
                if op.endswith("?"):
                    if unset:
                        raise ValueError(f"required variable {var}: {arg}")
                    return env[var]
                return interpolate(arg, env) if unset else env[var]
        raise ValueError(f"bad interpolation ${{{expr}}}")

    return _INTERPOLATION.sub(one, value)


def interpolate_tree(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def interpolation_names(text: str) -> set[str]:
    """Every variable name a compose file interpolates."""
    names = set()
    for m in _INTERPOLATION.finditer(text):
        if m.group("plain"):
            names.add(m.group("plain"))
        elif m.group("braced"):
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", m.group("braced"))
            if name:
                names.add(name.group(0))
    return names


def load_compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml with YAML merge keys resolved and variables interpolated (``env``, default empty)."""
    raw = yaml.safe_load(COMPOSE.read_text())
    return interpolate_tree(raw, env or {})  # type: ignore[no-any-return]


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def dockerfile_instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = DOCKERFILE.read_text() if text is None else text
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, args = buf.partition(" ")
        out.append((word.upper(), args.strip()))
        buf = ""
    return out


def dockerfile_env(text: str | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in dockerfile_instructions(text):
        if word == "ENV":
            for token in shlex.split(args):
                key, _, value = token.partition("=")
                env[key] = value
    return env


def lockstep_names_in(text: str) -> set[str]:
    return set(_LOCKSTEP_VAR.findall(text))
