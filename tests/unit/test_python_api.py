"""The Python API a Pydantic AI or Agents SDK user expects: models by name, run_sync from a
script and from a running loop, RunResult and its decisions, typed output, dependencies
for tools, conversations, retries and message history."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from oarlock.engine import Agent, Limits, Runner
from oarlock.errors import ConfigError, RunStateError
from oarlock.formats import dump_run, validate
from oarlock.models import ScriptedModel
from oarlock.testing import MemoryStore, ValidatingStore
from oarlock.tools import RunContext, tool


class Weather(BaseModel):
    city: str
    celsius: float


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Bank:
    balances: dict[str, float]
    lookups: list[str] = dataclasses.field(default_factory=list)


@tool(side_effect="read")
def balance(ctx: RunContext[Bank], customer: str) -> float:
    """A customer's balance.

    Args:
        customer: The customer's id.
    """
    ctx.deps.lookups.append(f"{ctx.run_id}:{ctx.call_id}:{customer}")
    return ctx.deps.balances[customer]


@tool(side_effect="spend")
def block_card(customer: str) -> str:
    """Block a customer's card (needs a human)."""
    return f"blocked {customer}"


def scripted(*turns: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(list(turns))


def test_a_model_string_makes_its_adapter() -> None:
    agent = Agent("a", "openai:gpt-4.1")
    assert agent.model.model_id == "openai:gpt-4.1"
    with pytest.raises(ConfigError, match="unknown model"):
        Agent("a", "gemini:pro")


def test_run_sync_in_five_lines() -> None:
    agent = Agent("hello", scripted({"text": "Hello!"}))
    result = agent.run_sync("Say hello")
    assert (result.status, result.output) == ("completed", "Hello!")
    assert result.run_id and result.document.turns == 1


def test_run_sync_works_inside_a_running_event_loop() -> None:
    agent = Agent("hello", scripted({"text": "from a notebook"}))

    async def notebook_cell() -> str:
        return str(agent.run_sync("hi").output)  # a loop is running here

    assert asyncio.run(notebook_cell()) == "from a notebook"


def test_the_context_reaches_the_tool_and_is_neither_in_its_schema_nor_stored() -> None:
    assert "ctx" not in balance.parameters["properties"]
    assert balance.parameters["required"] == ["customer"]
    bank = Bank({"c1": 123.5})
    agent = Agent(
        "support",
        scripted(
            {"tool_calls": [{"id": "t1", "name": "balance", "arguments": {"customer": "c1"}}]},
            {"text": "Your balance is 123.5"},
        ),
        tools=[balance],
    )
    store = ValidatingStore(MemoryStore())
    result = Runner(agent, store).run_sync("balance?", deps=bank)
    assert result.output == "Your balance is 123.5"
    assert bank.lookups == [f"{result.run_id}:t1:c1"]
    assert "Bank" not in dump_run(result.document).__repr__()


def test_a_result_decides_through_the_same_path_as_the_command_line() -> None:
    agent = Agent(
        "support",
        scripted(
            {"tool_calls": [{"id": "b1", "name": "block_card", "arguments": {"customer": "c1"}}]},
            {"text": "Your card is blocked."},
        ),
        tools=[block_card],
    )
    store = ValidatingStore(MemoryStore())
    runner = Runner(agent, store)
    result = runner.run_sync("block my card")
    assert result.status == "waiting_approval"
    assert [a.tool_call_id for a in result.pending_approvals] == ["b1"]
    with pytest.raises(RunStateError, match="no output"):
        _ = result.output
    done = result.approve_sync("b1", principal="ops:ana")
    assert (done.status, done.output) == ("completed", "Your card is blocked.")

    async def approval() -> Any:
        return await store.governance().approval_for(result.run_id, "b1")

    approved, used_by = asyncio.run(approval())
    assert approved.principal == "ops:ana" and approved.signature and used_by


def test_the_decisions_stay_with_the_document_who_when_and_on_what() -> None:
    from oarlock.cli._show import timeline

    agent = Agent(
        "support",
        scripted(
            {
                "tool_calls": [
                    {"id": "b1", "name": "block_card", "arguments": {"customer": "c1"}},
                    {"id": "b2", "name": "block_card", "arguments": {"customer": "c2"}},
                ]
            },
            {"text": "One card blocked."},
        ),
        tools=[block_card],
    )
    store = ValidatingStore(MemoryStore())
    runner = Runner(agent, store, clock=lambda: "2026-12-01T10:00:00Z")
    waiting = runner.run_sync("block the cards")
    halfway = asyncio.run(
        runner.decide(
            waiting.run_id, "b1", "approved", edited_arguments={"customer": "c9"},
            principal="ops:ana",
        )
    )  # fmt: skip
    # decided, not yet settled: still in the pending list, with who and when
    first = halfway.pending_approvals[0]
    assert (first.decision, first.principal, first.decided_at) == (
        "approved", "ops:ana", "2026-12-01T10:00:00Z",
    )  # fmt: skip
    done = waiting.deny_sync("b2", "not this one", principal="ops:bo")
    doc = done.document
    assert done.status == "completed" and doc.pending_approvals == []
    history = [
        (d.tool_call_id, d.decision, d.principal, d.arguments, d.edited_arguments, d.reason)
        for d in doc.decisions
    ]
    assert history == [
        ("b1", "approved", "ops:ana", {"customer": "c1"}, {"customer": "c9"}, None),
        ("b2", "denied", "ops:bo", {"customer": "c2"}, None, "not this one"),
    ]
    exported = dump_run(doc)
    assert [d["decidedAt"] for d in exported["decisions"]] == ["2026-12-01T10:00:00Z"] * 2
    assert validate(exported).valid
    events = [
        {"seq": e.seq, "kind": e.kind, "at": e.at, "data": e.data}
        for e in asyncio.run(store.events(done.run_id))
    ]
    shown = "\n".join(timeline(exported, events))
    edited = ', arguments edited to {"customer": "c9"}'
    assert f"approved by human (ops:ana) at 2026-12-01T10:00:00Z{edited}" in shown
    assert "denied by human (ops:bo) at 2026-12-01T10:00:00Z: not this one" in shown


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        pytest.param(
            [{"text": '{"city": "Oslo", "celsius": -3.5}'}],
            Weather(city="Oslo", celsius=-3.5),
            id="json-text",
        ),
        pytest.param(
            [{"text": '```json\n{"city": "Oslo", "celsius": 2}\n```'}],
            Weather(city="Oslo", celsius=2),
            id="fenced-json",
        ),
        pytest.param(
            [
                {
                    "tool_calls": [
                        {"name": "final_result", "arguments": {"city": "Rome", "celsius": 20}}
                    ]
                }
            ],
            Weather(city="Rome", celsius=20),
            id="final-tool",
        ),
        pytest.param(
            [{"text": "It is cold in Oslo."}, {"text": '{"city": "Oslo", "celsius": -1}'}],
            Weather(city="Oslo", celsius=-1),
            id="text-then-fixed",
        ),
        pytest.param(
            [
                {"tool_calls": [{"name": "final_result", "arguments": {"city": "Rome"}}]},
                {
                    "tool_calls": [
                        {"name": "final_result", "arguments": {"city": "Rome", "celsius": 21}}
                    ]
                },
            ],
            Weather(city="Rome", celsius=21),
            id="tool-then-fixed",
        ),
    ],
)
def test_typed_output(turns: list[dict[str, Any]], expected: Weather) -> None:
    store = ValidatingStore(MemoryStore())  # every stored document checked, rules included
    agent = Agent("weather", scripted(*turns), output_type=Weather)
    result = Runner(agent, store).run_sync("weather in?")
    assert result.status == "completed", result.error
    assert result.output == expected
    assert result.document.result == expected.model_dump_json()
    assert result.document.turns == len(turns)


