"""Kubernetes pods -> native job events: watch events, single pods, or a ``PodList``.

Reference: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/ and the
watch event shape ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {<Pod>}}``.

A training job is several pods; a job event needs all of them, so pods are kept in the adapter
state (by ``metadata.uid``) and every pod change re-emits its job:

- **job**: the first training-job label found, in :data:`JOB_LABELS` order (JobSet, Kubeflow
  training-operator, Volcano, LeaderWorkerSet, batch Job); ``job_id`` is ``<namespace>/<name>``. A
  pod without one is its own job when it requests GPUs; other pods are skipped and counted.
- **nodes**: ``spec.nodeName`` of the job's running pods; **GPUs per node**: the sum of
  ``resources.limits["nvidia.com/gpu"]`` (else ``requests``) of its containers on that node; nodes
  with different counts are rejected (the job contract has one count per node).
- **state**: ``RUNNING`` if any pod runs; else ``PENDING`` if any waits; else ``FAILED`` if any
  failed, ``COMPLETED`` if all succeeded; ``CANCELLED`` when its pods were deleted before ending.
- **storage**: ``persistentVolumeClaim.claimName`` and ``nfs.server`` of its pods' volumes.
- **time**: the latest of the pods' ``status.startTime``, container ``finishedAt``,
  ``metadata.deletionTimestamp``, else ``metadata.creationTimestamp``, else the ``ts`` argument.
"""

from __future__ import annotations

from typing import Any

from streams.formats.base import Context, parse_time_value
from streams.formats.jsonrecords import json_documents

#: Labels that name the training job a pod belongs to, most specific first.
JOB_LABELS: tuple[str, ...] = (
    "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-name",
    "trainer.kubeflow.org/trainjob-name",
    "volcano.sh/job-name",
    "leaderworkerset.sigs.k8s.io/name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
GPU_RESOURCE = "nvidia.com/gpu"
SKIP_NOT_TRAINING = "pod without a training-job label and without GPUs"
_PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})


class _Bad(ValueError):
    pass


