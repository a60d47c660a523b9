"""Properties of the formats layer, checked with hypothesis:

1. ``canonicalize`` is byte-identical to the ``rfc8785`` package on arbitrary JSON values;
2. digests do not depend on the insertion order of object members;
3. valid run documents, invocations and receipts survive parse -> dump unchanged
   (same members, same values, same number types);
4. ``validate`` never raises on any JSON value: it always returns a report.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import random
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oarlock.formats import (
    APPROVAL_REQUIRED_CLASSES,
    SIDE_EFFECT_CLASSES,
    Report,
    ToolInvocation,
    ToolReceipt,
    canonicalize,
    digest,
    dump,
    dump_json,
    dump_run,
    parse,
    parse_json,
    parse_run,
    validate,
)
from oarlock.formats._codec import dump_run_json

HEAVY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIGHT = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT_MAX = 2**53 - 1

# --------------------------------------------------------------------------- JSON values

# characters that matter for JCS: controls, quote and backslash, DEL, the edges of the
# surrogate range, private use, U+FB33 vs U+1F600 (UTF-16 vs code point order), non-BMP
SPECIAL_CHARS = st.sampled_from(
    ["\x00", "\x1f", "\n", "\t", '"', "\\", "/", "\x7f", "\u0080", "\u2028", "\ud7ff",
     "\ue000", "\ufb33", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff", "é", "A"]
)
ANY_CHAR = st.characters(exclude_categories=["Cs"])  # every code point but surrogates
NON_BMP = st.characters(min_codepoint=0x10000)
TEXT = st.text(alphabet=st.one_of(ANY_CHAR, SPECIAL_CHARS, NON_BMP), max_size=12)

FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-5, max_value=1e-5, allow_nan=False),  # tiny: exponent forms
    st.sampled_from(
        [0.0, -0.0, 1.0, 1e21, 1e-7, 1e-6, 5e-324, 1.7976931348623157e308, 2.0**53,
         123456789012345680000.0, 1e16, 9.999999999999997e22, 333333333.33333329, 0.1]
    ),
    st.integers(min_value=-(2**70), max_value=2**70).map(float),  # integral floats
    st.integers(min_value=-400, max_value=400).map(lambda e: 10.0**e if abs(e) < 308 else 1.5),
)
INTS = st.integers(min_value=-INT_MAX, max_value=INT_MAX)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)


def json_values(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda children: st.one_of(
            st.lists(children, max_size=5), st.dictionaries(TEXT, children, max_size=6)
        ),
        max_leaves=max_leaves,
    )


JSON = json_values()
SMALL_JSON = json_values(max_leaves=6)  # inside generated documents, to keep them quick
JSON_OBJECTS = st.dictionaries(TEXT, SMALL_JSON, max_size=3)


# --------------------------------------------------------------------------- (1) JCS


@LIGHT
@given(JSON)
def test_canonicalize_matches_rfc8785(value):
    assert canonicalize(value) == rfc8785.dumps(value)


@LIGHT
@given(st.dictionaries(st.text(alphabet=SPECIAL_CHARS, max_size=4), INTS, max_size=10))
def test_key_order_matches_rfc8785(value):
    assert canonicalize(value) == rfc8785.dumps(value)


@LIGHT
@given(FLOATS)
def test_floats_match_rfc8785(value):
    assert canonicalize(value) == rfc8785.dumps(value)
    assert canonicalize([value, {"v": value}]) == rfc8785.dumps([value, {"v": value}])


@LIGHT
@given(JSON)
def test_canonical_form_is_a_fixed_point(value):
    once = canonicalize(value)
    # read the way an ECMAScript (double-only) consumer reads it: an integral float of
    # 2**53 or more comes back from the text as an integer, which I-JSON refuses
    reread = json.loads(once, parse_int=lambda s: int(s) if abs(int(s)) <= INT_MAX else float(s))
    assert canonicalize(reread) == once
    assert once.decode("utf-8")  # always valid UTF-8


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(st.integers(min_value=INT_MAX + 1), st.integers(max_value=-INT_MAX - 1)), JSON
)
def test_big_integers_are_always_refused(big, other):
    from oarlock.errors import CanonicalizationError

    with pytest.raises(CanonicalizationError, match=r"2\*\*53"):
        canonicalize([other, {"n": big}])


# --------------------------------------------------------------------------- (2) digests


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's members inserted in another order."""
    if isinstance(value, dict):
        items = [(k, shuffled(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@LIGHT
@given(JSON, st.randoms(use_true_random=False))
def test_digest_is_stable_under_member_order(value, rnd):
    other = shuffled(value, rnd)
    assert other == value
    assert canonicalize(other) == canonicalize(value)
    assert digest(other) == digest(value)
    assert digest(value) == "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


# --------------------------------------------------------------------------- document parts

RUN_MEMBERS = {
    "format", "tags", "id", "agent", "model", "input", "status", "messages",
    "pendingApprovals", "bufferedToolResults", "usage", "turns", "result", "error",
    "createdAt", "updatedAt", "role", "content", "type", "text", "name", "arguments",
    "toolCallId", "toolName", "isError", "requestedAt", "decision", "decidedBy", "reason",
    "editedArguments", "response", "inputTokens", "outputTokens", "costUsd",
}
# Unknown members named like a model's Python attribute (``is_error``, ``decided_by``...)
# are not generated here: see test_unknown_snake_case_member_round_trips below.
SNAKE_NAMES = {
    "tool_call_id", "tool_name", "is_error", "requested_at", "decided_by",
    "edited_arguments", "pending_approvals", "buffered_tool_results", "created_at",
    "updated_at", "input_tokens", "output_tokens", "cost_usd",
}
EXTRA_KEYS = st.one_of(
    st.sampled_from(
        ["x-vendor", "metadata", "model_config", "model_fields", "__class__", "_private",
         "schema", "json", "copy", "dict", "ID", "Type", "tool_call", "", " "]
    ),
    TEXT,
).filter(lambda k: k not in RUN_MEMBERS and k not in SNAKE_NAMES)
EXTRAS = st.one_of(st.just({}), st.dictionaries(EXTRA_KEYS, SMALL_JSON, max_size=2))
NAMES = st.text(alphabet=string.ascii_letters + "_.-", min_size=1, max_size=12)
NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=10**12),
    st.floats(min_value=0, max_value=1e12, allow_nan=False),
    st.integers(min_value=0, max_value=10**6).map(float),
)


def with_extras(draw: Any, obj: dict[str, Any]) -> dict[str, Any]:
    extras = draw(EXTRAS)
    merged = {**obj, **{k: v for k, v in extras.items() if k not in obj}}
    keys = draw(st.permutations(list(merged)))
    return {k: merged[k] for k in keys}


@st.composite
def instants(draw: Any, low: datetime | None = None) -> datetime:
    start = low or datetime(2001, 1, 1, tzinfo=UTC)
    delta = draw(
        st.one_of(
            st.just(timedelta(0)),
            st.timedeltas(min_value=timedelta(0), max_value=timedelta(microseconds=3)),
            st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
        )
    )
    return start + delta


@st.composite
def rfc3339(draw: Any, moment: datetime) -> str:
    """``moment`` written in RFC 3339 with a random offset and exact fraction."""
    minutes = draw(st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59))
    local = moment + timedelta(minutes=minutes)
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if local.microsecond or draw(st.booleans()):
        text += f".{local.microsecond:06d}" + "0" * draw(st.integers(0, 12))
    if minutes == 0 and draw(st.booleans()):
        return text + draw(st.sampled_from(["Z", "z"]))
    sign = "+" if minutes >= 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def text_part(draw: Any) -> dict[str, Any]:
    return with_extras(draw, {"type": "text", "text": draw(TEXT)})


