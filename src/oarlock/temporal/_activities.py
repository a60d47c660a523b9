"""The activities of a run's workflow: each loads the run from oarlock's store, takes one
step through the runner's and the executor's own code, commits it, and answers with a
:class:`~._types.Snapshot` (ids, versions and hashes; never the conversation).

* :data:`~._types.MODEL_STEP`: the run's next model request (or halt), taken only if the
  run is still at the version the workflow saw, so that a retried attempt whose first try
  committed takes no second step.
* :data:`~._types.TOOL_CALL`: one call of the current step through the governed executor
  (policy, approval binding, an idempotency claim keyed on the run and the call, never on
  Temporal's attempt number), its result committed to the run. A retry of an attempt that
  died with the call's claim taken and no receipt gets Uncertain for a side-effecting tool
  (recorded as data; the tool is not run again) and a new attempt for a ``read`` or
  ``sandbox`` one. Denials and Uncertain are results, never errors, so never retried.
* :data:`~._types.DECIDE`: a decision, stored through :meth:`Runner.decide` (the command
  line's path: the approval signed and kept by the executor before the run records it).
* :data:`~._types.RECONCILE`: lapsed approvals denied by the store's clock, a cancellation,
  a failure.

Every activity heartbeats while it works, so that a dead worker is noticed within the
heartbeat timeout. A refusal is an ``ApplicationError`` that is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from oarlock._driven import ENGINE
from oarlock._secrets import redact
from oarlock.engine import _core as core
from oarlock.engine._execute import plan_call
from oarlock.engine._run_agents import RunAgents
from oarlock.engine._runner import Runner, update_run
from oarlock.engine._settled import record_settled_calls
from oarlock.errors import (
    ConflictError,
    DecisionRefused,
    NotFound,
    OarlockError,
    RunStateError,
    StoreError,
)
from oarlock.formats._codec import dump
from oarlock.formats._jcs import digest, digest_bytes
from oarlock.formats._models import AssistantMessage, ToolCallPart, ToolResultPart
from oarlock.formats._time import parse_rfc3339, shift_rfc3339
from oarlock.governance._sanitize import sanitize
from oarlock.temporal._types import (
    DECIDE,
    MODEL_STEP,
    RECONCILE,
    TOOL_CALL,
    DecideInput,
    Pending,
    ReconcileInput,
    Snapshot,
    StepInput,
    ToolInput,
)

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.formats._models import PendingApproval, RunDocument
    from oarlock.governance._approvers import ApproverKey
    from oarlock.store._base import Event, RunStore, StoredRun

__all__ = ["Activities", "arguments_hash", "snapshot"]


def arguments_hash(pending: PendingApproval) -> str:
    """The hash a decision on ``pending`` binds to: of the arguments a human is shown."""
    try:
        return digest(pending.arguments)
    except (OarlockError, TypeError, ValueError):  # not portable JSON: its escaped text
        text = json.dumps(pending.arguments, sort_keys=True, ensure_ascii=True, default=repr)
        return digest_bytes(text.encode())


def _epoch(pending: PendingApproval) -> float | None:
    deadline = (pending.model_extra or {}).get("expiresAt")
    parsed = parse_rfc3339(deadline) if isinstance(deadline, str) else None
    if parsed is None:
        return None
    return parsed[0].timestamp() + float(parsed[1])


def _document_hash(doc: RunDocument) -> str:
    data = dump(doc)
    try:
        return digest(data)
    except (OarlockError, TypeError, ValueError):
        text = json.dumps(data, sort_keys=True, ensure_ascii=True, default=repr)
        return digest_bytes(text.encode())


def _step_calls(doc: RunDocument) -> list[ToolCallPart]:
    last = doc.messages[-1] if doc.messages else None
    return last.tool_calls if isinstance(last, AssistantMessage) else []


def _open_calls(doc: RunDocument) -> tuple[list[str], list[str]]:
    """The calls of the current step that nothing answered yet: unplanned ones, and
    approved ones that may run (once every decision is made)."""
    if doc.status in core.TERMINAL:
        return [], []
    answered = {r.tool_call_id for r in doc.buffered_tool_results}
    pending = {a.tool_call_id: a for a in doc.pending_approvals}
    unplanned, approved = [], []
    for call in _step_calls(doc):
        if call.id in answered:
            continue
        if call.id not in pending:
            unplanned.append(call.id)
        elif pending[call.id].decision == "approved" and doc.status == "running":
            approved.append(call.id)
    return unplanned, approved


def snapshot(doc: RunDocument, version: int, limits: Any) -> Snapshot:
    """What the workflow keeps of the run as stored at ``version``."""
    unplanned, approved = _open_calls(doc)
    if doc.status in core.TERMINAL:
        nxt, calls = "done", []
    elif unplanned or approved:
        nxt, calls = "tools", unplanned + approved
    elif isinstance(core.next_action(doc, limits), core.CallModel | core.Halt):
        nxt, calls = "model", []
    else:
        nxt, calls = "wait", []
    pending = [
        Pending(a.tool_call_id, arguments_hash(a), _epoch(a), a.decision)
        for a in doc.pending_approvals
    ]
    return Snapshot(doc.id, version, _document_hash(doc), doc.status, doc.turns, nxt, calls,
                    pending)  # fmt: skip


@contextlib.asynccontextmanager
async def _heartbeats() -> AsyncIterator[None]:
    """Heartbeat while the block runs (a third of the heartbeat timeout apart)."""
    timeout = activity.info().heartbeat_timeout
    every = 1.0 if timeout is None else max(timeout.total_seconds() / 3, 0.1)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


A = TypeVar("A")
S = TypeVar("S", bound="Activities")


def _guarded(
    body: Callable[[S, A], Awaitable[Snapshot]],
) -> Callable[[S, A], Awaitable[Snapshot]]:
    """What an activity raises reaches the workflow's history: a failure nobody expected
    (the store down, say) is retried as an error holding its redacted message only,
    never its traceback or its causes."""

    @functools.wraps(body)
    async def guarded(self: S, given: A) -> Snapshot:
        try:
            return await body(self, given)
        except (ApplicationError, asyncio.CancelledError):
            raise
        except Exception as exc:
            why = sanitize(redact(f"{type(exc).__name__}: {exc}"), max_chars=2000)
            raise ApplicationError(why, type=type(exc).__name__) from None

    return guarded


def _refusal(exc: OarlockError) -> ApplicationError:
    kind = "DecisionRefused" if isinstance(exc, DecisionRefused | RunStateError) else "RunGone"
    return ApplicationError(f"{exc} ({exc.code})", type=kind, non_retryable=True)


class _StepRunner(Runner):
    """The runner of the activities: the Temporal engine's, the one runner that takes the
    steps of (and stores the decisions on) the runs Temporal drives, where any other
    sends them to the run's workflow (see :mod:`oarlock.engine._dispatch`)."""

    drives = ENGINE


