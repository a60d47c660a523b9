"""The scripted model: a list of assistant turns played back in order. Offline, exact, and
stateless across processes: the turn to play is the number of assistant messages so far,
so a run resumed anywhere continues its script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oarlock.errors import ConfigError, ModelError, RetryableModelError
from oarlock.formats._models import AssistantMessage, TextPart, ToolCallPart
from oarlock.models._base import ModelRequest, ModelResponse, assistant_message, call_part

__all__ = ["ScriptedModel"]


class ScriptedModel:
    """Turns are mappings: ``text``, ``tool_calls`` (each ``name``, ``arguments`` as an
    object or as raw text, optional ``id``), ``usage`` (``input_tokens``,
    ``output_tokens``), and ``fail`` (errors to raise before the turn succeeds, each
    ``{"kind": "rate_limit"|"server_error"|"fatal", "retry_after": seconds}``)."""

    def __init__(self, turns: list[dict[str, Any]], *, name: str = "script") -> None:
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise ConfigError("a script is a list of turns, each a mapping")
        self.turns = turns
        self._model_id = f"scripted:{name}"
        self._failures: dict[int, int] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        import yaml

        p = Path(path)
        try:
            text = p.read_text("utf-8")
            data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read script {p}: {exc}") from None
        if isinstance(data, dict):
            data = data.get("turns")
        return cls(data, name=p.stem.removesuffix(".script"))

    @property
    def model_id(self) -> str:
        return self._model_id

    async def respond(self, request: ModelRequest) -> ModelResponse:
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(self.turns):
            raise ModelError(
                f"the script has {len(self.turns)} turns; turn {index + 1} was asked for",
                code="script_exhausted",
            )
        turn = self.turns[index]
        self._fail_if_scripted(index, turn.get("fail") or [])
        return ModelResponse(_message(index, turn), *_usage(turn))

    def _fail_if_scripted(self, index: int, failures: list[dict[str, Any]]) -> None:
        done = self._failures.get(index, 0)
        if done >= len(failures):
            return
        self._failures[index] = done + 1
        f = failures[done]
        kind = f.get("kind", "server_error")
        if kind == "fatal":
            raise ModelError(f.get("message", "scripted fatal error"), code="scripted_fatal")
        raise RetryableModelError(
            f.get("message", f"scripted {kind}"), code=kind, retry_after=f.get("retry_after")
        )


def _usage(turn: dict[str, Any]) -> tuple[int, int, int]:
    u = turn.get("usage") or {}
    return (
        int(u.get("input_tokens", 0)),
        int(u.get("output_tokens", 0)),
        int(u.get("cached_tokens", 0)),
    )


def _message(index: int, turn: dict[str, Any]) -> AssistantMessage:
    parts: list[TextPart | ToolCallPart] = []
    if turn.get("text"):
        parts.append(TextPart(type="text", text=str(turn["text"])))
    for j, call in enumerate(turn.get("tool_calls") or []):
        args = call.get("arguments", {})
        call_id = str(call.get("id") or f"call_{index + 1}_{j + 1}")
        if isinstance(args, dict):
            parts.append(call_part(call_id, str(call["name"]), args, None))
        else:
            parts.append(call_part(call_id, str(call["name"]), {}, str(args)))
    return assistant_message(parts)
