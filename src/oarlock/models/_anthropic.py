"""The Anthropic model: Claude through the Messages API, with the official ``anthropic`` SDK
(the ``anthropic`` extra: ``pip install 'oarlock[anthropic]'``).

The SDK is imported on first use, never when this module is imported (it is large and
optional), and its client is made on the first request with ``max_retries=0``: the runner
retries, with the provider's Retry-After, so the SDK must not retry underneath it.

How a run's messages become a request:

* the agent's instructions are the ``system`` prompt (left out when empty);
* a user message's text parts are text blocks; its tool results are ``tool_result``
  blocks (``tool_use_id``, the text as ``content``, ``is_error``), placed before any text
  of the same user turn, as the API requires;
* an assistant message's text and tool calls are ``text`` and ``tool_use`` blocks
  (``id``, ``name``, ``input``) in their original order; a call whose arguments were not a
  JSON object (``rawArguments``) is sent with ``input: {}``, next to its error result;
* empty or blank text is left out (the API refuses empty text blocks), a message left with
  nothing is dropped, and consecutive messages of one role are merged into one turn (the
  API requires user and assistant turns to alternate);
* tools are ``{"name", "description", "input_schema"}``.

And how a response comes back: text blocks become text parts and ``tool_use`` blocks tool
calls, with their ids, in order; other blocks (thinking, server tools) are left out. A
``tool_use`` whose input is not a JSON object keeps it, as JSON text, in ``rawArguments``
with ``arguments`` empty, so that the engine answers it with an error result.

A tool whose name the API refuses (``server.tool``: only ``A-Za-z0-9_-``, at most 64
characters) is sent under a safe name, and its calls come back under the real one
(:mod:`oarlock.models._names`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import time
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal

from oarlock._secrets import redact, register_secret, register_url
from oarlock.errors import ConfigError, ModelError, RetryableModelError
from oarlock.formats._models import (
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserMessage,
)
from oarlock.models._base import (
    ModelRequest,
    ModelResponse,
    TextSink,
    assistant_message,
    call_part,
    redacted,
)
from oarlock.models._names import ToolNames

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import (
        MessageParam,
        TextBlockParam,
        ToolParam,
        ToolResultBlockParam,
        ToolUseBlockParam,
    )

    _Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam

__all__ = ["AnthropicModel"]

_INSTALL = "pip install 'oarlock[anthropic]'"
_TRUNCATING_STOPS = {
    "max_tokens": "reached max_tokens ({max_tokens})",
    "model_context_window_exceeded": "filled the model's context window",
}
_SPEND_LIMITS = frozenset({"contract_spend_limit_reached", "enforced_spend_limit_reached"})
# An error event inside a stream comes with the 200 of the stream: its type says what the
# status would have said.
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_CONTEXT_TOO_LONG = re.compile(
    r"prompt is too long|exceeds? (?:the )?context|context (?:limit|window)"
    r"|too many (?:input )?tokens",
    re.IGNORECASE,
)


def _sdk_available() -> bool:
    try:
        return importlib.util.find_spec("anthropic") is not None
    except (ImportError, ValueError):
        return False


def _import_sdk() -> Any:
    try:
        import anthropic
        import httpx2
    except ImportError as exc:
        raise ConfigError(
            f"the Anthropic model needs the anthropic SDK ({exc}): {_INSTALL}",
            code="missing_extra",
        ) from None
    return anthropic, httpx2


class _SinkFailed(Exception):
    """The caller's ``on_text`` raised: its error is given back as it was."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class AnthropicModel:
    """Claude through the Messages API (``model_id``: ``anthropic:<model>``). A typed
    answer goes through the final-answer tool, which the model is offered beside the
    others with ``tool_choice: any`` (each turn calls some tool: the answer is one).

    The key is ``api_key`` or else ``ANTHROPIC_API_KEY``; ``base_url`` defaults to the
    SDK's (``ANTHROPIC_BASE_URL``, else the public API). ``timeout`` (seconds) bounds the
    connection and each wait for data. With ``on_text`` in the request, the response is
    streamed and every text delta is given to it as it arrives; without, it is not.

    Usage: the Messages API counts a prompt in three parts, ``input_tokens`` (not cached),
    ``cache_read_input_tokens`` (read from the prompt cache) and
    ``cache_creation_input_tokens`` (written to it). ``input_tokens`` of the response is
    their sum, the whole prompt, and ``cached_tokens`` the part read from the cache, so
    that prices (``cached_input_per_million`` for cache reads) apply as for other
    providers. Cache writes, which Anthropic bills above the input price, are counted at
    the plain input price.

    Truncation: a response that stops at ``max_tokens`` (or at the end of the context
    window) in the middle of a tool call raises ``ModelError`` (code ``truncated``, not
    retried): the call's arguments are cut off, so it is never run, and asking again with
    the same limit would be cut off again; raise ``max_tokens``. A response cut off in its
    text is returned as it is.

    Errors: rate limits (429) and overload (529) raise ``RetryableModelError`` with the
    ``retry-after`` header's delay; server errors (5xx), timeouts and connection failures
    raise it without one. A 429 for a reached spend limit is not retried
    (``spend_limit_reached``). 401 and 403 are ``auth_failed``, 404 ``model_not_found``,
    a prompt too long ``context_too_long``, another 400 ``bad_request``, and a response
    that cannot be read ``bad_response``. An ``error`` event inside a stream is classified
    by its type as the status it stands for (``overloaded_error`` retryable,
    ``invalid_request_error`` ``bad_request``...). Messages are redacted
    (:func:`oarlock._secrets.redact`); the key and a base URL's password are registered as
    secrets when they are given or read.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 120.0,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError("an Anthropic model needs a model name, e.g. 'claude-haiku-4-5'")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(
                f"max_tokens must be a whole number of at least 1, not {max_tokens!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"timeout must be a number of seconds above 0, not {timeout!r}")
        if base_url is not None and not (
            isinstance(base_url, str) and base_url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"base_url must be an http(s) URL, not {redact(repr(base_url))}")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string")
        if not _sdk_available():
            raise ConfigError(
                f"the Anthropic model needs the anthropic SDK: {_INSTALL}", code="missing_extra"
            )
        self.model = model
        self.base_url = base_url
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self._api_key = api_key
        register_secret(api_key)
        register_url(base_url)
        self._client: AsyncAnthropic | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, base_url={self.base_url!r})"

    native_output = True  # the final-answer tool, chosen with tool_choice any

    @property
    def model_id(self) -> str:
        return f"anthropic:{self.model}"

    async def aclose(self) -> None:
        """Close the client's connections (a new client is made if the model is used again)."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()

    def _client_for_this_loop(self) -> AsyncAnthropic:
        # A client's connection pool belongs to the event loop it was used on: a model used
        # again under another loop (a second asyncio.run) gets a client of its own.
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            return self._client
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY")
        register_secret(key)
        if self.base_url is None:  # the SDK reads it from there
            register_url(os.environ.get("ANTHROPIC_BASE_URL"))
        if not key:
            raise ModelError(
                "no Anthropic API key: set ANTHROPIC_API_KEY, or pass api_key to AnthropicModel",
                code="auth_failed",
            )
        sdk, _ = _import_sdk()
        client: AsyncAnthropic = sdk.AsyncAnthropic(
            api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )
        self._client, self._loop = client, loop
        return client

    async def respond(self, request: ModelRequest) -> ModelResponse:
        names, request = ToolNames.for_request(request)
        try:
            return names.restore(await self._respond(request, names))
        except ModelError as exc:
            error = redacted(exc)
            raise error from error.__cause__

    async def _respond(self, request: ModelRequest, names: ToolNames) -> ModelResponse:
        client = self._client_for_this_loop()
        sdk, httpx2 = _import_sdk()
        system: Any = request.instructions or sdk.omit
        specs = request.tools
        choice: Any = sdk.omit
        if request.output_tool is not None:  # the answer goes through the final tool:
            specs = [*specs, request.output_tool]  # some tool must be called each turn
            choice = {"type": "any"}
        tools: Any = _tools(specs) or sdk.omit
        messages = _messages(request.messages)
        try:
            if request.on_text is None:
                raw: Any = await client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    system=system,
                    messages=messages,
                    tools=tools,
                    tool_choice=choice,
                )
                reply = _reply_of_message(raw)
            else:
                stream = await client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    system=system,
                    messages=messages,
                    tools=tools,
                    tool_choice=choice,
                    stream=True,
                )
                assembly = _Assembly(request.on_text)
                async with stream:
                    async for event in stream:
                        assembly.add(_as_dict(event))
                reply = assembly.reply()
        except ModelError:
            raise
        except _SinkFailed as failed:
            raise failed.original from None
        except Exception as exc:
            translated = self._translate(exc, sdk, httpx2, str(client.base_url))
            if translated is None:
                raise
            raise translated from exc
        return self._response(reply, names)

    def _response(self, reply: _Reply, names: ToolNames) -> ModelResponse:
        if reply.stop_reason in _TRUNCATING_STOPS and reply.blocks and reply.blocks[-1].is_call:
            why = _TRUNCATING_STOPS[reply.stop_reason].format(max_tokens=self.max_tokens)
            tool = names.real(reply.blocks[-1].name)
            raise ModelError(
                f"the response {why} while writing a call to tool {tool!r}; "
                "its arguments are cut off, so it was not run: raise max_tokens",
                code="truncated",
            )
        message = assistant_message([b.part() for b in reply.blocks if b.keep()])
        return ModelResponse(message, *_usage(reply.usage))

    def _translate(self, exc: Exception, sdk: Any, httpx2: Any, base_url: str) -> ModelError | None:
        """The oarlock error for an SDK or transport failure (None: not one of those)."""
        if isinstance(exc, sdk.APIStatusError):
            return self._status_error(exc, base_url)
        if isinstance(exc, sdk.APITimeoutError | httpx2.TimeoutException):
            return RetryableModelError(
                f"the request to Anthropic timed out (after {self.timeout:g} s of waiting)",
                code="timeout",
            )
        if isinstance(exc, sdk.APIConnectionError | httpx2.TransportError):
            cause = exc.__cause__ or exc
            return RetryableModelError(
                f"cannot reach Anthropic at {base_url}: {type(cause).__name__}: {cause}",
                code="connection_error",
            )
        if isinstance(exc, sdk.APIResponseValidationError | ValueError):
            return ModelError(
                f"Anthropic sent a response that cannot be read: {exc}", code="bad_response"
            )
        if isinstance(exc, sdk.AnthropicError):
            return ModelError(
                f"the Anthropic SDK failed: {type(exc).__name__}: {exc}", code="api_error"
            )
        return None

    def _status_error(self, exc: Any, base_url: str) -> ModelError:
        status: int = exc.status_code
        kind = exc.type or _error_type(exc.body)
        said = exc.api_message or _error_message(exc.body) or str(exc.message)
        request_id = f"; request id {exc.request_id}" if exc.request_id else ""
        where = f"{status}" if status >= 400 else "an error event in the stream"
        detail = f"{where} {kind}: {said}{request_id}" if kind else f"{where}: {said}{request_id}"
        if status < 400:  # the stream's 200: the type says what the status would have
            status = _STATUS_OF_TYPE.get(str(kind), 500)
        retry_after = _retry_after(exc.response.headers)
        if status == 429 or kind == "rate_limit_error":
            if exc.error_code in _SPEND_LIMITS:
                return ModelError(
                    f"Anthropic refused the request: a spend limit is reached ({detail})",
                    code="spend_limit_reached",
                )
            return RetryableModelError(
                f"Anthropic rate limit ({detail})", code="rate_limited", retry_after=retry_after
            )
        if status == 529 or kind == "overloaded_error":
            return RetryableModelError(
                f"Anthropic is overloaded ({detail})", code="overloaded", retry_after=retry_after
            )
        if status >= 500 or status == 408 or kind in ("api_error", "timeout_error"):
            return RetryableModelError(
                f"Anthropic server error ({detail})", code="server_error", retry_after=retry_after
            )
        if status in (401, 403):
            return ModelError(
                f"Anthropic refused the credentials ({detail}): set ANTHROPIC_API_KEY, or pass "
                "api_key, to a valid key with access to the model",
                code="auth_failed",
            )
        if status == 404:
            return ModelError(
                f"model {self.model!r} was not found at {base_url} ({detail}): check the model "
                "name and base_url",
                code="model_not_found",
            )
        if status == 413 or _CONTEXT_TOO_LONG.search(said):
            return ModelError(
                f"the conversation is too long for model {self.model!r} ({detail})",
                code="context_too_long",
            )
        if status == 400:
            return ModelError(f"Anthropic refused the request ({detail})", code="bad_request")
        return ModelError(f"Anthropic API error ({detail})", code="api_error")


