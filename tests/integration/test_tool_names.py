"""Tool names that providers refuse (``server.tool``) travel under safe names, and come back
as the real tool: through the engine, against the local wire servers of OpenAI (Chat
Completions, Responses, an OpenAI-compatible server) and Anthropic, and with the tools of a
real MCP server process. The fake servers answer with a call of whatever name the adapter
sent for the tool, so the test finds it from the request, as a model would."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic_wire as aw
import openai_wire as ow
import pytest

from oarlock.engine import Agent, RetryPolicy, Runner
from oarlock.formats import dump_run
from oarlock.models import ModelAdapter
from oarlock.models._anthropic import AnthropicModel
from oarlock.models._openai import OpenAIModel
from oarlock.testing import MemoryStore
from oarlock.tools import tool
from oarlock.tools._mcp import MCPServerConfig

pytestmark = pytest.mark.timeout(90)

SAFE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
KEY = "sk-test-names-0123456789"
TOOLS_SERVER = str(Path(__file__).resolve().parent / "mcp_servers" / "tools_server.py")
ADAPTERS = ["chat", "responses", "openai-compatible", "anthropic"]


@tool(name="notes.search", side_effect="read")
def dotted_search(query: str) -> str:
    """Search the notes (the dotted one)."""
    return f"dotted found {query}"


@tool(name="notes_search", side_effect="read")
def plain_search(query: str) -> str:
    """Search the notes (the plain one)."""
    return f"plain found {query}"


LONG = "archive." + "x" * 56  # 64 characters: a valid oarlock name, too long once mapped


@tool(name=LONG, side_effect="read")
def long_named() -> str:
    """The tool with the long name."""
    return "long one ran"


# -- what a request carries --------------------------------------------------------------
def sent_tools(adapter: str, body: dict[str, Any]) -> dict[str, str]:
    """Description -> the name the tool was sent under."""
    if adapter in ("chat", "openai-compatible"):
        specs = [t["function"] for t in body["tools"]]
    else:
        specs = body["tools"]
    return {s["description"]: s["name"] for s in specs}


def history_names(adapter: str, body: dict[str, Any]) -> list[str]:
    """The names of the calls in the conversation the request carries."""
    if adapter in ("chat", "openai-compatible"):
        return [
            c["function"]["name"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
        ]
    if adapter == "responses":
        return [i["name"] for i in body["input"] if i.get("type") == "function_call"]
    return [
        b["name"]
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def openai_call(adapter: str, calls: list[ow.Call]) -> dict[str, Any]:
    if adapter == "responses":
        return ow.response_object(None, calls)
    return ow.chat_completion(None, calls)


def openai_text(adapter: str, text: str) -> dict[str, Any]:
    return ow.response_object(text) if adapter == "responses" else ow.chat_completion(text)


Turn = Callable[[dict[str, Any]], list[tuple[str, str, dict[str, Any]]] | str]
"""A model turn made from the request: calls (id, name sent, arguments) or text."""


@pytest.fixture
def openai_server() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[aw.FakeAnthropic]:
    with aw.FakeAnthropic() as server:
        yield server


def model_for(adapter: str, openai: ow.FakeOpenAI, anthropic: aw.FakeAnthropic) -> ModelAdapter:
    if adapter == "anthropic":
        return AnthropicModel(aw.MODEL, base_url=anthropic.base_url, api_key=KEY, timeout=10)
    if adapter == "openai-compatible":
        return OpenAIModel(
            "qwen2.5", base_url=openai.base_url, provider="openai-compatible", timeout=10
        )
    return OpenAIModel("gpt-4.1", api=adapter, base_url=openai.base_url, api_key=KEY, timeout=10)  # type: ignore[arg-type]


def queue(
    adapter: str, openai: ow.FakeOpenAI, anthropic: aw.FakeAnthropic | None, turns: list[Turn]
) -> None:
    for turn in turns:
        if anthropic is not None and adapter == "anthropic":

            def make(request: aw.Recorded, turn: Turn = turn) -> dict[str, Any]:
                out = turn(request.body)
                if isinstance(out, str):
                    return aw.message(aw.text(out))
                return aw.message(*(aw.tool_use(n, a, id=i) for i, n, a in out))

            anthropic.answer_with(make)
        else:

            def reply(request: ow.Recorded, turn: Turn = turn) -> ow.Reply:
                out = turn(request.body)
                if isinstance(out, str):
                    return ow.Reply(body=openai_text(adapter, out))
                calls = [(i, n, json.dumps(a)) for i, n, a in out]
                return ow.Reply(body=openai_call(adapter, calls))

            openai.reply(reply)


def bodies(adapter: str, openai: ow.FakeOpenAI, anthropic: aw.FakeAnthropic) -> list[Any]:
    return anthropic.bodies if adapter == "anthropic" else openai.bodies()


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_unsafe_names_travel_safe_and_come_back_real(
    adapter: str, openai_server: ow.FakeOpenAI, anthropic_server: aw.FakeAnthropic
) -> None:
    def call_both(body: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        sent = sent_tools(adapter, body)
        return [
            ("call_dot", sent["Search the notes (the dotted one)."], {"query": "milk"}),
            ("call_plain", sent["Search the notes (the plain one)."], {"query": "eggs"}),
            ("call_long", sent["The tool with the long name."], {}),
        ]

    queue(
        adapter,
        openai_server,
        anthropic_server,
        [call_both, lambda body: "Found both."],
    )
    model = model_for(adapter, openai_server, anthropic_server)
    agent = Agent("notes", model, tools=[dotted_search, plain_search, long_named])
    try:
        runner = Runner(agent, MemoryStore(), retry=RetryPolicy(attempts=1))
        doc = await runner.start("Find milk and eggs")
    finally:
        await model.aclose()  # type: ignore[attr-defined]

    assert doc.status == "completed", doc.error
    # the run document, and so governance, sees the real names
    calls = dump_run(doc)["messages"][1]["content"]
    assert [(c["id"], c["name"]) for c in calls] == [
        ("call_dot", "notes.search"),
        ("call_plain", "notes_search"),
        ("call_long", LONG),
    ]
    results = {r.tool_call_id: r for r in doc.messages[2].content}  # type: ignore[union-attr]
    assert "dotted found milk" in results["call_dot"].content  # type: ignore[union-attr]
    assert "plain found eggs" in results["call_plain"].content  # type: ignore[union-attr]
    assert "long one ran" in results["call_long"].content  # type: ignore[union-attr]
    # every request carries only safe, distinct names, the same ones turn after turn
    first, second = bodies(adapter, openai_server, anthropic_server)
    names = sent_tools(adapter, first)
    assert all(SAFE.fullmatch(n) for n in names.values()), names
    assert len(set(names.values())) == 3
    assert names["Search the notes (the plain one)."] == "notes_search"
    assert sent_tools(adapter, second) == names
    assert history_names(adapter, second) == [
        names["Search the notes (the dotted one)."],
        "notes_search",
        names["The tool with the long name."],
    ]


async def test_the_tools_of_a_real_mcp_server_are_called_by_their_safe_names(
    openai_server: ow.FakeOpenAI,
) -> None:
    def add(body: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        sent = sent_tools("chat", body)
        return [("call_add", sent["Add two integers."], {"a": 2, "b": 3})]

    queue("chat", openai_server, None, [add, lambda body: "2 + 3 = 5."])
    model = OpenAIModel("gpt-4.1", base_url=openai_server.base_url, api_key=KEY, timeout=10)
    config = MCPServerConfig("calc", command=[sys.executable, TOOLS_SERVER])
    agent = Agent("calc", model, mcp_servers=[config])
    store = MemoryStore()
    try:
        async with agent.connected():
            doc = await Runner(agent, store, retry=RetryPolicy(attempts=1)).start("2 + 3?")
    finally:
        await model.aclose()
    assert doc.status == "completed", doc.error
    (call,) = doc.messages[1].content  # type: ignore[union-attr]
    assert call.name == "calc.add"  # type: ignore[union-attr]
    assert "5" in doc.messages[2].content[0].content  # type: ignore[union-attr]
    first, second = openai_server.bodies()
    sent = [t["function"]["name"] for t in first["tools"]]
    assert sent and all(SAFE.fullmatch(n) for n in sent)
    assert "calc_add" in sent and not any("." in n for n in sent)
    assert history_names("chat", second) == ["calc_add"]
    (receipt,) = await store.governance().receipts()
    assert receipt.invocation["toolId"] == "calc.add" and receipt.status == "Succeeded"
    assert receipt.invocation["mcpServerId"] == "calc"
