"""One turn with many tool calls: which run at once, which wait for a human, which are
refused, and how every result reaches the model in the order the model made the calls.

Every run goes through ``ValidatingStore(MemoryStore())``: each written document is valid.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

import oarlock
from helpers import result_text
from oarlock.engine import Agent, RetryPolicy, Runner
from oarlock.errors import ConfigError
from oarlock.formats import dump_run
from oarlock.governance._policy import RulePolicy
from oarlock.models import ModelRequest, ModelResponse
from oarlock.testing import MemoryStore, ScriptedModel, ValidatingStore
from oarlock.tools import CAUTIOUS_CLASS, Tool, tool

T = TypeVar("T")

CALLED: list[tuple[str, dict[str, Any]]] = []


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLED.clear()


class RecordingModel:
    """Delegates to a scripted model and keeps every request it was sent."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.inner = ScriptedModel(turns)
        self.requests: list[ModelRequest] = []

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.respond(request)


@tool(side_effect="read")
def lookup(key: str) -> dict[str, str]:
    """Look a key up."""
    CALLED.append(("lookup", {"key": key}))
    return {"key": key, "value": key.upper()}


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    CALLED.append(("refund", {"order_id": order_id, "amount": amount}))
    return f"refunded {amount} on {order_id}"


@tool(side_effect="production", needs_approval=True)
def delete_account(user: str) -> str:
    """Delete an account."""
    CALLED.append(("delete_account", {"user": user}))
    return "deleted"


@tool(side_effect="external", allow_response=True)
def ask_expert(question: str) -> str:
    """Ask an expert."""
    CALLED.append(("ask_expert", {"question": question}))
    return "the tool itself answered"


@tool(side_effect="read")
def boom(what: str = "disk") -> str:
    """Always fails."""
    CALLED.append(("boom", {"what": what}))
    raise ValueError(f"kaboom: {what} on fire")


TOOLS: list[Tool] = [lookup, refund, delete_account, ask_expert, boom]

# the calls of the big turn, in the order the model makes them
BIG_TURN = {"text": "working on it", "tool_calls": [
    {"name": "lookup", "arguments": {"key": "a"}, "id": "c_lookup"},
    {"name": "refund", "arguments": {"order_id": "A1", "amount": 80}, "id": "c_refund"},
    {"name": "ghost", "arguments": {"x": 1}, "id": "c_unknown"},
    {"name": "delete_account", "arguments": {"user": "u1"}, "id": "c_delete"},
    {"name": "lookup", "arguments": "{not json", "id": "c_badjson"},
    {"name": "ask_expert", "arguments": {"question": "which one?"}, "id": "c_ask"},
    {"name": "lookup", "arguments": {"wrong": "x"}, "id": "c_invalid"},
    {"name": "boom", "arguments": {"what": "disk"}, "id": "c_boom"},
]}
AUTO_IDS = {"c_lookup", "c_unknown", "c_badjson", "c_invalid", "c_boom"}


def assert_valid(doc: Any) -> None:
    report = oarlock.validate(dump_run(doc), "run")
    assert report.valid, [(p.pointer, p.rule, p.message) for p in report.errors]


