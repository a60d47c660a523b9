"""Semantic rules R1-R10 (runs), I1-I2 (invocations), C1-C3 (receipts).

Every rule gets at least one document that breaks it, for which the report must hold
exactly the expected (rule, JSON Pointer) pairs and nothing else, and one that keeps it,
which must be valid. Documents are built by mutating fresh copies of the examples.
"""

from __future__ import annotations

from typing import Any

import pytest

from oarlock.formats import (
    APPROVAL_REQUIRED_CLASSES,
    SIDE_EFFECT_CLASSES,
    Report,
    ensure_valid,
    validate,
)

Doc = dict[str, Any]


def found(report: Report) -> list[tuple[str, str]]:
    """(rule, pointer) of every problem, in report order."""
    return [(p.rule, p.pointer) for p in report.errors]


def assert_valid(doc: Doc, kind: str = "auto") -> None:
    report = validate(doc, kind)  # type: ignore[arg-type]
    assert report.valid, report.errors
    assert report.errors == []


def assert_breaks(doc: Doc, *expected: tuple[str, str], kind: str = "auto") -> Report:
    report = validate(doc, kind)  # type: ignore[arg-type]
    assert not report.valid
    assert sorted(found(report)) == sorted(expected), report.errors
    # a semantic rule runs only after the schema passed: no schema error may hide in here
    assert all(p.rule != "schema" for p in report.errors)
    for p in report.errors:
        assert p.message.strip(), "every problem needs a sentence"
    return report


def tool_call(call_id: str, name: str, **arguments: Any) -> Doc:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def tool_result(call_id: str, name: str, content: str = "ok") -> Doc:
    return {"type": "tool_result", "toolCallId": call_id, "toolName": name, "content": content}


# --------------------------------------------------------------------------- the examples


@pytest.mark.parametrize(
    "name",
    [
        "runs/refund-waiting-approval.json",
        "runs/refund-completed.json",
        "runs/responded-oar-0.2.json",
        "runs/legacy-oar-0.1.json",
        "invocations/lookup-read.json",
        "invocations/refund-spend.json",
        "receipts/refund-succeeded.json",
        "receipts/lookup-denied.json",
        "receipts/refund-uncertain.json",
    ],
)
def test_every_example_keeps_every_rule(example, name):
    assert_valid(example(name))
    ensure_valid(example(name))


# --------------------------------------------------------------------------- R1


def test_r1_waiting_with_every_approval_decided_breaks(run_waiting):
    run_waiting["pendingApprovals"][0]["decision"] = "approved"
    report = assert_breaks(run_waiting, ("R1", "/status"))
    assert "waiting_approval" in report.errors[0].message


def test_r1_waiting_with_no_approval_at_all_breaks(run_waiting):
    # call_2 is then neither pending nor buffered, so R10 fires as well
    run_waiting["pendingApprovals"] = []
    assert_breaks(run_waiting, ("R1", "/status"), ("R10", "/messages/3/content/0/id"))


def test_r1_waiting_with_one_undecided_among_decided_keeps(run_legacy):
    # legacy example: call_2 approved, call_4 undecided
    assert "decision" in run_legacy["pendingApprovals"][0]
    assert "decision" not in run_legacy["pendingApprovals"][1]
    assert_valid(run_legacy)
    run_legacy["pendingApprovals"][1]["decision"] = "denied"
    assert_breaks(run_legacy, ("R1", "/status"))


# --------------------------------------------------------------------------- R2


def _completed_from_waiting(doc: Doc) -> Doc:
    doc["status"] = "completed"
    doc["result"] = "done"
    return doc


def test_r2_completed_with_undecided_approval_breaks(run_waiting):
    doc = _completed_from_waiting(run_waiting)
    report = assert_breaks(doc, ("R2", "/pendingApprovals/0"))
    assert "completed" in report.errors[0].message


def test_r2_points_at_each_undecided_approval(run_legacy):
    run_legacy["format"] = "oar/0.2"
    doc = _completed_from_waiting(run_legacy)
    # approval 0 is decided, approval 1 is not
    assert_breaks(doc, ("R2", "/pendingApprovals/1"))


