"""The OpenAI wire formats, both ways: OAR messages to Chat Completions and Responses
requests, and their answers (whole or streamed) back to an assistant message."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from oarlock.errors import ModelError, RetryableModelError
from oarlock.formats._models import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserMessage,
)
from oarlock.models._base import ModelResponse, assistant_message, call_part

_CONTEXT = re.compile(
    r"context[ _]length|context[ _]window|maximum context|too many tokens|prompt is too long|"
    r"input is too long|reduce the length",
    re.IGNORECASE,
)


_AUTH = frozenset(
    {"invalid_api_key", "authentication_error", "permission_error", "unauthorized", "forbidden"}
)
_NOT_FOUND = frozenset({"model_not_found", "not_found_error", "not_found"})
_RATE = frozenset({"rate_limit_exceeded", "rate_limited", "rate_limit_error", "tokens", "requests"})


def _status_of(code: object) -> int | None:
    """An HTTP status given as an error's code (OpenRouter sends ``"code": 400``)."""
    if isinstance(code, bool):
        return None
    if isinstance(code, int):
        return code if 100 <= code <= 599 else None
    if isinstance(code, str) and len(code) == 3 and code.isdigit():
        return int(code)
    return None


def error_from_event(model_id: str, code: object, kind: object, message: object) -> ModelError:
    """An error the server reported inside a 200 answer (an error chunk or event in a
    stream, a failed response), classified like the HTTP errors: by its code when that is
    an HTTP status (400 ``bad_request``, 401/403 ``auth_failed``, 404 ``model_not_found``,
    429 retryable ``rate_limited``, 408 and 5xx retryable ``server_error``), else by its
    code and type; an error that says nothing known is taken for a server error and
    retried."""
    code_s, kind_s, said = str(code or ""), str(kind or ""), str(message or "")
    text = f"{model_id}: {said or 'the server reported an error'}"
    status = _status_of(code)
    if status is not None and status >= 400:
        return _by_status(text, status, said)
    if code_s == "insufficient_quota":
        return ModelError(text, code="insufficient_quota")
    if code_s in _RATE or kind_s in _RATE:
        return RetryableModelError(text, code="rate_limited")
    if code_s == "context_length_exceeded" or _CONTEXT.search(said):
        return ModelError(text, code="context_too_long")
    if code_s in _AUTH or kind_s in _AUTH:
        return ModelError(text, code="auth_failed")
    if code_s in _NOT_FOUND or kind_s in _NOT_FOUND:
        return ModelError(text, code="model_not_found")
    if kind_s == "invalid_request_error" or code_s in ("invalid_prompt", "invalid_request_error"):
        return ModelError(text, code="bad_request")
    return RetryableModelError(text, code="server_error")


def _by_status(text: str, status: int, said: str) -> ModelError:
    if status == 429:
        return RetryableModelError(text, code="rate_limited")
    if status == 408 or status >= 500:
        return RetryableModelError(text, code="server_error")
    if status in (401, 403):
        return ModelError(text, code="auth_failed")
    if status == 402:
        return ModelError(text, code="insufficient_quota")
    if status == 404:
        return ModelError(text, code="model_not_found")
    if status == 413 or _CONTEXT.search(said):
        return ModelError(text, code="context_too_long")
    return ModelError(text, code="bad_request")


