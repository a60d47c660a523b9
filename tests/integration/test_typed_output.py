"""Typed output on the wire: OpenAI is asked with a JSON schema response format (Chat
Completions and the Responses API), Anthropic through the final-answer tool with
``tool_choice: any``, an OpenAI-compatible server through the final-answer tool offered
among the others; each answer is validated and stored as JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic_wire as aw
import openai_wire as ow
import pytest
from pydantic import BaseModel

from oarlock.engine import Agent, Runner
from oarlock.models import AnthropicModel, OpenAIModel
from oarlock.testing import MemoryStore, ValidatingStore

KEY = "sk-test-0123456789abcdef"


class Ticket(BaseModel):
    priority: int
    summary: str


def run(agent: Agent) -> Any:
    return asyncio.run(Runner(agent, ValidatingStore(MemoryStore())).run("triage this"))


@pytest.fixture
def openai() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def claude() -> Iterator[aw.FakeAnthropic]:
    with aw.FakeAnthropic() as fake:
        yield fake


def test_openai_chat_asks_with_a_json_schema_response_format(openai: ow.FakeOpenAI) -> None:
    answer = json.dumps({"priority": 2, "summary": "login broken"})
    openai.reply(ow.Reply(body=ow.chat_completion(answer)))
    model = OpenAIModel("gpt-4.1", base_url=openai.base_url, api_key=KEY)
    result = run(Agent("triage", model, output_type=Ticket))
    assert result.output == Ticket(priority=2, summary="login broken")
    [body] = openai.bodies()
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "final_result"
    assert set(fmt["json_schema"]["schema"]["required"]) == {"priority", "summary"}
    assert all(t["function"]["name"] != "final_result" for t in body.get("tools", []))


def test_openai_responses_asks_with_a_text_format(openai: ow.FakeOpenAI) -> None:
    answer = json.dumps({"priority": 1, "summary": "outage"})
    openai.reply(ow.Reply(body=ow.response_object(answer)))
    model = OpenAIModel("gpt-4.1", base_url=openai.base_url, api_key=KEY, api="responses")
    result = run(Agent("triage", model, output_type=Ticket))
    assert result.output == Ticket(priority=1, summary="outage")
    [body] = openai.bodies()
    assert body["text"]["format"]["type"] == "json_schema"
    assert body["text"]["format"]["schema"]["properties"]["priority"]["type"] == "integer"


def test_an_invalid_answer_goes_back_with_its_problems(openai: ow.FakeOpenAI) -> None:
    openai.reply(
        ow.Reply(body=ow.chat_completion(json.dumps({"priority": "high"}))),
        ow.Reply(body=ow.chat_completion(json.dumps({"priority": 3, "summary": "ok"}))),
    )
    model = OpenAIModel("gpt-4.1", base_url=openai.base_url, api_key=KEY)
    result = run(Agent("triage", model, output_type=Ticket))
    assert result.output == Ticket(priority=3, summary="ok")
    second = openai.bodies()[1]["messages"][-1]
    assert second["role"] == "user" and "does not match the required output" in second["content"]
    assert "priority" in second["content"] and "summary" in second["content"]


def test_anthropic_answers_through_the_final_tool_it_must_call(claude: aw.FakeAnthropic) -> None:
    claude.reply(aw.message(aw.tool_use("final_result", {"priority": 5, "summary": "typo"})))
    model = AnthropicModel(aw.MODEL, base_url=claude.base_url, api_key=KEY, timeout=10.0)
    result = run(Agent("triage", model, output_type=Ticket))
    assert result.output == Ticket(priority=5, summary="typo")
    [body] = claude.bodies
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["final_result"]
    doc = result.document  # the final call is answered: the conversation can go on
    assert doc.messages[-1].content[0].tool_call_id == doc.messages[-2].tool_calls[0].id


def test_a_compatible_server_is_offered_the_final_tool(openai: ow.FakeOpenAI) -> None:
    call = ("c1", "final_result", json.dumps({"result": 4}))
    openai.reply(ow.Reply(body=ow.chat_completion(None, [call])))
    model = OpenAIModel("qwen", base_url=openai.base_url, provider="openai-compatible")
    result = run(Agent("count", model, output_type=int))
    assert result.output == 4
    [body] = openai.bodies()
    assert "response_format" not in body
    [final] = [t for t in body["tools"] if t["function"]["name"] == "final_result"]
    assert final["function"]["parameters"]["required"] == ["result"]


def test_a_streaming_model_streams_its_text_as_events(openai: ow.FakeOpenAI) -> None:
    from oarlock.engine._stream import Finished, ModelResponded, TextDelta

    openai.reply(ow.Reply(events=ow.chat_chunks(["Hel", "lo, ", "world."])))
    model = OpenAIModel("gpt-4.1", base_url=openai.base_url, api_key=KEY)
    runner = Runner(Agent("greeter", model), ValidatingStore(MemoryStore()))

    async def go() -> list[Any]:
        return [e async for e in runner.stream("greet")]

    events = asyncio.run(go())
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == "Hello, world." and len(deltas) >= 2
    first_response = next(i for i, e in enumerate(events) if isinstance(e, ModelResponded))
    assert all(isinstance(e, TextDelta) for e in events[:first_response])  # text comes first
    assert isinstance(events[-1], Finished) and events[-1].result.output == "Hello, world."