@pytest.mark.parametrize("decision", ["approved", "denied"])
def test_r2_completed_with_decided_approvals_keeps(run_waiting, decision):
    doc = _completed_from_waiting(run_waiting)
    doc["pendingApprovals"][0]["decision"] = decision
    assert_valid(doc)


# --------------------------------------------------------------------------- R3


def test_r3_completed_without_result_breaks(run_completed):
    del run_completed["result"]
    report = assert_breaks(run_completed, ("R3", "/result"))
    assert "result" in report.errors[0].message


def test_r3_failed_without_error_breaks(run_completed):
    run_completed["status"] = "failed"
    assert_breaks(run_completed, ("R3", "/error"))


def test_r3_failed_with_error_keeps(run_completed):
    run_completed["status"] = "failed"
    run_completed["error"] = "model provider gave up"
    assert_valid(run_completed)
    del run_completed["result"]
    assert_valid(run_completed)


@pytest.mark.parametrize(
    "status", ["running", "halted_budget", "halted_max_turns", "cancelled"]
)
def test_r3_other_statuses_need_neither_result_nor_error(run_completed, status):
    run_completed["status"] = status
    del run_completed["result"]
    assert_valid(run_completed)


# --------------------------------------------------------------------------- R4


def test_r4_result_for_unknown_call_breaks(run_completed):
    run_completed["messages"][2]["content"][0]["toolCallId"] = "call_9"
    report = assert_breaks(run_completed, ("R4", "/messages/2/content/0/toolCallId"))
    assert "call_9" in report.errors[0].message


def test_r4_result_with_wrong_tool_name_breaks(run_completed):
    run_completed["messages"][4]["content"][1]["toolName"] = "issue_refund"
    report = assert_breaks(run_completed, ("R4", "/messages/4/content/1/toolName"))
    assert "notify_customer" in report.errors[0].message


def test_r4_result_whose_call_comes_only_in_a_later_assistant_message_breaks(run_completed):
    # messages[2] now answers call_2, which is made only by messages[3]
    part = run_completed["messages"][2]["content"][0]
    part["toolCallId"], part["toolName"] = "call_2", "issue_refund"
    assert_breaks(run_completed, ("R4", "/messages/2/content/0/toolCallId"))


def test_r4_result_before_its_call_breaks(run_completed):
    # the answer to call_1 is moved in front of the assistant message that makes call_1
    answer = run_completed["messages"].pop(2)
    run_completed["messages"].insert(1, answer)
    assert_breaks(run_completed, ("R4", "/messages/1/content/0/toolCallId"))


def test_r4_result_answering_a_call_of_an_older_assistant_message_keeps(run_completed):
    # an answer to call_1 (made two assistant messages earlier) is fine
    run_completed["messages"][4]["content"].append(tool_result("call_1", "lookup_order"))
    assert_valid(run_completed)


def test_r4_buffered_result_for_unknown_call_breaks(run_waiting):
    run_waiting["bufferedToolResults"][0]["toolCallId"] = "call_9"
    # call_3 then is neither pending nor buffered: R10 too
    assert_breaks(
        run_waiting,
        ("R4", "/bufferedToolResults/0/toolCallId"),
        ("R10", "/messages/3/content/1/id"),
    )


def test_r4_buffered_result_for_unknown_call_in_running_run_breaks(run_responded):
    run_responded["bufferedToolResults"][0]["toolCallId"] = "call_9"
    assert_breaks(run_responded, ("R4", "/bufferedToolResults/0/toolCallId"))


def test_r4_buffered_result_with_wrong_tool_name_breaks(run_waiting):
    run_waiting["bufferedToolResults"][0]["toolName"] = "lookup_order"
    assert_breaks(run_waiting, ("R4", "/bufferedToolResults/0/toolName"))


def test_r4_buffered_result_for_call_of_an_older_message_keeps(run_responded):
    run_responded["bufferedToolResults"].append(tool_result("call_1", "lookup_order"))
    assert_valid(run_responded)


