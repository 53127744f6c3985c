"""deploy/kubernetes: every kustomization renders, validates against the Kubernetes API schemas
(bundled by kubernetes-validate, offline) and hangs together."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from lockstep.cli import build_parser
from lockstep.delivery.config import load_routing
from models.settings import LockstepSettings

from .files import KUBERNETES, KUSTOMIZATIONS, SCHEMAS
from .kustomize import KustomizeError, build, containers, json_patch, pod_specs

#: The oldest Kubernetes we support (batch/v1 Job TTL, policy/v1 PDB, autoscaling/v2) and the newest
#: the bundled schemas know.
K8S_VERSIONS = ["1.29.0", kubernetes_validate.utils.latest_version()]
CRD_SCHEMAS = {("keda.sh/v1alpha1", "ScaledObject"): "keda-scaledobject.schema.json"}
IDS = [str(p.relative_to(KUBERNETES)) for p in KUSTOMIZATIONS]


def rendered(directory: Path) -> list[dict[str, Any]]:
    return build(directory)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_every_kustomization_is_covered() -> None:
    assert {"base", "overlays/keda", "overlays/kafka-sasl-ssl"} <= set(IDS)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(directory: Path, version: str) -> None:
    docs = rendered(directory)
    assert docs
    for doc in docs:
        crd = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
        if crd is not None:
            schema = json.loads((SCHEMAS / crd).read_text())
            jsonschema.Draft202012Validator(schema).validate(doc)
        else:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_catches_mistakes() -> None:
    (deployment,) = [d for d in rendered(KUBERNETES / "base") if d["metadata"]["name"] == "lockstep-worker"
                     and d["kind"] == "Deployment"]
    typo = json.loads(json.dumps(deployment))
    typo["spec"]["template"]["spec"]["containers"][0]["resourcse"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_VERSIONS[-1], strict=True)
    (so,) = by_kind(rendered(KUBERNETES / "overlays" / "keda"), "ScaledObject")
    numeric = json.loads(json.dumps(so))
    numeric["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 20000  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(numeric, json.loads((SCHEMAS / "keda-scaledobject.schema.json").read_text()))


@pytest.mark.skipif(shutil.which("kubectl") is None and shutil.which("kustomize") is None,
                    reason="no kubectl/kustomize here: the renderer's output is checked where one exists")
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_renderer_matches_real_kustomize(directory: Path) -> None:
    cmd = ["kustomize", "build", str(directory)] if shutil.which("kustomize") else ["kubectl", "kustomize",
                                                                                    str(directory)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout

    def key(d: dict[str, Any]) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]

    real = sorted((d for d in yaml.safe_load_all(out) if d), key=key)
    ours = sorted(rendered(directory), key=key)
    assert [key(d) for d in ours] == [key(d) for d in real]
    for mine, theirs in zip(ours, real, strict=True):
        assert mine == theirs, key(mine)


def test_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nconfigMapGenerator: []\n")
    with pytest.raises(KustomizeError, match="configMapGenerator"):
        build(tmp_path)
    doc = {"spec": {"list": [1, 2]}}
    json_patch(doc, {"op": "add", "path": "/spec/list/-", "value": 3})
    json_patch(doc, {"op": "remove", "path": "/spec/list/0"})
    assert doc == {"spec": {"list": [2, 3]}}
    with pytest.raises(KustomizeError):
        json_patch(doc, {"op": "remove", "path": "/spec/missing"})


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_everything_lands_in_the_namespace_and_no_secret_is_shipped(directory: Path) -> None:
    docs = rendered(directory)
    (namespace,) = by_kind(docs, "Namespace")
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], doc["metadata"]["name"]
    assert not by_kind(docs, "Secret"), "secrets are referenced, never part of the manifests"


def _env_of(container: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """What the container's environment holds (ConfigMap values; secret values as a marker)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "<from-secret>")
    return env


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_workloads_are_wired_to_what_exists(directory: Path) -> None:
    docs = rendered(directory)
    workloads = [d for d in docs if pod_specs(d)]
    assert {d["metadata"]["name"] for d in workloads} == {"lockstep-worker", "lockstep-deliver", "lockstep-topics"}
    for doc in workloads:
        (spec,) = pod_specs(doc)
        assert spec["automountServiceAccountToken"] is False
        one(docs, "ServiceAccount", spec["serviceAccountName"])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["fsGroup"] == 10001
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(doc):
            assert container["image"] == "lockstep:0.1.0", "set by the images transformer"
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])
            assert "memory" in container["resources"]["limits"]
            args = build_parser().parse_args(container["args"])
            assert callable(args.handler)
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts
            for volume in volumes.values():
                if "configMap" in volume:
                    one(docs, "ConfigMap", volume["configMap"]["name"])
                if "secret" in volume:
                    assert volume["secret"].get("optional") is True, "a missing secret must not block a pod"
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["optional"] is True, item["name"]
            env = _env_of(container, docs)
            _check_paths(env, mounts, docs)


