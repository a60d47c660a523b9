"""The OpenAI adapter against a fake OpenAI server on the loopback interface
(openai_wire.py): the real SDK, real HTTP, real server-sent events; nothing of the SDK is
mocked. The server records what the adapter sent, so the tests check both directions of
the mapping: what the model is told, and what its answer becomes."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from email.utils import formatdate
from typing import Any

import pytest
from openai_wire import (
    FakeOpenAI,
    Reply,
    chat_chunks,
    chat_completion,
    error_reply,
    rate_limited,
    response_events,
    response_object,
)

from oarlock.engine import Agent, RetryPolicy, Runner
from oarlock.errors import ConfigError, ModelError, RetryableModelError
from oarlock.formats import dump_run
from oarlock.formats._models import (
    AssistantMessage,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserMessage,
)
from oarlock.models import ModelRequest, ModelResponse, ScriptedModel
from oarlock.models._openai import OpenAIModel
from oarlock.testing import MemoryStore
from oarlock.tools import tool

KEY = "sk-test-0123456789"
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "name": "get_time",
        "description": "Local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
]
APIS = ["chat", "responses"]
PATH = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@asynccontextmanager
async def model_at(server: FakeOpenAI, **kw: Any) -> AsyncIterator[OpenAIModel]:
    kw.setdefault("api_key", KEY)
    model = OpenAIModel(kw.pop("model", "gpt-4.1"), base_url=server.base_url, **kw)
    try:
        yield model
    finally:
        await model.aclose()


async def ask(server: FakeOpenAI, request: ModelRequest, **kw: Any) -> ModelResponse:
    async with model_at(server, **kw) as model:
        return await model.respond(request)


def user(text: str) -> UserMessage:
    return UserMessage(role="user", content=[TextPart(type="text", text=text)])


def request(text: str = "What's the weather in Paris?", **kw: Any) -> ModelRequest:
    kw.setdefault("instructions", "You are a weather assistant.")
    return ModelRequest(messages=[user(text)], **kw)


def call(cid: str, name: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(type="tool_call", id=cid, name=name, arguments=args)


def dumped(message: AssistantMessage) -> dict[str, Any]:
    return message.model_dump(mode="json", by_alias=True, exclude_unset=True)


def text_reply(api: str, text: str, **kw: Any) -> Reply:
    body = chat_completion(text, **kw) if api == "chat" else response_object(text, **kw)
    return Reply(body=body)


def calls_reply(api: str, calls: list[tuple[str, str, str]], text: str | None = None) -> Reply:
    if api == "chat":
        return Reply(body=chat_completion(text, calls))
    return Reply(body=response_object(text, calls))


# -- plain answers and the request ---------------------------------------------------------
async def test_chat_plain_text_answer_and_request(server: FakeOpenAI) -> None:
    server.reply(Reply(body=chat_completion("Hello! How can I help?", usage=(19, 10, 0))))
    response = await ask(server, request("Hi"))
    assert response.message == AssistantMessage(
        role="assistant", content=[TextPart(type="text", text="Hello! How can I help?")]
    )
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (19, 10, 0)
    sent = server.last
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "You are a weather assistant."},
            {"role": "user", "content": "Hi"},
        ],
    }


async def test_responses_plain_text_answer_and_request(server: FakeOpenAI) -> None:
    server.reply(Reply(body=response_object("Hello! How can I help?", usage=(36, 87, 0))))
    response = await ask(server, request("Hi"), api="responses")
    assert response.message.text == "Hello! How can I help?"
    assert [p.type for p in response.message.content] == ["text"]
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (36, 87, 0)
    sent = server.last
    assert sent.path == "/v1/responses"
    assert sent.body == {
        "model": "gpt-4.1",
        "instructions": "You are a weather assistant.",
        "input": [{"type": "message", "role": "user", "content": "Hi"}],
        "store": False,
    }


@pytest.mark.parametrize("api", APIS)
async def test_no_instructions_no_system_message(server: FakeOpenAI, api: str) -> None:
    server.reply(text_reply(api, "ok"))
    await ask(server, request("Hi", instructions=""), api=api)
    body = server.last.body
    if api == "chat":
        assert body["messages"] == [{"role": "user", "content": "Hi"}]
    else:
        assert "instructions" not in body


async def test_several_user_text_parts_are_joined(server: FakeOpenAI) -> None:
    server.reply(text_reply("chat", "ok"))
    message = UserMessage(
        role="user",
        content=[TextPart(type="text", text="first"), TextPart(type="text", text="second")],
    )
    await ask(server, ModelRequest("", [message]))
    assert server.last.body["messages"] == [{"role": "user", "content": "first\n\nsecond"}]


# -- tools ---------------------------------------------------------------------------------
async def test_chat_tools_are_sent_as_functions(server: FakeOpenAI) -> None:
    server.reply(text_reply("chat", "ok"))
    await ask(server, request(tools=TOOLS))
    assert server.last.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["parameters"],
            },
        }
        for t in TOOLS
    ]


async def test_responses_tools_are_sent_as_functions(server: FakeOpenAI) -> None:
    server.reply(text_reply("responses", "ok"))
    await ask(server, request(tools=TOOLS), api="responses")
    assert server.last.body["tools"] == [
        {
            "type": "function",
            "name": t["name"],
            "description": t["description"],
            "parameters": t["parameters"],
            "strict": False,
        }
        for t in TOOLS
    ]


async def test_a_tool_without_description_or_parameters(server: FakeOpenAI) -> None:
    server.reply(text_reply("chat", "ok"))
    await ask(server, request(tools=[{"name": "ping"}]))
    assert server.last.body["tools"] == [
        {
            "type": "function",
            "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        }
    ]


@pytest.mark.parametrize("api", APIS)
async def test_one_tool_call(server: FakeOpenAI, api: str) -> None:
    server.reply(calls_reply(api, [("call_12345xyz", "get_weather", '{"city":"Paris"}')]))
    response = await ask(server, request(tools=TOOLS), api=api)
    assert response.message.content == [call("call_12345xyz", "get_weather", city="Paris")]


@pytest.mark.parametrize("api", APIS)
async def test_parallel_tool_calls_keep_their_order_and_ids(server: FakeOpenAI, api: str) -> None:
    calls = [
        ("call_a1", "get_weather", '{"city": "Paris"}'),
        ("call_b2", "get_time", '{"city":"Tokyo"}'),
        ("call_c3", "get_weather", '{"city":"Lima"}'),
    ]
    server.reply(calls_reply(api, calls))
    response = await ask(server, request(tools=TOOLS), api=api)
    assert response.message.content == [
        call("call_a1", "get_weather", city="Paris"),
        call("call_b2", "get_time", city="Tokyo"),
        call("call_c3", "get_weather", city="Lima"),
    ]


@pytest.mark.parametrize("api", APIS)
async def test_text_next_to_tool_calls(server: FakeOpenAI, api: str) -> None:
    calls = [("call_a1", "get_weather", '{"city":"Paris"}'), ("call_b2", "get_time", "{}")]
    server.reply(calls_reply(api, calls, text="Let me check both."))
    response = await ask(server, request(tools=TOOLS), api=api)
    assert response.message.content == [
        TextPart(type="text", text="Let me check both."),
        call("call_a1", "get_weather", city="Paris"),
        call("call_b2", "get_time"),
    ]


@pytest.mark.parametrize(
    "raw",
    ['{"city": "Par', "[1, 2]", '"Paris"', "null", "city=Paris"],
    ids=["truncated", "array", "string", "null", "not-json"],
)
@pytest.mark.parametrize("api", APIS)
async def test_arguments_that_are_not_an_object_are_kept_raw(
    server: FakeOpenAI, api: str, raw: str
) -> None:
    server.reply(calls_reply(api, [("call_bad", "get_weather", raw)]))
    response = await ask(server, request(tools=TOOLS), api=api)
    (part,) = response.message.content
    assert isinstance(part, ToolCallPart)
    assert part.arguments == {}
    assert part.model_extra == {"rawArguments": raw}
    scripted = ScriptedModel(
        [{"tool_calls": [{"id": "call_bad", "name": "get_weather", "arguments": raw}]}]
    )
    expected = (await scripted.respond(request())).message
    assert dumped(response.message) == dumped(expected)


@pytest.mark.parametrize("api", APIS)
async def test_empty_arguments_are_a_call_without_arguments(server: FakeOpenAI, api: str) -> None:
    server.reply(calls_reply(api, [("call_e", "get_time", "")]))
    response = await ask(server, request(tools=TOOLS), api=api)
    assert response.message.content == [call("call_e", "get_time")]
    assert response.message.content[0].model_extra == {}


async def test_a_tool_call_without_id_gets_one(server: FakeOpenAI) -> None:
    body = chat_completion(None, [("", "get_time", "{}"), ("", "get_time", "{}")])
    server.reply(Reply(body=body))
    response = await ask(server, request(tools=TOOLS))
    ids = [c.id for c in response.message.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2


async def test_a_refusal_is_text(server: FakeOpenAI) -> None:
    server.reply(Reply(body=chat_completion(None, refusal="I can't help with that.")))
    response = await ask(server, request())
    assert response.message.text == "I can't help with that."


async def test_an_empty_answer_is_one_empty_text_part(server: FakeOpenAI) -> None:
    server.reply(Reply(body=chat_completion(None, finish_reason="length")))
    response = await ask(server, request())
    assert response.message.content == [TextPart(type="text", text="")]


# -- a conversation round trip -------------------------------------------------------------
def conversation() -> list[Any]:
    """A user question, an assistant turn with text and three calls (the last with
    arguments that could not be read), the results (one an error) with a follow-up text,
    then an assistant turn with text only and a last user question."""
    bad = ToolCallPart.model_validate(
        {
            "type": "tool_call",
            "id": "call_3",
            "name": "get_time",
            "arguments": {},
            "rawArguments": '{"city": "Li',
        }
    )
    return [
        user("Weather in Paris and Tokyo?"),
        AssistantMessage(
            role="assistant",
            content=[
                TextPart(type="text", text="Checking "),
                TextPart(type="text", text="both."),
                call("call_1", "get_weather", city="Paris", units={"temp": "C", "wind": None}),
                call("call_2", "get_weather", city="Tōkyō"),
                bad,
            ],
        ),
        UserMessage(
            role="user",
            content=[
                ToolResultPart(
                    type="tool_result",
                    tool_call_id="call_1",
                    tool_name="get_weather",
                    content="18°C, cloudy",
                ),
                ToolResultPart(
                    type="tool_result",
                    tool_call_id="call_2",
                    tool_name="get_weather",
                    content="The weather service timed out.",
                    is_error=True,
                ),
                ToolResultPart(
                    type="tool_result",
                    tool_call_id="call_3",
                    tool_name="get_time",
                    content="The arguments could not be read.",
                    is_error=True,
                ),
            ],
        ),
        AssistantMessage(role="assistant", content=[TextPart(type="text", text="Paris: 18°C.")]),
        UserMessage(
            role="user",
            content=[
                ToolResultPart(
                    type="tool_result",
                    tool_call_id="call_9",
                    tool_name="get_time",
                    content="10:00",
                ),
                TextPart(type="text", text="And Lima?"),
            ],
        ),
    ]


async def test_chat_conversation_round_trip(server: FakeOpenAI) -> None:
    server.reply(text_reply("chat", "Done."))
    await ask(server, ModelRequest("Be brief.", conversation(), TOOLS))
    assert server.last.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city":"Paris","units":{"temp":"C","wind":null}}',
                    },
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Tōkyō"}'},
                },
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C, cloudy"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": "Error: The weather service timed out.",
        },
        {
            "role": "tool",
            "tool_call_id": "call_3",
            "content": "Error: The arguments could not be read.",
        },
        {"role": "assistant", "content": "Paris: 18°C."},
        {"role": "tool", "tool_call_id": "call_9", "content": "10:00"},
        {"role": "user", "content": "And Lima?"},
    ]


async def test_responses_conversation_round_trip(server: FakeOpenAI) -> None:
    server.reply(text_reply("responses", "Done."))
    await ask(server, ModelRequest("Be brief.", conversation(), TOOLS), api="responses")
    body = server.last.body
    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Paris and Tokyo?"},
        {"type": "message", "role": "assistant", "content": "Checking both."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris","units":{"temp":"C","wind":null}}',
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "get_weather",
            "arguments": '{"city":"Tōkyō"}',
        },
        {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18°C, cloudy"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": "Error: The weather service timed out.",
        },
        {
            "type": "function_call_output",
            "call_id": "call_3",
            "output": "Error: The arguments could not be read.",
        },
        {"type": "message", "role": "assistant", "content": "Paris: 18°C."},
        {"type": "function_call_output", "call_id": "call_9", "output": "10:00"},
        {"type": "message", "role": "user", "content": "And Lima?"},
    ]


@pytest.mark.parametrize("api", APIS)
async def test_answer_to_a_round_trip_parses_back(server: FakeOpenAI, api: str) -> None:
    """What the adapter made of an answer, sent back as history, is what the server sent."""
    calls = [("call_a1", "get_weather", '{"city":"Paris"}'), ("call_b2", "get_time", "{}")]
    server.reply(calls_reply(api, calls, text="Checking."), text_reply(api, "Done."))
    async with model_at(server, api=api) as model:
        first = await model.respond(request(tools=TOOLS))
        results = UserMessage(
            role="user",
            content=[
                ToolResultPart(
                    type="tool_result", tool_call_id=c.id, tool_name=c.name, content="ok"
                )
                for c in first.message.tool_calls
            ],
        )
        await model.respond(ModelRequest("", [user("Q"), first.message, results], TOOLS))
    body = server.last.body
    if api == "chat":
        assistant = body["messages"][1]
        assert assistant["content"] == "Checking."
        assert [
            (t["id"], t["function"]["name"], t["function"]["arguments"])
            for t in assistant["tool_calls"]
        ] == calls
        assert [(m["role"], m["tool_call_id"]) for m in body["messages"][2:]] == [
            ("tool", "call_a1"),
            ("tool", "call_b2"),
        ]
    else:
        items = body["input"][1:]
        assert [i["type"] for i in items] == ["message"] + ["function_call"] * 2 + [
            "function_call_output"
        ] * 2
        assert [(i["call_id"], i["name"], i["arguments"]) for i in items[1:3]] == calls
        assert [i["call_id"] for i in items[3:]] == ["call_a1", "call_b2"]


# -- usage ---------------------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
async def test_usage_with_cached_tokens(server: FakeOpenAI, api: str) -> None:
    server.reply(text_reply(api, "ok", usage=(2006, 300, 1920)))
    response = await ask(server, request(), api=api)
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (
        2006,
        300,
        1920,
    )


async def test_missing_usage_is_zero(server: FakeOpenAI) -> None:
    body = chat_completion("ok")
    del body["usage"]
    server.reply(Reply(body=body))
    response = await ask(server, request())
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (0, 0, 0)


async def test_usage_without_details(server: FakeOpenAI) -> None:
    body = chat_completion("ok")
    body["usage"] = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    server.reply(Reply(body=body))
    response = await ask(server, request())
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (5, 2, 0)


@pytest.mark.parametrize(
    ("api", "provider", "member"),
    [
        ("chat", "openai", "max_completion_tokens"),
        ("chat", "openai-compatible", "max_tokens"),
        ("responses", "openai", "max_output_tokens"),
    ],
)
async def test_max_output_tokens(server: FakeOpenAI, api: str, provider: str, member: str) -> None:
    server.reply(text_reply(api, "ok"))
    await ask(server, request(), api=api, provider=provider, max_output_tokens=256)
    body = server.last.body
    assert body[member] == 256
    others = {"max_completion_tokens", "max_tokens", "max_output_tokens"} - {member}
    assert not others & set(body)


# -- streaming -----------------------------------------------------------------------------
PIECES = ["The", " weather", " in Paris", " is 18°C", " and cloudy."]


async def test_chat_streaming_text(server: FakeOpenAI) -> None:
    full = "".join(PIECES)
    server.reply(
        Reply(events=chat_chunks(PIECES, usage=(19, 10, 4))),
        Reply(body=chat_completion(full, usage=(19, 10, 4))),
    )
    seen: list[str] = []
    async with model_at(server) as model:
        streamed = await model.respond(request(on_text=seen.append))
        plain = await model.respond(request())
    assert seen == PIECES
    assert streamed == plain
    assert streamed.message.text == full
    first, second = server.bodies()
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert "stream" not in second and "stream_options" not in second
    assert {k: v for k, v in first.items() if not k.startswith("stream")} == second


async def test_responses_streaming_text(server: FakeOpenAI) -> None:
    full = "".join(PIECES)
    server.reply(
        Reply(events=response_events(PIECES, usage=(40, 12, 8))),
        Reply(body=response_object(full, usage=(40, 12, 8))),
    )
    seen: list[str] = []
    async with model_at(server, api="responses") as model:
        streamed = await model.respond(request(on_text=seen.append))
        plain = await model.respond(request())
    assert seen == PIECES
    assert streamed == plain
    first, second = server.bodies()
    assert first["stream"] is True
    assert {k: v for k, v in first.items() if k != "stream"} == second


async def test_text_arrives_before_the_stream_ends(server: FakeOpenAI) -> None:
    """on_text sees each piece as it comes: the server holds the rest of the stream back
    until the first piece has reached the callback."""
    first_seen = threading.Event()
    seen: list[str] = []

    def on_text(piece: str) -> None:
        seen.append(piece)
        first_seen.set()

    events = chat_chunks(["first", " second"])
    server.reply(Reply(events=events, hold_after=2, hold=first_seen, hold_timeout=10))
    response = await ask(server, request(on_text=on_text))
    assert server.holds == [True]
    assert seen == ["first", " second"]
    assert response.message.text == "first second"


@pytest.mark.parametrize("interleave", [False, True], ids=["in-turn", "interleaved"])
async def test_chat_streamed_parallel_tool_calls(server: FakeOpenAI, interleave: bool) -> None:
    calls = [
        ("call_a1", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
        ("call_b2", "get_time", ["{", '"city":', '"Tokyo"', "}"]),
        ("call_c3", "get_weather", ['{"city":"Lima"}']),
    ]
    whole = [(c, n, "".join(p)) for c, n, p in calls]
    server.reply(
        Reply(events=chat_chunks(["Checking."], calls, interleave=interleave)),
        Reply(body=chat_completion("Checking.", whole)),
    )
    seen: list[str] = []
    async with model_at(server) as model:
        streamed = await model.respond(request(tools=TOOLS, on_text=seen.append))
        plain = await model.respond(request(tools=TOOLS))
    assert streamed == plain
    assert seen == ["Checking."]
    assert streamed.message.content == [
        TextPart(type="text", text="Checking."),
        call("call_a1", "get_weather", city="Paris"),
        call("call_b2", "get_time", city="Tokyo"),
        call("call_c3", "get_weather", city="Lima"),
    ]


async def test_responses_streamed_parallel_tool_calls(server: FakeOpenAI) -> None:
    calls = [
        ("call_a1", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
        ("call_b2", "get_time", ["{", '"city":', '"Tokyo"', "}"]),
    ]
    whole = [(c, n, "".join(p)) for c, n, p in calls]
    server.reply(
        Reply(events=response_events(["Checking."], calls)),
        Reply(body=response_object("Checking.", whole)),
    )
    seen: list[str] = []
    async with model_at(server, api="responses") as model:
        streamed = await model.respond(request(tools=TOOLS, on_text=seen.append))
        plain = await model.respond(request(tools=TOOLS))
    assert streamed == plain
    assert seen == ["Checking."]
    assert [c.arguments for c in streamed.message.tool_calls] == [
        {"city": "Paris"},
        {"city": "Tokyo"},
    ]


async def test_responses_stream_assembled_from_events_when_final_has_no_output(
    server: FakeOpenAI,
) -> None:
    """A server whose response.completed leaves the output out: the events make the
    message."""
    calls = [("call_a1", "get_weather", ['{"city":', '"Paris"}'])]
    events = response_events(["Hi", " there"], calls, usage=(9, 3, 0))
    name, last = events[-1]
    last["response"]["output"] = []
    server.reply(Reply(events=events))
    response = await ask(server, request(tools=TOOLS, on_text=lambda _: None), api="responses")
    assert response.message.content == [
        TextPart(type="text", text="Hi there"),
        call("call_a1", "get_weather", city="Paris"),
    ]
    assert (response.input_tokens, response.output_tokens) == (9, 3)
    assert name == "response.completed"


@pytest.mark.parametrize("api", APIS)
async def test_a_server_that_answers_a_stream_request_whole(server: FakeOpenAI, api: str) -> None:
    """Some OpenAI-compatible servers ignore ``stream``: a JSON answer is taken as it is,
    and its text reaches on_text in one piece."""
    calls = [("call_a1", "get_weather", '{"city":"Paris"}')]
    server.reply(
        calls_reply(api, calls, text="Checking."), calls_reply(api, calls, text="Checking.")
    )
    seen: list[str] = []
    async with model_at(server, api=api) as model:
        streamed = await model.respond(request(tools=TOOLS, on_text=seen.append))
        plain = await model.respond(request(tools=TOOLS))
    assert streamed == plain
    assert seen == ["Checking."]


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_cut_short_is_retryable(server: FakeOpenAI, api: str) -> None:
    events = (
        chat_chunks(["Hel", "lo"], done=False)
        if api == "chat"
        else response_events(["Hel", "lo"], complete=False)
    )
    server.reply(Reply(events=events))
    seen: list[str] = []
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(on_text=seen.append), api=api)
    assert info.value.code == "stream_interrupted"
    assert seen == ["Hel", "lo"]


@pytest.mark.parametrize("api", APIS)
async def test_a_dropped_connection_mid_stream_is_retryable(server: FakeOpenAI, api: str) -> None:
    events = (
        chat_chunks(["Hel", "lo"], done=False)
        if api == "chat"
        else response_events(["Hel", "lo"], complete=False)
    )
    server.reply(Reply(events=events, drop=True))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(on_text=lambda _: None), api=api)
    assert info.value.code in ("connection_error", "stream_interrupted")


async def test_chat_error_inside_a_stream(server: FakeOpenAI) -> None:
    events = [
        *chat_chunks(["Hel"], done=False),
        {"error": {"message": "The server had an error.", "type": "server_error", "code": None}},
    ]
    server.reply(Reply(events=events))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(on_text=lambda _: None))
    assert info.value.code == "server_error"
    assert "The server had an error." in str(info.value)


@pytest.mark.parametrize(
    ("code", "expected", "retryable"),
    [
        ("server_error", "server_error", True),
        ("rate_limit_exceeded", "rate_limited", True),
        ("context_length_exceeded", "context_too_long", False),
    ],
)
async def test_responses_error_events(
    server: FakeOpenAI, code: str, expected: str, retryable: bool
) -> None:
    events = [
        *response_events(["Hel"], complete=False),
        (
            "error",
            {
                "type": "error",
                "code": code,
                "message": "it broke",
                "param": None,
                "sequence_number": 99,
            },
        ),
    ]
    server.reply(Reply(events=events))
    with pytest.raises(ModelError) as info:
        await ask(server, request(on_text=lambda _: None), api="responses")
    assert info.value.code == expected
    assert isinstance(info.value, RetryableModelError) is retryable


@pytest.mark.parametrize("streamed", [False, True])
async def test_responses_failed(server: FakeOpenAI, streamed: bool) -> None:
    failed = response_object(status="failed", usage=None)
    failed["error"] = {"code": "server_error", "message": "The model failed to answer."}
    if streamed:
        events = [
            *response_events(complete=False),
            (
                "response.failed",
                {"type": "response.failed", "sequence_number": 9, "response": failed},
            ),
        ]
        server.reply(Reply(events=events))
    else:
        server.reply(Reply(body=failed))
    with pytest.raises(RetryableModelError) as info:
        await ask(
            server,
            request(on_text=(lambda _: None) if streamed else None),
            api="responses",
        )
    assert info.value.code == "server_error"
    assert "The model failed to answer." in str(info.value)


async def test_an_incomplete_response_gives_what_it_has(server: FakeOpenAI) -> None:
    body = response_object("Half an ans", status="incomplete")
    body["incomplete_details"] = {"reason": "max_output_tokens"}
    server.reply(Reply(body=body))
    response = await ask(server, request(), api="responses")
    assert response.message.text == "Half an ans"


async def test_reasoning_items_are_left_out(server: FakeOpenAI) -> None:
    body = response_object("Answer.")
    body["output"].insert(
        0, {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": None}
    )
    server.reply(Reply(body=body))
    response = await ask(server, request(), api="responses")
    assert response.message.content == [TextPart(type="text", text="Answer.")]


# -- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
async def test_429_with_retry_after_seconds(server: FakeOpenAI, api: str) -> None:
    server.reply(rate_limited(retry_after="7"))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(), api=api)
    assert info.value.retry_after == 7
    assert info.value.code == "rate_limited"
    assert "Rate limit reached" in str(info.value)
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_429_with_retry_after_ms(server: FakeOpenAI) -> None:
    server.reply(rate_limited(retry_after_ms="1500", retry_after="2"))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request())
    assert info.value.retry_after == 1.5


async def test_429_with_retry_after_date(server: FakeOpenAI) -> None:
    server.reply(rate_limited(retry_after=formatdate(time.time() + 30, usegmt=True)))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request())
    assert info.value.retry_after is not None
    assert 25 <= info.value.retry_after <= 31


async def test_429_without_retry_after(server: FakeOpenAI) -> None:
    server.reply(rate_limited())
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request())
    assert info.value.retry_after is None


async def test_429_out_of_quota_is_not_retried(server: FakeOpenAI) -> None:
    server.reply(
        error_reply(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            "insufficient_quota",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request())
    assert not isinstance(info.value, RetryableModelError)
    assert info.value.code == "insufficient_quota"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
@pytest.mark.parametrize("api", APIS)
async def test_server_errors_are_retryable(server: FakeOpenAI, api: str, status: int) -> None:
    server.reply(
        error_reply(
            status,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
        )
    )
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(), api=api)
    assert info.value.code == "server_error"
    assert info.value.retry_after is None
    assert str(status) in str(info.value)


async def test_a_bare_502_from_a_proxy_is_retryable(server: FakeOpenAI) -> None:
    server.reply(
        Reply(
            status=502, body="<html><body>502 Bad Gateway</body></html>", content_type="text/html"
        )
    )
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request())
    assert "502 Bad Gateway" in str(info.value)


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("api", APIS)
async def test_auth_failures(server: FakeOpenAI, api: str, status: int) -> None:
    server.reply(
        error_reply(
            status,
            "Incorrect API key provided: sk-test-***789. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            "invalid_api_key",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request(), api=api)
    assert not isinstance(info.value, RetryableModelError)
    assert info.value.code == "auth_failed"
    assert "OPENAI_API_KEY" in str(info.value)
    assert "Incorrect API key provided" in str(info.value)


async def test_auth_failure_names_the_compatible_variable(server: FakeOpenAI) -> None:
    server.reply(error_reply(401, "bad key", "invalid_request_error", "invalid_api_key"))
    with pytest.raises(ModelError) as info:
        await ask(server, request(), provider="openai-compatible")
    assert "OPENAI_COMPATIBLE_API_KEY" in str(info.value)


@pytest.mark.parametrize("api", APIS)
async def test_model_not_found(server: FakeOpenAI, api: str) -> None:
    server.reply(
        error_reply(
            404,
            "The model `gpt-nope` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request(), api=api, model="gpt-nope")
    assert info.value.code == "model_not_found"
    assert "'gpt-nope'" in str(info.value)
    assert server.base_url in str(info.value)


async def test_a_wrong_base_url_is_model_not_found(server: FakeOpenAI) -> None:
    async with model_at(server) as model:
        model.base_url = server.base_url.removesuffix("/v1")  # made before the client
        with pytest.raises(ModelError) as info:
            await model.respond(request())
    assert info.value.code == "model_not_found"
    assert "Invalid URL" in str(info.value)
    assert server.requests == []


@pytest.mark.parametrize("api", APIS)
async def test_context_too_long(server: FakeOpenAI, api: str) -> None:
    server.reply(
        error_reply(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130532 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            "context_length_exceeded",
            param="messages",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request(), api=api)
    assert not isinstance(info.value, RetryableModelError)
    assert info.value.code == "context_too_long"


async def test_context_too_long_from_a_server_without_codes(server: FakeOpenAI) -> None:
    """vLLM's wording, with no error code."""
    server.reply(
        error_reply(
            400,
            "This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
            "length of the messages or completion.",
            "BadRequestError",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request(), provider="openai-compatible")
    assert info.value.code == "context_too_long"


@pytest.mark.parametrize("api", APIS)
async def test_other_bad_requests(server: FakeOpenAI, api: str) -> None:
    server.reply(
        error_reply(
            400,
            "Invalid schema for function 'get_weather': 'strng' is not valid under any of "
            "the given schemas.",
            "invalid_request_error",
            "invalid_function_parameters",
            param="tools[0].function.parameters",
        )
    )
    with pytest.raises(ModelError) as info:
        await ask(server, request(), api=api)
    assert not isinstance(info.value, RetryableModelError)
    assert info.value.code == "bad_request"
    assert "Invalid schema for function 'get_weather'" in str(info.value)


GARBAGE = {
    "html": Reply(body="<html><body>Welcome to nginx!</body></html>", content_type="text/html"),
    "broken-json": Reply(body='{"id": "chatcmpl-1", "choices": [', content_type="application/json"),
    "not-json-said-json": Reply(body="upstream connect error", content_type="application/json"),
    "empty-object": Reply(body={}),
    "no-choices": Reply(body={**chat_completion("x"), "choices": []}),
    "choices-not-a-list": Reply(body={**chat_completion("x"), "choices": "x"}),
    "choice-without-message": Reply(body={**chat_completion("x"), "choices": [{"index": 0}]}),
    "content-not-text": Reply(
        body={**chat_completion("x"), "choices": [{"index": 0, "message": {"content": 5}}]}
    ),
    "json-array": Reply(body=[1, 2, 3]),
    "json-null": Reply(body=None),
    "empty-body": Reply(body=b""),
}


@pytest.mark.parametrize("name", list(GARBAGE))
async def test_a_200_with_garbage_is_bad_response(server: FakeOpenAI, name: str) -> None:
    server.reply(GARBAGE[name])
    with pytest.raises(ModelError) as info:
        await ask(server, request())
    assert not isinstance(info.value, RetryableModelError)
    assert info.value.code == "bad_response"


@pytest.mark.parametrize(
    "body",
    [{}, {"output": "x"}, "<html></html>", [1]],
    ids=["empty", "output-not-list", "html", "array"],
)
async def test_responses_garbage_is_bad_response(server: FakeOpenAI, body: Any) -> None:
    server.reply(Reply(body=body, content_type="text/html" if isinstance(body, str) else None))
    with pytest.raises(ModelError) as info:
        await ask(server, request(), api="responses")
    assert info.value.code == "bad_response"


@pytest.mark.parametrize("api", APIS)
async def test_a_garbage_stream_is_bad_response(server: FakeOpenAI, api: str) -> None:
    server.reply(Reply(events=["{not json", "[DONE]"]))
    with pytest.raises(ModelError) as info:
        await ask(server, request(on_text=lambda _: None), api=api)
    assert info.value.code == "bad_response"


@pytest.mark.parametrize("api", APIS)
async def test_an_empty_stream_is_bad_response(server: FakeOpenAI, api: str) -> None:
    server.reply(Reply(events=[]))
    with pytest.raises(ModelError) as info:
        await ask(server, request(on_text=lambda _: None), api=api)
    assert info.value.code == "bad_response"


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("api", APIS)
async def test_a_server_that_hangs_times_out(server: FakeOpenAI, api: str, streamed: bool) -> None:
    body = chat_completion("late") if api == "chat" else response_object("late")
    server.reply(Reply(body=body, delay=30))
    started = time.monotonic()
    with pytest.raises(RetryableModelError) as info:
        await ask(
            server,
            request(on_text=(lambda _: None) if streamed else None),
            api=api,
            timeout=0.5,
        )
    assert info.value.code == "timeout"
    assert time.monotonic() - started < 10


async def test_a_stream_that_stalls_times_out(server: FakeOpenAI) -> None:
    """The first pieces arrive, then nothing: the wait between pieces is bounded too."""
    events = chat_chunks(["Hel", "lo"])
    server.reply(Reply(events=events, hold_after=3, hold=threading.Event()))
    seen: list[str] = []
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(on_text=seen.append), timeout=0.5)
    assert info.value.code == "timeout"
    assert seen == ["Hel", "lo"]


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIModel("gpt-4.1", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    try:
        with pytest.raises(RetryableModelError) as info:
            await model.respond(request())
    finally:
        await model.aclose()
    assert info.value.code == "connection_error"


# -- keys, providers, construction ---------------------------------------------------------
async def test_openai_compatible_without_any_key(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_COMPATIBLE_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-should-not-leak")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-should-not-leak")
    server.reply(text_reply("chat", "Hi from a local model."))
    model = OpenAIModel("qwen2.5", base_url=server.base_url, provider="openai-compatible")
    assert model.model_id == f"openai-compatible:qwen2.5@{server.base_url}"
    try:
        response = await model.respond(request())
    finally:
        await model.aclose()
    assert response.message.text == "Hi from a local model."
    headers = server.last.headers
    assert headers["authorization"] == "Bearer not-needed"
    assert "openai-organization" not in headers
    assert "openai-project" not in headers
    assert server.last.body["model"] == "qwen2.5"


async def test_openai_compatible_key_from_its_variable(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-others")
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "local-key")
    server.reply(text_reply("chat", "ok"))
    model = OpenAIModel("m", base_url=server.base_url, provider="openai-compatible")
    try:
        await model.respond(request())
    finally:
        await model.aclose()
    assert server.last.headers["authorization"] == "Bearer local-key"


async def test_openai_key_from_the_environment(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.reply(text_reply("chat", "ok"))
    model = OpenAIModel("gpt-4.1", base_url=server.base_url)
    assert model.model_id == "openai:gpt-4.1"
    try:
        await model.respond(request())
    finally:
        await model.aclose()
    assert server.last.headers["authorization"] == "Bearer sk-from-env"


async def test_openai_without_a_key_fails_before_sending(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel("gpt-4.1", base_url=server.base_url)
    with pytest.raises(ModelError) as info:
        await model.respond(request())
    assert info.value.code == "auth_failed"
    assert "OPENAI_API_KEY" in str(info.value)
    assert server.requests == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": ""}, "model name"),
        ({"api": "completions"}, "api must be"),
        ({"provider": "azure"}, "provider must be"),
        ({"provider": "openai-compatible"}, "needs a base_url"),
        ({"base_url": "localhost:8000"}, "http(s) URL"),
        ({"base_url": 8000}, "http(s) URL"),
        ({"api_key": 12345}, "api_key must be a non-empty string"),
        ({"api_key": ""}, "api_key must be a non-empty string"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"model": "gpt-4.1", **kwargs}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OpenAIModel(kwargs.pop("model"), **kwargs)


def test_missing_sdk_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ConfigError) as info:
        OpenAIModel("gpt-4.1")
    assert info.value.code == "missing_extra"
    assert "pip install 'oarlock[openai]'" in str(info.value)


async def test_missing_sdk_at_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    model = OpenAIModel("gpt-4.1", api_key=KEY)
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ConfigError) as info:
        await model.respond(request())
    assert info.value.code == "missing_extra"


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = (
        "import sys, oarlock, oarlock.models, oarlock.models._openai as m\n"
        "assert 'openai' not in sys.modules\n"
        "m.OpenAIModel('gpt-4.1')\n"
        "assert 'openai' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr


async def test_a_model_serves_more_than_one_event_loop(server: FakeOpenAI) -> None:
    server.reply(*(text_reply("chat", f"answer {i}") for i in range(3)))
    async with model_at(server) as model:
        first = await model.respond(request())

        async def elsewhere() -> ModelResponse:
            try:
                return await model.respond(request())
            finally:
                await model.aclose()

        other = await asyncio.to_thread(asyncio.run, elsewhere())
        again = await model.respond(request())
    assert [first.message.text, other.message.text, again.message.text] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]


# -- through the engine --------------------------------------------------------------------
@tool(side_effect="read")
def order_status(order_id: str) -> str:
    """Look up an order's status."""
    return f"Order {order_id} shipped on 2025-03-01."


@pytest.mark.parametrize("api", APIS)
async def test_a_run_through_the_engine(server: FakeOpenAI, api: str) -> None:
    call_args = json.dumps({"order_id": "A42"})
    server.reply(
        calls_reply(api, [("call_Xq1", "order_status", call_args)], text="Let me look."),
        text_reply(api, "Your order A42 shipped on 2025-03-01.", usage=(120, 15, 64)),
    )
    async with model_at(server, api=api) as model:
        agent = Agent("support", model, instructions="Help with orders.", tools=[order_status])
        runner = Runner(agent, MemoryStore(), retry=RetryPolicy(attempts=1, base_delay=0))
        doc = await runner.start("Where is my order A42?")
    assert doc.status == "completed", doc.error
    assert doc.result == "Your order A42 shipped on 2025-03-01."
    assert doc.model == "openai:gpt-4.1"
    assert doc.usage.input_tokens == (36 if api == "responses" else 19) + 120
    first, second = server.bodies()
    if api == "chat":
        assert first["messages"][0] == {"role": "system", "content": "Help with orders."}
        assert first["tools"][0]["function"]["name"] == "order_status"
        tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_messages] == ["call_Xq1"]
        result = tool_messages[0]["content"]
        assert second["messages"][2]["tool_calls"][0]["id"] == "call_Xq1"
    else:
        assert first["instructions"] == "Help with orders."
        assert first["tools"][0]["name"] == "order_status"
        outputs = [i for i in second["input"] if i["type"] == "function_call_output"]
        assert [o["call_id"] for o in outputs] == ["call_Xq1"]
        result = outputs[0]["output"]
    assert result.startswith("<untrusted-tool-result")
    assert "Order A42 shipped on 2025-03-01." in result
    stored = dump_run(doc)
    assert stored["messages"][1]["content"][1]["id"] == "call_Xq1"