def test_r4_buffered_result_for_a_call_not_yet_made_breaks(run_responded):
    # no assistant message makes call_5
    run_responded["bufferedToolResults"].append(tool_result("call_5", "lookup_order"))
    assert_breaks(run_responded, ("R4", "/bufferedToolResults/1/toolCallId"))


# --------------------------------------------------------------------------- R5


def test_r5_approval_naming_a_call_of_an_older_message_breaks(run_responded):
    appr = run_responded["pendingApprovals"][0]
    appr["toolCallId"], appr["toolName"] = "call_1", "lookup_order"
    report = assert_breaks(run_responded, ("R5", "/pendingApprovals/0/toolCallId"))
    assert "call_1" in report.errors[0].message


def test_r5_approval_naming_an_unknown_call_breaks(run_responded):
    run_responded["pendingApprovals"][0]["toolCallId"] = "call_77"
    assert_breaks(run_responded, ("R5", "/pendingApprovals/0/toolCallId"))


def test_r5_approval_with_wrong_tool_name_breaks(run_waiting):
    run_waiting["pendingApprovals"][0]["toolName"] = "notify_customer"
    report = assert_breaks(run_waiting, ("R5", "/pendingApprovals/0/toolName"))
    assert "issue_refund" in report.errors[0].message


def test_r5_approval_when_last_assistant_message_has_no_calls_breaks(run_completed):
    run_completed["pendingApprovals"].append(
        {
            "toolCallId": "call_2",
            "toolName": "issue_refund",
            "arguments": {"order_id": "A-1001", "amount": 42.5},
            "requestedAt": "2026-11-02T09:15:20Z",
            "decision": "approved",
        }
    )
    assert_breaks(run_completed, ("R5", "/pendingApprovals/0/toolCallId"))


def test_r5_approval_for_each_call_of_last_message_keeps(run_waiting):
    run_waiting["bufferedToolResults"] = []
    run_waiting["pendingApprovals"].append(
        {
            "toolCallId": "call_3",
            "toolName": "notify_customer",
            "arguments": {},
            "requestedAt": "2026-11-02T09:15:20Z",
        }
    )
    assert_valid(run_waiting)


# --------------------------------------------------------------------------- R6


def test_r6_duplicate_tool_call_id_across_messages_breaks(run_completed):
    run_completed["messages"][5]["content"].append(tool_call("call_1", "lookup_order"))
    report = assert_breaks(run_completed, ("R6", "/messages/5/content/1/id"))
    assert "call_1" in report.errors[0].message


def test_r6_duplicate_tool_call_id_in_one_message_breaks(run_responded):
    run_responded["messages"][3]["content"].append(tool_call("call_3", "notify_customer"))
    assert_breaks(run_responded, ("R6", "/messages/3/content/2/id"))


def test_r6_fresh_tool_call_id_keeps(run_completed):
    run_completed["messages"][5]["content"].append(tool_call("call_4", "lookup_order"))
    assert_valid(run_completed)


# --------------------------------------------------------------------------- R7


def test_r7_edited_arguments_without_approved_breaks(run_waiting):
    run_waiting["pendingApprovals"][0]["editedArguments"] = {"amount": 1}
    report = assert_breaks(run_waiting, ("R7", "/pendingApprovals/0/editedArguments"))
    assert "approved" in report.errors[0].message


def test_r7_edited_arguments_with_denied_breaks(run_legacy):
    run_legacy["pendingApprovals"][0]["decision"] = "denied"
    assert_breaks(run_legacy, ("R7", "/pendingApprovals/0/editedArguments"))


def test_r7_edited_arguments_with_approved_keeps(run_legacy):
    assert run_legacy["pendingApprovals"][0]["decision"] == "approved"
    assert "editedArguments" in run_legacy["pendingApprovals"][0]
    assert_valid(run_legacy)


def test_r7_response_without_responded_breaks(run_waiting):
    run_waiting["pendingApprovals"][0]["response"] = "yes"
    report = assert_breaks(run_waiting, ("R7", "/pendingApprovals/0/response"))
    assert "responded" in report.errors[0].message


def test_r7_response_with_approved_breaks(run_responded):
    run_responded["pendingApprovals"][0]["decision"] = "approved"
    assert_breaks(run_responded, ("R7", "/pendingApprovals/0/response"))