def _without(turn: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {**turn, "tool_calls": [c for c in turn["tool_calls"] if c["id"] != call_id]}


@pytest.mark.parametrize("with_responded", [
    pytest.param(True, id="with-responded-call"),
    pytest.param(False, id="no-responded-call"),
])
def test_one_turn_with_every_kind_of_call(with_responded: bool) -> None:
    turn = BIG_TURN if with_responded else _without(BIG_TURN, "c_ask")
    call_order = [c["id"] for c in turn["tool_calls"]]  # type: ignore[index]
    approval_ids = [i for i in ("c_refund", "c_delete", "c_ask") if i in call_order]
    model = RecordingModel([turn, {"text": "all done"}])
    store = ValidatingStore(MemoryStore())
    runner = Runner(Agent("agent", model, tools=TOOLS), store,
                    retry=RetryPolicy(attempts=1, base_delay=0))

    async def go() -> None:
        doc = await runner.start("do everything")
        assert doc.status == "waiting_approval"

        # waiting: buffered holds exactly the results that needed nobody, pending the rest
        buffered = [r.tool_call_id for r in doc.buffered_tool_results]
        assert sorted(buffered) == sorted(AUTO_IDS)
        assert len(buffered) == len(AUTO_IDS)
        assert [a.tool_call_id for a in doc.pending_approvals] == approval_ids
        assert all(a.decision is None for a in doc.pending_approvals)
        assert {a.tool_call_id: a.arguments for a in doc.pending_approvals}["c_refund"] == {
            "order_id": "A1", "amount": 80}
        # only the auto-run calls ran; no call needing approval did
        assert sorted(name for name, _ in CALLED) == ["boom", "lookup"]
        assert len(model.requests) == 1
        stored = await store.load(doc.id)
        assert dump_run(stored.document) == dump_run(doc)

        # decide in another order than the calls were made
        if with_responded:
            doc = await runner.decide(doc.id, "c_ask", "responded", response="the blue one")
            assert doc.status == "waiting_approval"
            assert doc.pending_approvals[2].response == "the blue one"
        doc = await runner.decide(doc.id, "c_delete", "denied", reason="not on a Friday")
        assert doc.status == "waiting_approval"
        # still waiting: nothing moved from buffered into the messages yet
        assert len(doc.messages) == 2
        doc = await runner.decide(doc.id, "c_refund", "approved",
                                  edited_arguments={"order_id": "A1", "amount": 30})
        assert doc.status == "running"
        doc = await runner.resume(doc.id)

        assert doc.status == "completed"
        assert doc.result == "all done"
        assert doc.pending_approvals == []
        assert doc.buffered_tool_results == []
        assert_valid(doc)

        # the model made the calls in call_order: the results come back in that order
        results_msg = doc.messages[2]
        assert results_msg.role == "user"
        results = {p.tool_call_id: p for p in results_msg.content}
        assert [p.tool_call_id for p in results_msg.content] == call_order
        assert [p.tool_name for p in results_msg.content] == [
            c["name"] for c in turn["tool_calls"]]  # type: ignore[index]
        # ... and that is exactly what the model was sent next
        assert len(model.requests) == 2
        assert dump_run(doc)["messages"][2] == model.requests[1].messages[-1].model_dump(
            mode="json", by_alias=True, exclude_unset=True)

        ok = results["c_lookup"]
        assert not ok.is_error
        assert result_text(ok) == '{"key": "a", "value": "A"}'
        # what a tool returned reaches the model fenced as untrusted data, a nonce per call
        assert ok.content.startswith('<untrusted-tool-result id="')

        refunded = results["c_refund"]
        assert not refunded.is_error
        assert result_text(refunded) == "refunded 30 on A1"
        assert refunded.content.startswith('<untrusted-tool-result id="')
        assert refunded.content.splitlines()[0] != ok.content.splitlines()[0]
        assert ("refund", {"order_id": "A1", "amount": 30}) in CALLED  # the EDITED arguments
        assert ("refund", {"order_id": "A1", "amount": 80}) not in CALLED

        unknown = results["c_unknown"]
        assert unknown.is_error
        assert "Unknown tool 'ghost'" in unknown.content
        assert "lookup" in unknown.content  # names the tools there are

        denied = results["c_delete"]
        assert denied.is_error
        assert "not on a Friday" in denied.content
        assert "denied" in denied.content

        bad_json = results["c_badjson"]
        assert bad_json.is_error
        assert "not valid JSON" in bad_json.content

        if with_responded:
            answered = results["c_ask"]
            assert not answered.is_error
            assert answered.content == "the blue one"

        invalid = results["c_invalid"]
        assert invalid.is_error
        assert "invalid arguments for tool 'lookup'" in invalid.content

        raised = results["c_boom"]
        assert raised.is_error
        assert "untrusted-tool-result" not in raised.content  # errors are not fenced
        assert "Tool 'boom' failed" in raised.content
        assert "kaboom: disk on fire" in raised.content
        assert "ValueError" in raised.content
        assert "Traceback" not in raised.content

        # the tools of the denied and the answered calls never ran, the bad calls neither
        assert sorted(name for name, _ in CALLED) == ["boom", "lookup", "refund"]

    run(go())


def test_responded_as_the_last_decision_answers_in_the_tools_place() -> None:
    turn = {"tool_calls": [
        {"name": "lookup", "arguments": {"key": "a"}, "id": "c_lookup"},
        {"name": "ask_expert", "arguments": {"question": "which one?"}, "id": "c_ask"},
        {"name": "delete_account", "arguments": {"user": "u1"}, "id": "c_delete"}]}
    model = RecordingModel([turn, {"text": "ok"}])
    runner = Runner(Agent("agent", model, tools=TOOLS), ValidatingStore(MemoryStore()))

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_delete", "denied", reason="no")
        doc = await runner.decide(doc.id, "c_ask", "responded", response="the blue one")
        assert doc.status == "running"
        assert [p.tool_call_id for p in doc.messages[2].content] == [
            "c_lookup", "c_ask", "c_delete"]
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        answered = doc.messages[2].content[1]
        assert (answered.content, answered.is_error) == ("the blue one", False)
        assert doc.messages[2].content[2].is_error
        assert sorted(name for name, _ in CALLED) == ["lookup"]  # the expert never ran

    run(go())


def test_responded_decision_is_recorded_in_the_pending_approval() -> None:
    turn = {"tool_calls": [
        {"name": "ask_expert", "arguments": {"question": "which one?"}, "id": "c_ask"},
        {"name": "refund", "arguments": {"order_id": "A1", "amount": 1}, "id": "c_refund"}]}
    runner = Runner(Agent("agent", ScriptedModel([turn, {"text": "ok"}]), tools=TOOLS),
                    ValidatingStore(MemoryStore()))

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_ask", "responded", response="the blue one")
        approval = doc.pending_approvals[0]
        assert (approval.decision, approval.response) == ("responded", "the blue one")
        assert_valid(doc)

    run(go())


def test_the_approved_call_keeps_its_original_arguments_in_the_assistant_message() -> None:
    model = RecordingModel([BIG_TURN, {"text": "ok"}])
    store = ValidatingStore(MemoryStore())
    runner = Runner(Agent("agent", model, tools=TOOLS), store)

    async def go() -> None:
        doc = await runner.start("q")
        doc = await runner.decide(doc.id, "c_refund", "approved",
                                  edited_arguments={"order_id": "Z", "amount": 1})
        doc = await runner.decide(doc.id, "c_delete", "approved")
        doc = await runner.decide(doc.id, "c_ask", "approved")
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        call = next(c for c in doc.messages[1].tool_calls if c.id == "c_refund")
        assert call.arguments == {"order_id": "A1", "amount": 80}
        assert CALLED.count(("refund", {"order_id": "Z", "amount": 1})) == 1
        assert CALLED.count(("delete_account", {"user": "u1"})) == 1
        assert CALLED.count(("ask_expert", {"question": "which one?"})) == 1
        assert result_text(doc.messages[2].content[5]) == "the tool itself answered"

    run(go())


@pytest.mark.parametrize(("raw", "why"), [
    ("{not json", "not valid JSON"),
    ('{"key": "a"', "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('"just a string"', "not a JSON object"),
])
def test_arguments_that_are_not_a_json_object_become_an_error_result(raw: str, why: str) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "lookup", "arguments": raw}]},
                           {"text": "ok"}])
    runner = Runner(Agent("agent", model, tools=TOOLS), ValidatingStore(MemoryStore()))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    result = doc.messages[2].content[0]
    assert result.is_error
    assert why in result.content
    assert CALLED == []  # the tool never ran
    assert dump_run(doc)["messages"][1]["content"][0]["rawArguments"] == raw


