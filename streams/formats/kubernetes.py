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


def _gpus(spec: dict[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        resources = c.get("resources") or {}
        qty = (resources.get("limits") or {}).get(GPU_RESOURCE, (resources.get("requests") or {}).get(GPU_RESOURCE))
        if qty is None:
            continue
        text = str(qty)
        if isinstance(qty, bool) or not text.isdigit():
            raise _Bad(f"{GPU_RESOURCE} quantity {text[:20]!r} is not a whole number")
        total += int(text)
    return total


def _pod_time(pod: dict[str, Any]) -> float | None:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    candidates: list[Any] = [status.get("startTime"), meta.get("deletionTimestamp")]
    for cs in status.get("containerStatuses") or []:
        term = ((cs or {}).get("state") or {}).get("terminated") if isinstance(cs, dict) else None
        if isinstance(term, dict):
            candidates.append(term.get("finishedAt"))
    times = []
    for c in candidates:
        if isinstance(c, str) and c:
            try:
                times.append(parse_time_value(c, "pod time"))
            except ValueError as exc:
                raise _Bad(str(exc)) from None
    if times:
        return max(times)
    created = meta.get("creationTimestamp")
    if isinstance(created, str) and created:
        try:
            return parse_time_value(created, "metadata.creationTimestamp")
        except ValueError as exc:
            raise _Bad(str(exc)) from None
    return None


def _volumes(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and isinstance(pvc.get("claimName"), str):
            out.append(pvc["claimName"])
        nfs = v.get("nfs")
        if isinstance(nfs, dict) and isinstance(nfs.get("server"), str):
            out.append(nfs["server"])
    return out


def _pod_entry(pod: dict[str, Any], deleted: bool, ctx: Context) -> tuple[str, dict[str, Any]] | None:
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise _Bad("pod has no metadata.name")
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise _Bad("metadata.labels is not an object")
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    gpus = _gpus(spec)
    job_name = next((labels[k] for k in JOB_LABELS if isinstance(labels.get(k), str) and labels[k]), None)
    if job_name is None:
        if gpus == 0:
            ctx.skip(SKIP_NOT_TRAINING)
            return None
        job_name = meta["name"]
    phase = status.get("phase", "Pending")
    if phase not in _PHASES:
        raise _Bad(f"status.phase {str(phase)[:20]!r} is not a pod phase")
    ts = _pod_time(pod)
    if ts is None:
        ts = ctx.collection_ts()
        if ts is None:
            raise _Bad("no startTime, finishedAt, deletionTimestamp or creationTimestamp and no collection time")
    uid = meta.get("uid") or f"{namespace}/{meta['name']}"
    return str(uid), {"job": f"{namespace}/{job_name}", "name": job_name, "node": spec.get("nodeName"),
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
            items = [(f"{rec}.items[{i}]", p, False) for i, p in enumerate(doc.get("items") or [])]
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
        try:
            event = _job_event(job, pods)
        except _Bad as exc:
            ctx.reject(prec, f"job {job}: {exc}")
            continue
        ctx.event(prec, event)