# -- request ------------------------------------------------------------------------------


def _tools(specs: list[dict[str, Any]]) -> list[ToolParam]:
    tools: list[ToolParam] = []
    for spec in specs:
        tool: ToolParam = {
            "name": str(spec["name"]),
            "input_schema": spec.get("parameters") or {"type": "object", "properties": {}},
        }
        if spec.get("description"):
            tool["description"] = str(spec["description"])
        tools.append(tool)
    return tools


def _messages(messages: list[Message]) -> list[MessageParam]:
    turns: list[tuple[Literal["user", "assistant"], list[_Block]]] = []
    for message in messages:
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == message.role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((message.role, blocks))
    out: list[MessageParam] = []
    for role, blocks in turns:
        if role == "user":
            # tool results first: the API wants a user turn's results before its text
            ordered: list[_Block] = [b for b in blocks if b["type"] == "tool_result"]
            ordered += [b for b in blocks if b["type"] != "tool_result"]
            out.append({"role": "user", "content": ordered})
        else:
            out.append({"role": "assistant", "content": blocks})
    return out


def _blocks(message: Message) -> list[_Block]:
    blocks: list[_Block] = []
    if isinstance(message, UserMessage):
        for part in message.content:
            if isinstance(part, ToolResultPart):
                blocks.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": part.tool_call_id,
                        "content": part.content,
                        "is_error": part.is_error,
                    }
                )
            elif part.text.strip():
                blocks.append({"type": "text", "text": part.text})
        return blocks
    for item in message.content:
        if isinstance(item, ToolCallPart):
            blocks.append(
                {"type": "tool_use", "id": item.id, "name": item.name, "input": item.arguments}
            )
        elif item.text.strip():
            blocks.append({"type": "text", "text": item.text})
    return blocks