# -- concurrency -----------------------------------------------------------------------------
def _meeting_tools(events: dict[str, asyncio.Event], *, needs_approval: bool) -> list[Tool]:
    @tool(name="left", side_effect="read", needs_approval=needs_approval)
    async def left() -> str:
        """Meets right."""
        events["left"].set()
        await asyncio.wait_for(events["right"].wait(), 2)
        return "left met right"

    @tool(name="right", side_effect="read", needs_approval=needs_approval)
    async def right() -> str:
        """Meets left."""
        events["right"].set()
        await asyncio.wait_for(events["left"].wait(), 2)
        return "right met left"

    return [left, right]


MEETING_TURN = {"tool_calls": [{"name": "left", "arguments": {}},
                               {"name": "right", "arguments": {}}]}


def test_auto_run_calls_run_concurrently() -> None:
    async def go() -> None:
        events = {"left": asyncio.Event(), "right": asyncio.Event()}
        model = ScriptedModel([MEETING_TURN, {"text": "ok"}])
        runner = Runner(Agent("agent", model, tools=_meeting_tools(events, needs_approval=False)),
                        ValidatingStore(MemoryStore()))
        doc = await runner.start("q")
        assert doc.status == "completed"
        results = doc.messages[2].content
        assert [(result_text(r), r.is_error) for r in results] == [
            ("left met right", False), ("right met left", False)]

    run(go())


def test_approved_calls_run_concurrently() -> None:
    async def go() -> None:
        events = {"left": asyncio.Event(), "right": asyncio.Event()}
        model = ScriptedModel([MEETING_TURN, {"text": "ok"}])
        runner = Runner(Agent("agent", model, tools=_meeting_tools(events, needs_approval=True)),
                        ValidatingStore(MemoryStore()))
        doc = await runner.start("q")
        assert doc.status == "waiting_approval"
        await runner.decide(doc.id, "call_1_1", "approved")
        await runner.decide(doc.id, "call_1_2", "approved")
        doc = await runner.resume(doc.id)
        assert doc.status == "completed"
        results = doc.messages[2].content
        assert [(result_text(r), r.is_error) for r in results] == [
            ("left met right", False), ("right met left", False)]

    run(go())