class Activities:
    """The activities of the runs of ``store``. ``agents`` gives the agent of each agent
    name it knows (runs of other agents load their agent file, as a worker does);
    ``approver`` signs the approvals decided through this worker (default: this
    process's own key, trusted by this process alone)."""

    def __init__(
        self,
        store: RunStore,
        *,
        agents: Mapping[str, Agent] | None = None,
        approver: ApproverKey | None = None,
        clock: Callable[[], str] | None = None,
    ) -> None:
        self.store, self.approver, self.clock = store, approver, clock
        self._agents = RunAgents(agents)

    def all(self) -> list[Callable[..., Any]]:
        return [self.model_step, self.tool_call, self.decide, self.reconcile]

    async def aclose(self) -> None:
        """Stop the MCP servers of the agents this worker connected."""
        await self._agents.aclose()

    # -- the run and its agent ----------------------------------------------------------
    async def _load(self, run_id: str) -> StoredRun:
        try:
            stored = await self.store.load(run_id)
        except NotFound as exc:
            raise _refusal(exc) from None
        stored.document.format = "oar/0.2"
        return stored

    async def _agent(self, stored: StoredRun) -> Agent:
        return await self._agents.of(stored)

    async def _runner(self, stored: StoredRun) -> Runner | Snapshot:
        """The run's runner; when its agent cannot be loaded, the run fails, saying why,
        and its snapshot is the answer."""
        try:
            agent = await self._agent(stored)
        except OarlockError as exc:
            message = f"the worker could not load the run's agent: {exc}"
            return await self._settled(stored.document.id, _failing(message), None)
        if self.clock is None:
            return _StepRunner(agent, self.store, approver=self.approver)
        return _StepRunner(agent, self.store, approver=self.approver, clock=self.clock)

    async def _settled(
        self,
        run_id: str,
        apply: Callable[[RunDocument], list[Event]],
        limits: Any,
    ) -> Snapshot:
        """Apply ``apply`` to the stored run (again on a racing writer's commit); the
        snapshot of the run as it then stands."""
        await update_run(self.store, run_id, apply)
        stored = await self.store.load(run_id)
        return snapshot(stored.document, stored.version, limits)

    # -- the activities -----------------------------------------------------------------
    @activity.defn(name=MODEL_STEP)
    @_guarded
    async def model_step(self, step: StepInput) -> Snapshot:
        stored = await self._load(step.run_id)
        runner = await self._runner(stored)
        if isinstance(runner, Snapshot):
            return runner
        doc, version, limits = stored.document, stored.version, runner.agent.limits
        action = core.next_action(doc, limits)
        if version != step.version or not isinstance(action, core.CallModel | core.Halt):
            return snapshot(doc, version, limits)
        try:
            async with _heartbeats():
                events, flush, _ = await runner._step(doc, action, None)  # no calls: no records
        except (StoreError, OSError, MemoryError):
            raise  # the store or the machine: retried
        except Exception as exc:  # anything else would leave the run 'running' forever
            why = sanitize(redact(f"{type(exc).__name__}: {exc}"), max_chars=2000)
            return await self._settled(step.run_id, _failing(f"internal error: {why}"), limits)
        try:
            version = await self.store.save(doc, version, events, flush=flush)
        except ConflictError:  # cancelled, or decided, meanwhile: the run as it is
            again = await self.store.load(step.run_id)
            return snapshot(again.document, again.version, limits)
        return snapshot(doc, version, limits)

    @activity.defn(name=TOOL_CALL)
    @_guarded
    async def tool_call(self, call_in: ToolInput) -> Snapshot:
        stored = await self._load(call_in.run_id)
        runner = await self._runner(stored)
        if isinstance(runner, Snapshot):
            return runner
        doc, limits = stored.document, runner.agent.limits
        call = next((c for c in _step_calls(doc) if c.id == call_in.call_id), None)
        unplanned, approved = _open_calls(doc)
        if call is None or doc.turns != call_in.turn or call.id not in unplanned + approved:
            return snapshot(doc, stored.version, limits)  # answered already, or moved on
        ctx = replace(runner._ctx(doc), retried=activity.info().attempt > 1)
        async with _heartbeats():
            if call.id in unplanned:
                apply = await self._planned(runner, call, ctx)
            else:
                result = await self._approved(runner, doc, call, ctx)
                apply = _answering(call.id, call_in.turn, lambda d: core.on_tools_ran(
                    d, [result], runner.clock()))  # fmt: skip
        return await self._settled(call_in.run_id, apply, limits)

    async def _planned(
        self, runner: Runner, call: ToolCallPart, ctx: Any
    ) -> Callable[[RunDocument], list[Event]]:
        """Plan one call as the runner does: refused, held for approval, or run now."""
        planned = plan_call(call, runner.agent.tools, runner.executor, ctx)
        if planned.approval:
            now = runner.clock()
            ttl = planned.ttl_seconds
            deadlines = {} if ttl is None else {call.id: shift_rfc3339(now, ttl)}
            return _answering(call.id, ctx.turn, lambda d: core.on_tools_planned(
                d, [], [call], now, deadlines))  # fmt: skip
        result = await runner._planned_call(planned, ctx)
        assert result is not None  # refused, or run: not held for approval (above)
        return _answering(call.id, ctx.turn, lambda d: core.on_tools_planned(
            d, [result], [], runner.clock()))  # fmt: skip

    async def _approved(
        self, runner: Runner, doc: RunDocument, call: ToolCallPart, ctx: Any
    ) -> ToolResultPart:
        """An approved call, with the arguments the approval covers (the runner's own
        approved call, as a native resume runs it)."""
        pending = next(a for a in doc.pending_approvals if a.tool_call_id == call.id)
        args = call.arguments if pending.edited_arguments is None else pending.edited_arguments
        return await runner._approved_call(call, args, ctx)

    @activity.defn(name=DECIDE)
    @_guarded
    async def decide(self, given: DecideInput) -> Snapshot:
        stored = await self._load(given.run_id)
        runner = await self._runner(stored)
        if isinstance(runner, Snapshot):
            return runner
        d = given.decision
        pending = next(
            (a for a in stored.document.pending_approvals if a.tool_call_id == d.call_id), None
        )
        if pending is not None and arguments_hash(pending) != d.arguments_hash:
            raise ApplicationError(
                f"the decision is bound to arguments {d.arguments_hash!r}, not to those "
                f"call {d.call_id} waits with (arguments_mismatch)",
                type="DecisionRefused",
                non_retryable=True,
            )
        if d.decision not in ("approved", "denied", "responded"):
            raise ApplicationError(f"unknown decision {d.decision!r}", type="DecisionRefused",
                                   non_retryable=True)  # fmt: skip
        try:
            await runner.decide(
                given.run_id,
                d.call_id,
                d.decision,  # type: ignore[arg-type]
                reason=d.reason,
                edited_arguments=d.edited_arguments,
                response=d.response,
                principal=d.principal,
                expires_in=d.expires_in,
            )
        except (DecisionRefused, RunStateError, NotFound) as exc:
            raise _refusal(exc) from None
        again = await self.store.load(given.run_id)
        return snapshot(again.document, again.version, runner.agent.limits)

    @activity.defn(name=RECONCILE)
    @_guarded
    async def reconcile(self, what: ReconcileInput) -> Snapshot:
        stored = await self._load(what.run_id)
        runner = await self._runner(stored)
        if isinstance(runner, Snapshot):
            return runner
        limits = runner.agent.limits
        if what.cancel is not None:
            reason = what.cancel

            def cancel(d: RunDocument) -> list[Event]:
                return [] if d.status in core.TERMINAL else core.cancel(d, runner.clock(), reason)

            done = await self._settled(what.run_id, cancel, limits)
            # the calls it left waiting for a decision: on the ledger as cancelled, as
            # Runner.cancel puts them (stored once, should the activity run again)
            doc = (await self.store.load(what.run_id)).document
            await record_settled_calls(runner.agent, runner.executor, doc, runner._ctx(doc))
            return done
        if what.fail is not None:
            return await self._settled(what.run_id, _failing(what.fail), limits)
        if what.expire:
            await runner.expire_approvals(what.run_id)
        again = await self.store.load(what.run_id)
        return snapshot(again.document, again.version, limits)


def _failing(message: str) -> Callable[[RunDocument], list[Event]]:
    def apply(doc: RunDocument) -> list[Event]:
        if doc.status in core.TERMINAL:
            return []
        from oarlock.formats._time import now_rfc3339

        return core.fail(doc, sanitize(redact(message), max_chars=2000), now_rfc3339())

    return apply


def _answering(
    call_id: str, turn: int, apply: Callable[[RunDocument], list[Event]]
) -> Callable[[RunDocument], list[Event]]:
    """``apply`` to a run whose current step still has ``call_id`` open (a re-read after a
    racing writer may find it answered, or the run moved on: then nothing changes)."""

    def guarded(doc: RunDocument) -> list[Event]:
        unplanned, approved = _open_calls(doc)
        if doc.turns != turn or call_id not in unplanned + approved:
            return []
        return apply(doc)

    return guarded
