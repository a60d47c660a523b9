"""Calls settled without running, put on the ledger: every call the model asked for ends
with an invocation and a receipt, whoever settled it.

A call that waits for a human is settled by a human's denial, a human's answer in the
tool's place, its approval's deadline, or its run's cancellation; none of these runs the
tool, and each is recorded by the governed executor
(:meth:`~oarlock.governance.GovernedExecutor.record_settled`) as an invocation with a
Denied receipt whose error says who settled it and how:

* ``denied_by_human``: ``denied by PRINCIPAL: REASON``;
* ``answered_by_human``: ``answered in the tool's place by PRINCIPAL`` (the answer is what
  the model received, in the run's document);
* ``approval_expired``: the policy denied it at its deadline;
* ``policy_denied``: any other denial by policy;
* ``run_cancelled``: the run was cancelled before the call was decided.

They are recorded after the decision is committed to the run (the document is the
authority on what was decided); a crash between the two is mended when the run is driven
next: the calls of the run's latest turn are looked at again, and a record already stored
is never stored twice (its invocation id is made from the run and the call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oarlock.formats._models import AssistantMessage, PendingApproval, ToolCallPart
from oarlock.tools._tool import ToolArgumentsError

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.engine._execute import CallContext, Executor
    from oarlock.formats._models import RunDocument

__all__ = ["record_settled_calls", "settled_as"]


def settled_as(approval: PendingApproval, status: str) -> tuple[str, str] | None:
    """How a call waiting for approval was settled without running (code and message),
    or None when it was approved or is still undecided in a live run."""
    who = approval.principal or ("a human" if approval.decided_by == "human" else "policy")
    reason = approval.reason or "no reason given"
    if approval.decision == "denied" and approval.decided_by == "human":
        return "denied_by_human", f"denied by {who}: {reason}"
    if approval.decision == "denied":
        code = "approval_expired" if reason.startswith("expired") else "policy_denied"
        return code, f"denied by policy: {reason}"
    if approval.decision == "responded":
        return "answered_by_human", f"answered in the tool's place by {who}"
    if approval.decision is None and status == "cancelled":
        return "run_cancelled", "the run was cancelled before this call was decided"
    return None


def _latest(doc: RunDocument) -> list[PendingApproval]:
    """The approvals of the run's latest turn of calls: those pending, and those decided
    for the calls of its last assistant message that asked for any."""
    last_calls: set[str] = set()
    for message in reversed(doc.messages):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            last_calls = {c.id for c in message.tool_calls}
            break
    decided = [a for a in doc.decisions if a.tool_call_id in last_calls]
    return [*doc.pending_approvals, *decided]


async def record_settled_calls(
    agent: Agent, executor: Executor, doc: RunDocument, ctx: CallContext
) -> int:
    """Record the settled calls of ``doc``'s latest turn that are not on the ledger yet;
    how many were stored. An executor that cannot record them (one of the caller's own,
    without ``record_settled``) records nothing."""
    record = getattr(executor, "record_settled", None)
    if record is None or not (doc.pending_approvals or doc.decisions):
        return 0  # (a drive of a run that never waited for a human looks no further)
    stored = 0
    for approval in _latest(doc):
        how = settled_as(approval, doc.status)
        tool = agent.tools.get(approval.tool_name)
        if how is None or tool is None:
            continue
        call = ToolCallPart(
            type="tool_call",
            id=approval.tool_call_id,
            name=approval.tool_name,
            arguments=approval.arguments,
        )
        arguments: dict[str, Any]
        try:
            arguments = tool.validate_arguments(approval.arguments)
        except ToolArgumentsError:
            arguments = dict(approval.arguments)
        done = await record(
            tool,
            call,
            arguments,
            ctx,
            code=how[0],
            message=how[1],
            requested_at=approval.requested_at,
        )
        stored += bool(done)
    return stored