def test_sync_tools_run_and_do_not_block_the_event_loop() -> None:
    gate = threading.Event()

    @tool(name="add", side_effect="read")
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    @tool(name="blocking", side_effect="read")
    def blocking() -> str:
        """Waits for the async tool, in its worker thread."""
        return "released" if gate.wait(2) else "never released"

    @tool(name="releaser", side_effect="read")
    async def releaser() -> str:
        """Releases the blocking tool from the event loop."""
        await asyncio.sleep(0.01)
        gate.set()
        return "set"

    model = ScriptedModel([{"tool_calls": [
        {"name": "add", "arguments": {"a": 2, "b": 3}},
        {"name": "blocking", "arguments": {}},
        {"name": "releaser", "arguments": {}}]}, {"text": "ok"}])
    runner = Runner(Agent("agent", model, tools=[add, blocking, releaser]),
                    ValidatingStore(MemoryStore()))
    doc = run(runner.start("q"))
    assert doc.status == "completed"
    assert [result_text(r) for r in doc.messages[2].content] == ["5", "released", "set"]


# -- who needs approval ------------------------------------------------------------------------
# A predicate can only add the need for a human to a tool that needs none by its class
# (``read`` and ``sandbox``); ``shared-write`` and above always need an approval.
@tool(side_effect="read", needs_approval=lambda args: args["amount"] > 50)
def pay(amount: int) -> str:
    """Pays (play money: a test of the predicate, not of money)."""
    CALLED.append(("pay", {"amount": amount}))
    return f"paid {amount}"


def test_needs_approval_as_a_predicate_over_the_arguments() -> None:
    assert not pay.requires_approval({"amount": 50})
    assert pay.requires_approval({"amount": 51})
    model = ScriptedModel([{"tool_calls": [
        {"name": "pay", "arguments": {"amount": 10}},
        {"name": "pay", "arguments": {"amount": 51}},
        {"name": "pay", "arguments": {"amount": 50}},
        {"name": "pay", "arguments": {"amount": 500}}]}, {"text": "ok"}])
    runner = Runner(Agent("agent", model, tools=[pay]), ValidatingStore(MemoryStore()))

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "waiting_approval"
        assert [a.tool_call_id for a in doc.pending_approvals] == ["call_1_2", "call_1_4"]
        assert [r.tool_call_id for r in doc.buffered_tool_results] == ["call_1_1", "call_1_3"]
        assert sorted(a["amount"] for _, a in CALLED) == [10, 50]  # 51 and 500 wait
        await runner.decide(doc.id, "call_1_2", "approved")
        await runner.decide(doc.id, "call_1_4", "denied", reason="no")
        doc = await runner.resume(doc.id)
        assert sorted(a["amount"] for _, a in CALLED) == [10, 50, 51]
        assert doc.status == "completed"
        assert [result_text(r) for r in doc.messages[2].content][:3] == [
            "paid 10", "paid 51", "paid 50"]
        assert doc.messages[2].content[3].is_error

    run(go())


def test_a_predicate_cannot_waive_the_approval_of_a_spend_tool() -> None:
    @tool(side_effect="spend", needs_approval=lambda args: args["amount"] > 50)
    def spend(amount: int) -> str:
        """Spends real money."""
        CALLED.append(("spend", {"amount": amount}))
        return f"spent {amount}"

    model = ScriptedModel([{"tool_calls": [
        {"name": "spend", "arguments": {"amount": 10}},
        {"name": "spend", "arguments": {"amount": 500}}]}, {"text": "ok"}])
    runner = Runner(Agent("agent", model, tools=[spend]), ValidatingStore(MemoryStore()))
    doc = run(runner.start("q"))
    assert doc.status == "waiting_approval"
    assert [a.tool_call_id for a in doc.pending_approvals] == ["call_1_1", "call_1_2"]
    assert doc.buffered_tool_results == []
    assert CALLED == []


