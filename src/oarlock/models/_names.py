"""Tool names as providers accept them.

OpenAI (Chat Completions and Responses, and the servers that copy them) and Anthropic take
a function name only if it matches ``^[a-zA-Z0-9_-]{1,64}$``; oarlock's tools may have other
names (MCP tools are ``server.tool``, and a conversation may hold calls of any name). Each
request maps the names it uses to provider-safe ones, and each response maps them back, so
that the run document, the policy, the approvals and the receipts only ever see the real
name.

For one set of names (the request's tools and every tool call of its conversation):

* a name that is already safe is sent as it is;
* another has each character outside ``A-Za-z0-9_-`` replaced by ``_`` (``notes.read`` is
  sent as ``notes_read``), unless that is empty, longer than 64 characters or taken (by a
  safe name of the set, or by another name mapped before it, in sorted order): then it
  is the first 55 characters of that, ``_`` and 8 hex digits of the SHA-256 of the real
  name (counted on, ``#1``, ``#2``..., in the improbable case that this is taken too).

The mapping depends only on the set, so a conversation maps the same way turn after turn,
and it is injective, so mapping back is exact. A name the model sends that is not in the
mapping (a tool it made up) comes back unchanged; the engine answers it as an unknown tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oarlock.formats._models import AssistantMessage, Message, TextPart, ToolCallPart

__all__ = ["PROVIDER_NAME", "ToolNames"]

PROVIDER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX = 64
_HASH = 8

if TYPE_CHECKING:
    from oarlock.models._base import ModelRequest, ModelResponse


def _digest(name: str, round_: int) -> str:
    data = name.encode("utf-8", "surrogatepass")
    if round_:
        data += f"#{round_}".encode()
    return hashlib.sha256(data).hexdigest()[:_HASH]


class ToolNames:
    """The provider-safe name of each of a set of tool names, and back (see the module)."""

    __slots__ = ("_back", "_out")

    def __init__(self, names: Iterable[str]) -> None:
        unique = set(names)
        out = {n: n for n in unique if PROVIDER_NAME.fullmatch(n)}
        taken = set(out)
        for name in sorted(unique - taken):
            base = _UNSAFE.sub("_", name)
            safe = base
            round_ = 0
            while not safe or len(safe) > _MAX or safe in taken:
                safe = f"{base[: _MAX - _HASH - 1]}_{_digest(name, round_)}"
                round_ += 1
            out[name] = safe
            taken.add(safe)
        self._out: Mapping[str, str] = out
        self._back: Mapping[str, str] = {v: k for k, v in out.items() if v != k}
        if not self._back:
            self._out = {}

    @property
    def identity(self) -> bool:
        """Every name is sent as it is."""
        return not self._back

    def safe(self, name: str) -> str:
        """The name sent to the provider (a name outside the set maps as if it were in it
        alone; the adapters only ask for names of the set)."""
        found = self._out.get(name)
        if found is not None:
            return found
        return name if PROVIDER_NAME.fullmatch(name) else ToolNames([name]).safe(name)

    def real(self, name: str) -> str:
        """The real name of a name the provider sent (unchanged if it maps from none)."""
        return self._back.get(name, name)

    @classmethod
    def of(cls, tools: Iterable[Mapping[str, Any]], messages: Iterable[Message]) -> ToolNames:
        """The mapping for a request: its tools' names and its conversation's calls."""
        names = {str(t["name"]) for t in tools}
        for message in messages:
            if isinstance(message, AssistantMessage):
                names.update(p.name for p in message.content if isinstance(p, ToolCallPart))
        return cls(names)

    # -- whole requests and responses -----------------------------------------------------
    @classmethod
    def for_request(cls, request: ModelRequest) -> tuple[ToolNames, ModelRequest]:
        """The mapping for ``request``, and the request with safe names (the same request
        when every name is safe already)."""
        names = cls.of(request.tools, request.messages)
        if names.identity:
            return names, request
        tools = [{**t, "name": names.safe(str(t["name"]))} for t in request.tools]
        messages = [names._message_out(m) for m in request.messages]
        return names, replace(request, tools=tools, messages=messages)

    def _message_out(self, message: Message) -> Message:
        if not isinstance(message, AssistantMessage) or not any(
            isinstance(p, ToolCallPart) and p.name in self._out for p in message.content
        ):
            return message
        parts: list[TextPart | ToolCallPart] = [
            p.model_copy(update={"name": self.safe(p.name)}) if isinstance(p, ToolCallPart) else p
            for p in message.content
        ]
        return message.model_copy(update={"content": parts})

    def restore(self, response: ModelResponse) -> ModelResponse:
        """``response`` with each tool call named by its real name."""
        message = response.message
        if self.identity or not any(
            isinstance(p, ToolCallPart) and p.name in self._back for p in message.content
        ):
            return response
        parts: list[TextPart | ToolCallPart] = [
            p.model_copy(update={"name": self.real(p.name)}) if isinstance(p, ToolCallPart) else p
            for p in message.content
        ]
        return replace(response, message=message.model_copy(update={"content": parts}))
