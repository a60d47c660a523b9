"""The runner's decisions on approvals: recorded as data (who, when, on what), an approval
kept by the executor bound to the call's exact arguments before the run records it, and a
decision refused as the run stands refused before anything changes.

A mixin of :class:`~oarlock.engine.Runner`, kept apart so that the runner's own module stays
the drive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from oarlock.engine import _core as core
from oarlock.engine._settled import record_settled_calls
from oarlock.errors import ConflictError, DecisionRefused
from oarlock.formats._time import shift_rfc3339
from oarlock.governance._approvers import ApproverKey
from oarlock.governance._userkey import default_signer
from oarlock.tools._tool import ToolArgumentsError

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.engine._execute import CallContext, Executor
    from oarlock.engine._lease import Hold
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import Event, RunStore, StoredRun
    from oarlock.store._queue import Lease, RunQueue

__all__ = ["Decisions"]

_MAX_EXPIRY = 366 * 86400  # a year and a day, as the command line allows


class Decisions:
    """``decide`` and ``expire_approvals`` (see each)."""

    if TYPE_CHECKING:  # the runner's, which this mixin uses
        agent: Agent
        store: RunStore
        approver: ApproverKey | None
        executor: Executor
        clock: Callable[[], str]
        _queue: RunQueue | None

        def _with_deps(self, run_id: str, deps: Any) -> AbstractContextManager[None]: ...
        def _ctx(self, doc: RunDocument, fence: Lease | None = None) -> CallContext: ...
        async def _update(
            self,
            run_id: str,
            apply: Callable[[RunDocument], list[Event]],
            *,
            loaded: StoredRun | None = None,
            lease: Lease | None = None,
        ) -> RunDocument: ...
        async def _held(
            self,
            run_id: str,
            drive: Callable[[Hold], Awaitable[RunDocument]],
            busy: Callable[[], Awaitable[RunDocument]] | None = None,
        ) -> RunDocument: ...
        async def _drive(self, doc: RunDocument, version: int, hold: Hold) -> RunDocument: ...

    async def expire_approvals(self, run_id: str) -> RunDocument:
        """Deny (by policy, reason: expired) the run's approvals past their deadline."""
        doc = await self._update(run_id, lambda d: core.expire_approvals(d, self.clock()))
        await record_settled_calls(self.agent, self.executor, doc, self._ctx(doc))
        return doc

    async def decide(
        self,
        run_id: str,
        call_id: str,
        decision: Literal["approved", "denied", "responded"],
        *,
        reason: str | None = None,
        edited_arguments: dict[str, Any] | None = None,
        response: str | None = None,
        by: Literal["human", "policy"] = "human",
        principal: str | None = None,
        expires_in: float | None = None,
        resume: bool = False,
        deps: Any = None,
    ) -> RunDocument:
        """Record one decision. Approvals past their deadline are denied first. An
        approval is kept by the executor (bound to the call's exact arguments, used at
        most once, optionally expiring ``expires_in`` seconds from now) before the run
        records it, signed by ``principal`` (default: the runner's approver, else
        ``human``) with the runner's approver key. A racing writer makes this re-read and
        re-apply, so a second decision on the same call is refused as already decided;
        nothing is lost.

        ``resume=True`` then drives the run on, if the decision left it running, holding
        its lease from before the decision to the end of the drive (on a run queue): no
        worker takes the run in between, so an approval this process alone trusts (signed
        with its own key) is used by this process. When another process holds the run
        already, the decision is recorded all the same and the run left to its holder. A
        holder looks at the run again once it has given it back (after its drive, or after
        its own decision was refused, say because another process decided first): a run
        that a decision made meanwhile left running, and that no one holds, it takes and
        drives, so that no decision recorded while it held the run is left undriven."""

        async def decided() -> RunDocument:
            return await self._decide(
                run_id,
                call_id,
                decision,
                reason=reason,
                edited_arguments=edited_arguments,
                response=response,
                by=by,
                principal=principal,
                expires_in=expires_in,
            )

        if not resume:
            return await decided()
        # a decision refused as it stands is refused before the run's lease is taken: a
        # refusal changes nothing, not even the lease
        doc = (await self.store.load(run_id)).document
        if not any(core.lapsed(a, self.clock()) for a in doc.pending_approvals):
            edited = self._check_decision(doc, call_id, decision, edited_arguments)
            core.check_decision(
                doc, call_id, decision, edited_arguments=edited, response=response
            )

        async def drive_on(hold: Hold) -> RunDocument:
            stored = await self.store.load(run_id)
            if stored.document.status != "running":
                return stored.document
            return await self._drive(stored.document, stored.version, hold)

        async def drive(hold: Hold) -> RunDocument:
            doc = await decided()
            return await drive_on(hold) if doc.status == "running" else doc

        async def as_it_stands() -> RunDocument:
            return (await self.store.load(run_id)).document

        async def left() -> RunDocument:
            # a run left running and held by no one is driven here; one another holds is
            # that holder's, which looks again in the same way once it gives the run back
            doc = await as_it_stands()
            if doc.status != "running" or self._queue is None:
                return doc
            return await self._held(run_id, drive_on, as_it_stands)

        async def busy() -> RunDocument:
            doc = await decided()
            return await left() if doc.status == "running" else doc

        with self._with_deps(run_id, deps):
            try:
                doc = await self._held(run_id, drive, busy)
            except DecisionRefused:
                await left()  # the lease given back: a decision made meanwhile is driven
                raise
            return await left() if doc.status == "waiting_approval" else doc

    async def _decide(
        self,
        run_id: str,
        call_id: str,
        decision: Literal["approved", "denied", "responded"],
        *,
        reason: str | None,
        edited_arguments: dict[str, Any] | None,
        response: str | None,
        by: Literal["human", "policy"],
        principal: str | None,
        expires_in: float | None,
    ) -> RunDocument:
        stored = await self.store.load(run_id)
        doc = stored.document
        now = self.clock()
        if any(core.lapsed(a, now) for a in doc.pending_approvals):
            pending = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
            deadline = None if pending is None else core.lapsed(pending, now)
            await self.expire_approvals(run_id)
            if deadline is not None:
                raise DecisionRefused(
                    f"call {call_id} was not decided by its deadline ({deadline}); "
                    "policy denied it",
                    code="approval_expired",
                )
            stored = await self.store.load(run_id)
            doc = stored.document
        if decision == "approved":
            await self._keep_approval(
                doc,
                call_id,
                edited=edited_arguments,
                response=response,
                principal=principal,
                expires_in=expires_in,
            )

        def apply(doc: RunDocument) -> list[Event]:
            edited = self._check_decision(doc, call_id, decision, edited_arguments)
            return core.apply_decision(
                doc,
                call_id,
                decision,
                by=by,
                now=self.clock(),
                reason=reason,
                edited_arguments=edited,
                response=response,
                principal=who,
            )

        who = principal or (self.approver.principal if self.approver is not None else None)
        doc = await self._update(run_id, apply, loaded=stored)
        if decision != "approved":  # settled without running: on the ledger too
            await record_settled_calls(self.agent, self.executor, doc, self._ctx(doc))
        return doc

    async def _keep_approval(
        self,
        doc: RunDocument,
        call_id: str,
        *,
        edited: dict[str, Any] | None,
        response: str | None,
        principal: str | None,
        expires_in: float | None,
    ) -> None:
        """Check the approval as the run would (every refusal comes before anything is
        stored), then hand it to the executor; a second approval of one call loses there,
        whichever process made it."""
        checked = self._check_decision(doc, call_id, "approved", edited)
        pending = core.check_decision(
            doc, call_id, "approved", edited_arguments=checked, response=response
        )
        tool = self.agent.tools.get(pending.tool_name)
        if tool is None:
            return  # the call cannot run; the run says so when it resumes
        try:
            arguments = tool.validate_arguments(pending.arguments if checked is None else checked)
        except ToolArgumentsError as exc:
            raise DecisionRefused(
                f"the call's arguments are invalid: {exc}", code="invalid_edit"
            ) from None
        if checked is not None:  # an edit is judged by the policy as the call would be
            review = self.executor.review(tool, arguments, self._ctx(doc))
            if review.denied:
                rule = f" (rule {review.rule_id})" if review.rule_id else ""
                why = "; ".join(review.reasons) or "no reason given"
                raise DecisionRefused(
                    f"the policy denies the edited call{rule}: {why}", code="edit_denied"
                )
        now = self.clock()
        if expires_in is not None and not (
            isinstance(expires_in, int | float)
            and not isinstance(expires_in, bool)
            and 0 < expires_in <= _MAX_EXPIRY
        ):
            raise DecisionRefused(
                f"an approval's lifetime must be more than 0 and at most {_MAX_EXPIRY} "
                f"seconds, not {expires_in!r}",
                code="invalid_expiry",
            )
        expires_at = None if expires_in is None else shift_rfc3339(now, expires_in)
        try:
            await self.executor.record_approval(
                tool,
                call_id,
                arguments,
                self._ctx(doc),
                signer=self._signer(principal),
                expires_at=expires_at,
            )
        except ConflictError:
            raise DecisionRefused(
                f"call {call_id} was already decided", code="already_decided"
            ) from None

    def _signer(self, principal: str | None) -> ApproverKey:
        if self.approver is not None:
            return ApproverKey(principal or self.approver.principal, self.approver.private_key)
        if self.agent.approvers is not None:
            raise DecisionRefused(
                f"agent {self.agent.name!r} accepts approvals signed by its configured "
                "approvers only; sign with one of their keys (oarlock approve --key, "
                "Runner(approver=...))",
                code="approval_unauthenticated",
            )
        return default_signer(principal)  # the user's own key, made on first use

    def _check_decision(
        self,
        doc: RunDocument,
        call_id: str,
        decision: str,
        edited: dict[str, Any] | None,
    ) -> dict[str, Any] | None:
        pending = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
        tool = self.agent.tools.get(pending.tool_name) if pending else None
        if pending is None or tool is None or pending.decision is not None:
            return edited  # the core names the refusal
        if decision == "responded" and not tool.allow_response:
            raise DecisionRefused(
                f"tool {tool.name!r} does not let a human answer in its place",
                code="response_not_allowed",
            )
        if edited is None:
            return None
        try:
            tool.validate_arguments(edited)
        except ToolArgumentsError as exc:
            code = "edit_not_canonical" if exc.code == "arguments_not_canonical" else "invalid_edit"
            raise DecisionRefused(f"edited arguments refused: {exc}", code=code) from None
        return edited
