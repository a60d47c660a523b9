"""What the governed executor tells the model about a call that did not give a result (a
refusal, a failure, an unknown outcome), and the effect record of a receipt. Every text is
redacted and sanitized: it may quote what a tool, a policy or a store said."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oarlock._secrets import redact
from oarlock.formats._jcs import digest
from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.governance._policy import PolicyVerdict
from oarlock.governance._sanitize import sanitize
from oarlock.tools._tool import Tool, ToolEffect

__all__ = ["effect_record", "error_result", "error_text", "policy_text", "uncertain_text"]


def effect_record(reported: ToolEffect | None) -> dict[str, Any]:
    if reported is None:
        effect: dict[str, Any] = {"kind": "unreported"}
    else:
        effect = {"kind": reported.kind}
        if reported.external_reference is not None:
            effect["externalReference"] = reported.external_reference
        if reported.reversible is not None:
            effect["reversible"] = reported.reversible
    effect["effectHash"] = digest(effect)
    return effect


def policy_text(what: str, verdict: PolicyVerdict) -> str:
    rule = f"rule {verdict.rule_id!r}" if verdict.rule_id else "the default policy"
    reasons = "; ".join(verdict.reasons)
    return f"{what} by {rule}" + (f": {reasons}" if reasons else "")


def error_result(call: ToolCallPart, message: str) -> ToolResultPart:
    return ToolResultPart(
        type="tool_result",
        tool_call_id=call.id,
        tool_name=call.name,
        content=sanitize(redact(message), max_chars=8000),
        is_error=True,
    )


def error_text(tool: Tool, receipt: Mapping[str, Any]) -> str:
    err = receipt.get("error") or {}
    status = receipt["status"]
    if status == "TimedOut":
        return f"Tool {tool.name!r} timed out: {err.get('message', '')}."
    if status == "Denied":
        return f"Tool {tool.name!r} was not run: {err.get('message', '')} ({err.get('code')})."
    return f"Tool {tool.name!r} failed: {err.get('message', '')}"


def uncertain_text(tool: Tool, receipt: Mapping[str, Any]) -> str:
    err = receipt.get("error") or {}
    return (
        f"The outcome of tool {tool.name!r} is unknown ({err.get('message', 'no receipt')}). "
        "It may or may not have taken effect and will not be retried automatically; an "
        f"operator must reconcile invocation {receipt['invocationId']}."
    )
