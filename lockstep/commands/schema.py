"""``lockstep schema [NAME]``: print the JSON Schema of a data contract."""

from __future__ import annotations

import argparse
import sys

import orjson


def _models() -> dict[str, object]:
    from pydantic import TypeAdapter

    from models.alerts import Alert
    from models.inventory import InventoryEvent
    from models.records import AnomalyRecord, DeadLetter, WatermarkRecord
    from models.samples import TelemetrySample
    from models.settings import LockstepSettings

    return {
        "sample": TypeAdapter(TelemetrySample | list[TelemetrySample]),
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
    return target.model_json_schema()  # type: ignore[attr-defined, no-any-return]


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
