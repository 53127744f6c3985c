"""The OpenAPI document is valid, covers every route, and every answer of a live worker conforms to it."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate

from agents.openapi import openapi_document

from .client import get, request
from .conftest import LiveWorker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(1200)]


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = openapi_document("https://lockstep.example.com/")
    validate(doc)
    assert doc["openapi"] == "3.1.0" and doc["servers"] == [{"url": "https://lockstep.example.com"}]
    writes = [(p, m) for p, ops in doc["paths"].items() for m, op in ops.items() if op.get("security")]
    assert sorted(writes) == [("/annotations", "post"), ("/api/v1/alertmanager", "post"), ("/api/v1/write", "post"),
                              ("/silences", "post"),
                              ("/silences/{silence_id}", "delete")]


def test_every_route_is_documented() -> None:
    from agents.web import WebServer

    class Stub:  # the server only builds its routes here; nothing is started
        from agents.metrics import WorkerMetrics
        from models.settings import LockstepSettings
        from streams.inventory import InventoryIndex

        settings = LockstepSettings(_env_file=None)  # type: ignore[call-arg]
        bootstrap = "127.0.0.1:1"
        inventory = InventoryIndex()
        metrics = WorkerMetrics()
        app = None
        reader = None

    app = WebServer(Stub()).make_app()
    routes = {(r.resource.canonical, r.method.lower()) for r in app.router.routes() if r.resource is not None
              and r.method != "HEAD"}
    routes = {(p, m) for p, m in routes if p not in ("/", "/fleet", "/static/{name}")}
    doc = openapi_document()
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented


def conforms(doc: dict[str, Any], reply: Any, path_template: str, method: str = "get") -> None:
    op = doc["paths"][path_template][method]
    response = op["responses"].get(str(reply.status))
    assert response is not None, f"{method.upper()} {path_template} answered {reply.status}, not documented"
    media = response["content"]
    if "application/json" in media:
        assert reply.headers["content-type"].startswith("application/json")
        schema = {**media["application/json"]["schema"], "components": doc["components"]}
        jsonschema.Draft202012Validator(schema).validate(reply.json)
    else:
        assert reply.headers["content-type"].startswith("text/plain")


def test_every_answer_of_a_live_worker_conforms(seed_worker: LiveWorker) -> None:
    doc = openapi_document()
    url, token = seed_worker.url, seed_worker.token
    alert_id = get(url, "/alerts").json["alerts"][0]["alert_id"]
    calls = [
        ("/healthz", "/healthz"), ("/readyz", "/readyz"), ("/metrics", "/metrics"), ("/openapi.json", "/openapi.json"),
        ("/jobs", "/jobs"), ("/jobs/{job_id}", "/jobs/llm-70b"), ("/jobs/{job_id}", "/jobs/vision-7b"),
        ("/jobs/{job_id}", "/jobs/nobody"),
        ("/jobs/{job_id}/timeline", "/jobs/llm-70b/timeline"), ("/jobs/{job_id}/timeline", "/jobs/rec-ft/timeline"),
        ("/jobs/{job_id}/timeline", "/jobs/llm-70b/timeline?step=7"),
        ("/jobs/{job_id}/timeline", f"/jobs/llm-70b/timeline?alert={alert_id}"),
        ("/jobs/{job_id}/timeline", "/jobs/llm-70b/timeline?from=soon"),
        ("/jobs/{job_id}/diagnosis", "/jobs/llm-70b/diagnosis"), ("/jobs/{job_id}/diagnosis", "/jobs/rec-ft/diagnosis"),
        ("/jobs/{job_id}/diagnosis", "/jobs/nobody/diagnosis"),
        ("/alerts", "/alerts"), ("/alerts", "/alerts?job=llm-70b&status=resolved&limit=5"),
        ("/alerts", "/alerts?status=sleeping"), ("/alerts/{alert_id}", f"/alerts/{alert_id}"),
        ("/alerts/{alert_id}", "/alerts/nope"), ("/fabric/{switch}/{port}", "/fabric/leaf03/17"),
        ("/fabric/{switch}/{port}", "/fabric/leaf06/20"), ("/fabric/{switch}/{port}", "/fabric/spine01/1"),
        ("/annotations", "/annotations"), ("/silences", "/silences"), ("/silences", "/silences?state=gone"),
    ]
    for template, path in calls:
        conforms(doc, get(url, path, headers={"Accept": "*/*"} if template == "/metrics" else None), template)

    made = request(url, "/silences", method="POST", token=token, body={
        "matchers": {"job_id": "rec-ft"}, "kind": "maintenance", "duration_s": 600, "comment": "conformance",
        "created_by": "tests"})
    conforms(doc, made, "/silences", "post")
    sid = made.json["silence_id"]
    conforms(doc, get(url, f"/silences/{sid}"), "/silences/{silence_id}")
    conforms(doc, request(url, f"/silences/{sid}", method="DELETE", token=token), "/silences/{silence_id}", "delete")
    conforms(doc, request(url, "/silences", method="POST", token=token, body={"matchers": {}}), "/silences", "post")
    conforms(doc, request(url, "/annotations", method="POST", token=token,
                          body={"job_id": "rec-ft", "text": "conformance"}), "/annotations", "post")
    conforms(doc, request(url, "/annotations", method="POST", raw=b"job_id=x",
                          headers={"Content-Type": "application/x-www-form-urlencoded"}, token=token),
             "/annotations", "post")