# -- response -----------------------------------------------------------------------------


class _Out:
    """A content block of the response: text, a tool call, or one left out."""

    def __init__(
        self,
        kind: str,
        *,
        text: str = "",
        call_id: str = "",
        name: str = "",
        arguments: dict[str, Any] | None = None,
        raw: str | None = None,
    ) -> None:
        self.kind, self.text, self.call_id, self.name = kind, text, call_id, name
        self.arguments, self.raw = arguments or {}, raw

    @property
    def is_call(self) -> bool:
        return self.kind == "tool_use"

    def keep(self) -> bool:
        return self.kind == "tool_use" or (self.kind == "text" and self.text != "")

    def part(self) -> TextPart | ToolCallPart:
        if self.kind == "text":
            return TextPart(type="text", text=self.text)
        return call_part(self.call_id, self.name, self.arguments, self.raw)


class _Reply:
    def __init__(
        self, blocks: list[_Out], usage: Mapping[str, Any], stop_reason: str | None
    ) -> None:
        self.blocks, self.usage, self.stop_reason = blocks, usage, stop_reason


def _bad(why: str) -> ModelError:
    return ModelError(f"Anthropic sent a response that cannot be read: {why}", code="bad_response")


def _as_dict(value: Any) -> Any:
    """A plain value of an SDK object, as the API sent it (the SDK does not validate)."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict(mode="python", warnings=False)
    return value


def _tool_block(data: Mapping[str, Any], input_value: Any, raw_text: str | None) -> _Out:
    call_id, name = data.get("id"), data.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise _bad(f"a tool_use block without an id or a name: {data!r}")
    if isinstance(input_value, dict):
        return _Out("tool_use", call_id=call_id, name=name, arguments=input_value)
    if raw_text is None:
        raw_text = input_value if isinstance(input_value, str) else json.dumps(input_value)
    return _Out("tool_use", call_id=call_id, name=name, raw=raw_text)


def _content_block(data: Any) -> _Out:
    if not isinstance(data, Mapping):
        raise _bad(f"a content block is not an object: {data!r}")
    kind = data.get("type")
    if kind == "text":
        text = data.get("text")
        if not isinstance(text, str):
            raise _bad(f"a text block without text: {data!r}")
        return _Out("text", text=text)
    if kind == "tool_use":
        return _tool_block(data, data.get("input"), None)
    return _Out(str(kind))


def _reply_of_message(raw: Any) -> _Reply:
    data = _as_dict(raw)
    if not isinstance(data, Mapping):
        shown = data if len(str(data)) <= 200 else f"{str(data)[:200]}..."
        raise _bad(f"not a JSON object: {shown!r}")
    content = data.get("content")
    if data.get("type", "message") != "message" or not isinstance(content, list):
        raise _bad(f"not a message: {_shorten(data)}")
    usage = data.get("usage")
    stop = data.get("stop_reason")
    return _Reply(
        [_content_block(b) for b in content],
        usage if isinstance(usage, Mapping) else {},
        stop if isinstance(stop, str) else None,
    )


def _shorten(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else f"{text[:200]}..."


class _Assembly:
    """Builds the message of a stream, event by event, passing text deltas on."""

    def __init__(self, on_text: TextSink) -> None:
        self.on_text = on_text
        self.started = self.stopped = False
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None

    def add(self, event: Any) -> None:
        if not isinstance(event, Mapping):
            raise _bad(f"a stream event is not an object: {event!r}")
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, Mapping):
                raise _bad(f"message_start without a message: {_shorten(event)}")
            self.started = True
            self._usage(message.get("usage"))
            return
        if not self.started and kind != "ping":
            raise _bad(f"the stream began with {kind!r}, not message_start")
        if kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, Mapping):
                raise _bad(f"content_block_start without a block: {_shorten(event)}")
            self.blocks[self._index(event)] = {**block, "_json": [], "_text": []}
        elif kind == "content_block_delta":
            self._delta(event)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            self.stopped = True

    def _index(self, event: Mapping[str, Any]) -> int:
        index = event.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            raise _bad(f"a content block event without an index: {_shorten(event)}")
        return index

    def _delta(self, event: Mapping[str, Any]) -> None:
        block = self.blocks.get(self._index(event))
        delta = event.get("delta")
        if block is None or not isinstance(delta, Mapping):
            raise _bad(f"a delta for no block: {_shorten(event)}")
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            block["_text"].append(delta["text"])
            try:
                self.on_text(delta["text"])
            except Exception as exc:
                raise _SinkFailed(exc) from exc
        elif delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            block["_json"].append(delta["partial_json"])

    def _usage(self, usage: Any) -> None:
        # counts are totals so far: a later event's count replaces an earlier one
        if isinstance(usage, Mapping):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def reply(self) -> _Reply:
        if not self.started:
            raise _bad("the stream held no message")
        if not self.stopped:
            raise RetryableModelError(
                "the response stream from Anthropic ended before message_stop",
                code="stream_incomplete",
            )
        blocks: list[_Out] = []
        for index in sorted(self.blocks):
            data = self.blocks[index]
            if data.get("type") == "text":
                blocks.append(
                    _Out("text", text=str(data.get("text") or "") + "".join(data["_text"]))
                )
            elif data.get("type") == "tool_use":
                blocks.append(self._tool(data))
            else:
                blocks.append(_Out(str(data.get("type"))))
        return _Reply(blocks, self.usage, self.stop_reason)

    @staticmethod
    def _tool(data: Mapping[str, Any]) -> _Out:
        text = "".join(data["_json"])
        if not text.strip():
            start = data.get("input")
            return _tool_block(data, start if start is not None else {}, None)
        try:
            value = json.loads(text)
        except ValueError:
            return _tool_block(data, None, text)
        return _tool_block(data, value, text)


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return 0
    return int(value)


def _usage(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    read = _count(usage, "cache_read_input_tokens")
    prompt = _count(usage, "input_tokens") + _count(usage, "cache_creation_input_tokens") + read
    return prompt, _count(usage, "output_tokens"), read


def _error_type(body: object) -> str | None:
    error = body.get("error") if isinstance(body, Mapping) else None
    kind = error.get("type") if isinstance(error, Mapping) else None
    return kind if isinstance(kind, str) else None


def _error_message(body: object) -> str | None:
    error = body.get("error") if isinstance(body, Mapping) else None
    said = error.get("message") if isinstance(error, Mapping) else None
    return said if isinstance(said, str) else None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or a date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - time.time(), 0.0)
