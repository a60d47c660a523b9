"""Prompts, answers, arguments and results on spans: only when asked for
(``capture_content``), and then as any text leaving oarlock goes: secrets redacted,
control and invisible characters escaped by the sanitizer, each capped in size."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oarlock._secrets import redact
from oarlock.governance._sanitize import sanitize

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from oarlock.formats._models import AssistantMessage
    from oarlock.models._base import ModelRequest

__all__ = ["Content"]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Content:
    on: bool
    max_chars: int = 4000

    def text(self, value: str) -> str:
        """``value`` as it may be recorded: redacted, sanitized and capped."""
        return sanitize(redact(value), max_chars=self.max_chars)

    def request(self, span: Span, request: ModelRequest) -> None:
        messages = [m.model_dump(mode="json", by_alias=True) for m in request.messages]
        span.set_attribute("gen_ai.input.messages", self.text(_json(messages)))
        if request.instructions:
            span.set_attribute("gen_ai.system_instructions", self.text(request.instructions))

    def response(self, span: Span, message: AssistantMessage) -> None:
        output = [message.model_dump(mode="json", by_alias=True)]
        span.set_attribute("gen_ai.output.messages", self.text(_json(output)))

    def arguments(self, span: Span, arguments: dict[str, Any]) -> None:
        span.set_attribute("gen_ai.tool.call.arguments", self.text(_json(arguments)))

    def result(self, span: Span, content: str) -> None:
        span.set_attribute("gen_ai.tool.call.result", self.text(content))