def test_r7_responded_without_response_breaks(run_responded):
    del run_responded["pendingApprovals"][0]["response"]
    report = assert_breaks(run_responded, ("R7", "/pendingApprovals/0"))
    assert "response" in report.errors[0].message


def test_r7_responded_with_response_keeps(run_responded):
    assert run_responded["pendingApprovals"][0]["decision"] == "responded"
    assert_valid(run_responded)


# --------------------------------------------------------------------------- R8


@pytest.mark.parametrize("turns", [0, 1, 3, 10])
def test_r8_turns_not_counting_assistant_messages_breaks(run_waiting, turns):
    run_waiting["turns"] = turns
    report = assert_breaks(run_waiting, ("R8", "/turns"))
    assert str(turns) in report.errors[0].message


def test_r8_turns_follow_assistant_messages_keeps(run_completed):
    assert run_completed["turns"] == 3
    assert_valid(run_completed)
    run_completed["messages"].append({"role": "assistant", "content": []})
    assert_breaks(run_completed, ("R8", "/turns"))
    run_completed["turns"] = 4
    assert_valid(run_completed)


# --------------------------------------------------------------------------- R9


@pytest.mark.parametrize(
    "bad",
    [
        "yesterday",
        "",
        "2026-11-02",
        "2026-11-02T09:15:00",  # no offset
        "2026-11-02 09:15:00Z",  # space instead of T
        "2026-11-02T09:15Z",  # no seconds
        "2026-11-02T09:15:00.Z",  # empty fraction
        "2026-02-30T09:15:00Z",  # no such day
        "2026-13-01T09:15:00Z",
        "2026-11-02T24:00:00Z",
        "2026-11-02T09:15:00+24:00",
        "2026-11-02T09:15:00+02:60",
        "2026-11-02T09:15:00+0200",
        "0000-01-01T00:00:00Z",
        "\uff12\uff10\uff12\uff16-11-02T09:15:00Z",  # fullwidth digits are not RFC 3339 DIGITs
        "2026-11-02T09:15:00Z\n",
    ],
)
@pytest.mark.parametrize("member", ["createdAt", "updatedAt"])
def test_r9_not_a_date_time_breaks(run_waiting, member, bad):
    run_waiting[member] = bad
    report = assert_breaks(run_waiting, ("R9", f"/{member}"))
    assert member in report.errors[0].message


@pytest.mark.parametrize(
    "value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]
)
def test_r9_instant_outside_years_1_to_9999_is_reported_not_raised(run_waiting, value):
    run_waiting["createdAt"] = value
    run_waiting["updatedAt"] = "2026-11-02T09:15:20Z"
    report = assert_breaks(run_waiting, ("R9", "/createdAt"))
    assert value in report.errors[0].message


def test_r9_updated_before_created_breaks(run_waiting):
    run_waiting["updatedAt"] = "2026-11-02T09:14:59.999999Z"
    report = assert_breaks(run_waiting, ("R9", "/updatedAt"))
    assert "before" in report.errors[0].message


@pytest.mark.parametrize(
    ("created", "updated"),
    [
        # 10:00+02:00 is 08:00Z, an hour BEFORE 09:00Z, though it reads later
        ("2026-11-02T09:00:00Z", "2026-11-02T10:00:00+02:00"),
        ("2026-11-02T09:00:00-01:00", "2026-11-02T09:30:00Z"),
        ("2026-11-02T00:30:00+00:45", "2026-11-01T23:44:00Z"),
        # crossing midnight and a month boundary through the offset
        ("2026-12-01T00:00:00Z", "2026-12-01T01:00:00+01:30"),
        # fractions with more digits than a float or a microsecond can hold
        ("2026-11-02T09:00:00.1234567890123456789Z", "2026-11-02T09:00:00.1234567890123456788Z"),
        ("2026-11-02T09:00:00.000000000000000001Z", "2026-11-02T09:00:00Z"),
        ("2026-11-02T09:00:00.1000000000000000001Z", "2026-11-02T09:00:00.1Z"),
        ("2026-11-02T09:00:00.5Z", "2026-11-02T10:00:00.4999999999999+01:00"),
    ],
)
def test_r9_updated_before_created_with_offsets_and_fractions_breaks(run_waiting, created, updated):
    run_waiting["createdAt"], run_waiting["updatedAt"] = created, updated
    assert_breaks(run_waiting, ("R9", "/updatedAt"))


