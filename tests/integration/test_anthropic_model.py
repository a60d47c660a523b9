"""The Anthropic adapter against a fake Messages API on the loopback interface: the real SDK
makes real HTTP requests, and the fake server answers in the API's wire format and records
what it was sent. Nothing leaves 127.0.0.1, and nothing in the SDK is mocked."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anthropic_wire as wire
import pytest
from anthropic_wire import FakeAnthropic

from oarlock.errors import ConfigError, ModelError, RetryableModelError
from oarlock.formats._models import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserMessage,
)
from oarlock.models._anthropic import AnthropicModel
from oarlock.models._base import ModelRequest, ModelResponse

KEY = "sk-ant-test-0123456789"


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def user(text: str) -> UserMessage:
    return UserMessage(role="user", content=[TextPart(type="text", text=text)])


def assistant(*parts: TextPart | ToolCallPart) -> AssistantMessage:
    return AssistantMessage(role="assistant", content=list(parts))


def call(id: str, name: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(type="tool_call", id=id, name=name, arguments=arguments)


def result(id: str, name: str, content: str, *, is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(
        type="tool_result", tool_call_id=id, tool_name=name, content=content, is_error=is_error
    )


def text(value: str) -> TextPart:
    return TextPart(type="text", text=value)


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def request(
    *messages: Message,
    instructions: str = "Be brief.",
    tools: list[dict[str, Any]] | None = None,
    on_text: Any = None,
) -> ModelRequest:
    return ModelRequest(
        instructions, list(messages) or [user("Hello")], tools or [], on_text=on_text
    )


async def ask(
    server: FakeAnthropic, req: ModelRequest | None = None, **options: Any
) -> ModelResponse:
    options.setdefault("api_key", KEY)
    options.setdefault("timeout", 10.0)
    model = AnthropicModel(wire.MODEL, base_url=server.base_url, **options)
    try:
        return await model.respond(req or request())
    finally:
        await model.aclose()


def sent_key(headers: dict[str, str]) -> str:
    """The key as the SDK sent it: this SDK (2.14) sends ``api_key`` as a bearer token;
    the API also takes it as ``x-api-key``. Exactly one of the two must carry it."""
    bearer = headers.get("authorization", "")
    found = [headers["x-api-key"]] if "x-api-key" in headers else []
    if bearer:
        assert bearer.startswith("Bearer ")
        found.append(bearer.removeprefix("Bearer "))
    assert len(found) == 1, headers
    return found[0]


def dumped(response: ModelResponse) -> list[dict[str, Any]]:
    return [p.model_dump() for p in response.message.content]


# -- the request and the plain response ---------------------------------------------------


async def test_plain_text(server: FakeAnthropic) -> None:
    server.reply(wire.message(wire.text("Hello! How can I help?")))
    response = await ask(server)
    assert response.message.content == [text("Hello! How can I help?")]
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (12, 6, 0)
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.body == {
        "model": wire.MODEL,
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
    }
    assert sent_key(sent.headers) == KEY
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", sent.headers["anthropic-version"])
    assert sent.headers["content-type"].startswith("application/json")
    # the runner retries: the SDK must make exactly one attempt
    assert sent.headers.get("x-stainless-retry-count") == "0"


async def test_model_id_options_and_no_system_without_instructions(server: FakeAnthropic) -> None:
    model = AnthropicModel("claude-opus-4-7", api_key=KEY)
    assert model.model_id == "anthropic:claude-opus-4-7"
    assert KEY not in repr(model)
    server.reply(wire.message(wire.text("ok")))
    await ask(server, request(instructions=""), max_tokens=321)
    (sent,) = server.bodies
    assert "system" not in sent and "tools" not in sent and "stream" not in sent
    assert sent["max_tokens"] == 321


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"model": ""}, "model name"),
        ({"model": "m", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "timeout": 0}, "timeout"),
        ({"model": "m", "base_url": "localhost:9"}, "base_url must be an http"),
        ({"model": "m", "api_key": 12345}, "api_key must be a non-empty string"),
    ],
)
def test_bad_options_are_config_errors(arguments: dict[str, Any], problem: str) -> None:
    model = arguments.pop("model")
    with pytest.raises(ConfigError, match=problem):
        AnthropicModel(model, **arguments)


async def test_one_tool_call(server: FakeAnthropic) -> None:
    server.reply(wire.message(wire.tool_use("get_weather", {"city": "Oslo"}, id="toolu_01A")))
    response = await ask(server, request(tools=[WEATHER]))
    assert response.message.content == [call("toolu_01A", "get_weather", city="Oslo")]
    (sent,) = server.bodies
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": WEATHER["parameters"],
        }
    ]


async def test_parallel_tool_calls_keep_their_ids_and_order(server: FakeAnthropic) -> None:
    server.reply(
        wire.message(
            wire.tool_use("get_weather", {"city": "Oslo"}, id="toolu_01"),
            wire.tool_use("get_weather", {"city": "Lima"}, id="toolu_02"),
            wire.tool_use("get_time", {}, id="toolu_03"),
        )
    )
    response = await ask(server, request(tools=[WEATHER]))
    assert response.message.content == [
        call("toolu_01", "get_weather", city="Oslo"),
        call("toolu_02", "get_weather", city="Lima"),
        call("toolu_03", "get_time"),
    ]


async def test_text_next_to_tool_calls(server: FakeAnthropic) -> None:
    server.reply(
        wire.message(
            wire.text("Let me check both."),
            wire.tool_use("get_weather", {"city": "Oslo"}, id="toolu_1"),
            wire.text("And then:"),
            wire.tool_use("get_weather", {"city": "Rome"}, id="toolu_2"),
        )
    )
    response = await ask(server, request(tools=[WEATHER]))
    assert response.message.content == [
        text("Let me check both."),
        call("toolu_1", "get_weather", city="Oslo"),
        text("And then:"),
        call("toolu_2", "get_weather", city="Rome"),
    ]


async def test_tool_results_round_trip_in_one_user_message(server: FakeAnthropic) -> None:
    server.reply(wire.message(wire.text("Oslo is cold; Lima failed.")))
    conversation = [
        user("Weather in Oslo and Lima?"),
        assistant(
            text("Checking."),
            call("toolu_1", "get_weather", city="Oslo"),
            call("toolu_2", "get_weather", city="Lima"),
        ),
        UserMessage(
            role="user",
            content=[
                result("toolu_1", "get_weather", "-3 C"),
                result("toolu_2", "get_weather", "service down", is_error=True),
            ],
        ),
    ]
    await ask(server, request(*conversation, tools=[WEATHER]))
    (sent,) = server.bodies
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Lima?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_weather",
                    "input": {"city": "Lima"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "-3 C",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "service down",
                    "is_error": True,
                },
            ],
        },
    ]


async def test_consecutive_messages_of_one_role_are_merged(server: FakeAnthropic) -> None:
    server.reply(wire.message(wire.text("done")))
    conversation = [
        user("first"),
        user("second"),
        assistant(text("thinking aloud")),
        assistant(text(""), call("toolu_9", "get_weather", city="Oslo")),
        user("a note written before the result arrived"),
        UserMessage(role="user", content=[result("toolu_9", "get_weather", "sunny")]),
        assistant(text("")),  # an empty turn says nothing: it is left out
        user("thanks"),
    ]
    await ask(server, request(*conversation, tools=[WEATHER]))
    (sent,) = server.bodies
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["user", "assistant", "user"]
    first, second, third = (m["content"] for m in sent["messages"])
    assert first == [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert second == [
        {"type": "text", "text": "thinking aloud"},
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    # the results come first in a user turn, as the API requires
    assert third == [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny", "is_error": False},
        {"type": "text", "text": "a note written before the result arrived"},
        {"type": "text", "text": "thanks"},
    ]


@pytest.mark.parametrize(
    ("sent_input", "raw"),
    [
        ("{not json", "{not json"),
        ("[1, 2]", "[1, 2]"),
        ([1, 2], "[1, 2]"),
        (None, "null"),
    ],
)
async def test_a_tool_input_that_is_not_an_object_is_kept_raw(
    server: FakeAnthropic, sent_input: Any, raw: str
) -> None:
    server.reply(wire.message(wire.tool_use("get_weather", sent_input, id="toolu_x")))
    response = await ask(server, request(tools=[WEATHER]))
    (part,) = response.message.content
    assert isinstance(part, ToolCallPart)
    assert (part.id, part.name, part.arguments) == ("toolu_x", "get_weather", {})
    assert part.model_extra == {"rawArguments": raw}


async def test_a_call_with_raw_arguments_goes_back_with_an_empty_input(
    server: FakeAnthropic,
) -> None:
    server.reply(wire.message(wire.text("retrying")))
    bad = ToolCallPart.model_validate(
        {
            "type": "tool_call",
            "id": "t1",
            "name": "get_weather",
            "arguments": {},
            "rawArguments": "{",
        }
    )
    conversation = [
        user("go"),
        assistant(bad),
        UserMessage(
            role="user", content=[result("t1", "get_weather", "could not read", is_error=True)]
        ),
    ]
    await ask(server, request(*conversation))
    (sent,) = server.bodies
    assert sent["messages"][1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}
    ]


async def test_usage_counts_the_whole_prompt_and_the_cache_reads(server: FakeAnthropic) -> None:
    counts = wire.usage(100, 50, cache_read=300, cache_creation=20)
    server.reply(wire.message(wire.text("cached"), usage_=counts))
    response = await ask(server)
    # input_tokens is the whole prompt (fresh + written to cache + read from cache)
    assert (response.input_tokens, response.output_tokens, response.cached_tokens) == (420, 50, 300)


async def test_thinking_and_unknown_blocks_are_left_out(server: FakeAnthropic) -> None:
    server.reply(
        wire.message(
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            wire.text("Answer."),
            {"type": "some_future_block", "data": 1},
        )
    )
    response = await ask(server)
    assert response.message.content == [text("Answer.")]


async def test_an_empty_response_is_one_empty_text(server: FakeAnthropic) -> None:
    server.reply(wire.message())
    response = await ask(server)
    assert response.message.content == [text("")]


# -- max_tokens -----------------------------------------------------------------------------


async def test_a_tool_call_cut_off_by_max_tokens_is_an_error(server: FakeAnthropic) -> None:
    server.reply(
        wire.message(
            wire.text("Writing the file."),
            wire.tool_use("write_file", {"path": "a.txt"}, id="toolu_cut"),
            stop_reason="max_tokens",
        )
    )
    with pytest.raises(ModelError) as err:
        await ask(server, max_tokens=64)
    assert not isinstance(err.value, RetryableModelError)
    assert err.value.code == "truncated"
    assert "write_file" in str(err.value) and "max_tokens (64)" in str(err.value)


async def test_text_cut_off_by_max_tokens_is_returned(server: FakeAnthropic) -> None:
    server.reply(
        wire.message(
            wire.tool_use("get_weather", {"city": "Oslo"}, id="toolu_ok"),
            wire.text("and the forecast for tomorrow is"),
            stop_reason="max_tokens",
        )
    )
    response = await ask(server)
    assert response.message.content == [
        call("toolu_ok", "get_weather", city="Oslo"),
        text("and the forecast for tomorrow is"),
    ]


# -- streaming ------------------------------------------------------------------------------


async def test_streamed_text_reaches_on_text_piece_by_piece(server: FakeAnthropic) -> None:
    body = wire.message(
        wire.text("The quick brown fox jumps."),
        usage_=wire.usage(40, 9, cache_read=10, cache_creation=5),
    )
    server.reply(body)
    plain = await ask(server)
    server.stream(wire.events(body, text_size=5))
    pieces: list[str] = []
    streamed = await ask(server, request(on_text=pieces.append))
    assert pieces == ["The q", "uick ", "brown", " fox ", "jumps", "."]
    assert dumped(streamed) == dumped(plain)
    assert (streamed.input_tokens, streamed.output_tokens, streamed.cached_tokens) == (55, 9, 10)
    assert (plain.input_tokens, plain.output_tokens, plain.cached_tokens) == (55, 9, 10)
    first, second = server.bodies
    assert "stream" not in first
    assert second == {**first, "stream": True}


async def test_streamed_tool_calls_are_assembled_from_partial_json(
    server: FakeAnthropic,
) -> None:
    body = wire.message(
        wire.text("Checking two cities."),
        wire.tool_use("get_weather", {"city": "Oslo", "units": "metric"}, id="toolu_s1"),
        wire.tool_use("get_weather", {"city": "São Paulo", "days": [1, 2]}, id="toolu_s2"),
        wire.tool_use("get_time", {}, id="toolu_s3"),
    )
    server.reply(body)
    plain = await ask(server, request(tools=[WEATHER]))
    stream = wire.events(body, json_size=3, partial_json={"toolu_s3": [""]})
    server.stream(stream)
    pieces: list[str] = []
    streamed = await ask(server, request(tools=[WEATHER], on_text=pieces.append))
    assert "".join(pieces) == "Checking two cities."
    assert streamed.message.content == [
        text("Checking two cities."),
        call("toolu_s1", "get_weather", city="Oslo", units="metric"),
        call("toolu_s2", "get_weather", city="São Paulo", days=[1, 2]),
        call("toolu_s3", "get_time"),
    ]
    assert dumped(streamed) == dumped(plain)
    partial = [e for _, e in stream if e.get("delta", {}).get("type") == "input_json_delta"]
    assert len(partial) > 6  # the JSON really came in pieces


async def test_streamed_tool_input_that_does_not_parse_is_kept_raw(
    server: FakeAnthropic,
) -> None:
    body = wire.message(wire.tool_use("get_weather", {}, id="toolu_bad"))
    server.stream(wire.events(body, partial_json={"toolu_bad": ['{"city": ', '"Os']}))
    streamed = await ask(server, request(on_text=lambda _: None))
    (part,) = streamed.message.content
    assert isinstance(part, ToolCallPart) and part.arguments == {}
    assert part.model_extra == {"rawArguments": '{"city": "Os'}


async def test_a_streamed_tool_call_cut_off_by_max_tokens_is_an_error(
    server: FakeAnthropic,
) -> None:
    body = wire.message(wire.tool_use("write_file", {}, id="toolu_c"), stop_reason="max_tokens")
    server.stream(wire.events(body, partial_json={"toolu_c": ['{"path": "a.txt", "te']}))
    with pytest.raises(ModelError) as err:
        await ask(server, request(on_text=lambda _: None))
    assert err.value.code == "truncated"


async def test_an_error_event_in_the_stream(server: FakeAnthropic) -> None:
    body = wire.message(wire.text("Hello there"))
    stream = wire.events(body)[:4]
    stream.append(("error", wire.error_body("overloaded_error", "Overloaded")))
    server.stream(stream)
    pieces: list[str] = []
    with pytest.raises(RetryableModelError) as err:
        await ask(server, request(on_text=pieces.append))
    assert err.value.code == "overloaded" and "Overloaded" in str(err.value)
    assert pieces == ["Hell"]


async def test_a_stream_that_ends_early_may_be_retried(server: FakeAnthropic) -> None:
    server.stream(wire.events(wire.message(wire.text("cut short")), stop=False)[:-1])
    with pytest.raises(RetryableModelError) as err:
        await ask(server, request(on_text=lambda _: None))
    assert err.value.code == "stream_incomplete"


async def test_a_garbage_stream_is_a_bad_response(server: FakeAnthropic) -> None:
    server.stream([("message_start", "{this is not json")])
    with pytest.raises(ModelError) as err:
        await ask(server, request(on_text=lambda _: None))
    assert err.value.code == "bad_response"
    assert not isinstance(err.value, RetryableModelError)


async def test_an_error_raised_by_on_text_reaches_the_caller_unchanged(
    server: FakeAnthropic,
) -> None:
    server.stream(wire.events(wire.message(wire.text("Hello"))))

    def sink(_: str) -> None:
        raise KeyError("the sink broke")

    with pytest.raises(KeyError, match="the sink broke"):
        await ask(server, request(on_text=sink))


# -- errors -----------------------------------------------------------------------------------


async def test_rate_limit_with_retry_after(server: FakeAnthropic) -> None:
    server.error(
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your per-minute rate limit",
        headers={"retry-after": "3"},
    )
    with pytest.raises(RetryableModelError) as err:
        await ask(server)
    assert err.value.retry_after == 3
    assert err.value.code == "rate_limited"
    assert "per-minute rate limit" in str(err.value)
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_retry_after_in_milliseconds_and_as_a_date(server: FakeAnthropic) -> None:
    server.error(429, "rate_limit_error", "slow down", headers={"retry-after-ms": "1500"})
    with pytest.raises(RetryableModelError) as err:
        await ask(server)
    assert err.value.retry_after == 1.5
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))
    server.error(429, "rate_limit_error", "slow down", headers={"retry-after": later})
    with pytest.raises(RetryableModelError) as err:
        await ask(server)
    assert err.value.retry_after is not None and 50 <= err.value.retry_after <= 61


async def test_a_reached_spend_limit_is_not_retried(server: FakeAnthropic) -> None:
    body = wire.error_body("rate_limit_error", "You have reached your monthly spend limit")
    body["error"]["details"] = {"error_code": "enforced_spend_limit_reached"}
    server.reply(body, status=429)
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert not isinstance(err.value, RetryableModelError)
    assert err.value.code == "spend_limit_reached"


async def test_overloaded_529_is_retryable(server: FakeAnthropic) -> None:
    server.error(529, "overloaded_error", "Overloaded")
    with pytest.raises(RetryableModelError) as err:
        await ask(server)
    assert err.value.code == "overloaded" and err.value.retry_after is None


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_server_errors_are_retryable(server: FakeAnthropic, status: int) -> None:
    server.error(status, "api_error", "Internal server error")
    with pytest.raises(RetryableModelError) as err:
        await ask(server)
    assert err.value.code == "server_error" and str(status) in str(err.value)


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "authentication_error"), (403, "permission_error")]
)
async def test_refused_credentials(server: FakeAnthropic, status: int, kind: str) -> None:
    server.error(status, kind, "invalid x-api-key")
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert not isinstance(err.value, RetryableModelError)
    assert err.value.code == "auth_failed"
    assert "ANTHROPIC_API_KEY" in str(err.value) and "invalid x-api-key" in str(err.value)


async def test_no_key_anywhere(server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelError) as err:
        await ask(server, api_key=None)
    assert err.value.code == "auth_failed" and "ANTHROPIC_API_KEY" in str(err.value)
    assert server.requests == []


async def test_the_key_from_the_environment(
    server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    server.reply(wire.message(wire.text("ok")))
    await ask(server, api_key=None)
    assert sent_key(server.requests[0].headers) == "sk-ant-from-env"


async def test_unknown_model(server: FakeAnthropic) -> None:
    server.error(404, "not_found_error", f"model: {wire.MODEL}")
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert err.value.code == "model_not_found"
    assert wire.MODEL in str(err.value) and server.base_url in str(err.value)


async def test_prompt_too_long(server: FakeAnthropic) -> None:
    server.error(400, "invalid_request_error", "prompt is too long: 215987 tokens > 200000 maximum")
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert err.value.code == "context_too_long" and "215987" in str(err.value)


async def test_another_bad_request(server: FakeAnthropic) -> None:
    server.error(400, "invalid_request_error", "messages.0.content: Field required")
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert not isinstance(err.value, RetryableModelError)
    assert err.value.code == "bad_request"
    assert "messages.0.content: Field required" in str(err.value)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html><body>502 Bad Gateway</body></html>", "text/html"),
        (b'{"id": "msg_1", "content": [', "application/json"),
        (b'{"hello": "world"}', "application/json"),
        (b"[1, 2, 3]", "application/json"),
        (
            b'{"type": "message", "content": [{"type": "tool_use", "input": {}}]}',
            "application/json",
        ),
    ],
)
async def test_a_garbage_body_is_a_bad_response(
    server: FakeAnthropic, body: bytes, content_type: str
) -> None:
    server.raw(body, content_type=content_type)
    with pytest.raises(ModelError) as err:
        await ask(server)
    assert not isinstance(err.value, RetryableModelError)
    assert err.value.code == "bad_response"


async def test_a_hanging_server_times_out(server: FakeAnthropic) -> None:
    server.hang()
    began = time.monotonic()
    with pytest.raises(RetryableModelError) as err:
        await ask(server, timeout=0.5)
    assert err.value.code == "timeout"
    assert time.monotonic() - began < 5


async def test_a_stream_that_stops_sending_times_out(server: FakeAnthropic) -> None:
    server.stream(wire.events(wire.message(wire.text("Hello there")))[:4], hang_after=True)
    pieces: list[str] = []
    with pytest.raises(RetryableModelError) as err:
        await ask(server, request(on_text=pieces.append), timeout=0.5)
    assert err.value.code == "timeout"
    assert pieces == ["Hell"]


async def test_nobody_listening() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = AnthropicModel(wire.MODEL, base_url=f"http://127.0.0.1:{port}", api_key=KEY)
    try:
        with pytest.raises(RetryableModelError) as err:
            await model.respond(request())
    finally:
        await model.aclose()
    assert err.value.code == "connection_error"


# -- the SDK is optional ------------------------------------------------------------------


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = (
        "import sys; import oarlock.models._anthropic as m; "
        "m.AnthropicModel('claude-haiku-4-5', api_key='k'); "
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('anthropic', 'httpx2')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout.replace("'", '"')) == []


def test_without_the_sdk_the_adapter_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ConfigError) as err:
        AnthropicModel(wire.MODEL, api_key=KEY)
    assert err.value.code == "missing_extra"
    assert "pip install 'oarlock[anthropic]'" in str(err.value)


# -- through the engine ---------------------------------------------------------------------


async def test_a_two_turn_run_through_the_engine(server: FakeAnthropic) -> None:
    from oarlock.engine import Agent, Runner
    from oarlock.testing import MemoryStore
    from oarlock.tools import tool

    @tool(side_effect="read")
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: The key to look up.
        """
        return f"value of {key}"

    server.reply(
        wire.message(
            wire.text("Looking it up."),
            wire.tool_use("lookup", {"key": "colour"}, id="toolu_engine"),
            usage_=wire.usage(30, 10),
        )
    )
    server.reply(wire.message(wire.text("The colour is blue."), usage_=wire.usage(60, 8)))
    model = AnthropicModel(wire.MODEL, base_url=server.base_url, api_key=KEY, timeout=10)
    agent = Agent("looker", model, instructions="Use the tools.", tools=[lookup])
    try:
        doc = await Runner(agent, MemoryStore()).start("What colour?")
    finally:
        await model.aclose()

    assert doc.status == "completed", doc.error
    assert doc.result == "The colour is blue."
    assert doc.model == "anthropic:claude-haiku-4-5"
    assert (doc.usage.input_tokens, doc.usage.output_tokens) == (90, 18)
    first, second = server.bodies
    assert first["system"] == "Use the tools."
    assert first["tools"][0]["name"] == "lookup"
    assert first["tools"][0]["input_schema"]["properties"]["key"]["type"] == "string"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_engine",
        "name": "lookup",
        "input": {"key": "colour"},
    }
    (block,) = second["messages"][2]["content"]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_engine"
    assert block["is_error"] is False
    assert block["content"].startswith("<untrusted-tool-result")
    assert "value of colour" in block["content"]
