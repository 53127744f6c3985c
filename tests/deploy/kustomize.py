"""Render a kustomization the way ``kustomize build`` does, for the subset of kustomize we use.

There may be no kustomize (or kubectl) binary where CI runs, and the PyPI "kustomize" packages
either download the Go binary or implement something else. Our kustomizations stay deliberately
plain, so rendering them is a small, exact job: ``resources`` (files and directories),
``namespace``, ``labels`` (metadata only), ``images`` and ``patches`` in RFC 6902 (JSON patch)
form with a ``target``. Any other key is an error, so the renderer can never silently drift from
what a real kustomize would produce; where kubectl is installed, a test compares the two outputs.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass"}
POD_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "Pod": ("spec",),
}


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not implement, or is wrong."""


def build(directory: Path) -> list[dict[str, Any]]:
    """The rendered resources of the kustomization in ``directory``, in resource order."""
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    spec = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(spec) - SUPPORTED_KEYS
    if unknown:
        raise KustomizeError(f"{kfile}: unsupported keys {sorted(unknown)}")
    if spec.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{kfile}: kind {spec.get('kind')!r} is not supported")
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            docs += build(path)
        elif path.is_file():
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
        else:
            raise KustomizeError(f"{kfile}: resource {entry} does not exist")
    for patch in spec.get("patches", []):
        _apply_patch(directory, kfile, patch, docs)
    if "namespace" in spec:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = spec["namespace"]
    for entry in spec.get("labels", []):
        if entry.get("includeSelectors") or entry.get("includeTemplates"):
            raise KustomizeError(f"{kfile}: labels with includeSelectors/includeTemplates are not supported")
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])
    for image in spec.get("images", []):
        _set_image(docs, image)
    return docs


def _matches(doc: dict[str, Any], target: dict[str, str]) -> bool:
    group, _, version = doc["apiVersion"].rpartition("/")
    checks = {"group": group, "version": version, "kind": doc["kind"], "name": doc["metadata"]["name"]}
    for key, want in target.items():
        if key not in checks:
            raise KustomizeError(f"patch target field {key!r} is not supported")
        if checks[key] != want:
            return False
    return True


def _apply_patch(directory: Path, kfile: Path, patch: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    if set(patch) != {"path", "target"}:
        raise KustomizeError(f"{kfile}: only `patches: [{{path, target}}]` (JSON 6902) is supported")
    ops = yaml.safe_load((directory / patch["path"]).read_text())
    if not isinstance(ops, list):
        raise KustomizeError(f"{patch['path']}: not a JSON 6902 patch (a list of operations)")
    targets = [d for d in docs if _matches(d, patch["target"])]
    if not targets:
        raise KustomizeError(f"{kfile}: patch {patch['path']} matches no resource")
    for doc in targets:
        for op in ops:
            json_patch(doc, op)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """Apply one RFC 6902 operation (add, replace, remove) in place."""
    *parents, last = _pointer(op["path"])
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    kind = op["op"]
    if isinstance(node, list):
        if kind == "add":
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
        elif kind == "replace":
            node[int(last)] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del node[int(last)]
        else:
            raise KustomizeError(f"patch op {kind!r} is not supported")
        return
    if kind in ("replace", "remove") and last not in node:
        raise KustomizeError(f"{kind} {op['path']}: no such member")
    if kind in ("add", "replace"):
        node[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del node[last]
    else:
        raise KustomizeError(f"patch op {kind!r} is not supported")


def pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec of a workload resource (empty for anything else)."""
    path = POD_TEMPLATE_PATHS.get(doc["kind"])
    if path is None:
        return []
    node: Any = doc
    for part in path:
        node = node[part]
    return [node]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for spec in pod_specs(doc) for c in spec.get("initContainers", []) + spec.get("containers", [])]


def _set_image(docs: list[dict[str, Any]], image: dict[str, str]) -> None:
    for doc in docs:
        for container in containers(doc):
            name, _, _tag = container["image"].partition(":")
            if name != image["name"]:
                continue
            new = image.get("newName", name)
            if "digest" in image:
                new += "@" + image["digest"]
            elif "newTag" in image:
                new += ":" + str(image["newTag"])
            container["image"] = new