@pytest.mark.parametrize(
    ("created", "updated"),
    [
        ("2026-11-02T09:00:00Z", "2026-11-02T09:00:00Z"),  # equal is not before
        ("2026-11-02T09:00:00Z", "2026-11-02T11:00:00+02:00"),  # same instant
        ("2026-11-02T09:00:00Z", "2026-11-02T10:00:00-02:00"),  # 12:00Z
        ("2026-11-02T09:00:00+02:00", "2026-11-02T08:00:00Z"),  # 07:00Z then 08:00Z
        ("2026-11-02T09:00:00.1234567890123456788Z", "2026-11-02T09:00:00.1234567890123456789Z"),
        ("2026-11-02T09:00:00.1234567890123456789Z", "2026-11-02T09:00:00.123456789012345679Z"),
        ("2026-11-02T09:00:00.5Z", "2026-11-02T09:00:00.50000000000000000000Z"),
        ("2026-11-02t09:00:00z", "2026-11-02t09:00:01z"),  # RFC 3339 allows t and z
        ("2026-11-02T09:00:00-00:00", "2026-11-02T09:00:00+00:00"),
        ("2026-12-31T23:59:60Z", "2027-01-01T00:00:00Z"),  # leap second
    ],
)
def test_r9_updated_not_before_created_keeps(run_waiting, created, updated):
    run_waiting["createdAt"], run_waiting["updatedAt"] = created, updated
    assert_valid(run_waiting)


def test_r9_reports_both_members_when_both_are_bad(run_waiting):
    run_waiting["createdAt"], run_waiting["updatedAt"] = "soon", "later"
    assert_breaks(run_waiting, ("R9", "/createdAt"), ("R9", "/updatedAt"))


# --------------------------------------------------------------------------- R10


def test_r10_waiting_with_a_call_neither_pending_nor_buffered_breaks(run_waiting):
    run_waiting["bufferedToolResults"] = []
    report = assert_breaks(run_waiting, ("R10", "/messages/3/content/1/id"))
    assert "call_3" in report.errors[0].message


def test_r10_each_uncovered_call_is_reported(run_legacy):
    run_legacy["bufferedToolResults"] = []
    del run_legacy["pendingApprovals"][0]
    assert_breaks(
        run_legacy,
        ("R10", "/messages/3/content/0/id"),
        ("R10", "/messages/3/content/1/id"),
    )


def test_r10_only_while_waiting(run_responded):
    run_responded["bufferedToolResults"] = []
    assert run_responded["status"] == "running"
    assert_valid(run_responded)


def test_r10_call_both_pending_and_buffered_keeps(run_waiting):
    run_waiting["bufferedToolResults"].append(tool_result("call_2", "issue_refund"))
    assert_valid(run_waiting)


# --------------------------------------------------------------------------- ordering


def test_problems_are_ordered_by_rule_number_not_text(run_waiting):
    run_waiting["pendingApprovals"][0]["decision"] = "denied"  # R1
    run_waiting["turns"] = 7  # R8
    run_waiting["bufferedToolResults"] = []  # R10
    report = validate(run_waiting)
    assert [p.rule for p in report.errors] == ["R1", "R8", "R10"]


# --------------------------------------------------------------------------- I1


def test_i1_wrong_arguments_hash_breaks(invocation_read):
    invocation_read["arguments"]["order_id"] = "A-1002"
    report = assert_breaks(invocation_read, ("I1", "/argumentsHash"))
    assert "sha256:" in report.errors[0].message


