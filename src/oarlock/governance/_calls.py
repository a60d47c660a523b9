"""The parts of one call's way through the governed executor (:mod:`._executor`) that
need none of its state: the call and its outcome as data, the refusal that ends it, and
the checks of its key, its approval and a claim's holder."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oarlock.formats._models import ToolCallPart
from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES
from oarlock.formats._time import is_before
from oarlock.governance._owner import owner_alive
from oarlock.governance._records import Approval
from oarlock.tools._context import RunContext
from oarlock.tools._tool import Tool, ToolEffect

if TYPE_CHECKING:
    from oarlock.governance._executor import CallContext
    from oarlock.governance._policy import PolicyVerdict
    from oarlock.governance._sandboxed import SandboxPlan
    from oarlock.governance._store import ClaimHeld

__all__: list[str] = []

_SAFE = frozenset({"read", "sandbox"})


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(slots=True)
class _Call:
    """One call on its way through the executor."""

    tool: Tool
    call: ToolCallPart
    ctx: CallContext
    arguments: dict[str, Any]  # as the tool receives them
    invocation: dict[str, Any]  # the tool-invocation-v1 record
    now: str
    bytes_in: int  # size of the canonical arguments
    sandbox: SandboxPlan | None = None  # how a ``sandbox``-class call runs
    unclaimed: bool = False  # a plain read of its own key, claimed after it ran (_plain)


@dataclass(slots=True)
class _Outcome:
    started: str
    t0: float
    status: str = "Failed"
    text: str | None = None
    effect: ToolEffect | None = None
    error: tuple[str, str] | None = None
    sandbox: dict[str, Any] | None = None  # the receipt's usage.sandbox


def _context(c: _Call) -> RunContext[Any] | None:
    """The RunContext of a call whose tool asks for one."""
    if c.tool.context_param is None:
        return None
    return RunContext(
        deps=c.ctx.deps,
        run_id=c.ctx.run_id,
        call_id=c.call.id,
        tool_name=c.tool.name,
        scope=c.ctx.scope,
        idempotency_key=c.invocation["idempotencyKey"],
        turn=c.ctx.turn,
    )


def _plain(tool: Tool, verdict: PolicyVerdict, ctx: CallContext) -> bool:
    """A call that the policy allows, that needs no approval, is no replay and runs
    outside the sandbox (a ``read`` call): nothing stands between it and its claim, so the
    store's claim (which gives the holder of a key already held) needs no look first.

    With the key of its own call (``run:<run>:call:<id>``: the tool declares none), made
    in the drive that received its model response (``CallContext.fresh``), it runs before
    it is claimed, and its claim, invocation and receipt are written after it in one write:
    by the save of its step when the runner's store takes them (``CallContext.pending``,
    :class:`~oarlock.governance.Recorded`), else by the store's ``record``. No earlier
    attempt can hold that key, and should a worker that lost the run's lease run it too,
    running a read twice changes nothing (its fenced write is refused). A call of
    a resumed step may have a receipt already, and a read with a key of its own making
    may share it with other calls and runs: those are claimed first, so that they wait
    for the holder and replay its receipt rather than run."""
    return (
        verdict.effect == "allow"
        and tool.side_effect not in APPROVAL_REQUIRED_CLASSES
        and tool.side_effect != "sandbox"
        and ctx.replay_of is None
    )


def _key(c: _Call) -> str:
    if c.tool.idempotency_key is None:
        replaying = c.ctx.replay_of is not None and c.tool.side_effect not in _SAFE
        run = c.ctx.replay_of if replaying else c.ctx.run_id
        return f"run:{run}:call:{c.call.id}"
    try:
        key = c.tool.idempotency_key(c.arguments)
    except Exception as exc:
        raise _Refused(
            "idempotency_key_failed",
            f"the tool's idempotency key could not be made: {type(exc).__name__}: {exc}",
        ) from None
    if not isinstance(key, str) or not key:
        raise _Refused("idempotency_key_failed", "the tool's idempotency key is empty")
    return key


def _check_approval(approval: Approval, used_by: str | None, c: _Call) -> None:
    """Refuse an approval that does not cover exactly this call, now."""
    tool, invocation, ctx, now = c.tool, c.invocation, c.ctx, c.now
    if approval.run_id != ctx.run_id:
        raise _Refused("approval_wrong_run", f"the approval is for run {approval.run_id}")
    if approval.tool_id != tool.name:
        raise _Refused("approval_wrong_tool", f"the approval is for tool {approval.tool_id!r}")
    if approval.scope != dict(ctx.scope):
        raise _Refused("approval_wrong_scope", "the approval was given in another scope")
    if approval.arguments_hash != invocation["argumentsHash"]:
        raise _Refused(
            "approval_mismatch",
            "the approval covers other arguments than these "
            f"({approval.arguments_hash} approved, {invocation['argumentsHash']} asked)",
        )
    if approval.expires_at is not None and not is_before(now, approval.expires_at):
        raise _Refused("approval_expired", f"the approval expired at {approval.expires_at}")
    if used_by is not None:
        raise _Refused("approval_used", f"the approval was used by invocation {used_by}")


def _stale(held: ClaimHeld) -> bool:
    """Whether a claim without a receipt will never get one from its holder: its run's
    lease epoch has moved on since the claim was taken (whatever its process is doing),
    its process is gone, or its lease passed while its process cannot be checked."""
    claim = held.claim
    if claim.epoch is not None and held.run_epoch is not None and held.run_epoch != claim.epoch:
        return True
    alive = owner_alive(claim.owner)
    if alive is False:
        return True
    return alive is None and time.time() > claim.lease_until


def _failed(verdict: PolicyVerdict) -> bool:
    return verdict.rule_id is None and any(
        r.startswith("policy evaluation failed") for r in verdict.reasons
    )
