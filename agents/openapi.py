"""The OpenAPI 3.1 document of the worker's HTTP API (served at ``/openapi.json``).

Written by hand next to the routes in :mod:`agents.web`, with the request and record schemas taken
from the pydantic contracts (:mod:`models.operator`, :mod:`models.alerts`), so they cannot drift.
The tests validate the document (openapi-spec-validator) and every response of a worker fed the
seed incident against it (tests/web/test_api.py).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from models.alerts import Alert
from models.operator import AnnotationRecord, AnnotationRequest, SilenceRecord, SilenceRequest
from models.version import __version__
from streams.lanes import LANE_ORDER

REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
OBJ = {"type": "object"}
NSTR = {"type": ["string", "null"]}
NNUM = {"type": ["number", "null"]}
NINT = {"type": ["integer", "null"]}


def _arr(items: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **kw}


def _obj(props: dict[str, Any], required: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **kw}


def _pydantic(model: type[BaseModel], components: dict[str, Any], mode: str = "serialization") -> None:
    schema = model.model_json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema


def _schemas() -> dict[str, Any]:
    s: dict[str, Any] = {}
    _pydantic(Alert, s)
    _pydantic(AnnotationRecord, s)
    _pydantic(SilenceRecord, s)
    _pydantic(AnnotationRequest, s, mode="validation")
    _pydantic(SilenceRequest, s, mode="validation")
    s["Error"] = _obj({"error": STR, "status": INT, "detail": _arr(_obj({"field": NSTR, "message": STR})),
                       "retry_after_s": {"type": "integer", "description": "429: seconds to wait (as Retry-After)"},
                       "retryable": BOOL}, ["error", "status"])
    s["FirstMover"] = _obj({
        "domain": STR, "layer": STR, "source": STR, "labels": {"type": "object", "additionalProperties": STR},
        "metric": NSTR, "meaning": NSTR, "first_seen": NSTR, "ts": NNUM, "lane": NSTR, "where": STR, "reason": STR})
    s["JobAlert"] = _obj({"alert_id": STR, "status": STR, "severity": STR, "domain": NSTR, "started_at": STR,
                          "resolved_at": NSTR, "summary": NSTR, "first_mover": _nullable(_ref("FirstMover"))})
    s["JobStatus"] = _obj({
        "job_id": STR, "name": NSTR, "state": STR,
        "status": {"enum": ["degraded", "recovered", "ok", "no_data", "ended"]},
        "gpus": NINT, "nodes": NINT, "pools": _arr(STR), "last_seen": NNUM, "last_seen_iso": NSTR,
        "step_time": _nullable(_obj({"p50": NNUM, "baseline_p50": NNUM, "ratio": NNUM})), "gpu_util": NNUM,
        "alert": _nullable(_ref("JobAlert"))})
    s["JobList"] = _obj({"jobs": _arr(_ref("JobStatus")), "as_of": NNUM})
    s["Path"] = _obj({"node": STR, "device": STR, "port": STR, "switch": STR, "switch_port": STR, "fabric": STR,
                      "spines": _arr(STR)})
    s["Leaf"] = _obj({"switch": STR, "tier": STR, "ports": _arr(STR), "nodes": _arr(STR), "spines": _arr(STR)})
    s["Pool"] = _obj({"pool": STR, "switches": _arr(STR),
                      "shared_with": _arr(_obj({"job_id": STR, "gpus": INT}))})
    s["Page"] = _obj({
        "offset": INT, "limit": INT, "nodes_total": INT, "gpus_total": INT, "paths_total": INT, "leaves_total": INT,
        "next_offset": {**NINT, "description": "offset of the next page of nodes; null on the last page"}},
        description="The page of the job's nodes in node_list (gpu_list, paths and leaves are those nodes')")
    s["JobDetail"] = {"allOf": [_ref("JobStatus"), _obj({
        "gpus_per_node": NINT, "node_list": _arr(STR), "hostlist": STR, "gpu_list": _arr(STR),
        "paths": _arr(_ref("Path")), "leaves": _arr(_ref("Leaf")), "spines": _arr(STR), "fabrics": _arr(STR),
        "storage": _arr(_ref("Pool")), "start": NNUM, "end": NNUM, "inventory": BOOL,
        "stats": {"type": ["object", "null"], "description": "the job's latest record on the stats topic"},
        "page": _ref("Page")})]}
    series = _arr(NNUM)
    s["Lane"] = _obj({
        "lane": {"enum": list(LANE_ORDER)}, "title": STR, "unit": STR, "layers": STR, "has_data": BOOL,
        "p50": series, "p99": series, "min": series, "max": series, "n": series,
        "baseline": _obj({"p50": NNUM, "p99": NNUM, "from": NUM, "to": NUM})})
    s["Marker"] = _obj({
        "lane": {"enum": list(LANE_ORDER)}, "ts": NUM, "end_ts": NNUM, "layer": STR, "source": STR,
        "labels": {"type": "object", "additionalProperties": STR}, "where": STR, "metric": STR, "meaning": NSTR,
        "role": NSTR, "direction": NSTR, "value": NNUM, "p50": NNUM, "p99": NNUM, "score": NNUM, "entities": INT})
    s["Incident"] = _obj({"alert_id": STR, "status": STR, "severity": STR, "domain": NSTR, "start": NUM,
                          "onset": NUM, "detected": NNUM, "end": NNUM, "summary": NSTR,
                          "first_mover": _nullable(_ref("FirstMover"))})
    s["Timeline"] = _obj({
        "job_id": STR, "from": NUM, "to": NUM, "from_iso": STR, "to_iso": STR,
        "step": {"type": "integer", "minimum": 1}, "ts": _arr(NUM), "lanes": _arr(_ref("Lane")),
        "anomalies": _arr(_ref("Marker")), "incidents": _arr(_ref("Incident")),
        "incident": _nullable(_ref("Incident")), "first_mover": _nullable(_ref("FirstMover")),
        "annotations": _arr(_ref("AnnotationRecord")), "as_of": NNUM})
    s["Answer"] = _obj({"n": {"type": "integer", "minimum": 1, "maximum": 7},
                        "key": {"enum": ["gpus", "nodes", "paths", "storage", "change", "domain", "after_fix"]},
                        "question": STR, "answer": STR, "evidence": OBJ})
    s["Diagnosis"] = _obj({
        "job_id": STR, "name": NSTR, "status": STR, "as_of": NNUM, "as_of_iso": NSTR, "alert_id": NSTR,
        "gpus": NINT, "nodes": NINT, "pools": _arr(STR), "domain": NSTR,
        "first_mover": _nullable(_ref("FirstMover")), "answers": _arr(_ref("Answer"), minItems=7, maxItems=7)})
    lifecycle = _arr(_obj({"status": STR, "at": NSTR}))
    s["AlertSummary"] = _obj({
        "alert_id": STR, "job_id": NSTR, "type": STR, "status": {"enum": ["firing", "resolved"]}, "severity": STR,
        "gpus": NINT, "nodes": INT, "started_at": STR, "detected_at": NSTR, "resolved_at": NSTR, "domain": NSTR,
        "first_mover": _nullable(_ref("FirstMover")), "summary": NSTR, "dedup_key": STR, "lifecycle": lifecycle,
        "silenced_by": _arr(STR), "matching_silences": _arr(STR)})
    s["AlertList"] = _obj({"alerts": _arr(_ref("AlertSummary"))})
    s["AlertDetail"] = {"allOf": [_ref("AlertSummary"), _obj({"alert": _ref("Alert"),
                                                               "firing": _nullable(_ref("Alert"))})]}
    s["FabricPort"] = _obj({
        "switch": STR, "port": STR, "tier": STR, "uplinks": _arr(STR), "peer": NSTR, "speed_gbps": NNUM,
        "nodes": _arr(_obj({"node": STR, "device": STR, "nic_port": STR, "fabric": STR,
                            "jobs": _arr(_obj({"job_id": STR, "gpus": INT}))})),
        "jobs": _arr(_obj({"job_id": STR, "name": NSTR, "gpus_total": INT, "gpus_behind_port": INT,
                           "nodes_behind_port": _arr(STR)})),
        "gpus_behind_port": INT,
        "switch_jobs": _arr(_obj({"job_id": STR, "gpus": INT, "behind_this_port": BOOL})),
        "anomalies": _arr(OBJ), "alerts": _arr(OBJ)})
    # The fabric report (streams/fabric.py, docs/fabric.md): six questions, each a list of groups.
    s["FabricGroup"] = _obj({"fabric": STR, "tier": STR, "value": NNUM, "unit": STR, "evidence": _arr(OBJ)},
                            additionalProperties=True)
    s["FabricQuestion"] = _obj({"question": STR, "value_is": STR, "groups": _arr(_ref("FabricGroup"))})
    s["FabricReport"] = _obj({
        "now": NUM, "now_iso": STR, "entities": INT, "refused": INT, "config": OBJ, "fabrics": _arr(STR),
        "questions": _obj({q: _ref("FabricQuestion") for q in ("bandwidth", "congestion", "loss", "telemetry",
                                                                "placement", "diagnosability")})})
    s["AnnotationList"] = _obj({"annotations": _arr(_ref("AnnotationRecord"))})
    record = s["SilenceRecord"]  # the record as on the topic (closed), plus what the API adds
    s["Silence"] = {"type": "object", "description": "A silence record with its state at the time of the request",
                    "properties": {**record["properties"], "state": {"enum": ["pending", "active", "expired"]},
                                   "starts_at_iso": STR, "ends_at_iso": STR, "created_at_iso": STR,
                                   "updated_at_iso": STR},
                    "required": [*record["required"], "state"], "additionalProperties": False}
    s["SilenceList"] = _obj({"silences": _arr(_ref("Silence"))})
    s["Ready"] = _obj({"ready": BOOL, "checks": _obj({"broker": BOOL, "inventory": BOOL, "agents": BOOL,
                                                      "read_model": BOOL, "correlation": BOOL}),
                       "reasons": {"type": "object", "additionalProperties": STR},
                       "inventory_jobs": INT, "read_model": OBJ})
    s["Health"] = _obj({"status": {"const": "ok"}})
    # the GPU-time lost ledger (issue 22; streams/ledger.py, docs/capacity.md)
    s["CapacityRow"] = _obj({"kind": STR, "id": STR, "gpu_seconds": NUM, "gpu_hours": NUM, "incidents": INT,
                             "open": INT, "fixed": BOOL, "jobs": _arr(STR), "domains": _arr(STR),
                             "last_seen": NSTR})
    s["CapacityReport"] = _obj({"as_of": NUM, "as_of_iso": STR, "window": STR, "by": STR, "window_s": NNUM,
                                "from": NNUM, "to": NUM, "from_iso": NSTR, "to_iso": STR, "gpu_seconds": NUM,
                                "gpu_hours": NUM, "incidents": INT, "rows": _arr(_ref("CapacityRow"))})
    # fabric health, placement, the fleet page's heatmap (issue 22; streams/fabric_health.py)
    s["CapacityHeatmap"] = _obj({"as_of": NUM, "as_of_iso": STR, "by": STR, "window": STR, "bucket": STR,
                                 "bucket_s": NUM, "starts": _arr(NUM), "starts_iso": _arr(STR),
                                 "rows": _arr(_obj({"kind": STR, "id": STR, "gpu_hours": NUM,
                                                    "values": _arr(NUM)}))})
    s["HealthEvidence"] = _obj({"alert_id": STR, "alert_type": STR, "status": STR, "job_id": STR, "gpus": INT,
                                "ratio": NUM, "onset_iso": STR, "end_iso": NSTR, "gpu_seconds": NUM,
                                "root_cause": OBJ, "first_mover": {"type": ["object", "null"]},
                                "summary": NSTR})
    s["HealthEntity"] = _obj({"kind": STR, "id": STR, "state": {"enum": ["degraded", "recovered"]},
                              "gpu_seconds": NUM, "gpu_hours": NUM, "at_stake_gpus": NUM, "incidents": INT,
                              "open": INT, "jobs": _arr(STR), "since_iso": STR, "last_seen_iso": STR,
                              "nodes": _arr(STR), "evidence": _arr(_ref("HealthEvidence"))})
    s["DrainSuggestion"] = _obj({"kind": STR, "id": STR, "action": {"enum": ["drain", "inspect"]},
                                 "nodes": _arr(STR), "hostlist": STR, "reason": STR, "command": NSTR})
    s["FabricHealth"] = _obj({"as_of": NUM, "window": STR, "from": NUM, "to": NUM, "from_iso": STR, "to_iso": STR,
                              "degraded": INT, "entities": _arr(_ref("HealthEntity")),
                              "drain": _arr(_ref("DrainSuggestion")), "exclude": STR})
    s["PlacementCandidate"] = _obj({"rank": INT, "nodes": _arr(STR), "hostlist": STR, "gpus": INT,
                                    "leaves": _arr(STR), "spines": _arr(STR), "pods": INT, "degraded": _arr(STR),
                                    "contended": _arr(STR), "reason": STR})
    s["Placement"] = _obj({"gpus": INT, "class": STR, "min_leaves": INT, "free_gpus": INT,
                           "avoided": {"type": "object", "additionalProperties": STR}, "reason": STR,
                           "candidates": _arr(_ref("PlacementCandidate")), "exclude": STR, "busy": INT,
                           "degraded_switches": {"type": "object", "additionalProperties": STR},
                           "contended_switches": {"type": "object", "additionalProperties": STR},
                           "as_of": NNUM})
    s["SeriesSummary"] = _obj({"n": INT, "mean": NNUM, "p50": NNUM, "std": NNUM})
    change = {"change": NNUM, "ci95": {"type": ["array", "null"], "items": NUM}, "relative": NNUM,
              "significant": {"type": ["boolean", "null"]}}
    s["BeforeAfter"] = {"type": ["object", "null"], "required": ["baseline", "during", "after", *change, "vs_baseline"],
                        "properties": {"baseline": {"anyOf": [_ref("SeriesSummary"), {"type": "null"}]},
                                       "during": _ref("SeriesSummary"), "after": _ref("SeriesSummary"), **change,
                                       "vs_baseline": {"type": ["object", "null"]}}}
    s["IncidentEffect"] = _obj({"incident": STR, "alert_id": STR, "job_id": STR, "entities": _arr(OBJ),
                                "window_s": NUM, "cause_lane": NSTR, "held": BOOL,
                                "step_time": _ref("BeforeAfter"), "cause": _ref("BeforeAfter")})
    s["IncidentEffects"] = _obj({"window": STR, "as_of": NUM, "window_s": NUM, "compare_s": NUM,
                                 "incidents": _arr(_ref("IncidentEffect"))})
    # checkpoint-stagger advice per pool (issue 22; streams/checkpoint_advice.py)
    s["CheckpointJob"] = _obj({"job_id": STR, "gpus": INT, "writes": INT, "last_write_at": NSTR,
                               "period_s": NNUM, "phase_s": NNUM, "move": BOOL, "offset_s": NUM,
                               "next_write_at": NSTR, "suggested_start_at": NSTR})
    s["CheckpointPool"] = _obj({"pool": STR, "state": {"enum": ["contended", "clear"]}, "contentions": INT,
                                "latest": _obj({"alert_id": STR, "status": STR, "started_at": STR,
                                                "overlap_s": NNUM, "advice": NSTR}),
                                "jobs": _arr(_ref("CheckpointJob"))})
    s["CheckpointAdvice"] = _obj({"as_of": NUM, "as_of_iso": STR, "window": STR,
                                  "pools": _arr(_ref("CheckpointPool"))})
    return s


def _json_response(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "Bad input (the message names the field or parameter)", 401: "Missing or invalid bearer token",
            403: "Writes are disabled (no LOCKSTEP_API_TOKEN configured)", 404: "Not found",
            415: "The body is not application/json", 503: "Kafka did not take the write (retry)"}
    return {str(c): _json_response(text[c], "Error") for c in codes}


#: A heavy read beyond LOCKSTEP_WEB_MAX_HEAVY_REQUESTS at once (agents.web.HEAVY).
BUSY = {"429": {**_json_response("Busy: too many heavy reads at once; retry after Retry-After seconds", "Error"),
                "headers": {"Retry-After": {"description": "Seconds to wait (LOCKSTEP_WEB_RETRY_AFTER_S)",
                                            "schema": INT}}}}


def _param(name: str, where: str, description: str, schema: dict[str, Any] | None = None,
           required: bool | None = None) -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "schema": schema or STR,
            "required": where == "path" if required is None else required}


TIME = {"anyOf": [{"type": "number"}, {"type": "string", "format": "date-time"}]}
JOB = _param("job_id", "path", "Job id, as in the inventory (e.g. llm-70b)")
ALERT_Q = _param("alert", "query", "An alert id of this job: the incident to examine")
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]


def _get(op_id: str, summary: str, response: str, *, params: list[dict[str, Any]] | None = None,
         errors: tuple[int, ...] = (), tag: str = "read", description: str = "", heavy: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": [tag],
                          "responses": {"200": _json_response(summary, response), **_errors(*errors)}}
    if heavy:
        op["responses"].update(BUSY)
    if params:
        op["parameters"] = params
    if description:
        op["description"] = description
    return {"get": op}


@cache
def _document() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/healthz": _get("healthz", "The process is up", "Health", tag="operations"),
        "/readyz": {"get": {
            "operationId": "readyz", "summary": "Ready: inventory loaded, agents running, read model caught up",
            "tags": ["operations"],
            "responses": {"200": _json_response("Ready", "Ready"), "503": _json_response("Not ready yet", "Ready")}}},
        "/metrics": {"get": {
            "operationId": "metrics", "summary": "Prometheus metrics of this worker", "tags": ["operations"],
            "responses": {"200": {"description": "Prometheus text exposition format",
                                  "content": {"text/plain": {"schema": STR}}}}}},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document", "tags": ["operations"],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": OBJ}}}}}},
        "/jobs": _get("listJobs", "Every job with its live status", "JobList", heavy=True),
        "/jobs/{job_id}": _get(
            "getJob", "A job's GPUs, nodes, NIC -> leaf -> spine paths and pools", "JobDetail", heavy=True,
            params=[JOB, _param("offset", "query", "First node of the page (default 0)", {"type": "integer",
                                                                                         "minimum": 0}, False),
                    _param("limit", "query", "Nodes per page (1-10000, default 1000)",
                           {"type": "integer", "minimum": 1, "maximum": 10000}, False)], errors=(400, 404),
            description="node_list holds the nodes [offset, offset + limit); gpu_list, paths and leaves are "
                        "theirs; page gives the totals and next_offset."),
        "/jobs/{job_id}/timeline": _get(
            "getTimeline", "The job's lanes on one time axis, anomalies, first mover, incident window", "Timeline",
            params=[JOB, _param("from", "query", "Start (Unix seconds or RFC 3339)", TIME, False),
                    _param("to", "query", "End, exclusive (Unix seconds or RFC 3339)", TIME, False),
                    _param("step", "query", "Seconds per point (1-60; default: at most 900 points)",
                           {"type": "integer", "minimum": 1, "maximum": 60}, False), ALERT_Q],
            errors=(400, 404), heavy=True,
            description="Without from/to: around `alert`'s incident, else the last 15 minutes held for the job."),
        "/jobs/{job_id}/diagnosis": _get("getDiagnosis", "The seven answers with their evidence", "Diagnosis",
                                         params=[JOB, ALERT_Q], errors=(400, 404), heavy=True),
        "/alerts": _get("listAlerts", "Alerts with their lifecycle, newest first", "AlertList", params=[
            _param("job", "query", "Only this job's alerts"),
            _param("status", "query", "Only firing or only resolved", {"enum": ["firing", "resolved"]}),
            _param("limit", "query", "At most this many (1-1000, default 100)",
                   {"type": "integer", "minimum": 1, "maximum": 1000})], errors=(400,), heavy=True),
        "/alerts/{alert_id}": _get("getAlert", "One alert: latest record, first firing record, lifecycle",
                                   "AlertDetail", params=[_param("alert_id", "path", "Alert id")], errors=(404,)),
        "/fabric/{switch}/{port}": _get(
            "getFabricPort", "Who is behind a switch port: nodes, jobs, GPU counts", "FabricPort",
            params=[_param("switch", "path", "Switch name (e.g. leaf03)"), _param("port", "path", "Port (e.g. 17)")],
            errors=(404,), heavy=True),
        "/capacity": _get(
            "getCapacity", "GPU-hours lost per root-cause entity, job or domain over a window, largest first",
            "CapacityReport", heavy=True, errors=(400,), params=[
                _param("by", "query", "entity (default), port, leaf, spine, core, switch, nic, gpu, node, pool, "
                       "unattributed, job or domain", required=False),
                _param("window", "query", "hour, day, week or <n>s|m|h|d|w (default 7d)", required=False),
                _param("limit", "query", "At most this many rows (1-1000, default 20)",
                       {"type": "integer", "minimum": 1, "maximum": 1000}, False)],
            description="GPU-seconds lost = GPUs x fraction of step time lost x duration, as of the latest event "
                        "time held (docs/capacity.md)."),
        "/fabric/report": _get(
            "getFabricReport", "The six fabric questions per fabric and tier, each with its evidence",
            "FabricReport", heavy=True,
            description="Bandwidth, congestion, loss, telemetry coverage, placement, diagnosability "
                        "(docs/fabric.md), as of the latest event time the read model holds."),
        "/capacity/heatmap": _get(
            "getCapacityHeatmap", "GPU-hours lost per group and time bucket (the fleet page's leaf x time grid)",
            "CapacityHeatmap", heavy=True, errors=(400,), params=[
                _param("by", "query", "leaf (default), or any grouping /capacity takes", required=False),
                _param("window", "query", "hour, day, week or <n>s|m|h|d|w (default 1d)", required=False),
                _param("bucket", "query", "The bucket, same syntax (default 1h; at most 1000 per window)",
                       required=False),
                _param("limit", "query", "At most this many rows (1-1000, default 20)",
                       {"type": "integer", "minimum": 1, "maximum": 1000}, False)]),
        "/capacity/effects": _get(
            "getCapacityEffects", "Before and after each resolved incident: step time and the cause's lane",
            "IncidentEffects", heavy=True, errors=(400,), params=[
                _param("window", "query", "Incidents resolved in this window (default 7d)", required=False),
                _param("limit", "query", "At most this many incidents (1-200, default 20)",
                       {"type": "integer", "minimum": 1, "maximum": 200}, False)],
            description="During the incident against after it, mean change with a 95% interval (Welch); "
                        "docs/capacity.md \"Before and after\"."),
        "/fabric/health": _get(
            "getFabricHealth", "Degraded and recovered fabric entities: evidence, GPU-hours, drain suggestions",
            "FabricHealth", heavy=True, errors=(400,), params=[
                _param("window", "query", "hour, day, week or <n>s|m|h|d|w (default 1d)", required=False),
                _param("limit", "query", "At most this many entities (1-1000, default 50)",
                       {"type": "integer", "minimum": 1, "maximum": 1000}, False)],
            description="From the ledger's incidents and the alerts (docs/capacity.md \"Fabric health\")."),
        "/placement": _get(
            "getPlacement", "Candidate node sets for N GPUs, ranked with the reason, and the advisory --exclude",
            "Placement", heavy=True, errors=(400,), params=[
                _param("gpus", "query", "GPUs asked (1-1000000)", {"type": "integer", "minimum": 1}, True),
                _param("class", "query", "tightly-coupled (default) or data-loader-heavy",
                       {"enum": ["tightly-coupled", "data-loader-heavy"]}, False)],
            description="Over the live inventory, away from drained, down, busy nodes and the entities of the "
                        "ledger's open incidents (docs/capacity.md \"Placement advice\")."),
        "/advice/checkpoints": _get(
            "getCheckpointAdvice", "Checkpoint-stagger advice per storage pool: the jobs sharing it, their "
            "checkpoint period and phase as observed, the offset suggested to each", "CheckpointAdvice",
            heavy=True, errors=(400,), params=[
                _param("window", "query", "Contentions started in this window (default 7d)", required=False),
                _param("pool", "query", "Only this pool", required=False)],
            description="From the checkpoint_contention alerts the read model holds, as of its latest event time "
                        "(docs/capacity.md \"Checkpoint-stagger advice\")."),
        "/annotations": {
            **_get("listAnnotations", "Operator annotations, oldest first", "AnnotationList",
                   params=[_param("job", "query", "Only this job's annotations")]),
            "post": {"operationId": "createAnnotation", "summary": "Record a fix or change on a job (needs the token)",
                     "tags": ["write"], "security": BEARER,
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": _ref("AnnotationRequest")}}},
                     "responses": {"201": _json_response("The annotation written", "AnnotationRecord"),
                                   **_errors(400, 401, 403, 415, 503)}}},
        "/silences": {
            **_get("listSilences", "Silences, active first", "SilenceList",
                   params=[_param("state", "query", "Only this state",
                                  {"enum": ["active", "pending", "expired"]})], errors=(400,), heavy=True),
            "post": {"operationId": "createSilence", "summary": "Silence alerts matching labels (needs the token)",
                     "tags": ["write"], "security": BEARER,
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": _ref("SilenceRequest")}}},
                     "responses": {"201": _json_response("The silence written", "Silence"),
                                   **_errors(400, 401, 403, 415, 503)}}},
        "/silences/{silence_id}": {
            **_get("getSilence", "One silence", "Silence", params=[_param("silence_id", "path", "Silence id")],
                   errors=(404,)),
            "delete": {"operationId": "expireSilence", "summary": "Expire a silence now (needs the token)",
                       "tags": ["write"], "security": BEARER,
                       "parameters": [_param("silence_id", "path", "Silence id")],
                       "responses": {"200": _json_response("The silence, expired", "Silence"),
                                     **_errors(401, 403, 404, 503)}}},
        "/api/v1/write": {
            "post": {"operationId": "remoteWrite",
                     "summary": "Prometheus remote-write 1.0 receiver: samples to telemetry.<layer> (needs the token)",
                     "description": "Body: snappy-compressed protobuf WriteRequest, with Content-Encoding: snappy, "
                                    "Content-Type: application/x-protobuf, X-Prometheus-Remote-Write-Version: "
                                    "0.1.0 (agents/remote_write.py).",
                     "tags": ["write"], "security": BEARER,
                     "requestBody": {"required": True, "content": {"application/x-protobuf": {
                         "schema": {"type": "string", "contentMediaType": "application/x-protobuf"}}}},
                     "responses": {"204": {"description": "Taken: samples written, unusable records dead-lettered"},
                                   **_errors(400, 401, 403, 415, 503),
                                   "413": _json_response("The body is over 2 MiB, or inflates to over 4 MiB",
                                                         "Error")}}},
        "/api/v1/alertmanager": {
            "post": {"operationId": "alertmanagerWebhook",
                     "summary": "Alertmanager webhook (version 4): each alert an event on its node's jobs' timelines "
                                "(needs the token)",
                     "description": "Body: Alertmanager's webhook message, application/json (agents/alert_input.py, "
                                    "streams/formats/alertmanager_webhook.py).",
                     "tags": ["write"], "security": BEARER,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
                     "responses": {"200": {"description": "Taken: events written, unusable alerts dead-lettered",
                                           "content": {"application/json": {"schema": {
                                               "type": "object", "required": ["events", "rejected"],
                                               "properties": {"events": {"type": "integer"},
                                                              "rejected": {"type": "integer"}}}}}},
                                   **_errors(400, 401, 403, 415, 503),
                                   "413": _json_response("The body is over 4 MiB", "Error")}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Lockstep operator API", "version": __version__,
                 "description": "Jobs, timelines, the seven answers, alerts, fabric ports, annotations and "
                                "silences, answered by any worker (docs/api.md)."},
        "paths": paths,
        "components": {"schemas": _schemas(), "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "LOCKSTEP_API_TOKEN"}}},
        "tags": [{"name": "read", "description": "Open to anyone who reaches the port"},
                 {"name": "write", "description": "Need Authorization: Bearer <LOCKSTEP_API_TOKEN>"},
                 {"name": "operations", "description": "Probes and metrics"}],
    }


def openapi_document(public_url: str | None = None) -> dict[str, Any]:
    """The document; ``servers`` names ``public_url`` when one is configured."""
    doc = dict(_document())
    if public_url:
        doc["servers"] = [{"url": public_url.rstrip("/")}]
    return doc