def stream_error(data: Any) -> tuple[Any, Any, Any] | None:
    """The (code, type, message) of an error sent inside a stream, None if ``data`` is not
    one: ``{"error": {...}}`` (as Chat Completions streams and OpenRouter send them, with
    the code a string or an HTTP status), ``{"error": "text"}``, or a Responses API
    ``error`` event (``{"type": "error", "code": ..., "message": ...}``)."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict) and error:
        message = error.get("message") or error.get("detail") or _compact(error)
        return error.get("code"), error.get("type"), message
    if isinstance(error, str) and error:
        return data.get("code"), data.get("type"), error
    if data.get("type") == "error":
        return data.get("code"), data.get("error_type"), data.get("message")
    return None


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _result_text(part: ToolResultPart) -> str:
    return f"Error: {part.content}" if part.is_error else part.content


def _user_text(message: UserMessage) -> str | None:
    texts = [p.text for p in message.content if isinstance(p, TextPart)]
    if not texts:
        return None
    return "\n\n".join(texts)


def chat_messages(instructions: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The Chat Completions ``messages`` for an OAR conversation."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if isinstance(message, UserMessage):
            results = [p for p in message.content if isinstance(p, ToolResultPart)]
            out.extend(
                {"role": "tool", "tool_call_id": r.tool_call_id, "content": _result_text(r)}
                for r in results
            )
            text = _user_text(message)
            if text is not None or not results:
                out.append({"role": "user", "content": text or ""})
        else:
            calls = message.tool_calls
            # content may be null only next to tool calls
            entry: dict[str, Any] = {
                "role": "assistant",
                "content": message.text or (None if calls else ""),
            }
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _compact(c.arguments)},
                    }
                    for c in calls
                ]
            out.append(entry)
    return out


def _tool_fields(spec: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": spec["name"]}
    if spec.get("description"):
        fields["description"] = spec["description"]
    fields["parameters"] = spec.get("parameters") or {"type": "object", "properties": {}}
    return fields


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": _tool_fields(t)} for t in tools]


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # strict: the Responses API makes function tools strict unless told otherwise, and a
    # strict schema must list every property as required and forbid others.
    return [{"type": "function", **_tool_fields(t), "strict": False} for t in tools]


def responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """The Responses API ``input`` items for an OAR conversation."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            results = [p for p in message.content if isinstance(p, ToolResultPart)]
            out.extend(
                {
                    "type": "function_call_output",
                    "call_id": r.tool_call_id,
                    "output": _result_text(r),
                }
                for r in results
            )
            text = _user_text(message)
            if text is not None or not results:
                out.append({"type": "message", "role": "user", "content": text or ""})
            continue
        pending: list[str] = []
        for part in message.content:
            if isinstance(part, TextPart):
                pending.append(part.text)
                continue
            if "".join(pending):
                out.append({"type": "message", "role": "assistant", "content": "".join(pending)})
            pending = []
            out.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": _compact(part.arguments),
                }
            )
        if "".join(pending):
            out.append({"type": "message", "role": "assistant", "content": "".join(pending)})
    return out


