"""Streams, against the local wire servers: a chat stream that reached ``[DONE]`` is
complete without a finish reason; errors sent inside a stream are classified by their code
and type like HTTP errors (OpenAI chat and Responses, OpenRouter's numeric codes,
Anthropic's error events); and a retried answer's text reaches ``on_text`` once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic_wire as aw
import openai_wire as ow
import pytest

from oarlock.engine import Agent, RetryPolicy, Runner
from oarlock.errors import ModelError, RetryableModelError
from oarlock.formats._models import TextPart, UserMessage
from oarlock.models._anthropic import AnthropicModel
from oarlock.models._base import ModelRequest, ModelResponse, TurnText
from oarlock.models._openai import OpenAIModel
from oarlock.models._sse import events, lines
from oarlock.testing import MemoryStore
from oarlock.tools import tool

KEY = "sk-test-streams-0123456789"
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def server() -> Iterator[ow.FakeOpenAI]:
    with ow.FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def anthropic() -> Iterator[aw.FakeAnthropic]:
    with aw.FakeAnthropic() as fake:
        yield fake


def request(on_text: Any = None, tools: list[dict[str, Any]] | None = None) -> ModelRequest:
    hello = UserMessage(role="user", content=[TextPart(type="text", text="Hello")])
    return ModelRequest("Be brief.", [hello], tools or [], on_text=on_text)


def openai_model(server: ow.FakeOpenAI, api: str = "chat") -> OpenAIModel:
    return OpenAIModel("gpt-4.1", api=api, base_url=server.base_url, api_key=KEY, timeout=10)  # type: ignore[arg-type]


async def ask(server: ow.FakeOpenAI, req: ModelRequest, api: str = "chat") -> ModelResponse:
    model = openai_model(server, api)
    try:
        return await model.respond(req)
    finally:
        await model.aclose()


def without_finish_reason(events_: list[Any]) -> list[Any]:
    """A Snowflake Cortex stream: the deltas, a usage chunk, ``[DONE]``; no chunk has a
    finish reason."""
    cut = [e for e in events_ if not (isinstance(e, dict) and _finishes(e))]
    assert len(cut) == len(events_) - 1 and cut[-1] == "[DONE]"
    return cut


def _finishes(chunk: dict[str, Any]) -> bool:
    return any(c.get("finish_reason") for c in chunk.get("choices") or [])


# -- [DONE] is the end ----------------------------------------------------------------------
async def test_a_stream_that_reached_done_without_a_finish_reason_is_complete(
    server: ow.FakeOpenAI,
) -> None:
    server.reply(ow.Reply(events=without_finish_reason(ow.chat_chunks(["Hel", "lo."]))))
    seen: list[str] = []
    response = await ask(server, request(seen.append))
    assert response.message.text == "Hello." and seen == ["Hel", "lo."]
    assert (response.input_tokens, response.output_tokens) == (19, 10)  # the usage chunk
    assert len(server.requests) == 1


async def test_streamed_calls_without_a_finish_reason_are_the_answer(
    server: ow.FakeOpenAI,
) -> None:
    calls = [("call_a", "lookup", ['{"key"', ': "x"}']), ("call_b", "lookup", ["{}"])]
    events_ = without_finish_reason(ow.chat_chunks(["Looking."], calls))
    server.reply(ow.Reply(events=events_))
    response = await ask(server, request(lambda _: None))
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
        ("call_a", "lookup", {"key": "x"}),
        ("call_b", "lookup", {}),
    ]


async def test_a_run_on_a_server_that_sends_no_finish_reason_asks_once(
    server: ow.FakeOpenAI,
) -> None:
    server.reply(ow.Reply(events=without_finish_reason(ow.chat_chunks(["All ", "done."]))))
    seen: list[str] = []
    model = openai_model(server)
    try:
        runner = Runner(Agent("cortex", model), MemoryStore(), retry=FAST, on_text=seen.append)
        doc = await runner.start("hi")
    finally:
        await model.aclose()
    assert doc.status == "completed", doc.error
    assert doc.result == "All done." and "".join(seen) == "All done."
    assert len(server.requests) == 1


async def test_a_stream_that_ends_without_done_or_finish_reason_is_still_cut_short(
    server: ow.FakeOpenAI,
) -> None:
    server.reply(ow.Reply(events=ow.chat_chunks(["Hel"], done=False)))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(lambda _: None))
    assert info.value.code == "stream_interrupted"


async def test_line_breaks_inside_an_event_are_text(server: ow.FakeOpenAI) -> None:
    """Only CR and LF end an SSE line: U+2028, U+0085 and a form feed inside the JSON of
    a chunk (a server that does not escape them) are part of the text."""
    text = "one\u2028two\x85three\x0cfour"
    raw = json.dumps(
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]},
        ensure_ascii=False,
    )
    server.reply(ow.Reply(events=[raw, "[DONE]"]))
    response = await ask(server, request(lambda _: None))
    assert response.message.text == text


async def test_events_split_at_any_byte_read_alike() -> None:
    body = (
        b'\xef\xbb\xbf: a comment\r\nevent: one\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
        b"data: caf\xc3\xa9\r\rdata: [DONE]"
    )

    async def chunked(size: int) -> AsyncIterator[bytes]:
        for i in range(0, len(body), size):
            yield body[i : i + size]

    for size in (1, 2, 3, 7, len(body)):
        got = [(e.name, e.data) for e in [e async for e in events(lines(chunked(size)))]]
        assert got == [("one", '{"a":\n1}'), (None, "café"), (None, "[DONE]")], size


# -- errors inside streams -----------------------------------------------------------------
OPENROUTER_CHUNK = {
    "id": "gen-1741569952-abc",
    "object": "chat.completion.chunk",
    "created": 1741569952,
    "model": "openai/gpt-4.1",
    "error": {"code": "server_error", "message": "Provider disconnected"},
    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
}


@pytest.mark.parametrize(
    ("error", "code", "retryable"),
    [
        ({"error": {"code": 400, "message": "Provider returned error"}}, "bad_request", False),
        ({"error": {"code": "400", "message": "Invalid tool schema"}}, "bad_request", False),
        ({"error": {"code": 400, "message": "maximum context length"}}, "context_too_long", False),
        ({"error": {"code": 401, "message": "No auth credentials found"}}, "auth_failed", False),
        ({"error": {"code": 403, "message": "Key is disabled"}}, "auth_failed", False),
        ({"error": {"code": 402, "message": "Insufficient credits"}}, "insufficient_quota", False),
        ({"error": {"code": 404, "message": "No endpoints found"}}, "model_not_found", False),
        ({"error": {"code": 429, "message": "Rate limit exceeded"}}, "rate_limited", True),
        ({"error": {"code": 502, "message": "Upstream error"}}, "server_error", True),
        (
            {"error": {"message": "bad key", "type": "invalid_request_error", "code": "x"}},
            "bad_request",
            False,
        ),
        (
            {"error": {"message": "no such model", "code": "model_not_found"}},
            "model_not_found",
            False,
        ),
        (
            {"error": {"message": "The server had an error.", "type": "server_error"}},
            "server_error",
            True,
        ),
        (OPENROUTER_CHUNK, "server_error", True),
    ],
)
async def test_chat_errors_inside_a_stream_are_classified_like_http_errors(
    server: ow.FakeOpenAI, error: dict[str, Any], code: str, retryable: bool
) -> None:
    server.reply(ow.Reply(events=[*ow.chat_chunks(["Hel"], done=False), error]))
    with pytest.raises(ModelError) as info:
        await ask(server, request(lambda _: None))
    assert info.value.code == code
    assert isinstance(info.value, RetryableModelError) is retryable
    assert "openai:gpt-4.1" in str(info.value)


async def test_a_finish_reason_of_error_is_a_server_error(server: ow.FakeOpenAI) -> None:
    chunk = {**OPENROUTER_CHUNK}
    del chunk["error"]
    server.reply(ow.Reply(events=[*ow.chat_chunks(["Hel"], done=False), chunk, "[DONE]"]))
    with pytest.raises(RetryableModelError) as info:
        await ask(server, request(lambda _: None))
    assert info.value.code == "server_error"


async def test_a_run_is_not_retried_on_a_400_inside_the_stream(server: ow.FakeOpenAI) -> None:
    bad = {"error": {"code": 400, "message": "Provider returned error"}}
    for _ in range(4):
        server.reply(ow.Reply(events=[*ow.chat_chunks(["Hel"], done=False), bad]))
    model = openai_model(server)
    try:
        runner = Runner(Agent("router", model), MemoryStore(), retry=FAST, on_text=lambda _: None)
        doc = await runner.start("hi")
    finally:
        await model.aclose()
    assert doc.status == "failed" and doc.error is not None
    assert doc.error.startswith("model error (bad_request)")
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("error", "code", "retryable"),
    [
        (("error", {"type": "error", "code": "400", "message": "bad"}), "bad_request", False),
        (("error", {"type": "error", "code": 429, "message": "slow"}), "rate_limited", True),
        (
            ("error", {"type": "error", "code": "invalid_api_key", "message": "no"}),
            "auth_failed",
            False,
        ),
        (
            ("error", {"type": "error", "code": "server_error", "message": "x"}),
            "server_error",
            True,
        ),
        ({"error": {"code": 404, "message": "No endpoints found"}}, "model_not_found", False),
        ({"error": {"code": 503, "message": "Unavailable"}}, "server_error", True),
    ],
)
async def test_responses_errors_inside_a_stream_are_classified_like_http_errors(
    server: ow.FakeOpenAI, error: Any, code: str, retryable: bool
) -> None:
    server.reply(ow.Reply(events=[*ow.response_events(["Hel"], complete=False), error]))
    with pytest.raises(ModelError) as info:
        await ask(server, request(lambda _: None), api="responses")
    assert info.value.code == code
    assert isinstance(info.value, RetryableModelError) is retryable


@pytest.mark.parametrize(
    ("kind", "code", "retryable"),
    [
        ("overloaded_error", "overloaded", True),
        ("api_error", "server_error", True),
        ("rate_limit_error", "rate_limited", True),
        ("invalid_request_error", "bad_request", False),
        ("authentication_error", "auth_failed", False),
        ("permission_error", "auth_failed", False),
        ("not_found_error", "model_not_found", False),
    ],
)
async def test_anthropic_error_events_are_classified_by_their_type(
    anthropic: aw.FakeAnthropic, kind: str, code: str, retryable: bool
) -> None:
    stream = aw.events(aw.message(aw.text("Hello there")))[:4]
    stream.append(("error", aw.error_body(kind, "it went wrong")))
    anthropic.stream(stream)
    model = AnthropicModel(aw.MODEL, base_url=anthropic.base_url, api_key=KEY, timeout=10)
    try:
        with pytest.raises(ModelError) as info:
            await model.respond(request(lambda _: None))
    finally:
        await model.aclose()
    assert info.value.code == code
    assert isinstance(info.value, RetryableModelError) is retryable
    assert "it went wrong" in str(info.value) and "in the stream" in str(info.value)


# -- a retried answer's text is seen once --------------------------------------------------
class Restarting:
    """A sink that wants to know when an answer starts over."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, text: str) -> None:
        self.seen.append(text)

    def restart(self) -> None:
        self.seen.append("<restart>")