def _under(path: str, mounts: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    for mount, volume in mounts.items():
        if PurePosixPath(path).is_relative_to(mount):
            return mount, volume
    return None


def _check_paths(env: dict[str, str], mounts: dict[str, dict[str, Any]], docs: list[dict[str, Any]]) -> None:
    """Every path a setting names is inside a volume of the pod (the root filesystem is read-only)."""
    data = _under(env["LOCKSTEP_DATA_DIR"], mounts)
    assert data is not None and "emptyDir" in data[1], "LOCKSTEP_DATA_DIR must be writable"
    for key in ("LOCKSTEP_KAFKA_SSL_CAFILE", "LOCKSTEP_KAFKA_SSL_CERTFILE", "LOCKSTEP_KAFKA_SSL_KEYFILE",
                "LOCKSTEP_DELIVERY_ROUTES_FILE", "LOCKSTEP_DELIVERY_SECRETS_DIR"):
        if key not in env:
            continue
        found = _under(env[key], mounts)
        assert found is not None, f"{key}={env[key]} is on no volume"
        mount, volume = found
        if "configMap" in volume:
            data_keys = one(docs, "ConfigMap", volume["configMap"]["name"])["data"]
            assert str(PurePosixPath(env[key]).relative_to(mount)) in data_keys, key


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_settings_are_valid_for_lockstep(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment each container gets builds a LockstepSettings (secrets filled with stand-ins)."""
    docs = rendered(directory)
    for doc in docs:
        for container in containers(doc):
            env = _env_of(container, docs)
            for key in list(env):
                monkeypatch.delenv(key, raising=False)
            clean = {k: ("stand-in" if v == "<from-secret>" else v) for k, v in env.items()}
            clean.pop("LOCKSTEP_DELIVERY_SECRETS_DIR", None)  # a directory that exists only in the pod
            settings = LockstepSettings(_env_file=None, **{k.removeprefix("LOCKSTEP_").lower(): v
                                                           for k, v in clean.items()})
            assert settings.kafka_bootstrap_servers, "a pod never starts the embedded broker"
            assert settings.web_host == "0.0.0.0"


def test_sasl_ssl_overlay_switches_every_client_to_scram_over_tls() -> None:
    docs = rendered(KUBERNETES / "overlays" / "kafka-sasl-ssl")
    data = one(docs, "ConfigMap", "lockstep-settings")["data"]
    assert data["LOCKSTEP_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert data["LOCKSTEP_KAFKA_SASL_MECHANISM"].startswith("SCRAM-")
    fields = {k.removeprefix("LOCKSTEP_").lower(): v for k, v in data.items()}
    with pytest.raises(ValidationError, match="SASL needs"):
        LockstepSettings(_env_file=None, **fields)  # without the Secret a SASL pod refuses to start
    LockstepSettings(_env_file=None, **fields, kafka_sasl_username="u", kafka_sasl_password="p")
    for doc in docs:
        for container in containers(doc):
            names = {e["name"] for e in container.get("env", [])}
            assert {"LOCKSTEP_KAFKA_SASL_USERNAME", "LOCKSTEP_KAFKA_SASL_PASSWORD"} <= names


def test_service_pdb_and_probes_select_the_workers() -> None:
    docs = rendered(KUBERNETES / "base")
    worker = one(docs, "Deployment", "lockstep-worker")
    pod_labels = worker["spec"]["template"]["metadata"]["labels"]
    assert worker["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = _env_of(container, docs)
    assert ports["http"] == int(env["LOCKSTEP_WEB_PORT"])
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    service = one(docs, "Service", "lockstep")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    pdb = one(docs, "PodDisruptionBudget", "lockstep-worker")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 < worker["spec"]["replicas"]


def test_routing_file_in_the_configmap_is_valid() -> None:
    files = one(rendered(KUBERNETES / "base"), "ConfigMap", "lockstep-files")
    config = load_routing(files["data"]["routes.yaml"], "lockstep-files/routes.yaml")
    assert config.receivers


def test_keda_scales_the_workers_on_their_own_consumer_group() -> None:
    docs = rendered(KUBERNETES / "overlays" / "keda")
    (so,) = by_kind(docs, "ScaledObject")
    target = so["spec"]["scaleTargetRef"]
    worker = one(docs, target["kind"], target["name"])
    assert "replicas" not in worker["spec"], "the HPA owns the replica count"
    (container,) = [c for c in containers(worker) if c["name"] == target["envSourceContainerName"]]
    env = _env_of(container, docs)
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert env[meta["bootstrapServersFromEnv"]] and env[meta["consumerGroupFromEnv"]] == env["LOCKSTEP_APP_ID"]
    assert int(meta["lagThreshold"]) > 0
    # More workers than partitions would sit idle (Faust assigns partitions, not topics, to workers).
    assert so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"] <= int(env["LOCKSTEP_PARTITIONS"])