# -- mapping back -------------------------------------------------------------------------
def _get(obj: Any, key: str, default: Any = None) -> Any:
    """A member of an SDK model or of a plain mapping (the SDK leaves parts it could not
    match to a type as they came)."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _bad(what: str) -> ModelError:
    return ModelError(f"the response could not be read: {what}", code="bad_response")


def tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCallPart:
    """A tool call part; arguments that are not a JSON object are kept as ``rawArguments``
    (the way :class:`~oarlock.models.ScriptedModel` builds them)."""
    if not isinstance(name, str) or not name:
        raise _bad("a tool call without a function name")
    cid = call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex[:24]}"
    parsed: Any
    if isinstance(arguments, dict):
        parsed = arguments
    elif isinstance(arguments, str):
        if not arguments.strip():
            parsed = {}
        else:
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = None
    else:
        parsed = None
    if isinstance(parsed, dict):
        return call_part(cid, name, parsed, None)
    raw = arguments if isinstance(arguments, str) else _compact(arguments)
    return call_part(cid, name, {}, raw)


def _message(text: str, calls: list[ToolCallPart]) -> AssistantMessage:
    parts: list[TextPart | ToolCallPart] = [TextPart(type="text", text=text)] if text else []
    return assistant_message([*parts, *calls])


def _usage(usage: Any, api: str) -> tuple[int, int, int]:
    """(input, output, cached) tokens of a Chat Completions (``prompt``/``completion``) or
    Responses (``input``/``output``) usage object."""
    if usage is None:
        return 0, 0, 0
    given, made = ("prompt", "completion") if api == "chat" else ("input", "output")
    details = _get(usage, f"{given}_tokens_details")
    return (
        _int(_get(usage, f"{given}_tokens")),
        _int(_get(usage, f"{made}_tokens")),
        _int(_get(details, "cached_tokens")) if details is not None else 0,
    )


def parse_chat_completion(completion: Any) -> ModelResponse:
    """A Chat Completions answer as a ModelResponse (raises ``bad_response``)."""
    if isinstance(completion, str | bytes) or completion is None:
        raise _bad("the body is not a JSON object")
    choices = _get(completion, "choices")
    if not isinstance(choices, list) or not choices:
        raise _bad("it has no choices")
    message = _get(choices[0], "message")
    if message is None or isinstance(message, str | list):
        raise _bad("its first choice has no message")
    content, refusal = _get(message, "content"), _get(message, "refusal")
    if content is not None and not isinstance(content, str):
        raise _bad("the message content is not text")
    text = (content or "") + (refusal if isinstance(refusal, str) else "")
    raw_calls = _get(message, "tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _bad("tool_calls is not a list")
    calls = []
    for call in raw_calls:
        function = _get(call, "function")
        if function is None:
            raise _bad(f"a tool call of type {_get(call, 'type')!r} has no function")
        calls.append(
            tool_call(_get(call, "id"), _get(function, "name"), _get(function, "arguments"))
        )
    return ModelResponse(_message(text, calls), *_usage(_get(completion, "usage"), "chat"))


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _ChatStream:
    """Assembles a streamed chat completion: text in order, tool calls by their index."""

    text: list[str] = field(default_factory=list)
    calls: dict[Any, _Call] = field(default_factory=dict)
    usage: Any = None
    chunks: int = 0
    finished: bool = False
    done: bool = False  # the stream reached ``data: [DONE]``

    def feed(self, chunk: Any) -> str:
        if isinstance(chunk, str | bytes) or chunk is None:
            raise _bad("a stream chunk is not a JSON object")
        self.chunks += 1
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = usage
        choices = _get(chunk, "choices") or []
        if not isinstance(choices, list):
            raise _bad("a stream chunk's choices is not a list")
        out: list[str] = []
        for choice in choices:
            if _get(choice, "index", 0) not in (0, None):
                continue
            finish = _get(choice, "finish_reason")
            if finish == "error":  # OpenRouter's, when the provider behind it failed
                raise RetryableModelError(
                    "the server ended the answer with an error", code="server_error"
                )
            if finish:
                self.finished = True
            delta = _get(choice, "delta")
            if delta is None:
                continue
            for key in ("content", "refusal"):
                piece = _get(delta, key)
                if isinstance(piece, str) and piece:
                    out.append(piece)
            for position, tc in enumerate(_get(delta, "tool_calls") or []):
                self._call_delta(position, tc)
        self.text.extend(out)
        return "".join(out)

    def _call_delta(self, position: int, tc: Any) -> None:
        index = _get(tc, "index")
        call_id = _get(tc, "id")
        if not isinstance(index, int):  # some servers leave the index out
            index = call_id if call_id and call_id in self.calls else position
        call = self.calls.setdefault(index, _Call())
        if isinstance(call_id, str) and call_id and not call.id:
            call.id = call_id
        function = _get(tc, "function")
        name = _get(function, "name") if function is not None else None
        if isinstance(name, str) and name and name != call.name:
            call.name += name  # a server that repeats the name each time adds nothing
        arguments = _get(function, "arguments") if function is not None else None
        if isinstance(arguments, str):
            call.arguments += arguments
        elif isinstance(arguments, dict):
            call.arguments += _compact(arguments)

    def result(self) -> ModelResponse:
        if self.chunks == 0:
            raise _bad("the stream was empty")
        if not self.finished and not self.done:  # [DONE] without a finish_reason: complete
            raise RetryableModelError(
                "the stream ended before the answer was complete", code="stream_interrupted"
            )
        calls = [tool_call(c.id, c.name, c.arguments) for _, c in sorted_calls(self.calls)]
        return ModelResponse(_message("".join(self.text), calls), *_usage(self.usage, "chat"))


def sorted_calls(calls: dict[Any, _Call]) -> list[tuple[Any, _Call]]:
    """Calls by index (ints in order; others after, in arrival order)."""
    numbered = sorted((k, c) for k, c in calls.items() if isinstance(k, int))
    return numbered + [(k, c) for k, c in calls.items() if not isinstance(k, int)]


def _output_parts(output: Any) -> tuple[str, list[ToolCallPart]]:
    if not isinstance(output, list):
        raise _bad("its output is not a list")
    texts: list[str] = []
    calls: list[ToolCallPart] = []
    for item in output:
        kind = _get(item, "type")
        if kind == "message":
            for content in _get(item, "content") or []:
                ctype = _get(content, "type")
                value = _get(content, "text" if ctype == "output_text" else "refusal")
                if ctype in ("output_text", "refusal") and isinstance(value, str):
                    texts.append(value)
        elif kind == "function_call":
            calls.append(
                tool_call(_get(item, "call_id"), _get(item, "name"), _get(item, "arguments"))
            )
    return "".join(texts), calls


def _check_failed(response: Any) -> None:
    error = _get(response, "error")
    if _get(response, "status") == "failed" or error is not None:
        raise error_from_event(
            f"the response of {_get(response, 'model')}",
            _get(error, "code"),
            None,
            _get(error, "message") or "it failed",
        )


def parse_response(response: Any) -> ModelResponse:
    """A Responses API answer as a ModelResponse (raises ``bad_response``)."""
    if isinstance(response, str | bytes) or response is None:
        raise _bad("the body is not a JSON object")
    _check_failed(response)
    text, calls = _output_parts(_get(response, "output"))
    return ModelResponse(_message(text, calls), *_usage(_get(response, "usage"), "responses"))


@dataclass
class _ResponsesStream:
    """Assembles a streamed response from its events: text deltas, function calls (added,
    argument deltas, done), and the final response, which has the last word when it carries
    the output."""

    text: list[str] = field(default_factory=list)
    calls: dict[Any, _Call] = field(default_factory=dict)
    final: Any = None
    events: int = 0
    done: bool = False  # a [DONE] (the API sends none): the final response still decides

    def feed(self, event: Any) -> str:
        if isinstance(event, str | bytes) or event is None:
            raise _bad("a stream event is not a JSON object")
        self.events += 1
        kind = _get(event, "type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = _get(event, "delta")
            if isinstance(delta, str) and delta:
                self.text.append(delta)
                return delta
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = _get(event, "item")
            if _get(item, "type") == "function_call":
                call = self.calls.setdefault(_key(event, item), _Call())
                call.id = _get(item, "call_id") or call.id
                call.name = _get(item, "name") or call.name
                arguments = _get(item, "arguments")
                if kind.endswith(".done") and isinstance(arguments, str):
                    call.arguments = arguments
        elif kind == "response.function_call_arguments.delta":
            delta = _get(event, "delta")
            if isinstance(delta, str):
                self.calls.setdefault(_key(event, None), _Call()).arguments += delta
        elif kind in ("response.completed", "response.incomplete"):
            self.final = _get(event, "response")
        elif kind == "response.failed":
            _check_failed(_get(event, "response"))
            raise _bad("a failed response without an error")
        elif kind == "error":
            code, what, message = stream_error(event) or (None, None, None)
            raise error_from_event("the server", code, what, message)
        return ""

    def result(self) -> ModelResponse:
        if self.final is None:
            if self.events == 0:
                raise _bad("the stream was empty")
            raise RetryableModelError(
                "the stream ended before the response was complete", code="stream_interrupted"
            )
        usage = _usage(_get(self.final, "usage"), "responses")
        output = _get(self.final, "output")
        if isinstance(output, list) and output:
            text, calls = _output_parts(output)
        else:
            calls = [tool_call(c.id, c.name, c.arguments) for _, c in sorted_calls(self.calls)]
            text = "".join(self.text)
        return ModelResponse(_message(text, calls), *usage)


def _key(event: Any, item: Any) -> Any:
    """Function call events are tied together by output index (item ids are optional on
    some servers)."""
    index = _get(event, "output_index")
    if isinstance(index, int):
        return index
    return _get(event, "item_id") or _get(item, "id")