def test_an_answer_that_never_fits_fails_after_its_retries() -> None:
    agent = Agent(
        "weather",
        scripted(*[{"text": "no idea"}] * 5),
        output_type=Weather,
        output_retries=2,
        limits=Limits(max_turns=10),
    )
    result = Runner(agent, ValidatingStore(MemoryStore())).run_sync("weather?")
    assert result.status == "failed" and result.error is not None
    assert result.error.startswith("output_invalid")
    assert result.document.turns == 3  # the first answer and two retries


def test_scalar_and_typeddict_outputs() -> None:
    counted = Agent("count", scripted({"text": "42"}), output_type=int)
    assert counted.run_sync("how many?").output == 42
    wrapped = Agent(
        "count",
        scripted({"tool_calls": [{"name": "final_result", "arguments": {"result": 7}}]}),
        output_type=int,
    )
    assert wrapped.output.tool_spec()["parameters"]["required"] == ["result"]
    assert wrapped.run_sync("how many?").output == 7
    point = Agent("p", scripted({"text": '{"x": 1, "y": 2}'}), output_type=Point)
    assert point.run_sync("where?").output == {"x": 1, "y": 2}


def test_a_conversation_goes_on_in_one_document() -> None:
    agent = Agent("chat", scripted(*[{"text": f"answer {i}"} for i in range(5)]))
    store = ValidatingStore(MemoryStore())
    runner = Runner(agent, store)
    result = runner.run_sync("question 0")
    for i in range(1, 5):
        result = result.continue_with_sync(f"question {i}")
        assert result.output == f"answer {i}"
    doc = result.document
    assert doc.turns == 5 and len(doc.messages) == 10
    assert validate(dump_run(doc)).valid
    other = Runner(Agent("chat", scripted()), store)
    with pytest.raises(RunStateError, match="only a failed or halted run"):
        asyncio.run(other.retry(doc.id))


