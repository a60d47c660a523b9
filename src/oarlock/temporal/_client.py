"""Starting, restarting (a continuation, a retry), deciding and cancelling runs that
Temporal drives, and the worker that drives them.

A run driven by Temporal is stored as any other (created by :func:`start_run` in queue
``temporal:TASK_QUEUE``, where no native worker of the default queue looks) and carries
where it is driven in its document's ``drivenBy`` member (``engine``, ``address``,
``namespace``, ``taskQueue``), so that the command line and the server find its workflow
(workflow id = run id): a decision becomes the workflow's decision update, a cancellation
its cancel signal, a continuation or a retry a new execution of the workflow once the
store holds the transition (:func:`restart_run`)."""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from oarlock._driven import TemporalTarget, driven_by
from oarlock.engine import _core as core
from oarlock.errors import ConfigError, DecisionRefused, OarlockError, RunStateError
from oarlock.temporal import _exit
from oarlock.temporal._activities import Activities, arguments_hash
from oarlock.temporal._types import (
    CANCEL_SIGNAL,
    DECIDE_UPDATE,
    STATE_QUERY,
    WORKFLOW,
    Decision,
    Progress,
    RunOptions,
    RunStart,
)
from oarlock.temporal._workflow import RunWorkflow

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.engine._runner import EventHook
    from oarlock.formats._models import Message, RunDocument
    from oarlock.governance._approvers import ApproverKey
    from oarlock.store._base import Event, RunStore

__all__ = [
    "TemporalTarget",
    "cancel_run",
    "connect",
    "decide_run",
    "driven_by",
    "ended",
    "has_worker",
    "make_worker",
    "restart_run",
    "settled",
    "start_run",
    "workflow_runner",
]

_exit.register()  # the SDK's threads done with Python before the interpreter finalizes


async def connect(address: str, namespace: str = "default") -> Client:
    """A client of the Temporal frontend at ``address`` (``HOST:PORT``; a URL is refused:
    ``temporal_address``)."""
    if "://" in address:
        raise ConfigError(
            f"the address of a Temporal frontend is HOST:PORT, not a URL: {address}",
            code="temporal_address",
        )
    try:
        return await Client.connect(address, namespace=namespace)
    except (RPCError, RuntimeError, ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(
            f"cannot reach Temporal at {address} (namespace {namespace}): {_why(exc)}",
            code="temporal_unreachable",
        ) from None


def _why(exc: Exception) -> str:
    """What a failed connection says, without the Rust error's debugging form around it
    (``... message: "Connection refused" ...``: Connection refused)."""
    text = str(exc)
    found = re.findall(r'(?:message|error): "((?:[^"\\]|\\.)*)"', text)
    return found[-1] if found else text


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox the workflow runs in; oarlock's modules pass through (the workflow
    imports only the pure ``_types``, which a test checks)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("oarlock")
    )


def make_worker(
    client: Client,
    store: RunStore,
    task_queue: str,
    *,
    agents: Mapping[str, Agent] | None = None,
    approver: ApproverKey | None = None,
    max_concurrent_activities: int = 100,
    drain: float = 30.0,
) -> tuple[Worker, Activities]:
    """A Temporal worker of ``task_queue`` driving the runs of ``store``, and its
    activities (close them with :meth:`Activities.aclose` once the worker stops). On
    shutdown, the activities in flight have ``drain`` seconds to finish (a tool call
    cancelled after that is recorded as after a crash: Uncertain if it has effects)."""
    activities = Activities(store, agents=agents, approver=approver)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=activities.all(),
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
        graceful_shutdown_timeout=timedelta(seconds=drain),
    )
    return worker, activities


async def start_run(
    client: Client,
    store: RunStore,
    agent: Agent,
    input: str,
    target: TemporalTarget,
    *,
    agent_ref: str | None = None,
    tags: dict[str, str] | None = None,
    run_id: str | None = None,
    options: RunOptions | None = None,
    message_history: Sequence[Message] = (),
) -> RunDocument:
    """Store a new run driven by Temporal at ``target`` and start its workflow."""
    from oarlock.formats._time import now_rfc3339

    doc, events = core.new_run(
        run_id=run_id or str(uuid.uuid4()),
        agent=agent.name,
        model=agent.model.model_id,
        input=input,
        now=now_rfc3339(),
        tags=tags,
        history=message_history,
    )
    setattr(doc, "drivenBy", target.member())  # noqa: B010 - an extension member
    version = await store.create(
        doc,
        events,
        agent_ref=agent_ref if agent_ref is not None else agent.ref,
        tenant=agent.tenant,
        queue=f"temporal:{target.task_queue}",
    )
    try:
        await client.start_workflow(
            WORKFLOW,
            RunStart(doc.id, options or RunOptions(), version=version),
            id=doc.id,
            task_queue=target.task_queue,
        )
    except RPCError as exc:
        from oarlock.engine._runner import cancel_run as cancel_stored

        await cancel_stored(store, doc.id, f"its workflow could not be started: {exc}")
        raise ConfigError(f"the run's workflow could not be started: {exc}",
                          code="temporal_unreachable") from None  # fmt: skip
    return doc


