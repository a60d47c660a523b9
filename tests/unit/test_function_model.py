"""The function model: a reply decided from the conversation each turn."""

from __future__ import annotations

from typing import Any

import pytest

from oarlock.engine import Agent, Runner
from oarlock.formats._models import ToolResultPart
from oarlock.models import FunctionModel, ModelRequest, ModelResponse
from oarlock.store import MemoryStore
from oarlock.testing import ValidatingStore
from oarlock.tools import tool


@tool(side_effect="read")
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "total": 12.5}


def results(request: ModelRequest) -> list[ToolResultPart]:
    return [p for m in request.messages for p in m.content if isinstance(p, ToolResultPart)]


def decide(request: ModelRequest) -> Any:
    done = results(request)
    if not done:
        return {"tool_calls": [{"name": "lookup", "arguments": {"order_id": "A-1"}}]}
    # a tool's result reaches the model fenced as untrusted data, as a real model sees it
    assert '"total": 12.5' in str(done[-1].content)
    return "total 12.5"


async def test_a_run_decided_from_the_conversation_is_valid_at_every_step() -> None:
    agent = Agent("a", FunctionModel(decide, name="desk"), tools=[lookup])
    doc = await Runner(agent, ValidatingStore(MemoryStore())).start("order A-1?")
    assert doc.status == "completed"
    assert doc.result == "total 12.5"
    assert doc.model == "function:desk"
    assert doc.turns == 2


async def test_an_async_function_and_every_kind_of_reply() -> None:
    seen: list[int] = []
    plain = FunctionModel(lambda r: "plain")

    async def reply(request: ModelRequest) -> Any:
        seen.append(len(request.messages))
        if len(request.messages) == 1:  # an assistant message, with usage
            message = (await plain.respond(request)).message
            return ModelResponse(message, input_tokens=7)
        return "unreachable"

    doc = await Runner(Agent("a", FunctionModel(reply)), MemoryStore()).start("hi")
    assert doc.result == "plain"
    assert doc.usage.input_tokens == 7
    assert seen == [1]
    message = (await plain.respond(ModelRequest("", []))).message
    doc = await Runner(Agent("b", FunctionModel(lambda r: message)), MemoryStore()).start("x")
    assert doc.result == "plain"


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        (42, "must be a ModelResponse"),
        ({"text": 5}, "turn.text"),
        ({"tool_calls": "lookup"}, "turn.tool_calls"),
        ({"fail": [{"kind": "fatal"}]}, "must be a ModelResponse"),
        ({"answer": "x"}, "answer"),
    ],
)
async def test_a_bad_reply_fails_the_run_naming_the_rule(reply: Any, rule: str) -> None:
    agent = Agent("a", FunctionModel(lambda r: reply))
    doc = await Runner(agent, ValidatingStore(MemoryStore())).start("hi")
    assert doc.status == "failed"
    assert doc.error is not None
    assert "function_reply_invalid" in doc.error
    assert rule in doc.error


def test_the_function_must_be_callable() -> None:
    with pytest.raises(TypeError, match="needs a function"):
        FunctionModel("decide")  # type: ignore[arg-type]