def result_part(draw: Any, call_id: str, name: str) -> dict[str, Any]:
    part = {"type": "tool_result", "toolCallId": call_id, "toolName": name, "content": draw(TEXT)}
    if draw(st.booleans()):
        part["isError"] = draw(st.booleans())
    return with_extras(draw, part)


@st.composite
def run_documents(draw: Any) -> dict[str, Any]:
    """A structurally and semantically valid oar/0.2 (or oar/0.1) run document."""
    prefix = draw(st.sampled_from(["call_", "toolu_", "c", "😀-"]))
    counter = iter(range(1, 10_000))
    calls_made: list[tuple[str, str]] = []
    messages: list[dict[str, Any]] = [
        with_extras(draw, {"role": "user", "content": [text_part(draw)]})
    ]
    last_calls: list[tuple[str, str]] = []
    turns = draw(st.integers(min_value=0, max_value=4))
    for turn in range(turns):
        parts: list[dict[str, Any]] = []
        calls: list[tuple[str, str]] = []
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            if draw(st.booleans()):
                parts.append(text_part(draw))
            else:
                call = (f"{prefix}{next(counter)}", draw(NAMES))
                calls.append(call)
                part = {"type": "tool_call", "id": call[0], "name": call[1],
                        "arguments": draw(JSON_OBJECTS)}
                parts.append(with_extras(draw, part))
        messages.append(with_extras(draw, {"role": "assistant", "content": parts}))
        calls_made += calls
        last_calls = calls
        if turn < turns - 1 or draw(st.booleans()):
            answers = [result_part(draw, c, n) for c, n in calls_made if draw(st.booleans())]
            answers += [text_part(draw) for _ in range(draw(st.integers(0, 1)))]
            answers = draw(st.permutations(answers))
            messages.append(with_extras(draw, {"role": "user", "content": answers}))

    statuses = ["running", "completed", "failed", "halted_budget", "halted_max_turns",
                "cancelled"] + (["waiting_approval"] * 3 if last_calls else [])
    status = draw(st.sampled_from(statuses))
    fmt = draw(st.sampled_from(["oar/0.2", "oar/0.2", "oar/0.1"]))
    decisions = [None, "approved", "denied"] + (["responded"] if fmt == "oar/0.2" else [])

    pending_calls = [c for c in last_calls if draw(st.booleans())]
    if status == "waiting_approval" and not pending_calls:
        pending_calls = [last_calls[0]]
    approvals = []
    for i, (call_id, name) in enumerate(pending_calls):
        decision = draw(st.sampled_from(decisions))
        if status == "completed" and decision is None:
            decision = "denied"
        if status == "waiting_approval" and i == 0:
            decision = None  # at least one approval is still undecided
        appr: dict[str, Any] = {
            "toolCallId": call_id,
            "toolName": name,
            "arguments": draw(JSON_OBJECTS),
            "requestedAt": draw(rfc3339(draw(instants()))),
        }
        if decision is not None:
            appr["decision"] = decision
            if draw(st.booleans()):
                appr["decidedBy"] = draw(st.sampled_from(["human", "policy"]))
        if decision == "approved" and draw(st.booleans()):
            appr["editedArguments"] = draw(JSON_OBJECTS)
        if decision == "responded":
            appr["response"] = draw(TEXT)
        if draw(st.booleans()):
            appr["reason"] = draw(TEXT)
        approvals.append(with_extras(draw, appr))

    pending_ids = {c for c, _ in pending_calls}
    buffered_calls = [c for c in calls_made if draw(st.booleans())]
    if status == "waiting_approval":
        buffered_calls += [c for c in last_calls if c[0] not in pending_ids]
    buffered = [result_part(draw, c, n) for c, n in buffered_calls]

    usage = with_extras(
        draw,
        {"inputTokens": draw(NUMBERS), "outputTokens": draw(NUMBERS), "costUsd": draw(NUMBERS)},
    )
    created = draw(instants())
    updated = draw(instants(low=created))
    doc: dict[str, Any] = {
        "format": fmt,
        "id": draw(st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)),
        "agent": draw(NAMES),
        "model": draw(NAMES),
        "input": draw(TEXT),
        "status": status,
        "messages": messages,
        "pendingApprovals": approvals,
        "bufferedToolResults": buffered,
        "usage": usage,
        "turns": turns,
        "createdAt": draw(rfc3339(created)),
        "updatedAt": draw(rfc3339(updated)),
    }
    if draw(st.booleans()):
        doc["tags"] = draw(st.dictionaries(TEXT, TEXT, max_size=3))
    if status == "completed" or draw(st.booleans()):
        doc["result"] = draw(TEXT)
    if status == "failed" or draw(st.booleans()):
        doc["error"] = draw(TEXT)
    return with_extras(draw, doc)


