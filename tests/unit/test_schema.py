"""The JSON Schema layer of ``validate``: required fields, enums, asserted formats,
closed objects, the oar/0.1 vs oar/0.2 difference, kind detection and raw input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oarlock.errors import DocumentInvalid, UsageError
from oarlock.formats import (
    SIDE_EFFECT_CLASSES,
    Problem,
    Report,
    detect_kind,
    ensure_valid,
    validate,
)

Doc = dict[str, Any]

RUN_REQUIRED = [
    "format",
    "id",
    "agent",
    "model",
    "input",
    "status",
    "messages",
    "pendingApprovals",
    "bufferedToolResults",
    "usage",
    "turns",
    "createdAt",
    "updatedAt",
]
INVOCATION_REQUIRED = [
    "invocationId",
    "toolId",
    "schemaVersion",
    "scope",
    "runId",
    "stepId",
    "attemptId",
    "sideEffectClass",
    "idempotencyKey",
    "arguments",
    "argumentsHash",
    "policyDecision",
]
RECEIPT_REQUIRED = ["invocationId", "status", "startedAt", "receiptHash"]
POLICY_REQUIRED = ["decisionId", "effect", "policyId", "evaluatedAt"]

GOOD_UUID = "8b7a6c5d-4e3f-4a1b-9c0d-e1f2a3b4c5d6"


def only_schema_error(report: Report, pointer: str) -> Problem:
    """The report holds exactly one problem, a schema one at ``pointer``."""
    assert not report.valid
    assert [(p.rule, p.pointer) for p in report.errors] == [("schema", pointer)], report.errors
    return report.errors[0]


def get(doc: Doc, path: str) -> Any:
    for part in path.split("/"):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def put(doc: Doc, path: str, value: Any) -> None:
    *parents, last = path.split("/")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[last] = value


# --------------------------------------------------------------------------- required fields


@pytest.mark.parametrize("field", RUN_REQUIRED)
def test_run_required_field(run_completed, field):
    del run_completed[field]
    problem = only_schema_error(validate(run_completed, "run"), "")
    assert f'"{field}"' in problem.message
    assert "missing" in problem.message


@pytest.mark.parametrize("field", INVOCATION_REQUIRED)
def test_invocation_required_field(invocation_spend, field):
    del invocation_spend[field]
    problem = only_schema_error(validate(invocation_spend, "invocation"), "")
    assert f'"{field}"' in problem.message
    assert "missing" in problem.message


@pytest.mark.parametrize("field", RECEIPT_REQUIRED)
def test_receipt_required_field(receipt_succeeded, field):
    del receipt_succeeded[field]
    problem = only_schema_error(validate(receipt_succeeded, "receipt"), "")
    assert f'"{field}"' in problem.message
    assert "missing" in problem.message


def test_scope_requires_tenant_id(invocation_spend):
    del invocation_spend["scope"]["tenantId"]
    problem = only_schema_error(validate(invocation_spend), "/scope")
    assert '"tenantId"' in problem.message


def test_scope_tenant_id_not_empty(invocation_read):
    invocation_read["scope"]["tenantId"] = ""
    only_schema_error(validate(invocation_read), "/scope/tenantId")


@pytest.mark.parametrize("field", POLICY_REQUIRED)
def test_policy_decision_required_field(invocation_spend, field):
    del invocation_spend["policyDecision"][field]
    problem = only_schema_error(validate(invocation_spend), "/policyDecision")
    assert f'"{field}"' in problem.message
    assert "missing" in problem.message


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("messages/0", "role"),
        ("messages/0", "content"),
        ("messages/1/content/1", "id"),
        ("messages/1/content/1", "name"),
        ("messages/1/content/1", "arguments"),
        ("messages/2/content/0", "toolCallId"),
        ("messages/2/content/0", "content"),
        ("pendingApprovals/0", "toolCallId"),
        ("pendingApprovals/0", "toolName"),
        ("pendingApprovals/0", "arguments"),
        ("pendingApprovals/0", "requestedAt"),
        ("bufferedToolResults/0", "toolName"),
        ("usage", "inputTokens"),
        ("usage", "outputTokens"),
        ("usage", "costUsd"),
    ],
)
def test_run_nested_required_field(run_waiting, path, field):
    del get(run_waiting, path)[field]
    report = validate(run_waiting)
    assert not report.valid
    assert {p.rule for p in report.errors} == {"schema"}
    pointer = "/" + path
    assert any(
        p.pointer in (pointer, pointer + "/" + field) and f'"{field}"' in p.message
        for p in report.errors
    ), report.errors


# --------------------------------------------------------------------------- enums


@pytest.mark.parametrize(
    ("fixture", "path", "bad"),
    [
        ("run_waiting", "status", "paused"),
        ("run_waiting", "status", "Completed"),
        ("run_waiting", "pendingApprovals/0/decision", "maybe"),
        ("run_waiting", "pendingApprovals/0/decidedBy", "robot"),
        ("invocation_read", "sideEffectClass", "delete"),
        ("invocation_read", "sideEffectClass", "Read"),
        ("receipt_succeeded", "status", "Done"),
        ("receipt_succeeded", "status", "succeeded"),
        ("invocation_read", "policyDecision/effect", "maybe"),
        ("invocation_read", "policyDecision/effect", "ALLOW"),
    ],
)
def test_enum_rejects_bad_value(request, fixture, path, bad):
    doc = request.getfixturevalue(fixture)
    put(doc, path, bad)
    problem = only_schema_error(validate(doc), "/" + path)
    assert f'"{bad}"' in problem.message
    assert "one of" in problem.message


@pytest.mark.parametrize("cls", SIDE_EFFECT_CLASSES)
def test_every_side_effect_class_passes_the_schema(invocation_read, cls):
    invocation_read["sideEffectClass"] = cls
    assert validate(invocation_read, schema_only=True).valid


@pytest.mark.parametrize("effect", ["allow", "deny", "require_approval"])
def test_every_policy_effect_passes_the_schema(invocation_read, effect):
    invocation_read["policyDecision"]["effect"] = effect
    assert validate(invocation_read).valid


@pytest.mark.parametrize("decided_by", ["human", "policy"])
def test_every_decided_by_passes(run_legacy, decided_by):
    run_legacy["pendingApprovals"][0]["decidedBy"] = decided_by
    assert validate(run_legacy).valid


@pytest.mark.parametrize(
    "status",
    ["running", "waiting_approval", "completed", "failed", "halted_budget",
     "halted_max_turns", "cancelled"],
)
def test_every_run_status_passes_the_schema(run_completed, status):
    run_completed["status"] = status
    assert validate(run_completed, schema_only=True).valid


@pytest.mark.parametrize(
    ("path", "value", "pointer"),
    [
        ("id", "has space", "/id"),
        ("id", "", "/id"),
        ("agent", "", "/agent"),
        ("model", "", "/model"),
        ("turns", -1, "/turns"),
        ("turns", 1.5, "/turns"),
        ("turns", "2", "/turns"),
        ("turns", True, "/turns"),
        ("usage/costUsd", -0.01, "/usage/costUsd"),
        ("usage/inputTokens", "1", "/usage/inputTokens"),
        ("tags/team", 1, "/tags/team"),
        ("messages/2/content/0/isError", "yes", "/messages/2/content/0/isError"),
        ("messages/1/content/1/arguments", [], "/messages/1/content/1/arguments"),
        ("pendingApprovals/0/editedArguments", "x", "/pendingApprovals/0/editedArguments"),
        ("createdAt", 5, "/createdAt"),
        ("result", None, "/result"),
    ],
)
def test_run_member_types(run_waiting, path, value, pointer):
    put(run_waiting, path, value)
    only_schema_error(validate(run_waiting), pointer)


def test_message_part_type_names_the_allowed_types(run_waiting):
    run_waiting["messages"][1]["content"][0] = {"type": "image", "url": "x"}
    problem = only_schema_error(validate(run_waiting), "/messages/1/content/0/type")
    assert '"text"' in problem.message
    assert '"tool_call"' in problem.message
    assert '"image"' in problem.message


def test_message_role_names_the_allowed_roles(run_waiting):
    run_waiting["messages"][0]["role"] = "system"
    problem = only_schema_error(validate(run_waiting), "/messages/0/role")
    assert '"user"' in problem.message
    assert '"assistant"' in problem.message


def test_tool_call_in_a_user_message_is_refused(run_waiting):
    run_waiting["messages"][0]["content"].append(
        {"type": "tool_call", "id": "call_9", "name": "x", "arguments": {}}
    )
    problem = only_schema_error(validate(run_waiting), "/messages/0/content/1/type")
    assert '"tool_result"' in problem.message


def test_part_with_known_type_reports_its_own_missing_field(run_waiting):
    run_waiting["messages"][1]["content"][0] = {"type": "text"}
    problem = only_schema_error(validate(run_waiting), "/messages/1/content/0")
    assert problem.message == 'missing required field "text"'


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-uuid",
        "",
        "3c1f9a7e5b2d4c8e9f102a3b4c5d6e7f",  # no hyphens
        "3c1f9a7e-5b2d-4c8e-9f10-2a3b4c5d6e7",  # one digit short
        "3c1f9a7e-5b2d-4c8e-9f10-2a3b4c5d6e7g",  # not hex
        "{3c1f9a7e-5b2d-4c8e-9f10-2a3b4c5d6e7f}",
        "3c1f9a7e-5b2d-4c8e-9f10-2a3b4c5d6e7f\n",
        "urn:uuid:3c1f9a7e-5b2d-4c8e-9f10-2a3b4c5d6e7f",
    ],
)
def test_uuid_format_is_asserted_in_invocation_id(invocation_spend, bad):
    invocation_spend["invocationId"] = bad
    problem = only_schema_error(validate(invocation_spend), "/invocationId")
    assert "uuid" in problem.message


@pytest.mark.parametrize(
    "path", ["runId", "stepId", "attemptId", "approvalId", "policyDecision/decisionId"]
)
def test_uuid_format_is_asserted_everywhere_in_an_invocation(invocation_spend, path):
    put(invocation_spend, path, "0b7f2c7e-3f7a-4d39-9a53")
    only_schema_error(validate(invocation_spend), "/" + path)


def test_uuid_format_is_asserted_in_receipt(receipt_succeeded):
    receipt_succeeded["invocationId"] = "refund-1"
    only_schema_error(validate(receipt_succeeded), "/invocationId")


def test_upper_case_uuid_is_accepted(invocation_read):
    invocation_read["invocationId"] = invocation_read["invocationId"].upper()
    assert validate(invocation_read).valid


BAD_DATE_TIMES = [
    "yesterday",
    "2026-11-02",
    "2026-11-02T09:15:31",
    "2026-11-02 09:15:31Z",
    "2026-11-02T09:15:31+2:00",
    "2026-02-29T09:15:31Z",  # 2026 is not a leap year
    "2026-11-02T09:61:00Z",
    "\uff12\uff10\uff12\uff16-11-02T09:15:31Z",
    "0001-01-01T00:00:00+00:01",  # before year 1 in UTC
]


@pytest.mark.parametrize("bad", BAD_DATE_TIMES)
def test_date_time_format_is_asserted_in_started_at(receipt_succeeded, rehash, bad):
    receipt_succeeded["startedAt"] = bad
    rehash.receipt(receipt_succeeded)
    problem = only_schema_error(validate(receipt_succeeded), "/startedAt")
    assert "date-time" in problem.message


def test_date_time_format_is_asserted_in_finished_at(receipt_succeeded):
    receipt_succeeded["finishedAt"] = "2026-11-02T25:00:00Z"
    only_schema_error(validate(receipt_succeeded), "/finishedAt")


@pytest.mark.parametrize("bad", BAD_DATE_TIMES)
def test_date_time_format_is_asserted_in_policy_evaluated_at(invocation_read, bad):
    invocation_read["policyDecision"]["evaluatedAt"] = bad
    problem = only_schema_error(validate(invocation_read), "/policyDecision/evaluatedAt")
    assert "date-time" in problem.message


@pytest.mark.parametrize(
    "good",
    [
        "2026-11-02T09:15:31Z",
        "2026-11-02t09:15:31z",
        "2026-11-02T09:15:31.123456789012Z",
        "2026-11-02T09:15:31+05:30",
        "2026-11-02T09:15:31-00:00",
        "2028-02-29T00:00:00Z",
        "2026-12-31T23:59:60Z",
    ],
)
def test_date_time_format_accepts_rfc3339(invocation_read, good):
    invocation_read["policyDecision"]["evaluatedAt"] = good
    assert validate(invocation_read).valid


# --------------------------------------------------------------------------- closed objects


@pytest.mark.parametrize(
    ("fixture", "path", "pointer"),
    [
        ("invocation_read", "", ""),
        ("receipt_succeeded", "", ""),
        ("invocation_read", "scope", "/scope"),
        ("invocation_read", "policyDecision", "/policyDecision"),
    ],
)
def test_closed_objects_refuse_unknown_members(request, fixture, path, pointer):
    doc = request.getfixturevalue(fixture)
    target = get(doc, path) if path else doc
    target["surprise"] = 1
    problem = only_schema_error(validate(doc), pointer)
    assert '"surprise"' in problem.message


def test_snake_case_member_is_unknown_in_a_closed_object(invocation_read):
    invocation_read["tool_id"] = invocation_read.pop("toolId")
    report = validate(invocation_read)
    assert sorted(p.message for p in report.errors) == [
        'missing required field "toolId"',
        'unexpected field "tool_id": this object allows no others',
    ]


def test_open_objects_keep_unknown_members(run_waiting, invocation_read, receipt_succeeded, rehash):
    run_waiting["x-extra"] = {"any": [1, "thing"]}
    run_waiting["messages"][0]["x-extra"] = True
    run_waiting["messages"][1]["content"][1]["x-extra"] = None
    run_waiting["pendingApprovals"][0]["x-extra"] = 1.5
    run_waiting["usage"]["cachedTokens"] = 12
    assert validate(run_waiting).valid
    invocation_read["sandbox"] = {"workspaceId": "w1", "x-extra": 1}
    assert validate(invocation_read).valid
    receipt_succeeded["effect"]["x-extra"] = "kept"
    receipt_succeeded["error"] = {"code": "x", "x-extra": 2}
    rehash.receipt(receipt_succeeded)
    assert validate(receipt_succeeded).valid


# --------------------------------------------------------------------------- oar/0.1 and oar/0.2


def test_responded_is_refused_in_oar_0_1(run_responded):
    assert validate(run_responded).valid  # as oar/0.2
    run_responded["format"] = "oar/0.1"
    problem = only_schema_error(validate(run_responded), "/pendingApprovals/0/decision")
    assert "responded" in problem.message
    assert "oar/0.2" in problem.message


def test_oar_0_1_keeps_approved_and_denied(run_legacy):
    assert run_legacy["format"] == "oar/0.1"
    run_legacy["pendingApprovals"][0]["decision"] = "approved"
    assert validate(run_legacy).valid
    del run_legacy["pendingApprovals"][0]["editedArguments"]
    run_legacy["pendingApprovals"][0]["decision"] = "denied"
    assert validate(run_legacy).valid


def test_legacy_document_is_valid_as_oar_0_2_too(run_legacy):
    run_legacy["format"] = "oar/0.2"
    report = validate(run_legacy)
    assert report.valid
    assert report.format == "oar/0.2"


@pytest.mark.parametrize("fmt", ["oar/0.3", "oar/1.0", "oar/", "oar/0.2 "])
def test_unknown_format_is_refused_naming_the_formats_read(run_waiting, fmt):
    run_waiting["format"] = fmt
    report = validate(run_waiting)
    assert report.kind == "run"
    assert report.format == fmt
    problem = only_schema_error(report, "/format")
    assert fmt in problem.message
    assert "oar/0.1" in problem.message
    assert "oar/0.2" in problem.message


def test_report_names_format(run_legacy, run_waiting):
    assert validate(run_legacy).format == "oar/0.1"
    assert validate(run_waiting).format == "oar/0.2"


# --------------------------------------------------------------------------- schema_only


def test_schema_only_skips_semantic_rules(run_waiting, invocation_read, receipt_succeeded):
    run_waiting["turns"] = 9  # R8
    invocation_read["argumentsHash"] = "sha256:0"  # I1
    receipt_succeeded["receiptHash"] = "sha256:0"  # C1
    for doc, rule in ((run_waiting, "R8"), (invocation_read, "I1"), (receipt_succeeded, "C1")):
        full = validate(doc)
        assert [p.rule for p in full.errors] == [rule]
        assert not full.schema_only
        quick = validate(doc, schema_only=True)
        assert quick.valid
        assert quick.schema_only


def test_schema_only_still_checks_the_schema(run_waiting):
    run_waiting["status"] = "paused"
    report = validate(run_waiting, schema_only=True)
    only_schema_error(report, "/status")


def test_semantic_rules_do_not_run_on_a_schema_invalid_document(run_waiting):
    run_waiting["turns"] = 9  # would break R8
    run_waiting["agent"] = ""
    only_schema_error(validate(run_waiting), "/agent")


# --------------------------------------------------------------------------- kind detection


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [
        ("run_waiting", "run"),
        ("run_legacy", "run"),
        ("invocation_read", "invocation"),
        ("invocation_spend", "invocation"),
        ("receipt_succeeded", "receipt"),
        ("receipt_denied", "receipt"),
    ],
)
def test_kind_detection(request, fixture, kind):
    doc = request.getfixturevalue(fixture)
    assert detect_kind(doc) == kind
    report = validate(doc)
    assert report.kind == kind
    assert report.valid
    assert validate(doc, kind).valid


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"hello": 1},
        {"format": "nar/0.2"},
        {"format": 2},
        {"invocation_id": "x", "idempotency_key": "y"},
    ],
)
def test_unrecognisable_object(doc):
    assert detect_kind(doc) is None
    report = validate(doc)
    assert report.kind is None
    assert not report.valid
    assert [(p.rule, p.pointer) for p in report.errors] == [("kind", "")]
    message = report.errors[0].message
    assert "oar/" in message
    assert "receiptHash" in message
    assert "idempotencyKey" in message


def test_kind_detection_order():
    assert detect_kind({"format": "oar/9", "receiptHash": "", "idempotencyKey": ""}) == "run"
    assert detect_kind({"receiptHash": "", "idempotencyKey": ""}) == "receipt"
    assert detect_kind({"format": 1, "idempotencyKey": ""}) == "invocation"
    assert detect_kind([]) is None
    assert detect_kind("oar/0.2") is None


def test_forced_kind_checks_against_that_schema(receipt_succeeded, invocation_read):
    report = validate(receipt_succeeded, "invocation")
    assert report.kind == "invocation"
    assert not report.valid
    assert {p.rule for p in report.errors} == {"schema"}
    assert validate(invocation_read, "receipt").kind == "receipt"
    assert not validate(invocation_read, "run").valid


def test_unknown_kind_is_a_usage_error(run_waiting):
    with pytest.raises(UsageError, match="kind"):
        validate(run_waiting, "document")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- raw input


def test_validate_accepts_json_text_and_bytes(examples_dir):
    text = (examples_dir / "runs/refund-waiting-approval.json").read_text("utf-8")
    assert validate(text).valid
    assert validate(text.encode("utf-8")).valid
    assert validate(text, "run").kind == "run"


def test_validate_text_runs_the_rules_too(run_waiting):
    run_waiting["turns"] = 5
    report = validate(json.dumps(run_waiting))
    assert [(p.rule, p.pointer) for p in report.errors] == [("R8", "/turns")]


@pytest.mark.parametrize(
    ("value", "name"),
    [("[]", "list"), ("[1, 2]", "list"), ("1", "int"), ('"x"', "str"), ("null", "null"),
     ("true", "bool"), ("1.5", "float")],
)
def test_non_object_json_text(value, name):
    report = validate(value)
    assert [(p.rule, p.pointer) for p in report.errors] == [("json", "")]
    assert "JSON object" in report.errors[0].message
    assert name in report.errors[0].message
    assert report.kind is None


@pytest.mark.parametrize("value", [[], [1], None, 1, "", 2.5, True])
def test_non_object_python_value(value):
    report = validate(value, "run")
    assert [p.rule for p in report.errors] == ["json"]
    assert report.kind == "run"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 1}',
        '{"format": "oar/0.2", "format": "oar/0.1"}',
        '{"outer": {"k": 1, "k": 2}}',
    ],
)
def test_duplicate_keys_are_refused(text):
    report = validate(text)
    assert [(p.rule, p.pointer) for p in report.errors] == [("json", "")]
    assert "duplicate" in report.errors[0].message


@pytest.mark.parametrize(
    "text", ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', "NaN"]
)
def test_nan_and_infinity_are_refused(text):
    report = validate(text)
    assert [(p.rule, p.pointer) for p in report.errors] == [("json", "")]
    assert "not JSON" in report.errors[0].message


@pytest.mark.parametrize(
    "text", ["", "{", "{'a': 1}", '{"a": 1,}', b"\xff\xfe{", "[" * 100_000]
)
def test_text_that_is_not_json(text):
    report = validate(text)
    assert [(p.rule, p.pointer) for p in report.errors] == [("json", "")]
    assert report.errors[0].message.startswith("not JSON")


# --------------------------------------------------------------------------- ensure_valid, Report


def test_ensure_valid(run_waiting):
    assert ensure_valid(run_waiting) is None
    run_waiting["turns"] = 5
    run_waiting["updatedAt"] = "never"
    with pytest.raises(DocumentInvalid) as info:
        ensure_valid(run_waiting)
    assert info.value.code == "document_invalid"
    assert [p.rule for p in info.value.report.errors] == ["R8", "R9"]
    assert "/turns" in str(info.value)
    assert "1 more" in str(info.value)


def test_report_to_json(run_waiting, run_legacy):
    run_waiting["turns"] = 5
    assert validate(run_waiting).to_json() == {
        "kind": "run",
        "valid": False,
        "format": "oar/0.2",
        "errors": [
            {
                "pointer": "/turns",
                "rule": "R8",
                "message": "turns is 5 but the document holds 2 assistant messages",
            }
        ],
    }
    report = validate(run_legacy)
    assert bool(report) is True
    assert report.to_json() == {"kind": "run", "valid": True, "format": "oar/0.1", "errors": []}
    assert "format" not in validate({"x": 1}).to_json()


def test_json_pointer_escapes_tilde_and_slash(run_waiting):
    run_waiting["tags"] = {"a/b~c": 1}
    only_schema_error(validate(run_waiting), "/tags/a~1b~0c")


def test_part_without_its_type_tag_says_so(run_waiting):
    run_waiting["messages"][1]["content"][0] = {"text": "no tag"}
    problem = only_schema_error(validate(run_waiting), "/messages/1/content/0")
    assert problem.message == 'missing required field "type"'


def test_message_without_its_role_tag_says_so(run_waiting):
    del run_waiting["messages"][2]["role"]
    problem = only_schema_error(validate(run_waiting), "/messages/2")
    assert problem.message == 'missing required field "role"'


def test_message_that_is_not_an_object(run_waiting):
    run_waiting["messages"][2] = 5
    problem = only_schema_error(validate(run_waiting), "/messages/2")
    assert "shape" in problem.message
