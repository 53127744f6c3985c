"""``lockstep schema [NAME]``: print the JSON Schema of a data contract.

``sample`` is the schema of a *message* on a ``telemetry.<layer>`` topic, exactly as the worker
judges it (:func:`streams.ingest.decode_records`, :func:`streams.ingest.validate_record`): one
sample, an array of samples, ``{"samples": [...]}``, or the end-of-input control message; a sample's
``ts`` and ``ingest_ts`` are Unix seconds or RFC 3339 strings. Validate with format checking on (the
``date-time`` format rejects impossible dates such as February 30, as the worker does). What a JSON
Schema cannot say: a message is at most ``MAX_MESSAGE_BYTES``, and an RFC 3339 time must fall in
2000-01-01..2100-01-01 *UTC* (the pattern bounds the year as written).
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

import orjson

#: RFC 3339 ``date-time`` (section 5.6) with a year of 2000-2099, as the worker's time range allows.
RFC3339_PATTERN = (r"^20[0-9]{2}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
                   r"([Zz]|[+-][0-9]{2}:[0-9]{2})$")


def sample_message_schema() -> dict[str, Any]:
    """The JSON Schema of a telemetry message, built on :class:`models.samples.TelemetrySample`.

    >>> doc = sample_message_schema()
    >>> [branch.get("type", branch.get("$ref")) for branch in doc["anyOf"]]
    ['#/$defs/TelemetrySample', 'array', 'object', 'object']
    >>> doc["$defs"]["Timestamp"]["anyOf"][1]["format"]
    'date-time'
    """
    from models.samples import (
        MAX_BATCH_SAMPLES,
        MAX_LABEL_KEY_LEN,
        MAX_LABEL_VALUE_LEN,
        MAX_LABELS,
        TelemetrySample,
    )
    from models.timeutil import MAX_TS, MIN_TS

    sample = copy.deepcopy(TelemetrySample.model_json_schema())
    defs: dict[str, Any] = sample.pop("$defs")
    props = sample["properties"]
    defs["Timestamp"] = {
        "description": "Unix seconds in [2000-01-01, 2100-01-01), or an RFC 3339 date-time with an offset",
        "anyOf": [{"type": "number", "minimum": MIN_TS, "exclusiveMaximum": MAX_TS},
                  {"type": "string", "maxLength": 64, "pattern": RFC3339_PATTERN, "format": "date-time"}]}
    props["ts"] = {"$ref": "#/$defs/Timestamp", "description": props["ts"].get("description", "")}
    ingest = props["ingest_ts"]
    props["ingest_ts"] = {"anyOf": [{"$ref": "#/$defs/Timestamp"}, {"type": "null"}], "default": None,
                          "description": ingest.get("description", "")}
    props["labels"].update({"maxProperties": MAX_LABELS,
                            "propertyNames": {"minLength": 1, "maxLength": MAX_LABEL_KEY_LEN},
                            "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE_LEN}})
    props["value"]["description"] = "a finite number"
    # A counter is never negative (the worker rejects the sample).
    sample["if"] = {"properties": {"kind": {"const": "counter"}}, "required": ["kind"]}
    sample["then"] = {"properties": {"value": {"minimum": 0}}}
    defs["TelemetrySample"] = sample
    ref = {"$ref": "#/$defs/TelemetrySample"}
    # A batch of more than MAX_BATCH_SAMPLES is refused whole, before its samples are looked at
    # (as the worker does); said with if/else so a validator need not check 100,000 samples first.
    batch = {"type": "array", "if": {"maxItems": MAX_BATCH_SAMPLES}, "then": {"items": ref},
             "else": {"description": f"more than {MAX_BATCH_SAMPLES} samples", "not": {}}}
    # How the worker tells the forms apart: "samples" without "layer" is the wrapper; else
    # "lockstep_control" is a control message; else the object is one sample.
    wrapper = {"required": ["samples"], "not": {"required": ["layer"]}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Telemetry message",
        "description": "A message on a telemetry.<layer> topic: one sample, an array of samples, "
                       '{"samples": [...]}, or {"lockstep_control": "eos"} (end of input).',
        "$defs": defs,
        "anyOf": [
            {**ref, "not": {"required": ["lockstep_control"]}},
            batch,
            {"type": "object", **wrapper, "properties": {"samples": batch}},
            {"type": "object", "required": ["lockstep_control"], "properties": {"lockstep_control": {"const": "eos"}},
             "not": wrapper},
        ],
    }


def _models() -> dict[str, Any]:
    from pydantic import TypeAdapter

    from models.alerts import Alert
    from models.inventory import InventoryEvent
    from models.records import AnomalyRecord, DeadLetter, WatermarkRecord
    from models.settings import LockstepSettings

    return {
        "sample": sample_message_schema,
        "inventory": TypeAdapter(InventoryEvent),
        "alert": TypeAdapter(Alert),
        "dead-letter": TypeAdapter(DeadLetter),
        "anomaly": TypeAdapter(AnomalyRecord),
        "watermark": TypeAdapter(WatermarkRecord),
        "settings": LockstepSettings,
    }


def schema_of(name: str) -> dict[str, object]:
    from pydantic import TypeAdapter

    target = _models()[name]
    if isinstance(target, TypeAdapter):
        return target.json_schema()
    if callable(target) and not isinstance(target, type):
        return target()  # type: ignore[no-any-return]
    return target.model_json_schema()  # type: ignore[no-any-return]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("schema", help="print the JSON Schema of a contract", description=__doc__)
    p.add_argument("name", nargs="?", default=None,
                   help="sample | inventory | alert | dead-letter | anomaly | watermark | settings (default: all)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    names = list(_models())
    if args.name is not None and args.name not in names:
        print(f"lockstep schema: unknown contract {args.name!r}; one of {', '.join(names)}", file=sys.stderr)
        return 2
    doc = schema_of(args.name) if args.name else {n: schema_of(n) for n in names}
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0