def independent_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


UUIDS = st.uuids().map(str)
I_JSON_OBJECTS = st.dictionaries(TEXT, SMALL_JSON, max_size=5)
STR_MAP = st.dictionaries(TEXT, TEXT, max_size=3)


def optional(draw: Any, obj: dict[str, Any], key: str, strategy: Any) -> None:
    if draw(st.booleans()):
        obj[key] = draw(strategy)


@st.composite
def invocations(draw: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {"tenantId": draw(TEXT.filter(bool))}
    for key in ("projectId", "environment", "principalId"):
        optional(draw, scope, key, TEXT)
    optional(draw, scope, "labels", STR_MAP)
    policy: dict[str, Any] = {
        "decisionId": draw(UUIDS),
        "effect": draw(st.sampled_from(["allow", "deny", "require_approval"])),
        "policyId": draw(TEXT),
        "evaluatedAt": draw(rfc3339(draw(instants()))),
    }
    optional(draw, policy, "policyVersion", TEXT)
    optional(draw, policy, "ruleId", TEXT)
    optional(draw, policy, "reasons", st.lists(TEXT, max_size=3))
    cls = draw(st.sampled_from(SIDE_EFFECT_CLASSES))
    arguments = draw(I_JSON_OBJECTS)
    doc: dict[str, Any] = {
        "invocationId": draw(UUIDS),
        "toolId": draw(TEXT),
        "schemaVersion": draw(TEXT),
        "scope": {k: scope[k] for k in draw(st.permutations(list(scope)))},
        "runId": draw(UUIDS),
        "stepId": draw(UUIDS),
        "attemptId": draw(UUIDS),
        "sideEffectClass": cls,
        "idempotencyKey": draw(TEXT),
        "arguments": arguments,
        "argumentsHash": independent_digest(arguments),
        "policyDecision": policy,
    }
    optional(draw, doc, "mcpServerId", TEXT)
    optional(draw, doc, "agentId", TEXT)
    optional(draw, doc, "timeoutSeconds", st.integers(min_value=-INT_MAX, max_value=INT_MAX))
    if cls in APPROVAL_REQUIRED_CLASSES or draw(st.booleans()):
        doc["approvalId"] = draw(UUIDS)
    if draw(st.booleans()):
        sandbox: dict[str, Any] = {}
        optional(draw, sandbox, "workspaceId", TEXT)
        optional(draw, sandbox, "egressProfile", TEXT)
        doc["sandbox"] = with_extras(draw, sandbox)
    keys = draw(st.permutations(list(doc)))
    return {k: doc[k] for k in keys}


@st.composite
def receipts(draw: Any) -> dict[str, Any]:
    started = draw(instants())
    status = draw(st.sampled_from(["Succeeded", "Failed", "Denied", "TimedOut", "Uncertain"]))
    doc: dict[str, Any] = {
        "invocationId": draw(UUIDS),
        "status": status,
        "startedAt": draw(rfc3339(started)),
    }
    if draw(st.booleans()):
        doc["finishedAt"] = draw(rfc3339(draw(instants(low=started))))
    if draw(st.booleans()):
        effect: dict[str, Any] = {}
        optional(draw, effect, "kind", TEXT)
        optional(draw, effect, "externalReference", TEXT)
        optional(draw, effect, "reversible", st.booleans())
        optional(draw, effect, "effectHash", TEXT)
        doc["effect"] = with_extras(draw, effect)
    optional(draw, doc, "resultRef", TEXT)
    optional(draw, doc, "sanitized", st.booleans())
    if draw(st.booleans()):
        usage: dict[str, Any] = {}
        for key in ("durationMs", "bytesIn", "bytesOut"):
            optional(draw, usage, key, st.integers(min_value=0, max_value=INT_MAX))
        doc["usage"] = with_extras(draw, usage)
    if status in ("Failed", "Denied", "TimedOut") or draw(st.booleans()):
        error: dict[str, Any] = {}
        optional(draw, error, "code", TEXT)
        optional(draw, error, "message", TEXT)
        doc["error"] = with_extras(draw, error)
    doc["receiptHash"] = independent_digest(doc)
    keys = draw(st.permutations(list(doc)))
    return {k: doc[k] for k in keys}


# --------------------------------------------------------------------------- (3) round trips


def same_json(a: Any, b: Any) -> bool:
    """Equal values AND equal JSON text: catches 1 vs 1.0 and True vs 1, which == hides."""
    return a == b and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@HEAVY
@given(run_documents())
def test_valid_run_documents_round_trip(doc):
    original = copy.deepcopy(doc)
    report = validate(doc)
    assert report.valid, report.errors
    assert report.kind == "run"
    model = parse_run(doc)
    assert doc == original  # parsing does not touch its input
    out = dump_run(model)
    assert same_json(out, doc)
    assert same_json(json.loads(dump_json(model)), doc)
    assert same_json(json.loads(dump_run_json(model)), doc)  # each message dumped anew
    if model.messages:  # and again, with the earlier messages cached
        model.messages.append(model.messages[0])
        grown = [*doc["messages"], doc["messages"][0]]
        assert same_json(json.loads(dump_run_json(model))["messages"], grown)
        model.messages.pop()
        assert same_json(json.loads(dump_run_json(model)), doc)  # the cache longer than them
        model.messages = model.messages[::-1]  # other objects at the same places
        assert same_json(json.loads(dump_run_json(model))["messages"], doc["messages"][::-1])
        model.messages = model.messages[::-1]
    again = parse_run(json.dumps(doc, ensure_ascii=False))
    assert same_json(dump_run(again), doc)
    assert digest(out) == digest(doc)


@HEAVY
@given(invocations())
def test_valid_invocations_round_trip(doc):
    report = validate(doc)
    assert report.valid, report.errors
    assert report.kind == "invocation"
    model = parse(ToolInvocation, doc)
    assert same_json(dump(model), doc)
    assert same_json(json.loads(dump_json(model)), doc)
    assert same_json(dump(parse_json(ToolInvocation, json.dumps(doc))), doc)
    assert digest(dump(model)["arguments"]) == doc["argumentsHash"]


@HEAVY
@given(receipts())
def test_valid_receipts_round_trip(doc):
    report = validate(doc)
    assert report.valid, report.errors
    assert report.kind == "receipt"
    model = parse(ToolReceipt, doc)
    out = dump(model)
    assert same_json(out, doc)
    assert same_json(json.loads(dump_json(model)), doc)
    assert same_json(dump(parse_json(ToolReceipt, json.dumps(doc))), doc)
    assert digest({k: v for k, v in out.items() if k != "receiptHash"}) == doc["receiptHash"]


def test_round_trip_of_the_examples(example):
    for name in ("runs/refund-waiting-approval.json", "runs/refund-completed.json",
                 "runs/responded-oar-0.2.json", "runs/legacy-oar-0.1.json"):
        doc = example(name)
        assert same_json(dump_run(parse_run(doc)), doc), name
    for name, model in (("invocations/refund-spend.json", ToolInvocation),
                        ("invocations/lookup-read.json", ToolInvocation),
                        ("receipts/refund-succeeded.json", ToolReceipt),
                        ("receipts/lookup-denied.json", ToolReceipt)):
        doc = example(name)
        assert same_json(dump(parse(model, doc)), doc), name  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("where", "member", "value"),
    [("bufferedToolResults/0", "is_error", True), ("pendingApprovals/0", "decided_by", 5)],
)
def test_unknown_snake_case_member_round_trips(run_waiting, where, member, value):
    section, index = where.split("/")
    run_waiting[section][int(index)][member] = value
    assert validate(run_waiting).valid  # the run schema is open
    assert same_json(dump_run(parse_run(run_waiting)), run_waiting)


