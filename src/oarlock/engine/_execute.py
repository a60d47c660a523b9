"""Between the loop and the tools: deciding which calls need a human, and running a call.

The runner hands every tool call to an :class:`Executor`; nothing runs a tool around it.
:class:`DirectExecutor` applies each tool's own approval rule (a flag or a predicate over
its arguments) and runs it with its timeout; the governed executor replaces it with
policy, exact approvals, idempotency and receipts without changing the loop.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Protocol

from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.tools._tool import Tool, ToolArgumentsError, Toolset, result_text

__all__ = ["CallContext", "DirectExecutor", "Executor", "Planned", "error_result", "plan_call"]


@dataclass(frozen=True, slots=True)
class CallContext:
    run_id: str
    agent: str
    tenant: str
    turn: int


class Executor(Protocol):
    def needs_approval(self, tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> bool: ...

    async def execute(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        approved_by: str | None = None,
    ) -> ToolResultPart: ...


def error_result(call: ToolCallPart, message: str) -> ToolResultPart:
    return ToolResultPart(
        type="tool_result",
        tool_call_id=call.id,
        tool_name=call.name,
        content=message,
        is_error=True,
    )


@dataclass(frozen=True, slots=True)
class Planned:
    """One call of a turn, planned: refused with ``result``, or ``run`` with ``arguments``
    at once, or held for approval."""

    call: ToolCallPart
    tool: Tool | None = None
    arguments: dict[str, Any] | None = None
    result: ToolResultPart | None = None
    approval: bool = False


def plan_call(call: ToolCallPart, tools: Toolset, executor: Executor, ctx: CallContext) -> Planned:
    """Bad model output becomes an error result the model can recover from."""
    raw = (call.model_extra or {}).get("rawArguments")
    if raw is not None:
        return Planned(call, result=error_result(call, _not_json(call.name, raw)))
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(tools.names()) or "none"
        return Planned(
            call,
            result=error_result(call, f"Unknown tool {call.name!r}. Available tools: {names}."),
        )
    try:
        arguments = tool.validate_arguments(call.arguments)
    except ToolArgumentsError as exc:
        return Planned(call, result=error_result(call, f"{exc}. Fix the arguments and retry."))
    if executor.needs_approval(tool, arguments, ctx):
        return Planned(call, tool, arguments, approval=True)
    return Planned(call, tool, arguments)


def _not_json(name: str, raw: str) -> str:
    try:
        json.loads(raw)
        why = "they are not a JSON object"
    except ValueError as exc:
        why = f"they are not valid JSON ({exc})"
    return f"The arguments for tool {name!r} could not be read: {why}. Send a JSON object."


class DirectExecutor:
    """Runs tools in-process with their timeout; a failure becomes an error result with
    the exception's message (never a traceback)."""

    def needs_approval(self, tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> bool:
        return tool.requires_approval(arguments)

    async def execute(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        approved_by: str | None = None,
    ) -> ToolResultPart:
        try:
            if tool.timeout_seconds is None:
                value = await tool.call(arguments)
            else:
                value = await asyncio.wait_for(tool.call(arguments), tool.timeout_seconds)
        except TimeoutError:
            return error_result(
                call, f"Tool {tool.name!r} timed out after {tool.timeout_seconds} s."
            )
        except Exception as exc:  # a tool's failure is the model's to handle
            return error_result(call, f"Tool {tool.name!r} failed: {type(exc).__name__}: {exc}")
        return ToolResultPart(
            type="tool_result",
            tool_call_id=call.id,
            tool_name=call.name,
            content=result_text(value),
        )
