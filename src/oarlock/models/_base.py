"""The model adapter protocol: messages and tool schemas in; one assistant message and its
usage out. Adapters raise RetryableModelError for what may pass (rate limits, server
errors; with ``retry_after`` when the provider says) and ModelError for the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from oarlock._secrets import redact
from oarlock.errors import ModelError
from oarlock.formats._models import AssistantMessage, Message, TextPart, ToolCallPart

__all__ = [
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "TextSink",
    "TurnText",
    "assistant_message",
    "call_part",
    "redacted",
]


TextSink = Callable[[str], None]
"""Receives the text of a response as it arrives (streaming); the stored message is the
assembled whole. When a streamed answer fails and is asked for again, the sink sees each
answer once (see :class:`TurnText`); a sink with a ``restart()`` method is told when an
answer starts over."""


class TurnText:
    """What a turn's ``on_text`` is given across the attempts of the turn (the runner
    retries an answer that was cut off, rate limited or failed on the server).

    A retried attempt streams its answer from its start again. Its text is held back while
    it repeats what the sink was already given, and passed on from where it goes beyond:
    an answer given again is seen once. When the new answer departs from what was shown,
    the sink is told that the answer starts over (its ``restart()`` is called if it has
    one, else it is given a line break), then it gets the new answer from its start."""

    __slots__ = ("_pos", "_replay", "_replaying", "_shown", "_sink")

    def __init__(self, sink: TextSink) -> None:
        self._sink = sink
        self._shown: list[str] = []  # the answer as the sink shows it now
        self._replay = ""  # what a retried attempt is matched against
        self._pos = 0  # how much of it the attempt has repeated
        self._replaying = False

    def attempt(self) -> TextSink:
        """The sink to give the next attempt."""
        shown = "".join(self._shown)
        self._shown = [shown] if shown else []
        self._replay, self._pos, self._replaying = shown, 0, bool(shown)
        return self._feed

    def _feed(self, text: str) -> None:
        if not text:
            return
        if not self._replaying:
            self._shown.append(text)
            self._sink(text)
            return
        rest = self._replay[self._pos :]
        if rest.startswith(text):  # repeats what was shown
            self._pos += len(text)
            self._replaying = self._pos < len(self._replay)
            return
        self._replaying = False
        if text.startswith(rest):  # catches up, and goes beyond
            new = text[len(rest) :]
            self._shown.append(new)
            self._sink(new)
            return
        fresh = self._replay[: self._pos] + text  # another answer: it starts over
        restart = getattr(self._sink, "restart", None)
        if callable(restart):
            restart()
        else:
            self._sink("\n")
        self._shown = [fresh]
        self._sink(fresh)


def redacted(error: ModelError) -> ModelError:
    """``error`` with every secret taken out of its message (:func:`oarlock._secrets.redact`):
    providers and proxies may echo the key they were sent. The SDK's exception it was
    raised from is let go when its text holds a secret, so that no traceback shows it."""
    text = redact(error.message)
    if text != error.message:
        error.message = text
        error.args = (text,)
    for linked in (error.__cause__, error.__context__):
        if linked is not None and redact(str(linked)) != str(linked):
            error.__cause__ = error.__context__ = None
            error.__suppress_context__ = True
            break
    return error


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the model is asked: the agent's instructions, the conversation, the tools
    (``{"name", "description", "parameters"}`` with a JSON Schema), and where to send
    text as it streams in (None: no streaming needed)."""

    instructions: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    on_text: TextSink | None = None
    output_tool: dict[str, Any] | None = None
    """For an adapter whose provider has its own way to ask for a typed answer
    (``native_output = True``): the final-answer tool (``name``, ``description``, an object
    schema in ``parameters``) whose schema the answer must match, as a response format or
    as a tool the answer must go through. Other adapters never see it: the engine offers
    the tool among the others instead."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """An assistant message. A tool call whose arguments the provider sent as text that is
    not a JSON object carries them in an extra ``rawArguments`` member of the part, with
    ``arguments`` empty; the engine answers it with an error result."""

    message: AssistantMessage
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


def call_part(call_id: str, name: str, arguments: dict[str, Any], raw: str | None) -> ToolCallPart:
    """A tool call part; ``raw``, arguments sent as text that is not a JSON object, travels
    in ``rawArguments`` with ``arguments`` empty (see :class:`ModelResponse`)."""
    if raw is None:
        return ToolCallPart(type="tool_call", id=call_id, name=name, arguments=arguments)
    return ToolCallPart.model_validate(
        {"type": "tool_call", "id": call_id, "name": name, "arguments": {}, "rawArguments": raw}
    )


def assistant_message(parts: list[TextPart | ToolCallPart]) -> AssistantMessage:
    """The assistant message of ``parts``; an empty text part when there are none (a
    message has content)."""
    return AssistantMessage(role="assistant", content=parts or [TextPart(type="text", text="")])


@runtime_checkable
class ModelAdapter(Protocol):
    @property
    def model_id(self) -> str:
        """The model string, e.g. ``scripted:demo`` or ``openai:gpt-4.1``: it names the
        model in the run document and in the pricing table."""
        ...

    async def respond(self, request: ModelRequest) -> ModelResponse: ...