async def restart_run(
    client: Client,
    store: RunStore,
    run_id: str,
    text: str | None = None,
    *,
    options: RunOptions | None = None,
    closing: float = 10.0,
    on_commit: EventHook | None = None,
    clock: Callable[[], str] | None = None,
) -> RunDocument:
    """Run again a run Temporal drove to an end, as :meth:`Runner.continue_run` (given
    ``text``: a completed run goes on with a new user message) or :meth:`Runner.retry`
    (without: a failed or halted run runs again from its last committed step) do for a
    native run: the same transition of the engine's core committed to the store, then a
    new execution of the run's workflow (workflow id = run id, reused) on the task queue
    its ``drivenBy`` member names. ``client`` is connected to that frontend and namespace.

    Refused, with nothing changed: a run Temporal does not drive (``not_temporal``), one
    the transition does not fit (``run_state``: a running run, say), and one whose earlier
    execution is still running after ``closing`` seconds (``temporal_workflow_running``;
    an execution that has just ended its run closes at once). When the new execution
    cannot be started, the run is failed, saying why, so that ``retry`` takes it again
    (``temporal_unreachable``)."""
    from oarlock.engine._runner import update_run
    from oarlock.formats._time import now_rfc3339

    now = clock or now_rfc3339
    stored = await store.load(run_id)
    target = driven_by(stored.document)
    if target is None:
        raise RunStateError(f"run {run_id} is not driven by Temporal", code="not_temporal")

    def again(doc: RunDocument) -> list[Event]:
        if text is None:
            return core.retry_run(doc, now())
        return core.continue_run(doc, text, now())

    again(stored.document.model_copy(deep=True))  # refused as the run stands: nothing changes
    await _closed(client, run_id, closing)
    await update_run(store, run_id, again, on_commit=on_commit)
    restarted = await store.load(run_id)
    try:
        await client.start_workflow(
            WORKFLOW,
            RunStart(run_id, options or RunOptions(), version=restarted.version),
            id=run_id,
            task_queue=target.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
    except (RPCError, WorkflowAlreadyStartedError) as exc:
        why = f"its workflow could not be started again: {exc}"

        def failing(doc: RunDocument) -> list[Event]:
            return [] if doc.status in core.TERMINAL else core.fail(doc, why, now())

        await update_run(store, run_id, failing, on_commit=on_commit)
        raise ConfigError(f"run {run_id}: {why}; the run failed, retry it once Temporal "
                          "answers", code="temporal_unreachable") from None  # fmt: skip
    return restarted.document


async def _closed(client: Client, run_id: str, within: float, poll: float = 0.05) -> None:
    """Wait until no execution of the run's workflow is running: refused (code
    ``temporal_workflow_running``) if one still is after ``within`` seconds."""
    handle = client.get_workflow_handle(run_id)
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            status = (await handle.describe()).status
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return  # never started (or deleted): nothing runs
            raise ConfigError(f"cannot ask Temporal about the run's workflow: {exc}",
                              code="temporal_unreachable") from None  # fmt: skip
        if status != WorkflowExecutionStatus.RUNNING:
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise RunStateError(
                f"run {run_id}: an execution of its workflow is still running; wait for it "
                f"to end, or end it with Temporal's tools (temporal workflow terminate "
                f"--workflow-id {run_id})",
                code="temporal_workflow_running",
            )
        await asyncio.sleep(poll)


async def has_worker(client: Client, task_queue: str) -> bool:
    """Whether a worker polls ``task_queue`` for workflow tasks now (or did a moment
    ago)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        described = await client.workflow_service.describe_task_queue(request)
    except RPCError as exc:
        raise ConfigError(f"cannot describe task queue {task_queue}: {exc}",
                          code="temporal_unreachable") from None  # fmt: skip
    return bool(described.pollers)


async def settled(client: Client, run_id: str, *, poll: float = 0.1) -> Progress:
    """Wait until the run's workflow finished its step: the run is done, or waits for
    decisions with no call in flight."""
    handle = client.get_workflow_handle(run_id)
    while True:
        try:
            progress: Progress = await handle.query(STATE_QUERY, result_type=Progress)
        except RPCError as exc:
            raise ConfigError(f"cannot ask the run's workflow: {exc}",
                              code="temporal_unreachable") from None  # fmt: skip
        snap = progress.snapshot
        if snap is not None and not progress.running and snap.next in ("done", "wait"):
            return progress
        await asyncio.sleep(poll)


async def decide_run(
    client: Client,
    doc: RunDocument,
    call_id: str,
    decision: str,
    *,
    reason: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
    response: str | None = None,
    principal: str | None = None,
    expires_in: float | None = None,
) -> None:
    """Send a decision on ``call_id`` to the run's workflow, bound to the arguments the
    call waits with in ``doc``; returns once the decision is stored. A refusal (by the
    update's validator or by the decision path) raises DecisionRefused."""
    pending = next((a for a in doc.pending_approvals if a.tool_call_id == call_id), None)
    bound = arguments_hash(pending) if pending is not None else ""
    handle = client.get_workflow_handle(doc.id)
    given = Decision(call_id, decision, bound, reason, edited_arguments, response, principal,
                     expires_in)  # fmt: skip
    try:
        await handle.execute_update(DECIDE_UPDATE, given)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        raise DecisionRefused(message, code="decision_refused") from None
    except RPCError as exc:
        raise OarlockError(f"the decision could not be sent to Temporal: {exc}",
                           code="temporal_unreachable") from None  # fmt: skip


async def cancel_run(client: Client, run_id: str, reason: str | None = None) -> bool:
    """Ask the run's workflow to cancel the run; False when no execution of it runs (it
    has ended, or never started: no workflow will cancel the run)."""
    try:
        await client.get_workflow_handle(run_id).signal(CANCEL_SIGNAL, reason or "cancelled")
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise OarlockError(f"the cancellation could not be sent to Temporal: {exc}",
                           code="temporal_unreachable") from None  # fmt: skip
    return True


async def ended(client: Client, run_id: str, *, poll: float = 0.1) -> None:
    """Wait until no execution of the run's workflow runs (a cancelled run's, say)."""
    await _closed(client, run_id, math.inf, poll)
