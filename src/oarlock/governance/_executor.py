"""The governed executor: the one way a tool runs.

For every call it builds a tool-invocation-v1 record and, in this order:

1. looks for the call's idempotency claim: a key that is held already is never run again
   (same arguments: the prior receipt is returned, identical; other arguments: refused;
   still running elsewhere: wait, bounded; cut off by a crash, taken under a lease
   epoch its run has left, or left by an attempt of this very run's call that an
   orchestrator gave up for dead (``CallContext.retried``): Uncertain for a
   side-effecting tool, a new attempt for a ``read`` or ``sandbox`` one);
2. asks the policy (an error in the policy denies);
3. for ``shared-write`` and above, or when the policy asks for one, finds the approval of
   this very call in its own store (never a caller's word) and checks that it covers this
   run, tool, scope and arguments hash, is unexpired and unused; a policy rule that allows
   such a call grants a standing approval, recorded as decided by that rule;
4. takes the claim, uses the approval and stores the invocation in one transaction,
   committed before the tool starts;
5. runs the tool with its timeout, stores the raw result as an artifact and writes the
   tool-receipt-v1; a side-effecting call whose outcome cannot be known (timeout,
   cancellation, a failed receipt write) is Uncertain and never run again automatically;
6. hands the model the sanitized, fenced result, or an error result saying what happened.

A ``read`` call that the policy allows, and that is no replay, skips the look of step 1:
the claim of step 4, refused for a key that is held already, gives its holder, and the
call goes on as step 1 says.

Every record goes to the hash-chained ledger with the transaction that stores it. A call
made under a worker's lease (``CallContext.fence``) passes it to every write, so that once
the run's lease has passed to another, nothing more of the call is stored: the store raises
:class:`~oarlock.errors.LeaseLost`, which the executor lets through, never turning it into
a result. The
records are built here, from values already checked (tool arguments against the tool's
schema, and canonical; scope and ids by their types), so they are valid by construction and
not validated again on each call: ``oarlock.testing.ValidatingGovernanceStore`` validates
every record written (schema and rules), and the test suites run the executor through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from oarlock._secrets import redact
from oarlock.errors import (
    CanonicalizationError,
    ConfigError,
    ConflictError,
    DecisionRefused,
    LeaseLost,
    NotFound,
    OarlockError,
    OutcomeUnknown,
)
from oarlock.formats._jcs import canonicalize, digest, digest_bytes, forget, remember
from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.formats._rules import APPROVAL_REQUIRED_CLASSES
from oarlock.formats._time import now_rfc3339, shift_rfc3339
from oarlock.governance._approvers import ApproverKey, TrustedApprovers, in_process_approvers
from oarlock.governance._calls import (
    _SAFE,
    _Call,
    _check_approval,
    _context,
    _failed,
    _key,
    _Outcome,
    _plain,
    _Refused,
    _stale,
)
from oarlock.governance._ledger import approval_ledger_problem
from oarlock.governance._owner import process_owner
from oarlock.governance._policy import (
    DEFAULT_POLICY,
    PolicyEngine,
    PolicyRequest,
    PolicyVerdict,
)
from oarlock.governance._records import (
    Approval,
    CallOutcome,
    Claim,
    new_uuid,
    run_uuid,
    seal,
    step_uuid,
)
from oarlock.governance._sandboxed import SandboxRefused, plan_sandbox, run_planned
from oarlock.governance._sanitize import DEFAULT_MAX_CHARS, sanitize, sanitize_result
from oarlock.governance._store import ClaimHeld, GovernanceStore, Recorded, artifact_ref
from oarlock.governance._told import (
    effect_record,
    error_result,
    error_text,
    policy_text,
    uncertain_text,
)
from oarlock.governance._verdict import checked_verdict, is_text
from oarlock.tools._tool import Tool, ToolOutput, result_text

if TYPE_CHECKING:
    from oarlock.sandbox._runner import SandboxRunner
    from oarlock.store._queue import Lease

__all__ = ["NO_APPROVAL", "CallContext", "CallOutcome", "GovernedExecutor", "Review",
           "json_arguments"]  # fmt: skip

NO_APPROVAL = "00000000-0000-0000-0000-000000000000"
"""The approval id a refused ``shared-write``-or-above invocation carries: none was used."""


@dataclass(frozen=True, slots=True)
class CallContext:
    """Where a call is made: the run (its document id), agent, scope and turn; ``fence``
    is the lease the run is driven under, which fences every write of the call."""

    run_id: str
    agent: str
    scope: Mapping[str, Any]
    turn: int
    replay_of: str | None = None  # a replay's original run: side effects are not repeated
    fence: Lease | None = None
    deps: Any = None  # the caller's dependencies, for tools that take the RunContext
    # a retry of this very call after its earlier attempt was given up for dead (an
    # orchestrator retrying the activity that made it): a claim of this run left without a
    # receipt is stale at once, whatever its owner looks like from here
    retried: bool = False
    # the call's model response came in this very drive, which then runs its calls: no
    # earlier attempt of them can hold their keys, so a plain read runs before its claim
    fresh: bool = False
    # where such a fresh call's one write goes (:class:`Recorded`): into the save of its
    # step, made by a runner whose store takes them; None: written at once (``record``)
    pending: list[Recorded] | None = None

    @property
    def tenant(self) -> str:
        return str(self.scope["tenantId"])


@dataclass(frozen=True, slots=True)
class Review:
    """The planning verdict on a call: whether a human must approve it first, and by when
    (seconds from now) the approval must come; whether the policy denies it outright, and
    the rule and reasons that decided."""

    needs_approval: bool
    ttl_seconds: float | None = None
    denied: bool = False
    rule_id: str | None = None
    reasons: tuple[str, ...] = ()
    four_eyes: bool = False
    # the policy's verdict and when it was reached: a call run in the same step as it was
    # planned runs under it (``execute(review=...)``), not under a second evaluation
    verdict: PolicyVerdict | None = None
    evaluated_at: str | None = None


def json_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as JSON (what invocations record and hashes cover): validated
    arguments may hold models, dates or tuples."""
    return canonical_arguments(arguments)[0]