async def run_streaming(server: ow.FakeOpenAI, sink: Any) -> Any:
    model = openai_model(server)
    try:
        runner = Runner(Agent("talker", model), MemoryStore(), retry=FAST, on_text=sink)
        return await runner.start("hi")
    finally:
        await model.aclose()


async def test_an_answer_asked_again_is_not_shown_twice(server: ow.FakeOpenAI) -> None:
    server.reply(
        ow.Reply(events=ow.chat_chunks(["Hel", "lo"], done=False)),  # cut short
        ow.Reply(events=ow.chat_chunks(["Hel", "lo", " world"])),
    )
    seen: list[str] = []
    doc = await run_streaming(server, seen.append)
    assert doc.status == "completed" and doc.result == "Hello world"
    assert "".join(seen) == "Hello world" and seen == ["Hel", "lo", " world"]
    assert len(server.requests) == 2


async def test_a_different_answer_starts_over_on_a_new_line(server: ow.FakeOpenAI) -> None:
    server.reply(
        ow.Reply(events=ow.chat_chunks(["Hel", "lo"], done=False)),
        ow.Reply(events=ow.chat_chunks(["Hel", "p is ", "here."])),
    )
    seen: list[str] = []
    doc = await run_streaming(server, seen.append)
    assert doc.result == "Help is here."
    assert seen == ["Hel", "lo", "\n", "Help is ", "here."]


