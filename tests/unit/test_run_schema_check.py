"""The compiled run check shipped in formats/_run_schema_check.py is exactly what
``python -m oarlock.formats._gen_run_check`` writes from today's schema, and the quick check
built on it (formats/_runcheck.py) accepts the examples and refuses, so that the full check
decides, whatever it cannot vouch for."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import RUN_EXAMPLES, load_example

from oarlock.formats import _models, _run_schema_check
from oarlock.formats._gen_run_check import COMMAND, TARGET, generate, schema_digest
from oarlock.formats._runcheck import _FORMATS, PYTHON_NAMES, conforming_run
from oarlock.formats._schemas import is_datetime_format, is_uuid_format


def test_the_shipped_run_check_was_generated_from_todays_schema() -> None:
    assert schema_digest() == _run_schema_check.SCHEMA, f"out of date: run `{COMMAND}`"


def test_the_shipped_run_check_is_what_the_generator_writes() -> None:
    import fastjsonschema

    if fastjsonschema.VERSION != _run_schema_check.VERSION:  # its output may differ a little
        pytest.skip(
            f"generated with fastjsonschema {_run_schema_check.VERSION}, "
            f"{fastjsonschema.VERSION} is installed; the schema digest is checked above"
        )
    assert TARGET.read_text("utf-8") == generate(), f"out of date: run `{COMMAND}`"


def test_the_generated_check_imports_nothing_but_re() -> None:
    imports = [
        line
        for line in TARGET.read_text("utf-8").splitlines()
        if line.startswith(("import", "from"))
    ]
    assert imports == ["import re"]


def test_python_names_are_those_of_the_run_models_aliased_fields() -> None:
    models = (
        _models.RunDocument,
        _models.Usage,
        _models.PendingApproval,
        _models.UserMessage,
        _models.AssistantMessage,
        _models.TextPart,
        _models.ToolCallPart,
        _models.ToolResultPart,
    )
    aliased = {
        name
        for model in models
        for name, field in model.model_fields.items()
        if field.alias not in (None, name)
    }
    assert aliased == PYTHON_NAMES


@pytest.mark.parametrize("name", RUN_EXAMPLES)
def test_the_run_examples_pass_as_text_and_as_bytes(name: str) -> None:
    doc = load_example(name)
    text = json.dumps(doc, ensure_ascii=False)
    assert conforming_run(text) == doc
    assert conforming_run(text.encode("utf-8")) == doc


def example(**members: Any) -> dict[str, Any]:
    return {**load_example("runs/refund-completed.json"), **members}


def with_result_member(member: str, value: Any) -> dict[str, Any]:
    doc = example()
    doc["messages"][2]["content"][0][member] = value  # the first tool result
    return doc


REFUSED = {
    "not-utf8": b'{"format": "oar/0.2", "id": "\xff"}',
    "utf16": json.dumps(example()).encode("utf-16"),
    "truncated": json.dumps(example())[:-5],
    "array": "[]",
    "null": "null",
    "nan": json.dumps(example(usage={"inputTokens": 1, "outputTokens": 2, "costUsd": 0})).replace(
        '"costUsd": 0', '"costUsd": NaN'
    ),
    "lone-surrogate": json.dumps(example(input="\ud800")),
    "surrogate-pair": json.dumps(example(input="\U0001f600")),  # escaped: the full check
    "missing-member": json.dumps({k: v for k, v in example().items() if k != "usage"}),
    "bad-status": json.dumps(example(status="done")),
    "null-result": json.dumps(example(result=None)),  # the models accept it; the schema not
    "integral-float-turns": json.dumps(example(turns=3.0)),  # the schema accepts it
    "python-name-member": json.dumps(example(created_at="2026-01-01T00:00:00Z")),
    "python-name-in-a-part": json.dumps(with_result_member("is_error", True)),
}


@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_what_it_cannot_vouch_for_is_refused(raw: str | bytes) -> None:
    assert conforming_run(raw) is None


def test_python_names_inside_arguments_are_just_data() -> None:
    doc = example()
    doc["messages"][1]["content"].append(
        {"type": "tool_call", "id": "c9", "name": "f", "arguments": {"created_at": "x"}}
    )
    assert conforming_run(json.dumps(doc)) == doc


def test_custom_formats_load_on_first_use() -> None:
    assert _FORMATS["uuid"] is is_uuid_format
    assert _FORMATS["date-time"] is is_datetime_format
    with pytest.raises(KeyError):
        _FORMATS["email"]