@pytest.mark.parametrize(
    "bad_hash",
    [
        "",
        "sha256:" + "0" * 64,
        # the right digest in upper case is still not the digest
        "SHA256:0DD3A2B2AFAA5EE2F9C3D72769D7935BC51B2A8986F94CB93097CC93DD915303",
        "0dd3a2b2afaa5ee2f9c3d72769d7935bc51b2a8986f94cb93097cc93dd915303",
    ],
)
def test_i1_hash_must_be_exactly_the_digest(invocation_read, bad_hash):
    invocation_read["argumentsHash"] = bad_hash
    assert_breaks(invocation_read, ("I1", "/argumentsHash"))


def test_i1_arguments_without_canonical_form_break(invocation_read, rehash):
    invocation_read["arguments"]["big"] = 2**53
    report = assert_breaks(invocation_read, ("I1", "/arguments"))
    assert "canonical" in report.errors[0].message


def test_i1_hash_of_changed_arguments_keeps(invocation_spend, rehash):
    invocation_spend["arguments"] = {"z": [1, 2.5, None], "a": {"é": "\U0001f600"}}
    rehash.invocation(invocation_spend)
    assert_valid(invocation_spend)


def test_i1_member_order_of_arguments_does_not_matter(invocation_spend):
    args = invocation_spend["arguments"]
    invocation_spend["arguments"] = dict(reversed(list(args.items())))
    assert list(invocation_spend["arguments"]) != list(args)
    assert_valid(invocation_spend)


def test_i1_number_spelling_does_not_matter(invocation_spend, rehash):
    # 42.5 and 42.50 are one number; 40 and 40.0 are one number
    invocation_spend["arguments"]["amount"] = 40
    rehash.invocation(invocation_spend)
    invocation_spend["arguments"]["amount"] = 40.0
    assert_valid(invocation_spend)


# --------------------------------------------------------------------------- I2


def test_i2_classes_needing_approval_are_shared_write_and_above():
    assert SIDE_EFFECT_CLASSES == (
        "read",
        "sandbox",
        "shared-write",
        "external",
        "production",
        "publication",
        "spend",
    )
    assert frozenset(SIDE_EFFECT_CLASSES[2:]) == APPROVAL_REQUIRED_CLASSES


@pytest.mark.parametrize(
    "cls", ["shared-write", "external", "production", "publication", "spend"]
)
def test_i2_class_without_approval_id_breaks(invocation_read, cls):
    invocation_read["sideEffectClass"] = cls
    report = assert_breaks(invocation_read, ("I2", "/approvalId"))
    assert cls in report.errors[0].message


@pytest.mark.parametrize(
    "cls", ["shared-write", "external", "production", "publication", "spend"]
)
def test_i2_class_with_approval_id_keeps(invocation_read, cls):
    invocation_read["sideEffectClass"] = cls
    invocation_read["approvalId"] = "8b7a6c5d-4e3f-4a1b-9c0d-e1f2a3b4c5d6"
    assert_valid(invocation_read)


@pytest.mark.parametrize("cls", ["read", "sandbox"])
def test_i2_read_and_sandbox_need_no_approval_id(invocation_spend, cls):
    invocation_spend["sideEffectClass"] = cls
    del invocation_spend["approvalId"]
    assert_valid(invocation_spend)
    invocation_spend["approvalId"] = "8b7a6c5d-4e3f-4a1b-9c0d-e1f2a3b4c5d6"
    assert_valid(invocation_spend)


def test_i1_and_i2_both_reported(invocation_spend):
    del invocation_spend["approvalId"]
    invocation_spend["argumentsHash"] = "sha256:" + "1" * 64
    report = validate(invocation_spend)
    assert found(report) == [("I1", "/argumentsHash"), ("I2", "/approvalId")]


# --------------------------------------------------------------------------- C1


def test_c1_changed_receipt_breaks(receipt_succeeded):
    receipt_succeeded["sanitized"] = False
    report = assert_breaks(receipt_succeeded, ("C1", "/receiptHash"))
    assert "sha256:" in report.errors[0].message


def test_c1_nested_change_breaks(receipt_succeeded):
    receipt_succeeded["usage"]["durationMs"] = 181
    assert_breaks(receipt_succeeded, ("C1", "/receiptHash"))


def test_c1_rehashed_receipt_keeps(receipt_succeeded, rehash):
    receipt_succeeded["sanitized"] = False
    rehash.receipt(receipt_succeeded)
    assert_valid(receipt_succeeded)