def test_undeclared_side_effect_defaults_to_spend_and_needs_approval() -> None:
    @tool
    def transfer(to: str) -> str:
        """Moves money."""
        return f"sent to {to}"

    def plain(to: str) -> str:
        """Not even decorated."""
        return to

    assert CAUTIOUS_CLASS == "spend"
    assert transfer.side_effect == "spend"
    assert transfer.requires_approval({"to": "x"})
    agent = Agent("agent", ScriptedModel([{"tool_calls": [
        {"name": "transfer", "arguments": {"to": "bob"}},
        {"name": "plain", "arguments": {"to": "eve"}}]}, {"text": "ok"}]),
        tools=[transfer, plain])
    plain_tool = agent.tools.get("plain")
    assert plain_tool is not None
    assert plain_tool.side_effect == "spend"
    doc = run(Runner(agent, ValidatingStore(MemoryStore())).start("q"))
    assert doc.status == "waiting_approval"
    assert [a.tool_name for a in doc.pending_approvals] == ["transfer", "plain"]
    assert doc.buffered_tool_results == []


@pytest.mark.parametrize(("side_effect", "needs"), [
    ("read", False), ("sandbox", False), ("shared-write", True), ("external", True),
    ("production", True), ("publication", True), ("spend", True),
])
def test_default_approval_by_side_effect_class(side_effect: Any, needs: bool) -> None:
    def f(x: str) -> str:
        return x

    t = tool(name="f", side_effect=side_effect)(f)
    assert t.requires_approval({"x": "1"}) is needs


def test_needs_approval_flag_adds_a_human_and_a_policy_rule_waives_one() -> None:
    # needs_approval=False cannot waive the approval of a spend tool: a policy rule can
    def waived(x: str) -> str:
        return x

    with pytest.raises(ConfigError, match="policy rule"):
        tool(name="cheap", side_effect="spend", needs_approval=False)(waived)

    @tool(side_effect="spend")
    def cheap(x: str) -> str:
        """No human needed: the policy allows it."""
        return x

    @tool(side_effect="read", needs_approval=True)
    def secret(x: str) -> str:
        """A human needed."""
        return x

    policy = RulePolicy.from_dict({"policy": "cheap-is-fine", "rules": [
        {"id": "allow-cheap", "effect": "allow", "match": {"tool": "cheap"}}]})
    model = ScriptedModel([{"tool_calls": [{"name": "cheap", "arguments": {"x": "1"}},
                                           {"name": "secret", "arguments": {"x": "2"}}]},
                           {"text": "ok"}])
    store = ValidatingStore(MemoryStore())
    runner = Runner(Agent("agent", model, tools=[cheap, secret], policy=policy), store)

    async def go() -> None:
        doc = await runner.start("q")
        assert doc.status == "waiting_approval"
        assert [a.tool_name for a in doc.pending_approvals] == ["secret"]
        assert [r.tool_name for r in doc.buffered_tool_results] == ["cheap"]
        assert [result_text(r) for r in doc.buffered_tool_results] == ["1"]
        # the rule's allow is a standing approval, recorded as decided by that rule
        approval, used_by = await store.governance().approval_for(doc.id, "call_1_1")
        assert (approval.decided_by, approval.principal) == ("policy", "allow-cheap")
        assert used_by is not None

    run(go())


def test_repeated_call_ids_from_the_model_are_made_unique() -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}, "id": "dup"},
                        {"name": "lookup", "arguments": {"key": "b"}, "id": "dup"}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "c"}, "id": "dup"}]},
        {"text": "ok"}])
    doc = run(Runner(Agent("agent", model, tools=TOOLS), ValidatingStore(MemoryStore()))
              .start("q"))
    assert doc.status == "completed"
    ids = [c.id for m in doc.messages if m.role == "assistant" for c in m.tool_calls]
    assert len(set(ids)) == 3
    assert ids[0] == "dup"
    parts = [p for m in doc.messages if m.role == "user" for p in m.content
             if p.type == "tool_result"]
    assert [p.tool_call_id for p in parts] == ids
    assert [result_text(r) for r in parts] == ['{"key": "a", "value": "A"}',
                                             '{"key": "b", "value": "B"}',
                                             '{"key": "c", "value": "C"}']


def test_a_call_id_repeated_after_a_reload_is_made_unique() -> None:
    """The ids seen are counted again in a document read back from the store."""
    model = ScriptedModel([
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}, "id": "dup"}]},
        {"text": "first"},
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "b"}, "id": "dup"}]},
        {"text": "second"}])
    store = ValidatingStore(MemoryStore())
    first = run(Runner(Agent("agent", model, tools=TOOLS), store).start("q"))
    doc = run(Runner(Agent("agent", model, tools=TOOLS), store).continue_run(first.id, "more"))
    assert (doc.status, doc.result) == ("completed", "second")
    ids = [c.id for m in doc.messages if m.role == "assistant" for c in m.tool_calls]
    assert ids == ["dup", "dup~2"]