def test_a_run_that_failed_on_its_model_is_retried_from_its_last_step() -> None:
    turns = [
        {"tool_calls": [{"id": "t1", "name": "balance", "arguments": {"customer": "c1"}}]},
        {"fail": [{"kind": "server_error"}], "text": "balance 5"},  # fails once, then answers
    ]
    agent = Agent("support", ScriptedModel(turns), tools=[balance])
    runner = Runner(agent, ValidatingStore(MemoryStore()))
    runner.retry_policy = dataclasses.replace(runner.retry_policy, attempts=1, base_delay=0)
    bank = Bank({"c1": 5})
    first = runner.run_sync("balance?", deps=bank)
    assert first.status == "failed" and "server" in (first.error or "")
    again = asyncio.run(runner.retry(first.run_id, deps=bank))
    assert (again.status, again.result) == ("completed", "balance 5")
    assert len(bank.lookups) == 1  # the tool's step was not repeated


def test_message_history_starts_a_run_from_earlier_messages() -> None:
    first = Agent("chat", scripted({"text": "Paris"})).run_sync("capital of France?")
    # a script answers by the turn of the conversation: the history holds the first
    agent = Agent("chat", scripted({"text": "(the first turn)"}, {"text": "About 2.1 million"}))
    result = agent.run_sync("and its population?", message_history=first.document.messages)
    doc = result.document
    assert [m.role for m in doc.messages] == ["user", "assistant", "user", "assistant"]
    assert doc.turns == 2 and validate(dump_run(doc)).valid


def test_a_module_level_agent_knows_where_it_is() -> None:
    assert MODULE_AGENT.ref == f"{__name__}:MODULE_AGENT"
    assert Agent("local", scripted()).ref is None


MODULE_AGENT = Agent("module-level", ScriptedModel([{"text": "hi"}]))


def test_a_run_streams_its_events_in_order() -> None:
    from oarlock.engine._stream import (
        ApprovalRequested,
        Finished,
        ModelResponded,
        StatusChanged,
        ToolFinished,
        ToolStarted,
    )

    agent = Agent(
        "support",
        scripted(
            {
                "text": "Looking it up.",
                "tool_calls": [
                    {"id": "t1", "name": "balance", "arguments": {"customer": "c1"}},
                    {"id": "b1", "name": "block_card", "arguments": {"customer": "c1"}},
                ],
            },
            {"text": "Done."},
        ),
        tools=[balance, block_card],
    )
    runner = Runner(agent, ValidatingStore(MemoryStore()))

    async def go() -> list[Any]:
        seen = []
        async for event in runner.stream("help", deps=Bank({"c1": 1.0})):
            seen.append(event)
        return seen

    events = asyncio.run(go())
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ModelResponded",
        "ToolStarted",
        "ToolFinished",
        "ApprovalRequested",
        "StatusChanged",
        "Finished",
    ], kinds
    assert isinstance(events[0], ModelResponded) and events[0].tool_calls == ("t1", "b1")
    started, finished = events[1], events[2]
    assert isinstance(started, ToolStarted) and started.call_id == "t1"
    assert isinstance(finished, ToolFinished) and (finished.ok, finished.status) == (
        True,
        "Succeeded",
    )
    assert isinstance(events[3], ApprovalRequested) and events[3].arguments == {"customer": "c1"}
    assert isinstance(events[4], StatusChanged) and events[4].new == "waiting_approval"
    done = events[-1]
    assert isinstance(done, Finished) and done.result.status == "waiting_approval"

    async def resume() -> list[Any]:
        await runner.decide(done.result.run_id, "b1", "denied", reason="not now")
        return [e async for e in runner.stream_resume(done.result.run_id)]

    after = asyncio.run(resume())
    assert [type(e).__name__ for e in after][-2:] == ["StatusChanged", "Finished"]
    assert not any(isinstance(e, ToolStarted) for e in after)  # a denied call never runs
    assert isinstance(after[-1], Finished) and after[-1].result.output == "Done."
