"""The scripted model: a list of assistant turns played back in order. Offline, exact, and
stateless across processes: the turn to play is the number of assistant messages so far,
so a run resumed anywhere continues its script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oarlock._config import (
    Problems,
    at,
    describe,
    need_json,
    need_mapping,
    need_number,
    need_text,
    need_whole,
    unknown_keys,
)
from oarlock._input import decode_text, read_input
from oarlock._yaml import load_yaml
from oarlock.errors import ConfigError, FormatError, ModelError, RetryableModelError
from oarlock.formats._models import AssistantMessage, TextPart, ToolCallPart
from oarlock.models._base import ModelRequest, ModelResponse, assistant_message, call_part

__all__ = ["ScriptedModel", "check_turn", "turn_message", "turn_usage"]


_TURN = ("text", "tool_calls", "usage", "fail")
_CALL = ("name", "arguments", "id")
_USAGE = ("input_tokens", "output_tokens", "cached_tokens")
_FAIL = ("kind", "retry_after", "message")
_KINDS = ("rate_limit", "server_error", "fatal")


class ScriptedModel:
    """Turns are mappings: ``text``, ``tool_calls`` (each ``name``, ``arguments`` as an
    object or as raw text, optional ``id``), ``usage`` (``input_tokens``,
    ``output_tokens``, ``cached_tokens``), and ``fail`` (errors to raise before the turn
    succeeds, each ``{"kind": "rate_limit"|"server_error"|"fatal", "retry_after":
    seconds, "message": text}``). A script is checked whole when the model is made: every
    problem is reported at once, naming the turn and the key."""

    def __init__(
        self, turns: list[dict[str, Any]], *, name: str = "script", source: str | None = None
    ) -> None:
        problems = Problems(f"{source}: " if source else "script: ")
        if not isinstance(turns, list):
            problems.add(f"turns: must be a list of turns, got {describe(turns)}")
        else:
            for i, turn in enumerate(turns):
                check_turn(turn, f"turns[{i}]", problems)
        if problems:
            raise problems.error(source or "script")
        self.turns = turns
        self._model_id = f"scripted:{name}"
        self._failures: dict[int, int] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """A script file: YAML (or JSON for a ``.json`` file) holding the list of turns, or
        a mapping whose ``turns`` holds it. Read within the input limit (see
        :mod:`oarlock._input`)."""
        p = Path(path)
        name = str(path)
        text = decode_text(read_input(p, what="script file"), name, what="script file")
        if p.suffix == ".json":
            from oarlock.formats._validate import loads_strict

            try:
                data = loads_strict(text)
            except FormatError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        else:
            data = load_yaml(text, name)
        if isinstance(data, dict):
            extra = sorted(str(k) for k in data if k != "turns")
            if extra:
                raise ConfigError(f"{name}: {extra[0]}: unknown key (allowed: turns)")
            if "turns" not in data:
                raise ConfigError(f"{name}: turns: required (the list of turns)")
            data = data["turns"]
        return cls(data, name=p.stem.removesuffix(".script"), source=name)

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
        return ModelResponse(turn_message(index, turn), *turn_usage(turn))

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


_PLAIN_TURN = frozenset(("text", "tool_calls"))
_PLAIN_CALL = frozenset(_CALL)
_SCALAR = (str, int, float, bool, type(None))


def _plain(turn: Any) -> bool:
    """Whether ``turn`` is of the common kind that :func:`check_turn` passes, seen in one
    pass: text, calls with flat arguments (no usage, no failures). False says only that the
    whole check must look."""
    if type(turn) is not dict or not _PLAIN_TURN.issuperset(turn):
        return False
    text, calls = turn.get("text"), turn.get("tool_calls")
    if not (text is None or isinstance(text, str)):
        return False
    if calls is None:
        return True
    if type(calls) is not list:
        return False
    for call in calls:
        if type(call) is not dict or not _PLAIN_CALL.issuperset(call):
            return False
        if not isinstance(call.get("name"), str):
            return False
        if "id" in call and not (isinstance(call["id"], str) and call["id"]):
            return False
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            continue
        if type(arguments) is not dict:
            return False
        for key, value in arguments.items():
            if not isinstance(key, str) or not isinstance(value, _SCALAR):
                return False
    return True


def check_turn(turn: Any, where: str, problems: Problems) -> None:
    """Record in ``problems`` every rule ``turn`` breaks, naming it by ``where``."""
    if not _plain(turn):
        _check_whole_turn(turn, where, problems)


def _check_whole_turn(turn: Any, where: str, problems: Problems) -> None:
    spec = problems.check(need_mapping, turn, where)
    if spec is None:
        return
    problems.extend(unknown_keys(spec, where, _TURN))
    if spec.get("text") is not None:
        problems.check(need_text, spec["text"], at(where, "text"))
    calls = spec.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        problems.add(f"{at(where, 'tool_calls')}: must be a list, got {describe(calls)}")
    for j, call in enumerate(calls if isinstance(calls, list) else []):
        _check_call(call, f"{where}.tool_calls[{j}]", problems)
    usage = spec.get("usage")
    if usage is not None:
        usage = problems.check(need_mapping, usage, at(where, "usage"))
    if usage is not None:
        problems.extend(unknown_keys(usage, at(where, "usage"), _USAGE))
        for key in _USAGE:
            if key in usage:
                problems.check(need_whole, usage[key], f"{where}.usage.{key}")
    failures = spec.get("fail")
    if failures is not None and not isinstance(failures, list):
        problems.add(f"{at(where, 'fail')}: must be a list, got {describe(failures)}")
    for k, failure in enumerate(failures if isinstance(failures, list) else []):
        _check_failure(failure, f"{where}.fail[{k}]", problems)


def _check_call(call: Any, where: str, problems: Problems) -> None:
    spec = problems.check(need_mapping, call, where)
    if spec is None:
        return
    problems.extend(unknown_keys(spec, where, _CALL))
    # a model may send any name and any JSON arguments, hostile ones included (an empty
    # name, numbers beyond 2**53, NaN, lone surrogates): the engine answers them as it
    # answers a model's, so a script can stand in for a hostile model too
    problems.check(need_text, spec.get("name"), at(where, "name"))
    if "id" in spec:
        problems.check(need_text, spec["id"], at(where, "id"), empty=False)
    arguments = spec.get("arguments", {})
    if isinstance(arguments, str):
        return
    if not isinstance(arguments, dict):
        problems.add(
            f"{at(where, 'arguments')}: must be a mapping or text, got {describe(arguments)}"
        )
        return
    problems.check(need_json, arguments, at(where, "arguments"), portable=False)


def _check_failure(failure: Any, where: str, problems: Problems) -> None:
    spec = problems.check(need_mapping, failure, where)
    if spec is None:
        return
    problems.extend(unknown_keys(spec, where, _FAIL))
    kind = spec.get("kind", "server_error")
    if kind not in _KINDS:
        problems.add(
            f"{at(where, 'kind')}: must be one of {', '.join(_KINDS)}, got {describe(kind)}"
        )
    if spec.get("retry_after") is not None:
        problems.check(need_number, spec["retry_after"], at(where, "retry_after"))
    if "message" in spec:
        problems.check(need_text, spec["message"], at(where, "message"))


def turn_usage(turn: dict[str, Any]) -> tuple[int, int, int]:
    u = turn.get("usage") or {}
    return (
        int(u.get("input_tokens", 0)),
        int(u.get("output_tokens", 0)),
        int(u.get("cached_tokens", 0)),
    )


def turn_message(index: int, turn: dict[str, Any]) -> AssistantMessage:
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
