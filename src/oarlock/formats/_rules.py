"""Semantic rules beyond the schemas (R1-R10 for runs, I1-I2 for invocations, C1-C3 for
receipts). Each check takes a document that already passed its schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from oarlock.errors import CanonicalizationError
from oarlock.formats._exported import redaction_note, without_note
from oarlock.formats._jcs import digest
from oarlock.formats._report import Kind, Problem, pointer
from oarlock.formats._time import parse_rfc3339

__all__ = ["APPROVAL_REQUIRED_CLASSES", "SIDE_EFFECT_CLASSES", "rule_problems"]

SIDE_EFFECT_CLASSES = (
    "read",
    "sandbox",
    "shared-write",
    "external",
    "production",
    "publication",
    "spend",
)
APPROVAL_REQUIRED_CLASSES = frozenset(SIDE_EFFECT_CLASSES[2:])

Doc = dict[str, Any]


def _p(rule: str, path: list[str | int], message: str) -> Problem:
    return Problem(pointer(path), rule, message)


def _undecided(doc: Doc) -> list[int]:
    return [i for i, a in enumerate(doc["pendingApprovals"]) if "decision" not in a]


def _last_calls(doc: Doc) -> list[tuple[list[str | int], dict[str, Any]]]:
    """The tool calls of the last assistant message, each with its path."""
    for i in range(len(doc["messages"]) - 1, -1, -1):
        msg = doc["messages"][i]
        if msg["role"] == "assistant":
            return [
                (["messages", i, "content", j], p)
                for j, p in enumerate(msg["content"])
                if p["type"] == "tool_call"
            ]
    return []


def _r1_r2_r3(doc: Doc) -> Iterator[Problem]:
    status = doc["status"]
    if status == "waiting_approval" and not _undecided(doc):
        yield _p(
            "R1",
            ["status"],
            "status waiting_approval requires at least one pending approval without a decision",
        )
    if status == "completed":
        for i in _undecided(doc):
            yield _p(
                "R2",
                ["pendingApprovals", i],
                "a completed run cannot hold a pending approval without a decision",
            )
    if status == "completed" and "result" not in doc:
        yield _p("R3", ["result"], "a completed run requires 'result'")
    if status == "failed" and "error" not in doc:
        yield _p("R3", ["error"], "a failed run requires 'error'")


def _r4(doc: Doc) -> Iterator[Problem]:
    calls: dict[str, str] = {}
    for i, msg in enumerate(doc["messages"]):
        for j, part in enumerate(msg["content"]):
            if part["type"] == "tool_call":
                calls.setdefault(part["id"], part["name"])
            elif part["type"] == "tool_result":
                yield from _answers(calls, part, ["messages", i, "content", j])
    for k, part in enumerate(doc["bufferedToolResults"]):
        yield from _answers(calls, part, ["bufferedToolResults", k])


def _answers(
    calls: dict[str, str], part: dict[str, Any], path: list[str | int]
) -> Iterator[Problem]:
    call_id, name = part["toolCallId"], part["toolName"]
    if call_id not in calls:
        yield _p(
            "R4",
            [*path, "toolCallId"],
            f"tool result for {call_id!r} answers no tool call of an earlier assistant message",
        )
    elif calls[call_id] != name:
        yield _p(
            "R4",
            [*path, "toolName"],
            f"tool result names tool {name!r} but call {call_id!r} was made to {calls[call_id]!r}",
        )


def _r5_r10(doc: Doc) -> Iterator[Problem]:
    last = _last_calls(doc)
    calls = {p["id"]: p["name"] for _, p in last}
    for i, appr in enumerate(doc["pendingApprovals"]):
        cid = appr["toolCallId"]
        if cid not in calls:
            yield _p(
                "R5",
                ["pendingApprovals", i, "toolCallId"],
                f"pending approval names "
                f"{cid!r}, which is not a tool call of the last assistant message",
            )
        elif calls[cid] != appr["toolName"]:
            yield _p(
                "R5",
                ["pendingApprovals", i, "toolName"],
                f"pending approval names "
                f"tool {appr['toolName']!r} but call {cid!r} was made to {calls[cid]!r}",
            )
    if doc["status"] != "waiting_approval":
        return
    covered = {a["toolCallId"] for a in doc["pendingApprovals"]}
    covered |= {r["toolCallId"] for r in doc["bufferedToolResults"]}
    for path, part in last:
        if part["id"] not in covered:
            yield _p(
                "R10",
                [*path, "id"],
                f"tool call {part['id']!r} of the last assistant "
                "message is neither pending approval nor buffered while the run waits",
            )


def _r6(doc: Doc) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, msg in enumerate(doc["messages"]):
        for j, part in enumerate(msg["content"]):
            if part["type"] == "tool_call":
                if part["id"] in seen:
                    yield _p(
                        "R6",
                        ["messages", i, "content", j, "id"],
                        f"tool call id {part['id']!r} is used more than once",
                    )
                seen.add(part["id"])


def _r7(doc: Doc) -> Iterator[Problem]:
    for i, appr in enumerate(doc["pendingApprovals"]):
        decision = appr.get("decision")
        if "editedArguments" in appr and decision != "approved":
            yield _p(
                "R7",
                ["pendingApprovals", i, "editedArguments"],
                "'editedArguments' is allowed only with decision 'approved'",
            )
        if "response" in appr and decision != "responded":
            yield _p(
                "R7",
                ["pendingApprovals", i, "response"],
                "'response' is allowed only with decision 'responded'",
            )
        if decision == "responded" and "response" not in appr:
            yield _p("R7", ["pendingApprovals", i], "decision 'responded' requires 'response'")


def _r8(doc: Doc) -> Iterator[Problem]:
    n = sum(1 for m in doc["messages"] if m["role"] == "assistant")
    if doc["turns"] != n:
        yield _p(
            "R8",
            ["turns"],
            f"turns is {doc['turns']} but the document holds {n} assistant messages",
        )


def _r9(doc: Doc) -> Iterator[Problem]:
    created, updated = parse_rfc3339(doc["createdAt"]), parse_rfc3339(doc["updatedAt"])
    for name, parsed in (("createdAt", created), ("updatedAt", updated)):
        if parsed is None:
            yield _p("R9", [name], f"{name} {doc[name]!r} is not an RFC 3339 date-time")
    if created and updated and updated < created:
        yield _p("R9", ["updatedAt"], "updatedAt is before createdAt")


def _i1(doc: Doc) -> Iterator[Problem]:
    try:
        expected = digest(doc["arguments"])
    except CanonicalizationError as exc:
        yield _p("I1", ["arguments"], f"arguments have no canonical form: {exc}")
        return
    if doc["argumentsHash"] != expected:
        yield _p("I1", ["argumentsHash"], _mismatch(doc, "/arguments", "argumentsHash", expected))


def _i2(doc: Doc) -> Iterator[Problem]:
    if doc["sideEffectClass"] in APPROVAL_REQUIRED_CLASSES and "approvalId" not in doc:
        yield _p(
            "I2",
            ["approvalId"],
            f"a {doc['sideEffectClass']!r} call requires "
            "approvalId (shared-write and above need an approval)",
        )


def _c1(doc: Doc) -> Iterator[Problem]:
    body = {k: v for k, v in without_note(doc).items() if k != "receiptHash"}
    try:
        expected = digest(body)
    except CanonicalizationError as exc:
        yield _p("C1", [], f"receipt has no canonical form: {exc}")
        return
    if doc["receiptHash"] != expected:
        yield _p("C1", ["receiptHash"], _mismatch(doc, "", "receiptHash", expected))


def _mismatch(doc: Doc, covered: str, member: str, expected: str) -> str:
    """Why ``member`` does not match: the export's redactions (named in its ``redacted``
    member) when they explain it, else a mismatch."""
    problem, redacted = redaction_note(doc, covered)
    if problem is not None:
        return f"{member} does not match ({problem})"
    if redacted:
        return (
            f"{member} cannot be checked: this is an export with secrets redacted at "
            f"{', '.join(redacted)}; the stored record holds them"
        )
    what = "the arguments" if covered else "the receipt"
    return f"{member} does not match {what} (expected {expected})"


def _c2(doc: Doc) -> Iterator[Problem]:
    if "finishedAt" in doc:
        started, finished = parse_rfc3339(doc["startedAt"]), parse_rfc3339(doc["finishedAt"])
        if started and finished and finished < started:
            yield _p("C2", ["finishedAt"], "finishedAt is before startedAt")


def _c3(doc: Doc) -> Iterator[Problem]:
    if doc["status"] in ("Failed", "Denied", "TimedOut") and "error" not in doc:
        yield _p("C3", ["error"], f"status {doc['status']} requires 'error'")


_NOT_STARTED = frozenset({"sandbox_unavailable", "sandbox_failed", "spawn_failed", "cancelled"})
_ISOLATIONS = frozenset({"bubblewrap", "unshare", "workspace"})


def sandbox_problem(invocation: Doc, receipt: Doc) -> str | None:
    """What is wrong between a ``sandbox``-class invocation and its receipt, or None.

    A call that ran (Succeeded, Failed, TimedOut) ran in the sandbox its invocation records:
    the receipt's ``usage.sandbox`` names an isolation (``bubblewrap``, ``unshare``, or
    ``workspace`` for oarlock's own confined file operations) and, where the invocation
    names them, the same isolation, egress profile and workspace. A receipt with no
    ``usage.sandbox`` (or one without an isolation) stands only for a call whose program
    never started: Failed, with the code saying so. Denied and Uncertain receipts say
    nothing of a sandbox."""
    if invocation.get("sideEffectClass") != "sandbox":
        return None
    status = receipt.get("status")
    if status not in ("Succeeded", "Failed", "TimedOut"):
        return None
    usage = receipt.get("usage")
    box = usage.get("sandbox") if isinstance(usage, dict) else None
    error = receipt.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(box, dict) or "isolation" not in box:
        if status == "Failed" and (isinstance(box, dict) or code in _NOT_STARTED):
            return None  # its program never started
        return f"a sandbox-class call ended {status} with no sandbox on its receipt"
    planned = invocation.get("sandbox")
    if not isinstance(planned, dict):
        return "the invocation of a sandbox-class call that ran records no sandbox"
    if box["isolation"] not in _ISOLATIONS:
        return f"the call ran under isolation {box['isolation']!r}, which isolates nothing"
    for key in ("isolation", "egressProfile", "workspaceId"):
        if key in planned and box.get(key) != planned[key]:
            return (
                f"the receipt's sandbox {key} {box.get(key)!r} is not the invocation's "
                f"{planned[key]!r}"
            )
    return None


_RULES: dict[Kind, tuple[Callable[[Doc], Iterator[Problem]], ...]] = {
    "run": (_r1_r2_r3, _r4, _r5_r10, _r6, _r7, _r8, _r9),
    "invocation": (_i1, _i2),
    "receipt": (_c1, _c2, _c3),
}


def rule_problems(doc: Doc, kind: Kind) -> list[Problem]:
    """Every semantic rule ``doc`` breaks, ordered by rule id."""
    found = [p for check in _RULES[kind] for p in check(doc)]
    return sorted(found, key=lambda p: (p.rule[0], int(p.rule[1:])))
