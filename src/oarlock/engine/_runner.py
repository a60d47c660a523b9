"""The runner: drives the pure turn loop, talking to the model, the executor and the store.

Every step is committed (document and events in one transaction) before the next begins,
so a run can be resumed by any process from whatever the last commit left. On a store that
is a run queue, each drive holds the run's lease (see :mod:`oarlock.engine._lease`), and
every write of the drive is fenced by it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from oarlock._secrets import redact
from oarlock.engine import _core as core
from oarlock.engine._agent import Agent
from oarlock.engine._dispatch import Dispatched, driver
from oarlock.engine._execute import (
    CallContext,
    Executor,
    Planned,
    Review,
    error_result,
    plan_call,
)
from oarlock.engine._lease import Hold, drive_held, save_releasing
from oarlock.engine._observe import CallWatch, ChatWatch, DriveWatch, RunObserver
from oarlock.engine._output import OutputJudge
from oarlock.engine._settled import record_settled_calls
from oarlock.engine._stream import (
    StreamEvent,
    Streams,
    TextDelta,
    ToolFinished,
    ToolStarted,
    from_stored,
)
from oarlock.engine._update import EventHook, cancel_run, update_run
from oarlock.errors import (
    ConflictError,
    LeaseLost,
    ModelError,
    RetryableModelError,
    StoreError,
    UsageError,
)
from oarlock.formats._models import Message, RunDocument, ToolCallPart, ToolResultPart
from oarlock.formats._time import now_rfc3339, shift_rfc3339
from oarlock.governance._approvers import ApproverKey
from oarlock.governance._executor import CallOutcome, GovernedExecutor
from oarlock.governance._sanitize import sanitize
from oarlock.governance._store import Recorded
from oarlock.models._base import ModelRequest, ModelResponse, TextSink, TurnText
from oarlock.store._base import Event, RunStore, StoredRun
from oarlock.store._leases import as_queue, process_holder
from oarlock.store._queue import Lease, RunQueue
from oarlock.tools._tool import Tool, ToolArgumentsError

__all__ = ["EventHook", "RetryPolicy", "Runner", "cancel_run", "update_run"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of rate-limited and failing model requests: exponential backoff with
    jitter, or the provider's Retry-After when it gives one (capped by ``max_delay``)."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return float(min(max(retry_after, 0.0), self.max_delay))
        backoff = min(self.base_delay * 2.0 ** (attempt - 1), self.max_delay)
        return float(backoff * random.uniform(0.5, 1.0))


@dataclass(slots=True)
class _Drive:
    """A drive under way: its id (its span's, when traced), when it began, its watch."""

    id: str
    started_us: int
    watch: DriveWatch | None

    def call(self, tool: Tool, call: ToolCallPart, arguments: dict[str, Any]) -> CallWatch | None:
        return None if self.watch is None else self.watch.call(tool, call, arguments)

    def span(self, started_us: int, t0: float, span_id: str | None) -> dict[str, Any]:
        """The ``span`` member of a step's event: its drive, when it began and how long
        it took (what ``runs show --trace`` draws the run's span tree from). Times are
        microseconds since the epoch: a clock read, no formatting, on every step."""
        span: dict[str, Any] = {
            "drive": self.id,
            "driveStartUs": self.started_us,
            "startUs": started_us,
            "durationMs": round((time.perf_counter() - t0) * 1000, 3),
        }
        if span_id is not None:
            span["spanId"] = span_id
        return span


class _CancelledElsewhere(Exception):
    def __init__(self, stored: RunDocument) -> None:
        self.stored = stored


class Runner(Dispatched):
    """Runs one agent's runs against one store.

    Every tool call goes through ``executor``: by default a
    :class:`~oarlock.governance.GovernedExecutor` keeping its records in the store's
    governance store, under the agent's policy. ``watch_interval`` (seconds) makes a
    waiting model request or tool call look for a cancellation written by another
    process, and stop the work when it finds one. ``replay_of`` names the run a replay
    repeats: its side-effecting calls are keyed to that run, so they are never made again.
    ``on_text`` receives the model's text as it streams in. ``approver`` signs the
    approvals :meth:`decide` records; without one, they are signed with this process's own
    key, which only an agent without configured approvers trusts (so that a decision made
    and acted on in one process needs no set-up).

    When the store is a run queue, every drive holds the run's lease as ``owner`` (default
    ``proc:HOST:PID``) for ``lease_seconds``, renewed while it drives; a run another holds
    live is refused with RunBusy. A worker passes the ``lease`` it holds instead: the
    runner then drives that run only, under that lease. ``pause``, asked before each step,
    ends the drive there when it says so, the run left as committed (running, to be
    resumed): a worker that shuts down hands its runs back between steps. ``on_event``
    receives the stream events (:mod:`oarlock.engine._stream`) of every run it drives, as
    they happen. ``observer`` is told of every drive, model request, tool call and commit
    (traces and metrics); by default, :func:`oarlock.telemetry.default_observer`, which
    records nothing until OpenTelemetry is configured.

    An action on a stored run goes where the run is driven (:mod:`oarlock.engine._dispatch`):
    a run Temporal drives is decided, cancelled, continued and retried through its workflow,
    and never resumed or driven here."""

    def __init__(
        self,
        agent: Agent,
        store: RunStore,
        *,
        executor: Executor | None = None,
        retry: RetryPolicy | None = None,
        clock: Callable[[], str] = now_rfc3339,
        on_commit: EventHook | None = None,
        watch_interval: float | None = None,
        replay_of: str | None = None,
        on_text: TextSink | None = None,
        approver: ApproverKey | None = None,
        lease: Lease | None = None,
        lease_seconds: float = 30.0,
        owner: str | None = None,
        pause: Callable[[], bool] | None = None,
        on_event: Callable[[StreamEvent], None] | None = None,
        observer: RunObserver | None = None,
    ) -> None:
        if isinstance(lease_seconds, bool) or not (
            isinstance(lease_seconds, int | float) and 0 < lease_seconds < float("inf")
        ):
            raise UsageError(
                f"lease_seconds must be a number of seconds above 0, not {lease_seconds!r}"
            )
        self.agent, self.store, self.approver = agent, store, approver
        self.lease, self.lease_seconds = lease, float(lease_seconds)
        self.owner, self.pause = owner or process_holder(), pause
        self._queue: RunQueue | None = as_queue(store)
        self.executor: Executor = executor or GovernedExecutor(
            store.governance(),
            policy=agent.policy,
            clock=clock,
            approvers=agent.approvers,
            sandbox=agent.sandbox,
        )
        self.retry_policy = retry or RetryPolicy()
        self.clock, self.on_commit, self.watch_interval = clock, on_commit, watch_interval
        self.replay_of, self.on_text = replay_of, on_text
        self._deps: dict[str, Any] = {}  # each drive's dependencies, by run (never stored)
        self._streams = Streams(on_event)
        if observer is None:
            from oarlock.telemetry._setup import default_observer

            observer = default_observer()
        self.observer: RunObserver = observer
        self._drives: dict[str, _Drive] = {}  # the drives under way, by run
        self._calls: dict[tuple[str, str], CallWatch] = {}  # (run, call): its watch
        self._timed: dict[tuple[str, str], dict[str, Any]] = {}  # (run, call): its span
        # whether a step's save carries the records of its fresh reads (Recorded): the
        # store's save takes them, and the executor keeps its records in that store
        self._saves_records = getattr(store, "saves_records", False) is True and (
            getattr(self.executor, "store", None) is store.governance())  # fmt: skip
        observers = getattr(self.executor, "observers", None)
        if isinstance(observers, list):  # the receipt of each call, for the streams
            observers.append(self._seen)

    # -- public operations ------------------------------------------------------------
    async def create(
        self,
        input: str,
        *,
        tags: dict[str, str] | None = None,
        agent_ref: str | None = None,
        run_id: str | None = None,
        queue: str = "default",
        message_history: Sequence[Message] = (),
        flush: bool = True,
    ) -> tuple[RunDocument, int]:
        """Store a new run (its conversation: ``message_history``, then ``input``).
        ``agent_ref`` says where other processes find the agent (an agent file, or
        ``module:name``); by default, the agent's own :attr:`~Agent.ref`. ``flush=False``
        when the run is driven at once: its first model response is flushed with it."""
        doc, events = core.new_run(
            run_id=run_id or str(uuid.uuid4()),
            agent=self.agent.name,
            model=self.agent.model.model_id,
            input=input,
            now=self.clock(),
            tags=tags,
            history=message_history,
        )
        version = await self.store.create(
            doc,
            events,
            agent_ref=agent_ref if agent_ref is not None else self.agent.ref,
            tenant=self.agent.tenant,
            queue=queue,
            flush=flush,
        )
        self._notify(doc, events)
        return doc, version

    async def submit(
        self,
        input: str,
        *,
        tags: dict[str, str] | None = None,
        queue: str = "default",
        agent_ref: str | None = None,
        run_id: str | None = None,
    ) -> RunDocument:
        """Create a run and leave it to a worker (it is runnable at once, in ``queue``).
        A worker loads the run's agent from ``agent_ref`` (an agent file), unless it was
        given the agent itself."""
        doc, _ = await self.create(
            input, tags=tags, agent_ref=agent_ref, run_id=run_id, queue=queue
        )
        return doc

    async def start(
        self,
        input: str,
        *,
        tags: dict[str, str] | None = None,
        agent_ref: str | None = None,
        run_id: str | None = None,
        queue: str = "default",
        deps: Any = None,
        message_history: Sequence[Message] = (),
    ) -> RunDocument:
        """Create a run (in ``queue``, where workers find it if it is handed back) and
        drive it until it finishes or waits for a human. On a run queue, a worker may claim
        the new run before this runner takes its lease: the run is then the worker's, and
        this returns it as it stands. ``deps`` reach the tools that take the RunContext
        during this drive, and are never stored."""
        doc, version = await self.create(
            input,
            tags=tags,
            agent_ref=agent_ref,
            run_id=run_id,
            queue=queue,
            message_history=message_history,
            flush=False,  # the drive's first commit, a model response, is flushed
        )

        async def taken() -> RunDocument:
            return (await self.store.load(doc.id)).document

        with self._with_deps(doc.id, deps):
            return await self._held(doc.id, lambda hold: self._drive(doc, version, hold), taken)

    async def resume(self, run_id: str, *, deps: Any = None) -> RunDocument:
        """Continue a stored run (in this process or any other) until it finishes or waits.
        On a run queue, a run another process holds live is refused (RunBusy)."""

        async def drive(hold: Hold) -> RunDocument:
            stored = await self.store.load(run_id)
            doc = stored.document
            driver(doc, "resume", self.drives)  # refused when Temporal drives it
            if doc.agent != self.agent.name:
                raise ConflictError(
                    f"run {run_id} belongs to agent {doc.agent!r}, not {self.agent.name!r}",
                    code="wrong_agent",
                )
            doc.format = "oar/0.2"
            return await self._drive(doc, stored.version, hold)

        with self._with_deps(run_id, deps):
            return await self._held(run_id, drive)

    @contextlib.contextmanager
    def _with_deps(self, run_id: str, deps: Any) -> Iterator[None]:
        """``deps`` for the calls of ``run_id`` while its drive lasts."""
        if deps is None:
            yield
            return
        self._deps[run_id] = deps
        try:
            yield
        finally:
            self._deps.pop(run_id, None)

    async def _again(
        self, run_id: str, apply: Callable[[RunDocument], list[Event]], deps: Any
    ) -> RunDocument:
        """Change a stored run so that it runs again (``apply``), then drive it, holding
        its lease from before the change. A change refused as the run stands (a run not
        in a state to run again) is refused before the lease is taken: nothing changes."""
        apply((await self.store.load(run_id)).document.model_copy(deep=True))

        async def drive(hold: Hold) -> RunDocument:
            await self._update(run_id, apply, lease=hold.lease)
            stored = await self.store.load(run_id)
            return await self._drive(stored.document, stored.version, hold)

        with self._with_deps(run_id, deps):
            return await self._held(run_id, drive)

    async def _held(
        self,
        run_id: str,
        drive: Callable[[Hold], Awaitable[RunDocument]],
        busy: Callable[[], Awaitable[RunDocument]] | None = None,
    ) -> RunDocument:
        if self.lease is not None and self.lease.run_id != run_id:
            raise UsageError(
                f"this runner drives run {self.lease.run_id} under its lease, not {run_id}"
            )
        return await drive_held(
            self._queue,
            run_id,
            drive,
            owner=self.owner,
            lease_seconds=self.lease_seconds,
            given=self.lease,
            busy=busy,
        )

    # -- internals --------------------------------------------------------------------
    def _ctx(self, doc: RunDocument, fence: Lease | None = None, fresh: bool = False
             ) -> CallContext:  # fmt: skip
        """The context of the calls of ``doc``'s next step; ``fresh``: the step follows
        a model response received in this drive (see ``CallContext.fresh``)."""
        return CallContext(
            doc.id, doc.agent, self.agent.scope, doc.turns, self.replay_of, fence,
            self._deps.get(doc.id), fresh=fresh,
            pending=[] if fresh and self._saves_records else None,
        )  # fmt: skip

    async def _update(
        self,
        run_id: str,
        apply: Callable[[RunDocument], list[Event]],
        *,
        loaded: StoredRun | None = None,
        lease: Lease | None = None,
    ) -> RunDocument:
        return await update_run(
            self.store, run_id, apply, on_commit=self._told, loaded=loaded, lease=lease
        )

    def _told(self, doc: RunDocument, events: list[Event]) -> None:
        """A commit, told to ``on_commit`` and the observer."""
        if self.on_commit is not None:
            self.on_commit(doc, events)
        self.observer.committed(doc, events)

    def _notify(self, doc: RunDocument, events: list[Event]) -> None:
        self._told(doc, events)
        if self._streams.watching(doc.id):
            self._streams.emit(doc.id, *from_stored(doc.id, doc, events))

    def _seen(self, outcome: CallOutcome) -> None:
        run_id = outcome.run_id
        if self._streams.watching(run_id):
            self._streams.receipts[(run_id, outcome.call_id)] = outcome.status
        key = (run_id, outcome.call_id)
        span = self._timed.get(key)
        if span is not None:  # the call's receipt, in its event's span
            span["status"] = outcome.status
            if outcome.replayed:
                span["replayed"] = True
        watch = self._calls.get(key)
        if watch is not None:
            watch.outcome(outcome)

    def _text_sink(self, run_id: str) -> TextSink | None:
        """Where the model's text goes: ``on_text``, and the run's streams."""
        if not self._streams.watching(run_id):
            return self.on_text
        own = self.on_text

        def sink(text: str) -> None:
            if own is not None:
                own(text)
            self._streams.emit(run_id, TextDelta(run_id, text))

        return sink

    async def _executed(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        review: Review | None = None,
    ) -> ToolResultPart:
        """One call through the executor (under ``review``, its review as the step was
        planned, when it holds the policy's verdict), told to the run's streams as it
        starts and ends."""
        run_id = ctx.run_id
        watched = self._streams.watching(run_id)
        if watched:
            self._streams.emit(run_id, ToolStarted(run_id, call.id, call.name))
        drive = self._drives.get(run_id)
        started, t0 = _now_us(), time.perf_counter()
        watch = None if drive is None else drive.call(tool, call, arguments)
        span: dict[str, Any] = {}
        if drive is not None:
            self._timed[(run_id, call.id)] = span
        if watch is None:
            result = await self._execute(tool, call, arguments, ctx, review)
        else:
            result = await self._watched_call(watch, tool, call, arguments, ctx, review=review)
        if drive is not None:
            span.update(drive.span(started, t0, None if watch is None else watch.span_id))
        if watched:
            status = self._streams.receipts.pop((run_id, call.id), None)
            self._streams.emit(
                run_id, ToolFinished(run_id, call.id, call.name, not result.is_error, status)
            )
        return result

    async def _execute(
        self,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        review: Review | None,
    ) -> ToolResultPart:
        """The executor's run of the call, under ``review`` when that holds a verdict."""
        if review is None or review.verdict is None:
            return await self.executor.execute(tool, call, arguments, ctx)
        return await self.executor.execute(tool, call, arguments, ctx, review=review)

    async def _watched_call(
        self,
        watch: CallWatch,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        ctx: CallContext,
        *,
        review: Review | None = None,
    ) -> ToolResultPart:
        key = (ctx.run_id, call.id)
        self._calls[key] = watch
        try:
            with watch.active():
                result = await self._execute(tool, call, arguments, ctx, review)
        except BaseException as exc:
            watch.failed(exc)
            raise
        finally:
            self._calls.pop(key, None)
        watch.done(result)
        return result

    def _spans(self, run_id: str, events: list[Event]) -> list[Event]:
        """The step's tool events, each with its call's span (see :meth:`_Drive.span`)."""
        for ev in events:
            if ev.kind == "tool_called":
                span = self._timed.pop((run_id, str(ev.data.get("toolCallId"))), None)
                if span is not None:
                    ev.data["span"] = span
        return events

    async def _commit(
        self,
        doc: RunDocument,
        version: int,
        events: list[Event],
        fence: Lease | None,
        *,
        flush: bool = True,
        hold: Hold | None = None,
        records: Sequence[Recorded] = (),
    ) -> int:
        """Save a step, with the ``records`` of its calls that ran before they were
        claimed (see ``_saves_records``); the drive's last (the run left at rest) gives
        back ``hold``."""
        def save(release: bool = False) -> Awaitable[int]:
            saving: Callable[..., Awaitable[int]] = self.store.save
            extra: dict[str, Any] = {"records": records} if records else {}
            if release:  # a queue that saves_releasing (see save_releasing): this store
                extra["release"] = True
            return saving(doc, version, events, lease=fence, flush=flush, **extra)

        try:
            if hold is None or doc.status == "running":
                version = await save()
            else:
                version = await save_releasing(self._queue, hold, save)
        except LeaseLost:
            raise
        except ConflictError:
            stored = await self.store.load(doc.id)
            if stored.document.status in core.TERMINAL:
                raise _CancelledElsewhere(stored.document) from None
            raise
        self._notify(doc, events)
        return version

    async def _drive(self, doc: RunDocument, version: int, hold: Hold) -> RunDocument:
        """Drive the run (see :meth:`_steps`), watched by the observer."""
        watch = self.observer.drive(doc)
        span_id = None if watch is None else watch.span_id
        self._drives[doc.id] = _Drive(span_id or os.urandom(8).hex(), _now_us(), watch)
        try:
            if watch is None:
                return await self._steps(doc, version, hold)
            try:
                with watch.active():
                    done = await self._steps(doc, version, hold)
            except BaseException as exc:
                watch.end(None, exc)
                raise
            watch.end(done, None)
            return done
        finally:
            self._drives.pop(doc.id, None)
            for key in [k for k in self._timed if k[0] == doc.id]:
                self._timed.pop(key, None)

    async def _steps(self, doc: RunDocument, version: int, hold: Hold) -> RunDocument:
        fence = hold.lease
        try:
            if expired := core.expire_approvals(doc, self.clock()):
                version = await self._commit(doc, version, expired, fence, hold=hold)
            # the latest turn's calls settled without running, on the ledger (again after
            # a crash between a decision's commit and its record: stored once)
            await record_settled_calls(self.agent, self.executor, doc, self._ctx(doc, fence))
            answered = False  # the last step received a model response
            while True:
                action = core.next_action(doc, self.agent.limits)
                if isinstance(action, core.Idle) or (self.pause is not None and self.pause()):
                    return doc
                events, flush, records = await self._step(doc, action, fence, answered)
                version = await self._commit(
                    doc, version, events, fence, flush=flush, hold=hold, records=records
                )
                answered = isinstance(action, core.CallModel)
        except _CancelledElsewhere as stop:
            return stop.stored
        except asyncio.CancelledError:
            # a worker's drive stopped (its shutdown, its lease lost) leaves the run to be
            # resumed; so does a lost lease; any other cancellation cancels the run
            if not hold.given and hold.lost is None:
                await asyncio.shield(self._cancel_quietly(doc.id, fence))
            raise
        except (StoreError, ConflictError, OSError, MemoryError):
            raise  # the store or the machine: the run stays as committed, to be resumed
        except Exception as exc:  # anything else would leave the run 'running' forever
            return await self._fail_stored(doc.id, exc, fence)

    async def _fail_stored(self, run_id: str, exc: Exception, fence: Lease | None) -> RunDocument:
        """Fail the run as it was last committed (the document in hand may hold what could
        not be stored) with what went wrong."""
        why = sanitize(redact(f"{type(exc).__name__}: {exc}"), max_chars=2000)
        message = f"internal error: {why}"
        return await self._update(
            run_id, lambda d: core.fail(d, message, self.clock()), lease=fence
        )

    async def _cancel_quietly(self, run_id: str, fence: Lease | None) -> None:
        with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
            await update_run(
                self.store,
                run_id,
                lambda d: core.cancel(d, self.clock(), "cancelled while running"),
                on_commit=self._told,
                lease=fence,
            )

    async def _step(
        self, doc: RunDocument, action: core.Action, fence: Lease | None, fresh: bool = False
    ) -> tuple[list[Event], bool, Sequence[Recorded]]:
        """Take one step; its events, whether its commit must wait for the disk, and the
        records its save carries (``CallContext.pending``).

        The flush rule: a commit waits for the disk when something outside the database
        acts on it or it holds what cannot be had again: a model response (paid for, and
        what a human is asked to approve), a decision, a halt or a failure, and the results
        of a step that ran a call with effects outside the sandbox (its receipt is flushed
        with them, so an outcome known is never lost to Uncertain). A step whose calls were
        all ``read`` or ``sandbox`` rides on the next flush: after a power cut at worst its
        reads run again. (A side-effecting call's claim is flushed before it starts, by the
        executor, whatever this rule says.)"""
        if isinstance(action, core.Halt):
            return core.halt(doc, action, self.clock()), True, ()
        if isinstance(action, core.CallModel):
            return await self._model_turn(doc), True, ()
        ctx = self._ctx(doc, fence, fresh)
        if isinstance(action, core.PlanTools):
            planned = [plan_call(c, self.agent.tools, self.executor, ctx) for c in action.calls]
            results = await self._watch(doc.id, self._run_planned(planned, ctx))
            approvals = [p.call for p in planned if p.approval]
            now = self.clock()
            deadlines = {
                p.call.id: shift_rfc3339(now, p.ttl_seconds)
                for p in planned
                if p.approval and p.ttl_seconds is not None
            }
            ran = [p.tool for p in planned if p.tool is not None and p.arguments is not None]
            flush = bool(approvals) or not _quiet(ran)
            events = core.on_tools_planned(doc, results, approvals, now, deadlines)
            return self._spans(doc.id, events), flush, ctx.pending or ()
        if isinstance(action, core.RunApproved):
            results = await self._watch(doc.id, self._run_approved(action.calls, ctx))
            tools = [self.agent.tools.get(call.name) for call, _ in action.calls]
            events = core.on_tools_ran(doc, results, self.clock())
            return self._spans(doc.id, events), not _quiet(tools), ctx.pending or ()
        raise TypeError(f"unknown action {action!r}")

    async def _run_planned(self, planned: list[Planned], ctx: CallContext) -> list[ToolResultPart]:
        outcomes = await _gather([self._planned_call(p, ctx) for p in planned])
        return [r for r in outcomes if r is not None]

    async def _planned_call(self, p: Planned, ctx: CallContext) -> ToolResultPart | None:
        """One planned call: its refusal, none when it waits for approval, else its run
        under the review it was planned with."""
        if p.result is not None or p.approval or p.tool is None or p.arguments is None:
            return p.result
        return await self._executed(p.tool, p.call, p.arguments, ctx, p.review)

    async def _run_approved(
        self, calls: list[tuple[ToolCallPart, dict[str, Any]]], ctx: CallContext
    ) -> list[ToolResultPart]:
        """Run approved calls with the arguments the approval covers."""
        return await _gather([self._approved_call(c, a, ctx) for c, a in calls])

    async def _approved_call(
        self, call: ToolCallPart, args: dict[str, Any], ctx: CallContext
    ) -> ToolResultPart:
        """One approved call, with ``args``, the arguments its approval covers. It was
        planned and decided already; only the tool's presence and the arguments are
        checked again (the agent may have changed since the run paused)."""
        tool = self.agent.tools.get(call.name)
        if tool is None:
            return error_result(call, f"Tool {call.name!r} is no longer available.")
        try:
            valid = tool.validate_arguments(args)
        except ToolArgumentsError as exc:
            return error_result(call, f"{exc}.")
        return await self._executed(tool, call, valid, ctx)

    async def _model_turn(self, doc: RunDocument) -> list[Event]:
        output = self.agent.output
        tools, final = self.agent.tools.specs(), None
        if output.typed:  # the provider's own way, else the final-answer tool
            if getattr(self.agent.model, "native_output", False):
                final = output.tool_spec()
            else:
                tools = [*tools, output.tool_spec()]
        request = ModelRequest(
            self.agent.instructions, list(doc.messages), tools, self._text_sink(doc.id), final
        )
        drive = self._drives.get(doc.id)
        watch = None
        if drive is not None and drive.watch is not None:
            watch = drive.watch.chat(self.agent.model.model_id, request)
        started, t0 = _now_us(), time.perf_counter()
        try:
            response = await self._watch(doc.id, self._respond(request, watch))
        except ModelError as exc:  # providers may echo a key: nothing secret is stored
            if watch is not None:
                watch.failed(exc)
            return core.fail(doc, redact(f"model error ({exc.code}): {exc}"), self.clock())
        except BaseException as exc:
            if watch is not None:
                watch.failed(exc)
            raise
        price = self.agent.price
        cost = (
            None
            if price is None
            else price.cost(response.input_tokens, response.output_tokens, response.cached_tokens)
        )
        if watch is not None:
            watch.done(response, cost)
        events = core.on_model_response(
            doc,
            response.message,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            cost=cost,
            now=self.clock(),
            judge=OutputJudge(output) if output.typed else None,
        )
        if drive is not None:
            span_id = None if watch is None else watch.span_id
            events[0].data["span"] = drive.span(started, t0, span_id)
        return events

    async def _respond(
        self, request: ModelRequest, watch: ChatWatch | None = None
    ) -> ModelResponse:
        """Ask the model, retrying what may pass; a retried answer's streamed text reaches
        ``on_text`` once (see :class:`~oarlock.models._base.TurnText`)."""
        text = None if request.on_text is None else TurnText(request.on_text)
        attempt = 0
        while True:
            attempt += 1
            try:
                if text is not None:
                    request = replace(request, on_text=text.attempt())
                return await self.agent.model.respond(request)
            except RetryableModelError as exc:
                if attempt >= self.retry_policy.attempts:
                    raise ModelError(
                        f"{exc} (gave up after {attempt} attempts)", code=exc.code
                    ) from exc
                delay = self.retry_policy.delay(attempt, exc.retry_after)
                if watch is not None:
                    watch.retried(attempt, exc, delay)
                await asyncio.sleep(delay)
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(
                    f"the model adapter failed: {type(exc).__name__}: {exc}", code="adapter_error"
                ) from exc

    async def _watch(self, run_id: str, work: Awaitable[T]) -> T:
        """Await ``work``; with a watch interval, stop it if another process cancels."""
        if self.watch_interval is None:
            return await work
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.watch_interval)
                if done:
                    return task.result()
                stored = await self.store.load(run_id)
                if stored.document.status in core.TERMINAL:
                    task.cancel()
                    [outcome] = await asyncio.gather(task, return_exceptions=True)
                    if isinstance(outcome, LeaseLost):  # ended by the run's next holder
                        raise outcome
                    raise _CancelledElsewhere(stored.document)
        except BaseException:  # the work stops with its watcher (cancelled, or its look at
            task.cancel()  # the store failed), and says so first
            await asyncio.gather(task, return_exceptions=True)
            raise


def _now_us() -> int:
    return time.time_ns() // 1000


_QUIET = frozenset({"read", "sandbox"})


def _quiet(tools: Sequence[Tool | None]) -> bool:
    """Whether calls of these tools have no effect outside the sandbox (an unknown tool
    ran nothing)."""
    return all(t is None or t.side_effect in _QUIET for t in tools)


async def _gather(coros: list[Awaitable[T]]) -> list[T]:
    if len(coros) == 1:
        return [await coros[0]]
    return list(await asyncio.gather(*coros))
