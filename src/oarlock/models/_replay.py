"""The replay model: plays back a stored run's assistant turns, and notes where the run
being replayed diverges from the original (a tool result or decision that differs).

A replay runs today's ``read`` and ``sandbox`` tools for real; a side-effecting call is
never made again: the runner keys it to the original run, so the executor hands back the
original's receipt, or refuses a call the original did not make."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from oarlock.errors import ModelError
from oarlock.formats._codec import dump
from oarlock.formats._models import AssistantMessage, RunDocument
from oarlock.governance._sanitize import unfence
from oarlock.models._base import ModelRequest, ModelResponse

__all__ = ["Divergence", "ReplayModel"]


@dataclass(frozen=True, slots=True)
class Divergence:
    message_index: int
    expected: str
    actual: str


class ReplayModel:
    def __init__(self, original: RunDocument) -> None:
        self.original = original
        self._turns = [m for m in original.messages if isinstance(m, AssistantMessage)]
        self.divergences: list[Divergence] = []
        self._checked = 0

    @property
    def model_id(self) -> str:
        return f"replay:{self.original.model}"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self._compare(request)
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(self._turns):
            raise ModelError(
                f"the original run has {len(self._turns)} assistant turns; the "
                f"replay asked for turn {index + 1}",
                code="replay_exhausted",
            )
        return ModelResponse(self._turns[index].model_copy(deep=True))

    def _compare(self, request: ModelRequest) -> None:
        original = self.original.messages
        for i in range(self._checked, len(request.messages)):
            actual = _plain(dump(request.messages[i]))
            expected = _plain(dump(original[i])) if i < len(original) else None
            if actual != expected:
                self.divergences.append(Divergence(i, _short(expected), _short(actual)))
        self._checked = len(request.messages)


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its tool results taken out of their untrusted-data fences, whose ids
    are random per call and so differ between a run and its replay."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        text = part.get("content") if isinstance(part, dict) else None
        plain = part
        if part.get("type") == "tool_result" and isinstance(text, str) and not part.get("isError"):
            with contextlib.suppress(ValueError):  # not fenced: compare it as it is
                plain = {**part, "content": unfence(text)}
        parts.append(plain)
    return {**message, "content": parts}


def _short(value: object) -> str:
    import json

    text = "(nothing)" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."
