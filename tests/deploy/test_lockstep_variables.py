"""Every LOCKSTEP_ variable that docker-compose.yml, the Kubernetes manifests and the Dockerfile set is
a field of LockstepSettings: a misspelt variable is silently ignored by pydantic-settings, so it has to
be caught here."""

from __future__ import annotations

from typing import Any

import pytest

from .files import (
    COMPOSE,
    DOCKERFILE,
    KUBERNETES,
    KUSTOMIZATIONS,
    dockerfile_env,
    interpolation_names,
    load_compose,
    lockstep_names_in,
    service_environment,
    setting_variables,
)
from .kustomize import build, containers


def compose_variables(text: str | None = None) -> dict[str, str]:
    """variable -> where, for every LOCKSTEP_ variable the compose file sets or interpolates."""
    found: dict[str, str] = {}
    doc = load_compose()
    for name, service in doc["services"].items():
        for key in service_environment(service):
            if key.startswith("LOCKSTEP_"):
                found[key] = f"compose service {name}"
    for key in interpolation_names(text if text is not None else COMPOSE.read_text()):
        if key.startswith("LOCKSTEP_"):
            found.setdefault(key, "compose interpolation")
    return found


def kubernetes_variables(docs: list[dict[str, Any]], where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for doc in docs:
        name = f"{where}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "ConfigMap":
            found.update({k: name for k in doc.get("data", {}) if k.startswith("LOCKSTEP_")})
        for container in containers(doc):
            found.update({e["name"]: name for e in container.get("env", []) if e["name"].startswith("LOCKSTEP_")})
        for trigger in doc.get("spec", {}).get("triggers", []) if doc["kind"] == "ScaledObject" else []:
            found.update({v: name for k, v in trigger["metadata"].items() if k.endswith("FromEnv")})
    return found


def dockerfile_variables(text: str | None = None) -> dict[str, str]:
    text = text if text is not None else DOCKERFILE.read_text()
    found = {k: "Dockerfile ENV" for k in dockerfile_env(text) if k.startswith("LOCKSTEP_")}
    found.update({k: "Dockerfile" for k in lockstep_names_in(text) if k not in found})
    return found


def all_variables() -> dict[str, str]:
    found = compose_variables()
    for directory in KUSTOMIZATIONS:
        found.update(kubernetes_variables(build(directory), str(directory.relative_to(KUBERNETES))))
    found.update(dockerfile_variables())
    return found


def test_every_variable_is_a_setting() -> None:
    fields = setting_variables()
    unknown = {var: where for var, where in all_variables().items() if var not in fields}
    assert not unknown, f"not fields of LockstepSettings: {unknown}"


def test_each_file_is_really_read() -> None:
    """Guard against a collector that finds nothing (and so passes): each source yields the basics."""
    assert {"LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", "LOCKSTEP_APP_ID", "LOCKSTEP_WEB_HOST",
            "LOCKSTEP_DATA_DIR"} <= set(compose_variables())
    base = kubernetes_variables(build(KUBERNETES / "base"), "base")
    assert {"LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS", "LOCKSTEP_KAFKA_SASL_PASSWORD", "LOCKSTEP_DELIVERY_ROUTES_FILE",
            "LOCKSTEP_WEB_HOST"} <= set(base)
    keda = kubernetes_variables(build(KUBERNETES / "overlays" / "keda"), "keda")
    assert "LOCKSTEP_APP_ID" in keda
    assert {"LOCKSTEP_WEB_HOST", "LOCKSTEP_WEB_PORT", "LOCKSTEP_DATA_DIR"} <= set(dockerfile_variables())


@pytest.mark.parametrize("source", ["compose", "dockerfile"])
def test_a_misspelt_variable_is_caught(source: str) -> None:
    if source == "compose":
        found = compose_variables(COMPOSE.read_text() + "\n# ${LOCKSTEP_PARTITON:-8}\n")
    else:
        found = dockerfile_variables(DOCKERFILE.read_text() + "\nENV LOCKSTEP_WEBPORT=1\n")
    assert set(found) - setting_variables() == {"LOCKSTEP_PARTITON" if source == "compose" else "LOCKSTEP_WEBPORT"}
