"""The typed models read a document as its JSON Schema judges it (hypothesis):

1. a member spelled like a model field's Python name (``decided_by`` for ``decidedBy``) is
   an unknown member: kept, and written back as it was, where the schema is open; refused
   where the schema is closed (``additionalProperties: false``); never read as the field;
2. an integer member accepts exactly the numbers JSON Schema's ``integer`` accepts there
   (``2.0`` and ``1e300`` too, not ``2.5`` or ``true``), reads them as integers and writes
   them back as they were given.

Each document is read from a dict, from JSON text, and from JSON text whose underscores
are all written as ``\\u005f`` escapes.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tests.conftest import load_example
from tests.property.test_formats_properties import (
    EXAMPLE_NAMES,
    SMALL_JSON,
    all_paths,
    invocations,
    receipts,
    run_documents,
    same_json,
)

from oarlock.errors import CanonicalizationError, FormatError
from oarlock.formats import (
    RunDocument,
    ToolInvocation,
    ToolReceipt,
    _models,
    digest,
    dump,
    dump_json,
    parse,
    parse_json,
    validate,
)

PROPS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MODELS: dict[str, type[BaseModel]] = {
    "run": RunDocument,
    "invocation": ToolInvocation,
    "receipt": ToolReceipt,
}
KIND_OF_FOLDER = {"runs": "run", "invocations": "invocation", "receipts": "receipt"}

# every Python name of a model field that differs from its JSON name
PYTHON_NAMES = sorted(
    {
        name
        for cls in vars(_models).values()
        if isinstance(cls, type) and issubclass(cls, BaseModel)
        for name, field in cls.model_fields.items()
        if field.alias and field.alias != name
    }
)
# those of optional fields of open objects: the members a reader could mistake for the
# field it would then write (``isError: false``) though the document has no such member
OPTIONAL_OPEN = sorted(
    {
        name
        for cls in vars(_models).values()
        if isinstance(cls, type) and issubclass(cls, BaseModel)
        if cls.model_config.get("extra") == "allow"
        for name, field in cls.model_fields.items()
        if field.alias and field.alias != name and not field.is_required()
    }
)


def texts(doc: dict[str, Any]) -> list[str]:
    """``doc`` as JSON text, plainly and with every underscore escaped."""
    plain = json.dumps(doc, ensure_ascii=False)
    return [plain, plain.replace("_", "\\u005f")]


def reads(kind: str, doc: dict[str, Any]) -> list[BaseModel | None]:
    """``doc`` read from a dict and from each of its texts: the model, or None if refused."""
    model = MODELS[kind]
    out: list[BaseModel | None] = []
    for read, data in [(parse, doc)] + [(parse_json, t) for t in texts(doc)]:
        try:
            out.append(read(model, data))  # type: ignore[operator]
        except FormatError:
            out.append(None)
    return out


def documents() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    examples = st.sampled_from(EXAMPLE_NAMES).map(
        lambda name: (KIND_OF_FOLDER[name.split("/")[0]], load_example(name))
    )
    generated = st.one_of(
        run_documents().map(lambda d: ("run", d)),
        invocations().map(lambda d: ("invocation", d)),
        receipts().map(lambda d: ("receipt", d)),
    )
    return st.one_of(examples, generated)


def object_paths(doc: Any) -> list[tuple[Any, ...]]:
    paths = []
    for path in all_paths(doc):
        target = doc
        for p in path:
            target = target[p]
        if isinstance(target, dict):
            paths.append(path)
    return paths


@PROPS
@given(documents(), st.data())
def test_a_member_named_like_a_python_name_is_judged_as_the_schema_judges_it(
    document: tuple[str, dict[str, Any]], data: st.DataObject
) -> None:
    kind, doc = document
    path = data.draw(st.sampled_from(object_paths(doc)), label="object")
    target: Any = doc
    for p in path:
        target = target[p]
    names = data.draw(
        st.lists(st.sampled_from(PYTHON_NAMES) | st.sampled_from(OPTIONAL_OPEN), min_size=1,
                 max_size=3)
    )  # fmt: skip
    for name in names:
        target[name] = data.draw(SMALL_JSON, label=name)
    accepted = validate(doc, kind, schema_only=True).valid
    for model in reads(kind, doc):
        assert (model is not None) is accepted, (path, names)
        if model is not None:  # kept as written: no member renamed, none added
            assert same_json(dump(model), doc)
            assert same_json(json.loads(dump_json(model)), doc)


def test_python_names_are_unknown_members_where_the_schema_is_open(run_waiting) -> None:
    run_waiting["pendingApprovals"][0]["decided_by"] = "policy"  # not decidedBy
    run_waiting["pendingApprovals"][0]["tool_call_id"] = 7  # and toolCallId stays
    for model in reads("run", run_waiting):
        assert isinstance(model, RunDocument)
        approval = model.pending_approvals[0]
        assert approval.decided_by is None
        assert approval.tool_call_id == "call_2"
        assert approval.model_extra == {"decided_by": "policy", "tool_call_id": 7}
        assert same_json(dump(model), run_waiting)


def test_python_names_are_refused_where_the_schema_is_closed(example) -> None:
    invocation = example("invocations/refund-spend.json")
    invocation["invocation_id"] = invocation.pop("invocationId")
    assert not validate(invocation, "invocation", schema_only=True).valid
    assert reads("invocation", invocation) == [None, None, None]
    receipt = example("receipts/refund-succeeded.json")
    receipt["receipt_hash"] = receipt["receiptHash"]  # an unknown member, next to the real one
    assert reads("receipt", receipt) == [None, None, None]


# -- integer members ----------------------------------------------------------------------

INTEGER_MEMBERS = [
    ("runs/refund-waiting-approval.json", ("turns",), ("turns",)),
    ("invocations/refund-spend.json", ("timeoutSeconds",), ("timeout_seconds",)),
    ("receipts/refund-succeeded.json", ("usage", "durationMs"), ("usage", "duration_ms")),
    ("receipts/refund-succeeded.json", ("usage", "bytesIn"), ("usage", "bytes_in")),
    ("receipts/refund-succeeded.json", ("usage", "bytesOut"), ("usage", "bytes_out")),
]
NUMBERS = st.one_of(
    st.integers(-5, 2**31),
    st.integers(-(2**80), 2**80),
    st.integers(-(2**60), 2**60).map(float),  # integral floats
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2.0, -0.0, 0.0, 1e300, -1.0, 2.5, 9007199254740993.0, True, False]),
)


@PROPS
@given(st.sampled_from(INTEGER_MEMBERS), NUMBERS)
def test_integer_members_read_what_json_schema_accepts(
    member: tuple[str, tuple[str, ...], tuple[str, ...]], value: Any
) -> None:
    name, path, attributes = member
    kind = KIND_OF_FOLDER[name.split("/")[0]]
    doc = load_example(name)
    target = doc
    for p in path[:-1]:
        target = target.setdefault(p, {})
    target[path[-1]] = value
    accepted = validate(doc, kind, schema_only=True).valid
    integer = type(value) is int or (type(value) is float and value.is_integer())
    assert accepted is (integer and (path != ("turns",) or value >= 0))  # turns: minimum 0
    for model in reads(kind, doc):
        assert (model is not None) is accepted, value
        if model is None:
            continue
        read: Any = model
        for attribute in attributes:
            read = getattr(read, attribute)
        assert isinstance(read, int) and not isinstance(read, bool)
        assert read == value
        assert type(read + 1) is int  # arithmetic gives plain integers
        assert same_json(dump(model), doc)  # written back as given: 2.0 stays 2.0
        assert same_json(json.loads(dump_json(model)), doc)
        with contextlib.suppress(CanonicalizationError):  # beyond 2**53: no canonical form
            assert digest(dump(model)) == digest(doc)


def test_an_integral_float_is_the_integer_it_names(run_waiting) -> None:
    run_waiting["turns"] = 2.0
    for model in reads("run", run_waiting):
        assert isinstance(model, RunDocument)
        assert model.turns == 2
        assert dump(model)["turns"] == 2.0
        assert json.dumps(dump(model)["turns"]) == "2.0"
        model.turns += 1  # the engine counts on from it
        assert type(model.turns) is int
        assert json.loads(dump_json(model))["turns"] == 3
        assert json.dumps(dump(model)["turns"]) == "3"
