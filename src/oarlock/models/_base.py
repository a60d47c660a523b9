"""The model adapter protocol: messages and tool schemas in; one assistant message and its
usage out. Adapters raise RetryableModelError for what may pass (rate limits, server
errors; with ``retry_after`` when the provider says) and ModelError for the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from oarlock.formats._models import AssistantMessage, Message, TextPart, ToolCallPart

__all__ = [
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "TextSink",
    "assistant_message",
    "call_part",
]


TextSink = Callable[[str], None]
"""Receives the text of a response as it arrives (streaming); the stored message is the
assembled whole."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the model is asked: the agent's instructions, the conversation, the tools
    (``{"name", "description", "parameters"}`` with a JSON Schema), and where to send
    text as it streams in (None: no streaming needed)."""

    instructions: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    on_text: TextSink | None = None


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