async def test_a_sink_with_restart_is_told_that_the_answer_starts_over(
    server: ow.FakeOpenAI,
) -> None:
    server.reply(
        ow.Reply(events=ow.chat_chunks(["Hel", "lo"], done=False)),
        ow.Reply(events=ow.chat_chunks(["Bye", "."])),
    )
    sink = Restarting()
    doc = await run_streaming(server, sink)
    assert doc.result == "Bye."
    assert sink.seen == ["Hel", "lo", "<restart>", "Bye", "."]


def test_turn_text_across_three_attempts() -> None:
    seen: list[str] = []
    turn = TurnText(seen.append)
    first = turn.attempt()
    first("The ord")
    second = turn.attempt()  # repeats part, then is cut short again
    second("The ")
    third = turn.attempt()
    for piece in ("The o", "rder ", "shipped."):
        third(piece)
    assert seen == ["The ord", "er ", "shipped."]
    assert "".join(seen) == "The order shipped."


# -- a tool answer streamed, then the run goes on ------------------------------------------
@tool(side_effect="read")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_a_tool_turn_without_finish_reasons_runs_to_the_end(server: ow.FakeOpenAI) -> None:
    calls = [("call_1", "lookup", ['{"key": "colour"}'])]
    server.reply(
        ow.Reply(events=without_finish_reason(ow.chat_chunks(["Checking."], calls))),
        ow.Reply(events=without_finish_reason(ow.chat_chunks(["It is blue."]))),
    )
    model = openai_model(server)
    try:
        agent = Agent("cortex", model, tools=[lookup])
        doc = await Runner(agent, MemoryStore(), retry=FAST, on_text=lambda _: None).start("?")
    finally:
        await model.aclose()
    assert doc.status == "completed", doc.error
    assert doc.result == "It is blue." and len(server.requests) == 2