def test_integral_float_in_an_integer_member_round_trips(run_waiting):
    run_waiting["turns"] = 2.0
    assert validate(run_waiting).valid
    assert same_json(dump_run(parse_run(run_waiting)), run_waiting)


# --------------------------------------------------------------------------- (4) never raises

DATE_TIME_LIKE = st.one_of(
    st.from_regex(
        r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,30})?([Zz]|[+-]\d{2}:\d{2})",
        fullmatch=True,
    ),
    st.builds(
        "{}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}".format,
        st.sampled_from(["0000", "0001", "9999", "2026"]),
        st.integers(0, 13),
        st.integers(0, 32),
        st.integers(0, 25),
        st.integers(0, 61),
        st.integers(0, 61),
        st.sampled_from(["Z", "+23:59", "-23:59", "+00:00", "-00:00", "+24:00", ".5Z"]),
    ),
    TEXT,
)


def all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            paths += all_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            paths += all_paths(v, (*prefix, i))
    return paths


def set_path(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


EXAMPLE_NAMES = [
    "runs/refund-waiting-approval.json",
    "runs/refund-completed.json",
    "runs/responded-oar-0.2.json",
    "runs/legacy-oar-0.1.json",
    "invocations/lookup-read.json",
    "invocations/refund-spend.json",
    "receipts/refund-succeeded.json",
    "receipts/lookup-denied.json",
    "receipts/refund-uncertain.json",
]
TIME_MEMBERS = {"createdAt", "updatedAt", "startedAt", "finishedAt", "evaluatedAt",
                "requestedAt"}


@st.composite
def mutated_examples(draw: Any) -> dict[str, Any]:
    """An example with one member replaced (by any JSON, or a date-time-like string) or
    removed; receipts are rehashed half of the time so that the rules beyond C1 run."""
    from pathlib import Path

    name = draw(st.sampled_from(EXAMPLE_NAMES))
    root = Path(__file__).resolve().parents[2] / "examples"
    doc = json.loads((root / name).read_text("utf-8"))
    path = draw(st.sampled_from(all_paths(doc)[1:]))
    action = draw(st.sampled_from(["replace", "time", "delete"]))
    if action == "delete":
        parent: Any = doc
        for p in path[:-1]:
            parent = parent[p]
        del parent[path[-1]]
    elif action == "time" or path[-1] in TIME_MEMBERS:
        set_path(doc, path, draw(DATE_TIME_LIKE))
    else:
        set_path(doc, path, draw(JSON))
    if "receiptHash" in doc and draw(st.booleans()):
        # a value with no canonical form leaves the receipt unhashed
        with contextlib.suppress(rfc8785.CanonicalizationError):
            doc["receiptHash"] = independent_digest(
                {k: v for k, v in doc.items() if k != "receiptHash"}
            )
    return doc


KINDS = st.sampled_from(["auto", "run", "invocation", "receipt"])


def check_report(report: Any) -> None:
    assert isinstance(report, Report)
    assert report.valid == (report.errors == [])
    for p in report.errors:
        assert isinstance(p.pointer, str)
        assert p.pointer == "" or p.pointer.startswith("/")
        assert p.rule
        assert p.message
    json.dumps(report.to_json())


@HEAVY
@given(JSON, KINDS, st.booleans())
def test_validate_never_raises_on_json_values(value, kind, schema_only):
    check_report(validate(value, kind, schema_only=schema_only))
    check_report(validate(json.dumps(value, ensure_ascii=False), kind))


@settings(HEAVY, max_examples=100)
@given(st.one_of(run_documents(), invocations(), receipts()), KINDS)
def test_validate_never_raises_on_documents_of_any_kind(doc, kind):
    check_report(validate(doc, kind))


@HEAVY
@given(mutated_examples(), KINDS, st.booleans())
def test_validate_never_raises_on_mutated_examples(doc, kind, schema_only):
    report = validate(doc, kind, schema_only=schema_only)
    check_report(report)
    check_report(validate(json.dumps(doc, ensure_ascii=False).encode("utf-8"), kind))


@HEAVY
@given(st.binary(max_size=64) | st.text(max_size=64))
def test_validate_never_raises_on_arbitrary_text(data):
    check_report(validate(data))
