"""A call settled without running, put on the ledger by the governed executor: its
invocation and a Denied receipt saying who settled it and how (see
:mod:`oarlock.engine._settled` for who calls it and when)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oarlock.errors import (
    CanonicalizationError,
    ConflictError,
    LeaseLost,
    NotFound,
    StoreError,
)
from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES
from oarlock.governance._calls import _Call
from oarlock.governance._records import name_uuid

if TYPE_CHECKING:
    from oarlock.formats._models import ToolCallPart
    from oarlock.governance._executor import CallContext, GovernedExecutor
    from oarlock.tools._tool import Tool

__all__ = ["record_settled"]

_NO_APPROVAL = "00000000-0000-0000-0000-000000000000"


async def record_settled(
    executor: GovernedExecutor,
    tool: Tool,
    call: ToolCallPart,
    arguments: dict[str, Any],
    ctx: CallContext,
    *,
    code: str,
    message: str,
    requested_at: str,
) -> bool:
    """Put on the ledger a call that was settled without running: denied by a human,
    answered by one in the tool's place, past its approval's deadline, or left
    undecided when its run was cancelled. Its invocation (the policy's
    ``require_approval`` as it was asked for, no approval used) and a Denied receipt
    saying who settled it and how (``code``, ``message``) are stored in one
    transaction. The invocation's id is made from the run and the call, so that
    recording the same call again (a retry after a crash, a second process) stores
    nothing more; returns whether this call stored it."""
    invocation_id = name_uuid(f"settled:{ctx.run_id}:{call.id}")
    try:
        await executor.store.load(invocation_id)
    except NotFound:
        pass
    else:
        return False  # on the ledger already
    try:
        invocation, bytes_in = executor._invocation(tool, call, arguments, ctx)
    except CanonicalizationError:  # never claimed: nothing can be hashed exactly
        return False
    invocation["invocationId"] = invocation_id
    invocation["attemptId"] = name_uuid(f"settled-attempt:{ctx.run_id}:{call.id}")
    invocation["idempotencyKey"] = f"run:{ctx.run_id}:call:{call.id}"
    invocation["policyDecision"] = {
        "decisionId": name_uuid(f"settled-decision:{ctx.run_id}:{call.id}"),
        "effect": "require_approval",
        "policyId": executor.policy.policy_id,
        "evaluatedAt": requested_at,
        "policyVersion": executor.policy.version,
    }
    if tool.side_effect in APPROVAL_REQUIRED_CLASSES:
        invocation["approvalId"] = _NO_APPROVAL  # rule I2: none was used
    now = executor.clock()
    receipt = executor._receipt(
        invocation, "Denied", bytes_in=bytes_in, started=now, error=(code, message)
    )
    try:
        await executor.store.refuse(invocation, receipt, now, fence=ctx.fence)
    except LeaseLost:
        raise
    except (ConflictError, StoreError) as exc:  # stored meanwhile by another process?
        try:
            await executor.store.load(invocation_id)
        except NotFound:
            raise exc from None
        return False
    c = _Call(tool, call, ctx, arguments, invocation, now, bytes_in)
    executor._observe(c, receipt, invocation=invocation)
    return True
