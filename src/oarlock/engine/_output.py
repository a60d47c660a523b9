"""Typed output: an agent whose answer is a pydantic model, a dataclass, a TypedDict or a
scalar rather than free text.

The model is asked for it in the provider's own way where there is one (a JSON schema
response format; a tool the answer must go through), and through a final-answer tool,
``final_result``, otherwise: it answers either with JSON text or by calling that tool. The
answer is validated; an invalid one goes back to the model with the validation errors (a
turn, counted against the limits) at most ``retries`` times, then the run fails
(``output_invalid``). A completed run stores the validated answer as JSON text in its
``result``; :attr:`RunResult.output` gives it back typed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from oarlock.errors import ConfigError

__all__ = ["FINAL_TOOL", "OutputJudge", "OutputSpec", "Verdict"]

FINAL_TOOL = "final_result"


@dataclass(frozen=True, slots=True)
class Verdict:
    """An answer checked: the stored JSON text, or the errors to show the model."""

    stored: str | None = None
    problem: str | None = None


class OutputSpec:
    """How an agent's answer is asked for and checked (text when ``output_type`` is None
    or ``str``)."""

    def __init__(self, output_type: Any = None, *, retries: int = 3) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 20:
            raise ConfigError(
                f"output retries must be a whole number from 0 to 20, not {retries!r}"
            )
        self.type, self.retries = output_type, retries
        self._adapter: Any = None
        self.schema: dict[str, Any] | None = None
        self.wrapped = False
        if output_type is None or output_type is str:
            return
        from pydantic import PydanticSchemaGenerationError, TypeAdapter

        try:
            self._adapter = TypeAdapter(output_type)
            schema = self._adapter.json_schema()
        except (PydanticSchemaGenerationError, TypeError) as exc:
            raise ConfigError(f"output_type {output_type!r} has no JSON schema: {exc}") from None
        # a tool's arguments are an object: any other answer goes in a member of one
        self.wrapped = schema.get("type") != "object"
        self.schema = schema

    @property
    def typed(self) -> bool:
        return self._adapter is not None

    def tool_spec(self) -> dict[str, Any]:
        """The final-answer tool the model may answer through."""
        assert self.schema is not None
        parameters = (
            {"type": "object", "properties": {"result": self.schema}, "required": ["result"]}
            if self.wrapped
            else self.schema
        )
        return {
            "name": FINAL_TOOL,
            "description": "Give the final answer (call it once, when you have the answer).",
            "parameters": parameters,
        }

    def check_text(self, text: str) -> Verdict:
        """An answer given as text: JSON of the output type (a fenced code block is read
        too)."""
        body = text.strip()
        if body.startswith("```"):
            body = body.strip("`").partition("\n")[2] if "\n" in body else body.strip("`")
        try:
            value = self._adapter.validate_json(body)
        except ValueError as exc:
            inner = self._unwrapped(body)
            if inner is None:
                return Verdict(problem=_problems(exc))
            return self.check_arguments(inner)
        return Verdict(stored=self._dump(value))

    def _unwrapped(self, body: str) -> dict[str, Any] | None:
        """A scalar answer given as the final-answer tool's object (``{"result": ...}``),
        as a provider's response format asks for it."""
        if not self.wrapped:
            return None
        try:
            data = json.loads(body)
        except ValueError:
            return None
        return data if isinstance(data, dict) and set(data) == {"result"} else None

    def check_arguments(self, arguments: dict[str, Any]) -> Verdict:
        """An answer given through the final-answer tool."""
        given: Any = arguments.get("result") if self.wrapped else arguments
        if self.wrapped and set(arguments) != {"result"}:
            return Verdict(problem="the answer goes in the one member 'result'")
        try:
            value = self._adapter.validate_python(given)
        except ValueError as exc:
            return Verdict(problem=_problems(exc))
        return Verdict(stored=self._dump(value))

    def _dump(self, value: Any) -> str:
        return str(self._adapter.dump_json(value).decode("utf-8"))

    def parse(self, stored: str) -> Any:
        """A stored answer as the output type (text as it is)."""
        if not self.typed:
            return stored
        return self._adapter.validate_json(stored)


def _problems(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = [
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'answer'}: {e.get('msg')}"
            for e in errors(include_url=False)[:10]
        ]
        return "; ".join(found)
    return str(exc)[:1000]


class OutputJudge:
    """The engine's judge of answers (:class:`oarlock.engine._core.Judge`) for a spec."""

    final_tool = FINAL_TOOL

    def __init__(self, spec: OutputSpec) -> None:
        self.spec, self.retries = spec, spec.retries

    def check(self, message: Any) -> Any:
        from oarlock.engine._core import Answer

        calls = message.tool_calls
        if not calls:
            verdict = self.spec.check_text(message.text)
        elif len(calls) == 1 and calls[0].name == FINAL_TOOL:
            raw = (calls[0].model_extra or {}).get("rawArguments")
            if raw is not None:
                return Answer(None, "the final answer's arguments are not a JSON object")
            verdict = self.spec.check_arguments(calls[0].arguments)
        else:
            return None
        return Answer(verdict.stored, verdict.problem)

    def feedback(self, problem: str) -> str:
        """What the model is told when its answer does not fit."""
        schema = json.dumps(self.spec.schema, separators=(",", ":"))[:4000]
        return (
            f"Your answer does not match the required output ({problem}). Answer again with "
            f"JSON matching this schema, or by calling {FINAL_TOOL}: {schema}"
        )