def _obj(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """An optional object field: absent or null is empty, another type is bad input."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"{path} is {type(value).__name__}, not an object")
    return value


def _list(parent: dict[str, Any], key: str, path: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"{path} is {type(value).__name__}, not a list")
    return value


def _str(parent: dict[str, Any], key: str, path: str) -> str | None:
    value = parent.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Bad(f"{path} is {type(value).__name__}, not a string")
    return value


def _gpus(spec: dict[str, Any]) -> int:
    total = 0
    for i, c in enumerate(_list(spec, "containers", "spec.containers")):
        where = f"spec.containers[{i}]"
        if not isinstance(c, dict):
            raise _Bad(f"{where} is not an object")
        resources = _obj(c, "resources", f"{where}.resources")
        limits = _obj(resources, "limits", f"{where}.resources.limits")
        requests = _obj(resources, "requests", f"{where}.resources.requests")
        qty = limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))
        if qty is None:
            continue
        text = str(qty)
        if isinstance(qty, bool) or not isinstance(qty, int | str) or not text.isdigit():
            raise _Bad(f"{GPU_RESOURCE} quantity {text[:20]!r} is not a whole number")
        total += int(text)
    return total


def _time_of(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        return parse_time_value(text, what)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _pod_time(meta: dict[str, Any], status: dict[str, Any]) -> float | None:
    times = [t for t in (_time_of(_str(status, "startTime", "status.startTime"), "status.startTime"),
                         _time_of(_str(meta, "deletionTimestamp", "metadata.deletionTimestamp"),
                                  "metadata.deletionTimestamp")) if t is not None]
    for i, cs in enumerate(_list(status, "containerStatuses", "status.containerStatuses")):
        where = f"status.containerStatuses[{i}]"
        if not isinstance(cs, dict):
            raise _Bad(f"{where} is not an object")
        term = _obj(_obj(cs, "state", f"{where}.state"), "terminated", f"{where}.state.terminated")
        finished = _time_of(_str(term, "finishedAt", f"{where}.state.terminated.finishedAt"), "finishedAt")
        if finished is not None:
            times.append(finished)
    if times:
        return max(times)
    return _time_of(_str(meta, "creationTimestamp", "metadata.creationTimestamp"), "metadata.creationTimestamp")


def _volumes(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for i, v in enumerate(_list(spec, "volumes", "spec.volumes")):
        where = f"spec.volumes[{i}]"
        if not isinstance(v, dict):
            raise _Bad(f"{where} is not an object")
        claim = _str(_obj(v, "persistentVolumeClaim", f"{where}.persistentVolumeClaim"), "claimName",
                     f"{where}.persistentVolumeClaim.claimName")
        server = _str(_obj(v, "nfs", f"{where}.nfs"), "server", f"{where}.nfs.server")
        out.extend(x for x in (claim, server) if x)
    return out


def _pod_entry(pod: dict[str, Any], deleted: bool, ctx: Context) -> tuple[str, dict[str, Any]] | None:
    meta = _obj(pod, "metadata", "metadata")
    name = _str(meta, "name", "metadata.name")
    if name is None:
        raise _Bad("pod has no metadata.name")
    namespace = _str(meta, "namespace", "metadata.namespace") or "default"
    labels = _obj(meta, "labels", "metadata.labels")
    spec = _obj(pod, "spec", "spec")
    status = _obj(pod, "status", "status")
    gpus = _gpus(spec)
    job_name = next((labels[k] for k in JOB_LABELS if isinstance(labels.get(k), str) and labels[k]), None)
    if job_name is None:
        if gpus == 0:
            ctx.skip(SKIP_NOT_TRAINING)
            return None
        job_name = name
    phase = status.get("phase", "Pending")
    if not isinstance(phase, str) or phase not in _PHASES:
        raise _Bad(f"status.phase {str(phase)[:20]!r} is not a pod phase")
    ts = _pod_time(meta, status)
    if ts is None:
        ts = ctx.collection_ts()
        if ts is None:
            raise _Bad("no startTime, finishedAt, deletionTimestamp or creationTimestamp and no collection time")
    uid = _str(meta, "uid", "metadata.uid") or f"{namespace}/{name}"
    return uid, {"job": f"{namespace}/{job_name}", "name": job_name, "node": _str(spec, "nodeName", "spec.nodeName"),
                 "gpus": gpus, "phase": phase, "gone": deleted, "ts": ts, "storage": _volumes(spec)}


def _job_event(job: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    running = [p for p in pods if p["phase"] == "Running" and not p["gone"] and p["node"]]
    per_node: dict[str, int] = {}
    for p in running:
        per_node[p["node"]] = per_node.get(p["node"], 0) + p["gpus"]
    counts = set(per_node.values())
    if len(counts) > 1:
        raise _Bad(f"GPUs per node differ across the job's nodes: {sorted(counts)}")
    live = [p for p in pods if not p["gone"]]
    if running:
        state = "RUNNING"
    elif any(p["phase"] in ("Pending", "Unknown") for p in live):
        state = "PENDING"
    elif any(p["phase"] == "Failed" for p in pods):
        state = "FAILED"
    elif pods and all(p["phase"] == "Succeeded" for p in pods):
        state = "COMPLETED"
    else:
        state = "CANCELLED"
    storage = sorted({s for p in pods for s in p["storage"]})
    return {"kind": "job", "ts": max(p["ts"] for p in pods), "job_id": job, "state": state,
            "nodes": sorted(per_node), "gpus_per_node": counts.pop() if counts else 0, "storage": storage,
            "name": pods[0]["name"]}


def convert(raw: bytes, ctx: Context) -> None:
    pods_state = ctx.state.pods
    touched: dict[str, str] = {}  # job -> record of the last pod that changed it
    for record, doc in json_documents(raw, ctx, split_arrays=False):
        rec = record or "message"
        items: list[tuple[str, Any, bool]]
        if isinstance(doc, dict) and doc.get("kind") == "PodList":
            pod_items = doc.get("items")
            if not isinstance(pod_items, list):
                ctx.reject(rec, "PodList items is not a list")
                continue
            items = [(f"{rec}.items[{i}]", p, False) for i, p in enumerate(pod_items)]
        elif isinstance(doc, dict) and "object" in doc and "type" in doc:
            etype = doc["type"]
            if etype not in ("ADDED", "MODIFIED", "DELETED"):
                if etype in ("BOOKMARK", "ERROR"):
                    ctx.skip(f"watch {etype} event")
                else:
                    ctx.reject(rec, f"watch event type {str(etype)[:20]!r} is not ADDED/MODIFIED/DELETED")
                continue
            items = [(rec, doc["object"], etype == "DELETED")]
        else:
            items = [(rec, doc, False)]
        for prec, pod, deleted in items:
            if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
                ctx.reject(prec, "not a Pod object")
                continue
            try:
                entry = _pod_entry(pod, deleted, ctx)
            except _Bad as exc:
                ctx.reject(prec, str(exc))
                continue
            if entry is None:
                continue
            uid, info = entry
            pods_state[uid] = info
            touched[info["job"]] = prec
    for job, prec in touched.items():
        pods = [p for p in pods_state.values() if p["job"] == job]
        if not pods:  # its only pod moved to another job (relabelled) within this message
            continue
        try:
            event = _job_event(job, pods)
        except _Bad as exc:
            ctx.reject(prec, f"job {job}: {exc}")
            continue
        ctx.event(prec, event)
