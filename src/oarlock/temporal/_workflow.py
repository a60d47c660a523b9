"""The workflow of one run (workflow id = run id): it orchestrates, oarlock's store keeps.

Its state is small and of fixed size whatever the conversation: the last snapshot (the
stored document's version and hash, status, turn, the calls to run, the pending approvals
and their deadlines), the calls in flight and a cancellation asked for. Every step is an
activity that loads the run from the store, takes the step through the runner's own code
and commits it, returning a new snapshot; history holds ids, versions and hashes, and the
decisions sent to the run as they were sent (a reason, a response, edited arguments).

* ``model`` next: :data:`MODEL_STEP` (a model request, or a halt at a limit).
* ``tools`` next: one :data:`TOOL_CALL` per call, concurrently, each through the governed
  executor, each committing its own result.
* ``wait`` next: approvals come as the :data:`DECIDE_UPDATE` update, whose validator
  binds the decision to the pending call's arguments hash and refuses one past its
  deadline (a refused update leaves nothing in history); its handler stores the decision
  with :data:`DECIDE` before it returns. The earliest deadline is a durable timer; when it
  fires, :data:`RECONCILE` denies what has lapsed by the store's clock.
* :data:`CANCEL_SIGNAL` cancels the activities in flight and the run.

This module does no I/O and reads no clock but the workflow's: it imports the pure
:mod:`._types` and Temporal's workflow API only (``tests/unit/test_temporal_determinism.py``
checks it). Changes to what it schedules are made behind ``workflow.patched(ID)``, so that
histories of runs in flight replay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from oarlock.temporal._types import (
        CANCEL_SIGNAL,
        DECIDE,
        DECIDE_UPDATE,
        MODEL_STEP,
        RECONCILE,
        STATE_QUERY,
        TOOL_CALL,
        WORKFLOW,
        DecideInput,
        Decision,
        Progress,
        ReconcileInput,
        RunStart,
        Snapshot,
        StepInput,
        ToolInput,
    )

__all__ = ["RunWorkflow"]

_DECISIONS = frozenset({"approved", "denied", "responded"})
# workflow changes, each behind workflow.patched(ID) (see the module)
_PATCH_EXPIRY_RECHECK = "oarlock.expiry-recheck-delay"
_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["DecisionRefused", "RunGone"],
)


@workflow.defn(name=WORKFLOW)
class RunWorkflow:
    @workflow.init
    def __init__(self, start: RunStart) -> None:
        # from the input, before any handler runs: an update or signal delivered with the
        # first task of a run (one continued as new, say) sees the run as it stands
        self.run_id, self.options = start.run_id, start.options
        self.snap: Snapshot | None = start.snapshot
        self.cancel_reason: str | None = start.cancel_reason
        self.running: dict[str, asyncio.Task[Snapshot | None]] = {}
        self.failure: str | None = None

    # -- handlers -----------------------------------------------------------------------
    @workflow.query(name=STATE_QUERY)
    def state(self) -> Progress:
        return Progress(self.snap, sorted(self.running), self.cancel_reason is not None)

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason or "cancelled"

    @workflow.update(name=DECIDE_UPDATE)
    async def decide(self, decision: Decision) -> Snapshot:
        try:
            snap: Snapshot = await workflow.execute_activity(
                DECIDE,
                DecideInput(self.run_id, decision),
                result_type=Snapshot,
                start_to_close_timeout=timedelta(seconds=self.options.store_seconds),
                retry_policy=_RETRY,
            )
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError):
                raise ApplicationError(cause.message, type=cause.type, non_retryable=True) from None
            raise
        self._see(snap)
        return snap

    @decide.validator
    def check_decision(self, decision: Decision) -> None:
        """Deterministic: refuses a decision the run cannot take as it stands."""
        if decision.decision not in _DECISIONS:
            raise ValueError(
                f"a decision is approved, denied or responded, not {decision.decision!r}"
            )
        if self.cancel_reason is not None or self.snap is None or self.snap.next == "done":
            raise ValueError(f"run {self.run_id} is not waiting for decisions")
        pending = next((p for p in self.snap.pending if p.call_id == decision.call_id), None)
        if pending is None:
            waiting = ", ".join(p.call_id for p in self.snap.pending if p.decision is None)
            raise ValueError(
                f"run {self.run_id} has no pending approval for call {decision.call_id!r}; "
                f"waiting: {waiting or 'none'}"
            )
        if pending.decision is not None:
            raise ValueError(f"call {decision.call_id} was already {pending.decision}")
        if decision.arguments_hash != pending.arguments_hash:
            raise ValueError(
                f"the decision is bound to arguments {decision.arguments_hash!r}, but call "
                f"{decision.call_id} waits with arguments {pending.arguments_hash}"
            )
        now = workflow.now().timestamp()
        if pending.expires_at is not None and now >= pending.expires_at:
            raise ValueError(f"call {decision.call_id} was not decided by its deadline")

    # -- the run ------------------------------------------------------------------------
    @workflow.run
    async def run(self, start: RunStart) -> Snapshot:
        if self.snap is None:  # taken at once when the run is still at the version given
            self._see(await self._step(start.version))
        while True:
            snap = self.snap
            assert snap is not None
            if self.cancel_reason is not None or self.failure is not None:
                return await self._stop()
            if snap.next == "done" and not self.running:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return snap
            if not self.running and workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    RunStart(self.run_id, self.options, self.snap, self.cancel_reason)
                )
            if snap.next == "model" and not self.running:
                await self._watched(self._step(snap.version))
            elif snap.next == "tools":
                self._launch(snap)
                await self._wait_change(None)
            else:
                await self._wait_change(self._deadline())
                if self._lapsed():
                    before = snap.version
                    self._see(await self._reconcile(ReconcileInput(self.run_id, expire=True)))
                    unchanged = self.snap is not None and self.snap.version == before
                    # added after the first release: runs in flight then replay without it
                    if unchanged and workflow.patched(_PATCH_EXPIRY_RECHECK):
                        await workflow.sleep(1)  # the store's clock is behind: look again

    def _see(self, snap: Snapshot | None) -> None:
        """Keep the newest snapshot (a commit's version orders them)."""
        if snap is not None and (self.snap is None or snap.version >= self.snap.version):
            self.snap = snap

    async def _step(self, version: int) -> Snapshot:
        snap: Snapshot = await workflow.execute_activity(
            MODEL_STEP,
            StepInput(self.run_id, version),
            result_type=Snapshot,
            start_to_close_timeout=timedelta(seconds=self.options.model_seconds),
            heartbeat_timeout=timedelta(seconds=self.options.heartbeat_seconds),
            retry_policy=_RETRY,
        )
        return snap

    async def _watched(self, step: Coroutine[Any, Any, Snapshot]) -> None:
        """Take a model step; a cancellation asked for meanwhile cancels it."""
        task = asyncio.ensure_future(step)
        await workflow.wait_condition(lambda: task.done() or self.cancel_reason is not None)
        if not task.done():
            task.cancel()
        try:
            self._see(await task)
        except (ActivityError, asyncio.CancelledError) as exc:
            if self.cancel_reason is None:
                self.failure = _why(exc)

    def _launch(self, snap: Snapshot) -> None:
        for call_id in snap.calls:
            if call_id not in self.running:
                self.running[call_id] = asyncio.ensure_future(self._tool(call_id, snap.turns))

    async def _tool(self, call_id: str, turn: int) -> Snapshot | None:
        try:
            snap: Snapshot = await workflow.execute_activity(
                TOOL_CALL,
                ToolInput(self.run_id, call_id, turn),
                result_type=Snapshot,
                start_to_close_timeout=timedelta(seconds=self.options.tool_seconds),
                heartbeat_timeout=timedelta(seconds=self.options.heartbeat_seconds),
                retry_policy=_RETRY,
            )
            return snap
        except (ActivityError, asyncio.CancelledError) as exc:
            if self.cancel_reason is None:
                self.failure = _why(exc)
            return None

    async def _wait_change(self, deadline: float | None) -> None:
        """Until a call in flight ends, a decision or cancellation arrives, or (when
        ``deadline`` is set) the deadline passes."""
        seen = None if self.snap is None else self.snap.version
        done = [c for c, t in self.running.items() if t.done()]
        if not done:

            def changed() -> bool:
                version = None if self.snap is None else self.snap.version
                return (
                    version != seen
                    or self.cancel_reason is not None
                    or any(t.done() for t in self.running.values())
                )

            timeout = None
            if deadline is not None:
                timeout = timedelta(seconds=max(deadline - workflow.now().timestamp(), 0) + 0.05)
            try:
                await workflow.wait_condition(changed, timeout=timeout)
            except TimeoutError:
                return
        for call_id in [c for c, t in self.running.items() if t.done()]:
            self._see(self.running.pop(call_id).result())

    def _deadline(self) -> float | None:
        snap = self.snap
        if snap is None or snap.next != "wait":
            return None
        times = [p.expires_at for p in snap.pending if p.decision is None and p.expires_at]
        return min(times) if times else None

    def _lapsed(self) -> bool:
        deadline = self._deadline()
        return deadline is not None and workflow.now().timestamp() >= deadline

    async def _reconcile(self, what: ReconcileInput) -> Snapshot:
        snap: Snapshot = await workflow.execute_activity(
            RECONCILE,
            what,
            result_type=Snapshot,
            start_to_close_timeout=timedelta(seconds=self.options.store_seconds),
            retry_policy=_RETRY,
        )
        return snap

    async def _stop(self) -> Snapshot:
        """Cancel what is in flight, then cancel (or fail) the stored run."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        self.running.clear()
        if self.cancel_reason is not None:
            what = ReconcileInput(self.run_id, cancel=self.cancel_reason)
        else:
            what = ReconcileInput(self.run_id, fail=self.failure)
        self._see(await self._reconcile(what))
        await workflow.wait_condition(workflow.all_handlers_finished)
        assert self.snap is not None
        return self.snap


def _why(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, ActivityError) else None
    text = cause.message if isinstance(cause, ApplicationError) else str(exc) or type(exc).__name__
    return f"the workflow's step failed: {text}"