def canonical_arguments(arguments: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """:func:`json_arguments` and its JCS bytes: the arguments themselves when they are
    JSON already, with the bytes that showed it."""
    try:
        return arguments, canonicalize(arguments)
    except (CanonicalizationError, TypeError, ValueError):
        converted: dict[str, Any] = to_jsonable_python(arguments)
        return converted, canonicalize(converted)


class GovernedExecutor:
    """Runs every tool call under policy, exact approvals, idempotency and receipts.

    ``duplicate_wait`` bounds how long a duplicate of a running call waits for its
    receipt; ``lease_seconds`` how long a claim without a timeout is presumed live when
    its owner cannot be checked (another host)."""

    def __init__(
        self,
        store: GovernanceStore,
        *,
        policy: PolicyEngine | None = None,
        clock: Callable[[], str] = now_rfc3339,
        duplicate_wait: float = 10.0,
        lease_seconds: float = 300.0,
        max_result_chars: int = DEFAULT_MAX_CHARS,
        approvers: TrustedApprovers | None = None,
        sandbox: SandboxRunner | None = None,
    ) -> None:
        self.store, self.policy, self.clock = store, policy or DEFAULT_POLICY, clock
        self._sandbox_runner = sandbox
        # told of every receipt a call ends with
        self.observers: list[Callable[[CallOutcome], None]] = []
        self.approvers = approvers if approvers is not None else in_process_approvers()
        for attr in ("policy_id", "version"):
            value = getattr(self.policy, attr, None)
            if not (is_text(value) and value):
                raise ConfigError(f"the policy engine's {attr} must be non-empty text")
        self.duplicate_wait, self.lease_seconds = duplicate_wait, lease_seconds
        self.max_result_chars = max_result_chars

    # -- planning and decisions ---------------------------------------------------------
    def review(self, tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> Review:
        at = self.clock()
        verdict = self._evaluate(tool, arguments, ctx)
        return Review(
            verdict.effect == "require_approval",
            verdict.approval_ttl_seconds,
            denied=verdict.effect == "deny",
            rule_id=verdict.rule_id,
            reasons=verdict.reasons,
            four_eyes=verdict.four_eyes is True,
            verdict=verdict,
            evaluated_at=at,
        )

    async def record_approval(
        self,
        tool: Tool,
        call_id: str,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        signer: ApproverKey,
        expires_at: str | None = None,
    ) -> Approval:
        """Store a human's approval of exactly these arguments (after any edit), signed by
        ``signer``; refused (DecisionRefused, code ``approval_unauthenticated``) when this
        executor does not trust the signer's key for its principal, since the approval
        could then never be used."""
        if not self.approvers.trusts(signer):
            raise DecisionRefused(
                f"key {signer.key_id} is not a trusted approver key for {signer.principal!r}; "
                "sign with a key listed in the agent's approvers",
                code="approval_unauthenticated",
            )
        approval = Approval(
            approval_id=new_uuid(),
            run_id=ctx.run_id,
            tool_call_id=call_id,
            tool_id=tool.name,
            arguments_hash=digest(json_arguments(arguments)),
            scope=dict(ctx.scope),
            decided_by="human",
            principal=signer.principal,
            decided_at=self.clock(),
            expires_at=expires_at,
        )
        approval = signer.sign(approval)
        await self.store.record_approval(approval)
        return approval

    async def record_settled(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        code: str,
        message: str,
        requested_at: str,
    ) -> bool:
        """Put on the ledger a call settled without running (see
        :func:`oarlock.governance._settle.record_settled`); whether this call stored it."""
        from oarlock.governance._settle import record_settled

        return await record_settled(
            self, tool, call, arguments, ctx, code=code, message=message,
            requested_at=requested_at,
        )  # fmt: skip

    def _evaluate(self, tool: Tool, arguments: dict[str, Any], ctx: CallContext) -> PolicyVerdict:
        """The policy's verdict; any error in the policy or the tool's rule, and any
        verdict that is not one (an unknown effect, a rule id or reason that is not text),
        denies: the executor fails closed, and records only what the formats allow."""
        try:
            request = PolicyRequest(
                tool=tool.name,
                side_effect_class=tool.side_effect,
                scope=ctx.scope,
                arguments=arguments,
                tool_requires_approval=tool.requires_approval(arguments),
            )
            return checked_verdict(self.policy.evaluate(request))
        except Exception as exc:  # fail closed
            why = sanitize(f"{type(exc).__name__}: {exc}", max_chars=2000)
            return PolicyVerdict("deny", None, (f"policy evaluation failed: {why}",))

    # -- execution ----------------------------------------------------------------------
    async def execute(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        review: Review | None = None,
    ) -> ToolResultPart:
        """Run one call under the policy, or refuse it. ``review``: this executor's review
        of this very call (tool, arguments and context), made as the step that runs it was
        planned; its verdict stands, and the policy is not asked again."""
        now = self.clock()
        if review is not None and review.verdict is not None:
            verdict, evaluated_at = review.verdict, review.evaluated_at or now
        else:
            verdict, evaluated_at = self._evaluate(tool, arguments, ctx), now
        try:
            invocation, bytes_in = self._invocation(tool, call, arguments, ctx)
        except CanonicalizationError as exc:  # nothing is claimed, run or recorded
            return error_result(
                call,
                f"Tool {tool.name!r} was not run: its arguments have no canonical form "
                f"({exc}) (arguments_not_canonical).",
            )
        c = _Call(tool, call, ctx, arguments, invocation, now, bytes_in)
        c.invocation["policyDecision"] = self._decision(verdict, evaluated_at)
        try:
            c.invocation["idempotencyKey"] = _key(c)
        except _Refused as refusal:
            c.invocation["idempotencyKey"] = f"unkeyed:{c.invocation['invocationId']}"
            return await self._deny(c, refusal)
        if _plain(tool, verdict, ctx):  # no look at the key first: the store's claim gives it
            if ctx.fresh and tool.idempotency_key is None:  # a key no one holds: run now
                c.unclaimed = True
                return await self._run(c)
            return await self._begin(c, None, None)
        unsandboxed: _Refused | None = None
        if tool.side_effect == "sandbox":  # planned first: every path below runs under it
            try:
                c.sandbox = plan_sandbox(self.sandbox, tool, verdict, c.invocation["runId"])
            except SandboxRefused as exc:
                unsandboxed = _Refused(exc.code, exc.message)
            else:
                c.invocation["sandbox"] = c.sandbox.invocation_member()
        held = await self.store.claim_of(ctx.tenant, tool.name, c.invocation["idempotencyKey"])
        if held is not None:
            return await self._held(c, held)
        if ctx.replay_of is not None and tool.side_effect not in _SAFE:
            return await self._deny(
                c,
                _Refused(
                    "replay_side_effect",
                    f"a replay does not make side-effecting calls; run {ctx.replay_of} "
                    "made no such call",
                ),
            )
        try:
            approval_id, grant = await self._authorize(c, verdict)
        except _Refused as refusal:
            if refusal.code == "approval_used":  # a duplicate may have claimed the key since
                return await self._raced(c, refusal)
            return await self._deny(c, refusal)
        if grant is not None:
            c.invocation["approvalId"] = grant.approval_id
        elif approval_id is not None:
            c.invocation["approvalId"] = approval_id
        if unsandboxed is not None:  # refused before anything is claimed
            return await self._deny(c, unsandboxed)
        return await self._begin(c, approval_id, grant)

    async def _begin(
        self, c: _Call, approval_id: str | None, grant: Approval | None
    ) -> ToolResultPart:
        """Claim the key and record the invocation, then run the call; or, when the key is
        held, answer as its holder's duplicate."""
        ctx = c.ctx
        try:
            held = await self.store.begin(
                c.invocation,
                self._claim(c),
                approval_id=approval_id,
                grant=grant,
                at=c.now,
                fence=ctx.fence,
            )
        except LeaseLost:
            raise
        except ConflictError as exc:
            return await self._raced(c, _Refused(exc.code, str(exc)))
        if held is not None:
            return await self._held(c, held)
        return await self._run(c)

    async def _raced(self, c: _Call, refusal: _Refused) -> ToolResultPart:
        """The approval was used between our look at the claim and our use of it: by a
        duplicate of this very call (wait for it and replay its receipt), or by another."""
        key = c.invocation["idempotencyKey"]
        held = await self.store.claim_of(c.ctx.tenant, c.tool.name, key)
        if held is not None:
            return await self._held(c, held)
        return await self._deny(c, refusal)

    def _invocation(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
    ) -> tuple[dict[str, Any], int]:
        """The invocation record (without its key and decision), and the size of its
        canonical arguments, which their hash was taken over."""
        record, canonical = canonical_arguments(arguments)
        invocation: dict[str, Any] = {
            "invocationId": new_uuid(),
            "toolId": tool.name,
            "schemaVersion": tool.schema_version,
            "scope": dict(ctx.scope),
            "runId": run_uuid(ctx.run_id),
            "stepId": step_uuid(ctx.run_id, ctx.turn),
            "attemptId": new_uuid(),
            "agentId": ctx.agent,
            "sideEffectClass": tool.side_effect,
            "idempotencyKey": "",
            "arguments": record,
            "argumentsHash": digest_bytes(canonical),
        }
        if tool.mcp_server_id is not None:
            invocation["mcpServerId"] = tool.mcp_server_id
        if tool.timeout_seconds is not None:
            invocation["timeoutSeconds"] = max(1, math.ceil(tool.timeout_seconds))
        return invocation, len(canonical)

    def _decision(self, verdict: PolicyVerdict, now: str) -> dict[str, Any]:
        decision: dict[str, Any] = {
            "decisionId": new_uuid(),
            "effect": verdict.effect,
            "policyId": self.policy.policy_id,
            "evaluatedAt": now,
            "policyVersion": self.policy.version,
        }
        if verdict.rule_id is not None:
            decision["ruleId"] = verdict.rule_id
        if verdict.reasons:
            decision["reasons"] = list(verdict.reasons)
        return decision

    def _claim(self, c: _Call) -> Claim:
        timeout = c.tool.timeout_seconds
        lease = self.lease_seconds if timeout is None else timeout + 60.0
        return Claim(
            tenant_id=c.ctx.tenant,
            tool_id=c.tool.name,
            idempotency_key=c.invocation["idempotencyKey"],
            invocation_id=c.invocation["invocationId"],
            arguments_hash=c.invocation["argumentsHash"],
            owner=process_owner(),
            claimed_at=c.now,
            lease_until=time.time() + lease,
            run_id=c.ctx.run_id,
            epoch=None if c.ctx.fence is None else c.ctx.fence.epoch,
        )

    async def _authorize(
        self, c: _Call, verdict: PolicyVerdict
    ) -> tuple[str | None, Approval | None]:
        """The approval this call runs under, or a refusal; a policy allow of a call that
        needs one is a standing approval, returned to be stored with the claim."""
        if verdict.effect == "deny":
            code = "policy_error" if _failed(verdict) else "policy_denied"
            raise _Refused(code, policy_text("denied", verdict))
        cautious = c.tool.side_effect in APPROVAL_REQUIRED_CLASSES
        if verdict.effect != "require_approval" and not cautious:
            return None, None
        try:
            approval, used_by = await self.store.approval_for(c.ctx.run_id, c.call.id)
        except NotFound:
            if verdict.effect == "allow":
                return None, self._standing(c, verdict)
            raise _Refused(
                "approval_required", f"tool {c.tool.name!r} needs an approval and has none"
            ) from None
        self._authenticate(approval, verdict, c)
        _check_approval(approval, used_by, c)
        if c.tool.side_effect not in _SAFE:  # its single use, as the ledger shows it
            read = getattr(self.store, "approval_ledger", None)
            if read is not None:
                problem = approval_ledger_problem(
                    await read(c.ctx.run_id, c.call.id), approval.approval_id
                )
                if problem is not None:
                    raise _Refused(*problem)
        return approval.approval_id, None

    def _authenticate(self, approval: Approval, verdict: PolicyVerdict, c: _Call) -> None:
        """Refuse an approval that is only a row: a human's must carry a signature by a
        trusted key; a policy's holds only while that very policy still allows the call."""
        if approval.decided_by == "policy":
            rule = verdict.rule_id or self.policy.policy_id
            if (
                verdict.effect != "allow"
                or approval.policy_version != self.policy.version
                or approval.principal != rule
            ):
                raise _Refused(
                    "approval_unauthenticated",
                    "the standing approval was not granted by the policy in force "
                    f"({self.policy.policy_id} {self.policy.version})",
                )
            return
        problem = self.approvers.problem(approval)
        if problem is not None:
            raise _Refused("approval_unauthenticated", problem)

    def _standing(self, c: _Call, verdict: PolicyVerdict) -> Approval:
        ttl = verdict.approval_ttl_seconds
        return Approval(
            approval_id=new_uuid(),
            run_id=c.ctx.run_id,
            tool_call_id=c.call.id,
            tool_id=c.tool.name,
            arguments_hash=c.invocation["argumentsHash"],
            scope=dict(c.ctx.scope),
            decided_by="policy",
            principal=verdict.rule_id or self.policy.policy_id,
            decided_at=c.now,
            expires_at=None if ttl is None else shift_rfc3339(c.now, ttl),
            policy_version=self.policy.version,
        )

    # -- a key that is held already -------------------------------------------------------
    async def _held(self, c: _Call, held: ClaimHeld) -> ToolResultPart:
        """Replay the holder's receipt, refuse other arguments, wait (bounded) for a live
        holder, or recover from a dead one."""
        claim = held.claim
        if claim.arguments_hash != c.invocation["argumentsHash"]:
            return await self._deny(
                c,
                _Refused(
                    "idempotency_mismatch",
                    f"idempotency key {claim.idempotency_key!r} was used with other arguments "
                    f"(invocation {claim.invocation_id}); nothing was run",
                ),
            )
        deadline = time.monotonic() + self.duplicate_wait
        given_up = c.ctx.retried and claim.run_id == c.ctx.run_id
        while held.receipt is None and not (given_up or _stale(held)):
            if time.monotonic() >= deadline:
                return await self._deny(
                    c,
                    _Refused(
                        "idempotency_in_progress",
                        f"the same call (invocation {held.claim.invocation_id}) is still running",
                    ),
                )
            await asyncio.sleep(0.01)
            again = await self.store.claim_of(claim.tenant_id, claim.tool_id, claim.idempotency_key)
            held = held if again is None else again
        if held.receipt is not None:
            return await self._replay(c, held.receipt)
        return await self._recover(c, held.claim)

    async def _recover(self, c: _Call, claim: Claim) -> ToolResultPart:
        """A claim whose owner died before its receipt (or whose run's lease has moved on
        since it was taken): a safe call runs again as a new attempt; a side-effecting one
        is Uncertain, never re-run."""
        prior, _ = await self.store.load(claim.invocation_id)
        fence = c.ctx.fence
        if c.tool.side_effect in _SAFE:
            attempt = {**prior, "invocationId": new_uuid(), "attemptId": new_uuid()}
            attempt.pop("sandbox", None)  # the plan this attempt runs under, not the prior's
            if c.sandbox is not None:
                attempt["sandbox"] = c.sandbox.invocation_member()
            retry = _Call(c.tool, c.call, c.ctx, c.arguments, attempt, c.now, c.bytes_in)
            retry.sandbox = c.sandbox
            if await self.store.take_over(claim, self._claim(retry), attempt, c.now, fence=fence):
                return await self._run(retry)
        else:
            receipt = self._receipt(
                prior,
                "Uncertain",
                bytes_in=c.bytes_in,  # the prior call had these very arguments
                started=c.now,
                error=(
                    "interrupted",
                    "the process running this call stopped before its receipt was written",
                ),
            )
            try:
                await self.store.finish(receipt, result=None, at=c.now, fence=fence)
            except LeaseLost:
                raise
            except ConflictError:  # another process recorded it first
                pass
        held = await self.store.claim_of(claim.tenant_id, claim.tool_id, claim.idempotency_key)
        if held is None or held.receipt is None:
            return error_result(c.call, f"Tool {c.tool.name!r}: its earlier attempt is unresolved.")
        return await self._replay(c, held.receipt)

    def _observe(
        self,
        c: _Call,
        receipt: dict[str, Any],
        replayed: bool = False,
        invocation: dict[str, Any] | None = None,
    ) -> None:
        if self.observers:
            record = c.invocation if invocation is None else invocation
            outcome = CallOutcome(c.ctx.run_id, c.call.id, record, receipt, replayed)
            for observer in self.observers:
                observer(outcome)

    async def _replay(self, c: _Call, receipt: dict[str, Any]) -> ToolResultPart:
        status = receipt["status"]
        self._observe(c, receipt, replayed=True)
        if status == "Succeeded" and "resultRef" in receipt:
            raw = await self.store.artifact(receipt["resultRef"])
            return self._result(c.call, raw.decode("utf-8", "replace"))
        if status == "Uncertain":
            notes = await self.store.reconciliations(receipt["invocationId"])
            if notes:
                last = notes[-1]
                return error_result(
                    c.call,
                    f"Tool {c.tool.name!r}: an operator reconciled invocation "
                    f"{last.invocation_id} as {last.outcome} ({last.evidence}).",
                )
            return error_result(c.call, uncertain_text(c.tool, receipt))
        return error_result(c.call, error_text(c.tool, receipt))

    # -- running ----------------------------------------------------------------------
    @property
    def sandbox(self) -> SandboxRunner:
        """The runner of ``sandbox``-class calls (made on first use)."""
        if self._sandbox_runner is None:
            from oarlock.sandbox._runner import SandboxRunner

            self._sandbox_runner = SandboxRunner()
        return self._sandbox_runner

    async def _run_sandboxed(self, c: _Call, out: _Outcome) -> ToolResultPart:
        """A ``sandbox``-class call, run by the sandbox runner under its plan, or refused
        (:func:`~oarlock.governance._sandboxed.run_planned`)."""
        try:
            await run_planned(self.sandbox, c, out)
        except asyncio.CancelledError:  # the runner killed the sandbox before it let this go
            await asyncio.shield(self._close(c, out))
            raise
        return await self._close(c, out)

    async def _run(self, c: _Call) -> ToolResultPart:
        tool = c.tool
        out = _Outcome(self.clock(), time.perf_counter())
        if tool.side_effect == "sandbox" or c.sandbox is not None:
            return await self._run_sandboxed(c, out)
        side_effecting = tool.side_effect not in _SAFE
        try:
            if tool.timeout_seconds is None:
                value = await tool.call(c.arguments, _context(c))
            else:
                value = await asyncio.wait_for(
                    tool.call(c.arguments, _context(c)), tool.timeout_seconds
                )
        except TimeoutError:
            out.status = "Uncertain" if side_effecting else "TimedOut"
            out.error = ("timeout", f"no answer within {tool.timeout_seconds} s")
            return await self._close(c, out)
        except asyncio.CancelledError:
            out.status = "Uncertain" if side_effecting else "Failed"
            out.error = ("cancelled", "the call was cancelled while it ran")
            await asyncio.shield(self._close(c, out))
            raise
        except Exception as exc:
            code = exc.code if isinstance(exc, OarlockError) else type(exc).__name__
            unknown = isinstance(exc, OutcomeUnknown) and side_effecting
            out.status = "Uncertain" if unknown else "Failed"
            out.error = (code, f"{type(exc).__name__}: {exc}")
            return await self._close(c, out)
        out.status = "Succeeded"
        if isinstance(value, ToolOutput):
            out.effect, value = value.effect, value.value
        out.text = result_text(value)
        return await self._close(c, out)

    async def _close(self, c: _Call, out: _Outcome) -> ToolResultPart:
        raw = None if out.text is None else out.text.encode("utf-8", "surrogatepass")
        sealed: list[bytes] = []
        receipt = self._receipt(
            c.invocation,
            out.status,
            bytes_in=c.bytes_in,
            started=out.started,
            duration_ms=round((time.perf_counter() - out.t0) * 1000),
            raw=raw,
            effect=effect_record(out.effect) if c.tool.side_effect not in _SAFE else None,
            error=out.error,
            sandbox=out.sandbox,
            sealed=sealed,
        )
        remember(receipt, sealed[0])  # the store's ledger entry takes its bytes as made
        try:
            if c.unclaimed and c.ctx.pending is not None:  # stored with the step's save
                claim, sealed_jcs = self._claim(c), sealed[0]
                c.ctx.pending.append(Recorded(c.invocation, claim, receipt, raw, c.now, sealed_jcs))
            elif c.unclaimed:
                held = await self.store.record(
                    c.invocation, self._claim(c), receipt, result=raw, at=c.now, fence=c.ctx.fence
                )
                if held is not None:  # a duplicate holds the key: its outcome stands
                    return await self._held(c, held)
            else:
                await self.store.finish(
                    receipt, result=raw, at=receipt["finishedAt"], fence=c.ctx.fence
                )
            self._observe(c, receipt)
        except LeaseLost:  # the run is another's now: it records the outcome as Uncertain
            raise
        except Exception as exc:  # the outcome happened but is not on record
            return await self._unrecorded(c, out.started, exc)
        finally:
            forget(receipt)
        if out.text is not None:
            return self._result(c.call, out.text)
        if out.status == "Uncertain":
            return error_result(c.call, uncertain_text(c.tool, receipt))
        return error_result(c.call, error_text(c.tool, receipt))

    async def _unrecorded(self, c: _Call, started: str, exc: Exception) -> ToolResultPart:
        why = f"its receipt could not be written: {type(exc).__name__}: {exc}"
        if c.tool.side_effect in _SAFE:
            return error_result(c.call, f"Tool {c.tool.name!r} ran, but {why}.")
        receipt = self._receipt(
            c.invocation,
            "Uncertain",
            bytes_in=c.bytes_in,
            started=started,
            error=("receipt_failed", why),
        )
        with contextlib.suppress(Exception):  # else the open claim stays: recovery records it
            await self.store.finish(
                receipt, result=None, at=receipt["finishedAt"], fence=c.ctx.fence
            )
        return error_result(c.call, uncertain_text(c.tool, receipt))

    def _receipt(
        self,
        invocation: dict[str, Any],
        status: str,
        *,
        bytes_in: int,
        started: str,
        duration_ms: int | None = None,
        raw: bytes | None = None,
        effect: dict[str, Any] | None = None,
        error: tuple[str, str] | None = None,
        sandbox: dict[str, Any] | None = None,
        sealed: list[bytes] | None = None,
    ) -> dict[str, Any]:
        """A tool-receipt-v1 record, its hash set; its JCS bytes go to ``sealed``."""
        receipt: dict[str, Any] = {
            "invocationId": invocation["invocationId"],
            "status": status,
            "startedAt": started,
            "finishedAt": max(self.clock(), started),
        }
        if status == "Succeeded" and effect is not None:
            receipt["effect"] = effect
        if raw is not None:
            receipt["resultRef"] = artifact_ref(raw)
            receipt["sanitized"] = True
        usage: dict[str, Any] = {"bytesIn": bytes_in}
        if duration_ms is not None:
            usage["durationMs"] = duration_ms
        if raw is not None:
            usage["bytesOut"] = len(raw)
        if sandbox is not None:
            usage["sandbox"] = sandbox
        receipt["usage"] = usage
        if error is not None:
            message = sanitize(redact(error[1]), max_chars=4000)
            receipt["error"] = {"code": error[0], "message": message}
        canonical = seal(receipt)
        if sealed is not None:
            sealed.append(canonical)
        return receipt

    async def _deny(self, c: _Call, refusal: _Refused) -> ToolResultPart:
        invocation = {k: v for k, v in c.invocation.items() if k != "approvalId"}
        if invocation["sideEffectClass"] in APPROVAL_REQUIRED_CLASSES:
            # tool-invocation-v1 (rule I2) wants an approval id on every such record; a
            # refused call carries the nil UUID: no approval was used
            invocation["approvalId"] = NO_APPROVAL
        receipt = self._receipt(
            invocation,
            "Failed" if c.unclaimed else "Denied",  # a plain read is refused after it ran
            bytes_in=c.bytes_in,
            started=c.now,
            error=(refusal.code, refusal.message),
        )
        await self.store.refuse(invocation, receipt, c.now, fence=c.ctx.fence)
        self._observe(c, receipt, invocation=invocation)
        what = "ran, but its result is not used" if c.unclaimed else "was not run"
        return error_result(
            c.call, f"Tool {c.call.name!r} {what}: {refusal.message} ({refusal.code})."
        )

    def _result(self, call: ToolCallPart, text: str) -> ToolResultPart:
        return ToolResultPart(
            type="tool_result",
            tool_call_id=call.id,
            tool_name=call.name,
            content=sanitize_result(text, max_chars=self.max_result_chars),
        )
