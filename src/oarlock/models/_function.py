"""A model played by a Python function: given each request (the instructions, the whole
conversation, the tools offered), it decides the reply from them, as a real model decides
from what it is sent. Where :class:`~oarlock.models.ScriptedModel` plays a fixed list of
turns, a function can answer whatever the conversation holds: the results of earlier
calls, a decision a human took, a continued conversation."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from oarlock._config import Problems
from oarlock.errors import ModelError
from oarlock.formats._models import AssistantMessage, TextPart
from oarlock.models._base import ModelRequest, ModelResponse, assistant_message
from oarlock.models._scripted import check_turn, turn_message, turn_usage

__all__ = ["FunctionModel", "Reply"]

Reply: TypeAlias = ModelResponse | AssistantMessage | str | dict[str, Any]
"""What the function returns: a :class:`ModelResponse`, an assistant message, the text of
an answer, or a turn as a script gives one (``text``, ``tool_calls``, ``usage``)."""


_NOT_AWAITABLE = frozenset((dict, str))  # the commonest replies: no call to look


class FunctionModel:
    """``FunctionModel(decide)``: ``decide(request)`` (sync or async) gives each reply. A
    reply that is not one of :data:`Reply` fails the turn with a model error naming the
    rule, as a provider's malformed answer would."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        name: str = "function",
    ) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a function, got {type(fn).__name__}")
        self._fn = fn
        self._model_id = f"function:{name}"

    @property
    def model_id(self) -> str:
        return self._model_id

    async def respond(self, request: ModelRequest) -> ModelResponse:
        reply = self._fn(request)
        if type(reply) not in _NOT_AWAITABLE and inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, ModelResponse):
            return reply
        if isinstance(reply, AssistantMessage):
            return ModelResponse(reply)
        if isinstance(reply, str):
            return ModelResponse(assistant_message([TextPart(type="text", text=reply)]))
        if isinstance(reply, dict) and "fail" not in reply:
            problems = Problems("the function's reply: ")
            check_turn(reply, "turn", problems)
            if not problems:
                index = len([m for m in request.messages if isinstance(m, AssistantMessage)])
                return ModelResponse(turn_message(index, reply), *turn_usage(reply))
            raise ModelError("; ".join(problems.items), code="function_reply_invalid")
        raise ModelError(
            "the function's reply must be a ModelResponse, an assistant message, text or a "
            f"turn mapping (text, tool_calls, usage), not {type(reply).__name__}",
            code="function_reply_invalid",
        )
