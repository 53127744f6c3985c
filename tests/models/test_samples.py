"""The telemetry sample contract: the pydantic reference model and the fast validator agree."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from models.samples import TelemetrySample
from streams.ingest import validate_record

GOOD = {"ts": 1764502930.25, "layer": "switch", "source": "leaf03", "metric": "SymbolErrorCounter",
        "value": 4211, "labels": {"port": "17"}}


def with_(**changes: object) -> dict[str, object]:
    doc = dict(GOOD)
    for key, value in changes.items():
        if value is ...:
            doc.pop(key)
        else:
            doc[key] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (with_(value=math.nan), "value is not finite"),
        (with_(value=math.inf), "value is not finite"),
        (with_(value="12"), "value must be a number"),
        (with_(value=True), "value must be a number"),
        (with_(layer="moon"), "unknown layer 'moon'"),
        (with_(ts=...), "missing field 'ts'"),
        (with_(value=...), "missing field 'value'"),
        (with_(ts=12.0), "outside 2000-01-01..2100-01-01"),
        (with_(ts=9e12), "outside 2000-01-01..2100-01-01"),
        (with_(ts="2025-11-30T11:42:10"), "has no UTC offset"),
        (with_(ts="yesterday"), "is not RFC 3339"),
        (with_(source="x" * 257), "source must be a string of 1..256"),
        (with_(source=""), "source must be a string of 1..256"),
        (with_(labels={"port": 17}), "label 'port' is not a string"),
        (with_(labels={"port": "x" * 1025}), "longer than 1024"),
        (with_(labels=["port"]), "labels must be an object"),
        (with_(kind="histogram"), "kind must be gauge or counter"),
        (with_(kind="counter", value=-1), "counter value is negative"),
    ],
)
def test_fast_validator_rejects_with_a_clear_reason(doc: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        validate_record(doc)
    with pytest.raises(ValidationError):
        TelemetrySample.model_validate(doc)


@pytest.mark.parametrize(
    "doc",
    [
        GOOD,
        with_(ts="2025-11-30T11:42:10.250Z"),
        with_(ts="2025-11-30T12:42:10.250+01:00"),
        with_(labels=...),
        with_(kind="gauge", value=-3.5),
        with_(ingest_ts=1764502930.5, extra_field="ignored"),
    ],
)
def test_fast_validator_accepts_what_the_contract_accepts(doc: dict[str, object]) -> None:
    fast = validate_record(doc)
    ref = TelemetrySample.model_validate(doc)
    assert fast.ts == ref.ts
    assert fast.value == float(ref.value)
    assert fast.labels == ref.labels
    assert fast.layer == ref.layer.value


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**13), st.floats(allow_nan=True),
                    st.text(max_size=8), st.just("2025-11-30T11:42:10Z"))
docs = st.fixed_dictionaries(
    {},
    optional={
        "ts": st.one_of(scalars, st.floats(946684800, 4102444799)),
        "layer": st.sampled_from(["gpu", "nccl", "nic", "switch", "storage", "host", "step", "moon", ""]),
        "source": st.one_of(st.text(max_size=4), st.integers()),
        "metric": st.one_of(st.text(max_size=4), st.integers()),
        "value": scalars,
        "labels": st.one_of(st.dictionaries(st.text(max_size=3), st.one_of(st.text(max_size=3), st.integers()),
                                            max_size=3), st.lists(st.integers(), max_size=2)),
        "kind": st.one_of(st.none(), st.sampled_from(["gauge", "counter", "summary"])),
    },
)


@settings(max_examples=400, deadline=None)
@given(docs)
def test_fast_validator_and_pydantic_model_agree(doc: dict[str, object]) -> None:
    try:
        fast = validate_record(doc)
    except ValueError:
        fast = None
    try:
        ref = TelemetrySample.model_validate(doc)
    except ValidationError:
        ref = None
    assert (fast is None) == (ref is None), doc
    if fast is not None and ref is not None:
        assert fast.ts == ref.ts and fast.value == float(ref.value) and fast.source == ref.source
