"""Random scripts and random decision sequences driven through the Runner.

Every run goes through ``ValidatingStore(MemoryStore())``, which refuses to write a document
that fails ``oarlock validate``: a run that gets through proves every state it passed
valid. Every decision is predicted (accepted, or refused and with which code) before it is
made; a refusal must change nothing stored. Completed runs are replayed with ReplayModel.

A successful tool result is fenced with a fresh nonce for every call, so an original and
its replay are compared with every fenced result unfenced (``unfenced_document``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import oarlock
from helpers import unfenced_document
from oarlock.engine import TERMINAL, Agent, RetryPolicy, Runner
from oarlock.errors import DecisionRefused, RunStateError
from oarlock.formats import RunDocument, dump_run
from oarlock.models import ReplayModel
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import Tool, ToolArgumentsError, tool

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@tool(name="lookup", side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value:{key}"


@tool(name="pay", side_effect="spend")
def pay(amount: int) -> str:
    """Pay an amount (needs approval)."""
    return f"paid {amount}"


@tool(name="ask", side_effect="external", allow_response=True)
def ask(question: str) -> str:
    """Ask someone (a human may answer instead)."""
    return f"asked {question}"


TOOLS: list[Tool] = [lookup, pay, ask]
BY_NAME = {t.name: t for t in TOOLS}

# -- strategies ------------------------------------------------------------------------------
calls = st.one_of(
    st.builds(lambda k: {"name": "lookup", "arguments": {"key": k}}, st.sampled_from("abc")),
    st.builds(lambda n: {"name": "pay", "arguments": {"amount": n}}, st.integers(0, 99)),
    st.builds(lambda q: {"name": "ask", "arguments": {"question": q}},
              st.sampled_from(["why?", "how?"])),
    st.builds(lambda n: {"name": n, "arguments": {"x": 1}},
              st.sampled_from(["ghost", "Pay", "lookup2"])),
    st.builds(lambda n, raw: {"name": n, "arguments": raw},
              st.sampled_from(["lookup", "pay", "ask", "ghost"]),
              st.sampled_from(["{bad", "[1, 2]", "", "null", '{"key": '])),
    st.sampled_from([{"name": "pay", "arguments": {"amount": "lots"}},
                     {"name": "lookup", "arguments": {}},
                     {"name": "ask", "arguments": {"question": "q", "extra": 1}}]),
)
turns = st.builds(
    lambda text, tool_calls: {**({"text": text} if text else {}), "tool_calls": tool_calls},
    st.sampled_from(["", "thinking"]), st.lists(calls, min_size=1, max_size=4))
scripts = st.builds(
    lambda body, answer: body + ([{"text": "final answer"}] if answer else []),
    st.lists(turns, min_size=1, max_size=6), st.booleans())

OP_KINDS = ["approve", "approve", "edit", "edit", "deny", "deny", "respond", "respond",
            "respond", "deny_with_edit", "approve_with_response", "cancel", "resume"]
ops = st.lists(st.tuples(st.sampled_from(OP_KINDS), st.integers(0, 9), st.booleans()),
               max_size=16)


# -- the driver ------------------------------------------------------------------------------
@dataclass
class Drive:
    doc: RunDocument
    decisions: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    refusals: int = 0


def decision_for(kind: str, tool_name: str | None, ok: bool) -> tuple[str, dict[str, Any]]:
    valid_edit = {"question": "edited?"} if tool_name == "ask" else {"amount": 7}
    if kind == "approve":
        return "approved", {}
    if kind == "edit":
        return "approved", {"edited_arguments": valid_edit if ok else {"amount": "x", "y": 1}}
    if kind == "deny":
        return "denied", {"reason": "not now"} if ok else {}
    if kind == "respond":
        return "responded", {"response": "a human answer"} if ok else {}
    if kind == "approve_with_response":  # never allowed
        return "approved", {"response": "a stray answer"}
    return "denied", {"edited_arguments": valid_edit}  # deny_with_edit: never allowed


def expected_refusals(doc: RunDocument, call_id: str, decision: str,
                      kwargs: dict[str, Any]) -> set[str]:
    """Every reason the decision must be refused for (empty: it must be accepted)."""
    out: set[str] = set()
    approval = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
    if doc.status != "waiting_approval":
        out.add("run_not_waiting")
    edited = kwargs.get("edited_arguments")
    if approval is None:
        out.add("unknown_call")
    elif approval.decision is not None:
        out.add("already_decided")
    else:
        t = BY_NAME[approval.tool_name]
        if decision == "responded" and not t.allow_response:
            out.add("response_not_allowed")
        if edited is not None:
            try:
                t.validate_arguments(edited)
            except ToolArgumentsError:
                out.add("invalid_edit")
    if decision == "responded" and kwargs.get("response") is None:
        out.add("response_required")
    if decision != "responded" and kwargs.get("response") is not None:
        out.add("response_needs_responded")
    if edited is not None and decision != "approved":
        out.add("edit_needs_approval")
    if decision == "denied" and not (kwargs.get("reason") or "").strip():
        out.add("reason_required")
    return out


async def snapshot(store: ValidatingStore, run_id: str) -> tuple[dict[str, Any], int, int]:
    stored = await store.load(run_id)
    return dump_run(stored.document), stored.version, len(await store.events(run_id))


async def ledger_length(store: ValidatingStore) -> int:
    """How many records the governance store holds (approvals, invocations, receipts)."""
    return len(await store.governance().ledger())


async def finish(runner: Runner, drive: Drive,
                 replayed: list[tuple[str, str, dict[str, Any]]] | None = None) -> None:
    """Drive the run to a final status: answer what a human may answer and deny the rest
    or, in a replay, make the original decisions in their original order; resume whenever
    the run can go on."""
    for _ in range(50):
        doc = drive.doc
        if doc.status in TERMINAL:
            return
        if doc.status == "running":
            drive.doc = await runner.resume(doc.id)
            continue
        undecided = {a.tool_call_id: a for a in doc.pending_approvals if a.decision is None}
        if replayed is not None:
            plan = [(c, d, k) for c, d, k in replayed if c in undecided]
            assert {c for c, _, _ in plan} == set(undecided), "the original decided them all"
        else:
            plan = [(c, "responded", {"response": "answered at cleanup"})
                    if BY_NAME[a.tool_name].allow_response
                    else (c, "denied", {"reason": "cleanup"}) for c, a in undecided.items()]
        for call_id, decision, kwargs in plan:
            drive.doc = await runner.decide(doc.id, call_id, decision, **kwargs)
            drive.decisions.append((call_id, decision, kwargs))
    raise AssertionError(f"the run did not finish: {drive.doc.status}")


async def drive_run(runner: Runner, store: ValidatingStore, script_ops: list[Any]) -> Drive:
    drive = Drive(await runner.start("go"))
    for kind, pick, ok in script_ops:
        doc = drive.doc
        if kind == "resume" or (doc.status == "running" and pick % 3):
            drive.doc = await runner.resume(doc.id)
            continue
        if kind == "cancel":
            if doc.status in TERMINAL:
                before = await snapshot(store, doc.id)
                with pytest.raises(RunStateError):
                    await runner.cancel(doc.id)
                assert await snapshot(store, doc.id) == before
            else:
                drive.doc = await runner.cancel(doc.id, "cancelled by the test")
                assert drive.doc.status == "cancelled"
            continue
        candidates = [a.tool_call_id for a in doc.pending_approvals] + ["no_such_call"]
        call_id = candidates[pick % len(candidates)]
        approval = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
        decision, kwargs = decision_for(kind, approval.tool_name if approval else None, ok)
        reasons = expected_refusals(doc, call_id, decision, kwargs)
        if not reasons:
            drive.doc = await runner.decide(doc.id, call_id, decision, **kwargs)
            drive.decisions.append((call_id, decision, kwargs))
            continue
        before = await snapshot(store, doc.id)
        recorded = await ledger_length(store)
        with pytest.raises(DecisionRefused) as refused:
            await runner.decide(doc.id, call_id, decision, **kwargs)
        assert refused.value.code in reasons, (refused.value, reasons)
        assert await snapshot(store, doc.id) == before  # a refusal changes nothing ...
        assert await ledger_length(store) == recorded  # ... not even in the governance store
        drive.refusals += 1
        if drive.doc.status in TERMINAL:
            break  # one refused decision on a finished run is enough
    await finish(runner, drive)
    return drive


def make_runner(model: Any, store: ValidatingStore, tools: list[Tool] = TOOLS) -> Runner:
    return Runner(Agent("agent", model, tools=tools), store,
                  retry=RetryPolicy(attempts=1, base_delay=0))


def messages(doc: RunDocument) -> list[dict[str, Any]]:
    """The messages of a run, every fenced tool result unfenced."""
    result: list[dict[str, Any]] = unfenced_document(dump_run(doc))["messages"]
    return result


async def check_random_run(script: list[dict[str, Any]], script_ops: list[Any]) -> None:
    store = ValidatingStore(MemoryStore())
    runner = make_runner(ScriptedModel(script), store)
    drive = await drive_run(runner, store, script_ops)
    doc = drive.doc
    assert doc.status in TERMINAL
    final = dump_run((await store.load(doc.id)).document)
    assert final == dump_run(doc)
    report = oarlock.validate(final, "run")
    assert report.valid, [(p.pointer, p.rule, p.message) for p in report.errors]
    assert doc.turns == sum(1 for m in doc.messages if m.role == "assistant")
    if doc.status == "completed":
        assert doc.pending_approvals == []
        assert doc.buffered_tool_results == []
        await check_replay(doc, drive)


async def check_replay(original: RunDocument, drive: Drive) -> None:
    """Replay the run with its decisions: no divergence, and the same messages (tool
    results unfenced)."""
    store = ValidatingStore(MemoryStore())
    model = ReplayModel(original)
    runner = make_runner(model, store)
    replay = Drive(await runner.start(original.input))
    await finish(runner, replay, drive.decisions)
    assert replay.doc.status == "completed"
    assert model.divergences == []
    assert messages(replay.doc) == messages(original)


# -- the properties ----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts, script_ops=ops)
@example(  # a response while another call still waits: the approval keeps the response
    script=[{"tool_calls": [{"name": "ask", "arguments": {"question": "why?"}},
                            {"name": "pay", "arguments": {"amount": 1}}]},
            {"text": "final answer"}],
    script_ops=[("respond", 0, True), ("approve", 1, True)],
)
@example(  # a refused approval with a stray response, then a good approval of that call
    script=[{"tool_calls": [{"name": "pay", "arguments": {"amount": 1}}]},
            {"text": "final answer"}],
    script_ops=[("approve_with_response", 0, True), ("approve", 0, True)],
)
def test_random_runs_and_decisions_keep_every_document_valid(
    script: list[dict[str, Any]], script_ops: list[Any],
) -> None:
    run(check_random_run(script, script_ops))


# -- replay ----------------------------------------------------------------------------------
SCRIPT = [
    {"text": "let me look", "tool_calls": [{"name": "lookup", "arguments": {"key": "a"}},
                                           {"name": "pay", "arguments": {"amount": 5}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "b"}}]},
    {"text": "all done"},
]


async def original_run() -> RunDocument:
    store = ValidatingStore(MemoryStore())
    runner = make_runner(ScriptedModel(SCRIPT), store)
    doc = await runner.start("go")
    await runner.decide(doc.id, "call_1_2", "approved", edited_arguments={"amount": 3})
    doc = await runner.resume(doc.id)
    assert doc.status == "completed"
    return doc


async def replay_with(original: RunDocument, tools: list[Tool]) -> tuple[RunDocument,
                                                                         ReplayModel]:
    store = ValidatingStore(MemoryStore())
    model = ReplayModel(original)
    runner = make_runner(model, store, tools)
    doc = await runner.start(original.input)
    doc = await runner.decide(doc.id, "call_1_2", "approved", edited_arguments={"amount": 3})
    return await runner.resume(doc.id), model


def assistant_messages(doc: RunDocument) -> list[dict[str, Any]]:
    return [m for m in dump_run(doc)["messages"] if m["role"] == "assistant"]


def test_replay_against_the_same_tools_reproduces_the_run() -> None:
    async def go() -> None:
        original = await original_run()
        replayed, model = await replay_with(original, TOOLS)
        assert replayed.status == "completed"
        assert replayed.result == original.result
        assert model.divergences == []
        assert assistant_messages(replayed) == assistant_messages(original)
        assert messages(replayed) == messages(original)

    run(go())


def test_replay_against_a_changed_tool_reports_where_it_diverges() -> None:
    @tool(name="lookup", side_effect="read")
    def changed_lookup(key: str) -> str:
        """Returns something else than the original lookup."""
        return f"changed:{key}"

    async def go() -> None:
        original = await original_run()
        replayed, model = await replay_with(original, [changed_lookup, pay, ask])
        # the model's side is replayed as it was ...
        assert replayed.status == "completed"
        assert assistant_messages(replayed) == assistant_messages(original)
        # ... and each message carrying a changed result is reported, at its index
        assert [d.message_index for d in model.divergences] == [2, 4]
        first = model.divergences[0]
        assert original.messages[2].role == "user"
        assert "value:a" in first.expected
        assert "changed:a" in first.actual
        assert "value:a" not in first.actual
        assert "changed:b" in model.divergences[1].actual

    run(go())


def test_replay_of_a_different_decision_reports_a_divergence() -> None:
    async def go() -> None:
        original = await original_run()
        store = ValidatingStore(MemoryStore())
        model = ReplayModel(original)
        runner = make_runner(model, store)
        doc = await runner.start(original.input)
        doc = await runner.decide(doc.id, "call_1_2", "denied", reason="changed my mind")
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        assert [d.message_index for d in model.divergences] == [2]
        assert "changed my mind" in model.divergences[0].actual

    run(go())
