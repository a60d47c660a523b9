"""Between the loop and the tools: planning each call, and the executor that runs it.

The runner hands every tool call to an :class:`Executor`; nothing runs a tool around it.
The executor shipped is :class:`~oarlock.governance.GovernedExecutor` (policy, exact
approvals, idempotency, receipts, ledger); the protocol is what the loop needs of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from oarlock._secrets import redact
from oarlock.formats._jcs import portable_problem
from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.governance._approvers import ApproverKey
from oarlock.governance._executor import CallContext, Review
from oarlock.governance._sanitize import sanitize
from oarlock.tools._tool import Tool, ToolArgumentsError, Toolset

__all__ = ["CallContext", "Executor", "Planned", "Review", "error_result", "plan_call"]


class Executor(Protocol):
    def review(self, tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> Review:
        """Whether the call needs a human's approval before it runs, and by when."""
        ...

    async def execute(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        review: Review | None = None,
    ) -> ToolResultPart:
        """Run one call (or refuse it) and say what the model is told. A call planned in
        the step that runs it is passed its review too (``review=``) when the review
        carries the policy's verdict (``Review.verdict``): the executor need not ask the
        policy again. An executor whose reviews carry none is never passed one."""
        ...

    async def record_approval(
        self,
        tool: Tool,
        call_id: str,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        signer: ApproverKey,
        expires_at: str | None = None,
    ) -> object:
        """Keep a human's approval of exactly these arguments, signed by ``signer``, where
        the executor will look for it; refuses a second approval of one call
        (ConflictError) and a signer it does not trust (DecisionRefused)."""
        ...


def error_result(call: ToolCallPart, message: str) -> ToolResultPart:
    """An error result the model can recover from; the message may quote what the model
    sent, so it is sanitized like any text that reaches the model or a terminal."""
    return ToolResultPart(
        type="tool_result",
        tool_call_id=call.id,
        tool_name=call.name,
        content=sanitize(redact(message), max_chars=8000),
        is_error=True,
    )


@dataclass(frozen=True, slots=True)
class Planned:
    """One call of a turn, planned: refused with ``result``, or ``run`` with ``arguments``
    at once, or held for approval (until ``ttl_seconds`` from now, if set)."""

    call: ToolCallPart
    tool: Tool | None = None
    arguments: dict[str, Any] | None = None
    result: ToolResultPart | None = None
    approval: bool = False
    ttl_seconds: float | None = None
    review: Review | None = None  # the executor's review, which the call runs under


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
    review = executor.review(tool, arguments, ctx)
    if review.needs_approval:
        return Planned(call, tool, arguments, approval=True, ttl_seconds=review.ttl_seconds)
    return Planned(call, tool, arguments, review=review)


def _not_json(name: str, raw: str) -> str:
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        why = f"they are not valid JSON ({exc})"
    else:
        problem = portable_problem(parsed) if isinstance(parsed, dict) else None
        why = "they are not a JSON object" if problem is None else f"not portable JSON: {problem}"
    return f"The arguments for tool {name!r} could not be read: {why}. Send a JSON object."