def test_c1_hash_excludes_only_receipt_hash(receipt_denied, rehash):
    # a hash over the body INCLUDING receiptHash is not the receipt hash
    body = dict(receipt_denied)
    body["receiptHash"] = ""
    receipt_denied["receiptHash"] = rehash.digest(body)
    assert_breaks(receipt_denied, ("C1", "/receiptHash"))


def test_c1_member_order_does_not_matter(receipt_succeeded):
    reordered = dict(reversed(list(receipt_succeeded.items())))
    assert_valid(reordered)


def test_c1_receipt_without_canonical_form_breaks(receipt_succeeded):
    receipt_succeeded["usage"]["bytesOut"] = 2**60  # a schema integer, but not I-JSON
    report = assert_breaks(receipt_succeeded, ("C1", ""))
    assert "canonical" in report.errors[0].message


# --------------------------------------------------------------------------- C2


@pytest.mark.parametrize(
    ("started", "finished"),
    [
        ("2026-11-02T09:15:31.180000Z", "2026-11-02T09:15:31.000000Z"),
        ("2026-11-02T10:00:00Z", "2026-11-02T11:00:00+02:00"),
        ("2026-11-02T10:00:00.00000000000000000002Z", "2026-11-02T10:00:00.00000000000000000001Z"),
    ],
)
def test_c2_finished_before_started_breaks(receipt_succeeded, rehash, started, finished):
    receipt_succeeded["startedAt"], receipt_succeeded["finishedAt"] = started, finished
    rehash.receipt(receipt_succeeded)
    report = assert_breaks(receipt_succeeded, ("C2", "/finishedAt"))
    assert "before" in report.errors[0].message


@pytest.mark.parametrize(
    ("started", "finished"),
    [
        ("2026-11-02T09:15:31Z", "2026-11-02T09:15:31Z"),
        ("2026-11-02T10:00:00Z", "2026-11-02T11:00:00+01:00"),
        ("2026-11-02T10:00:00+05:30", "2026-11-02T04:30:00.000000000000001Z"),
    ],
)
def test_c2_finished_not_before_started_keeps(receipt_succeeded, rehash, started, finished):
    receipt_succeeded["startedAt"], receipt_succeeded["finishedAt"] = started, finished
    rehash.receipt(receipt_succeeded)
    assert_valid(receipt_succeeded)


def test_c2_no_finished_at_keeps(receipt_succeeded, rehash):
    del receipt_succeeded["finishedAt"]
    rehash.receipt(receipt_succeeded)
    assert_valid(receipt_succeeded)


# --------------------------------------------------------------------------- C3


@pytest.mark.parametrize("status", ["Failed", "Denied", "TimedOut"])
def test_c3_failure_without_error_breaks(receipt_denied, rehash, status):
    receipt_denied["status"] = status
    del receipt_denied["error"]
    rehash.receipt(receipt_denied)
    report = assert_breaks(receipt_denied, ("C3", "/error"))
    assert status in report.errors[0].message


@pytest.mark.parametrize("status", ["Failed", "Denied", "TimedOut"])
def test_c3_failure_with_error_keeps(receipt_denied, rehash, status):
    receipt_denied["status"] = status
    rehash.receipt(receipt_denied)
    assert_valid(receipt_denied)


@pytest.mark.parametrize("status", ["Succeeded", "Uncertain"])
def test_c3_success_and_uncertain_need_no_error(receipt_uncertain, rehash, status):
    receipt_uncertain["status"] = status
    del receipt_uncertain["error"]
    rehash.receipt(receipt_uncertain)
    assert_valid(receipt_uncertain)


def test_c1_c2_c3_all_reported_in_order(receipt_uncertain):
    receipt_uncertain["status"] = "TimedOut"
    del receipt_uncertain["error"]
    receipt_uncertain["finishedAt"] = "2026-11-02T09:59:59Z"
    report = validate(receipt_uncertain)
    assert found(report) == [("C1", "/receiptHash"), ("C2", "/finishedAt"), ("C3", "/error")]
