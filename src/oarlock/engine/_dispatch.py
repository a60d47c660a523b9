"""Where each action on a stored run goes: the one dispatch of the command line, the
server and the Python API (:class:`~oarlock.engine.Runner`, through :class:`Dispatched`).

A run's document says who drives it (its ``drivenBy`` member, read by
:func:`oarlock._driven.driven_by`): the native engine (a process's runner, oarlock's
workers), or, for a run started on Temporal, its workflow (workflow id = run id) at the
frontend, namespace and task queue the member names. Every action on a stored run asks
:func:`driver` first and goes where it says:

* ``decide`` (approve, deny, respond): a native run's decision is the caller's
  (``Runner.decide``); a Temporal-driven run's is its workflow's decision update, stored
  by a worker of its task queue (which signs an approval with its own key), refused when
  no worker polls that queue (``temporal_no_worker``: the update would wait for one);
* ``cancel``: a Temporal-driven run that has not ended gets its workflow's cancel signal;
  one whose workflow has no execution running any more is cancelled in the store, as a
  native run is (nothing else drives it);
* ``continue`` and ``retry``: a Temporal-driven run's transition is committed to the
  store, then a new execution of its workflow started
  (:func:`oarlock.temporal.restart_run`) and waited on;
* ``resume``: refused for a Temporal-driven run (``temporal_driven``): its workflow takes
  its steps.

A run Temporal drives is never driven natively by a caller: only the runner of a Temporal
worker's activities (whose :attr:`Dispatched.drives` is ``temporal``) takes its steps. A
denial needs a reason, whatever the surface (:func:`check_decision`).

Temporal's SDK is imported only for a run Temporal drives (``oarlock[temporal]``; without
it, ``temporal_missing``). The frontend that reaches a stored run's workflow is
``$OARLOCK_TEMPORAL_ADDRESS`` when set, else the address the run names (:func:`frontend`).
What a person would be told along the way (a decision stored, how to start a worker) goes
to ``told`` (the command line prints it), else to the ``oarlock.temporal`` logger."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from oarlock._driven import ENGINE, TemporalTarget, driven_by
from oarlock.engine import _core as core
from oarlock.engine._conversation import Conversations
from oarlock.engine._decisions import Decisions
from oarlock.engine._settled import record_settled_calls
from oarlock.engine._update import cancel_run
from oarlock.errors import ConfigError, DecisionRefused, RunStateError, UsageError

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.engine._update import EventHook
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import Event, RunStore

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_QUEUE",
    "NATIVE",
    "Action",
    "Dispatched",
    "again",
    "cancel",
    "check_decision",
    "decide",
    "default_address",
    "driver",
    "frontend",
    "sdk",
    "start",
]

NATIVE = "native"
DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_QUEUE = "oarlock"

Action = Literal["decide", "resume", "cancel", "continue", "retry"]
Native = Callable[[], Awaitable["RunDocument"]]
Told = Callable[[str], None]

_log = logging.getLogger("oarlock.temporal")


# -- the rules --------------------------------------------------------------------------
def check_decision(decision: str, reason: str | None) -> None:
    """The rule every decision passes, from every surface, before anything is sent or
    stored: a denial says why (a reason that is neither empty nor blank)."""
    if decision == "denied" and not (isinstance(reason, str) and reason.strip()):
        raise DecisionRefused(
            "a denial needs a reason: say why the call is denied (a reason that is not empty)",
            code="reason_required",
        )


def driver(doc: RunDocument, action: Action, engine: str = NATIVE) -> TemporalTarget | None:
    """Where ``action`` on the run goes: None when the caller's ``engine`` drives the run
    (a native run, for any caller but a Temporal worker's activities), else the target of
    the Temporal workflow that takes it. A ``resume`` of a run Temporal drives is refused
    (RunStateError, ``temporal_driven``); a ``drivenBy`` member naming Temporal without
    saying where is refused (ConfigError, ``temporal_target``)."""
    target = driven_by(doc)
    if target is None or engine == ENGINE:
        return None
    if action == "resume":
        raise RunStateError(
            f"run {doc.id} is driven by Temporal (its drivenBy member): its workflow takes "
            "its steps, so it is not resumed from here",
            code="temporal_driven",
        )
    return target


def default_address() -> str:
    """The frontend a new run on Temporal is started at when none is given."""
    return os.environ.get("OARLOCK_TEMPORAL_ADDRESS") or DEFAULT_ADDRESS


def frontend(target: TemporalTarget) -> str:
    """The frontend that reaches a stored run's workflow: ``$OARLOCK_TEMPORAL_ADDRESS``
    when set (the frontend moved), else the address the run names."""
    return os.environ.get("OARLOCK_TEMPORAL_ADDRESS") or target.address


def _advice(address: str, target: TemporalTarget) -> str:
    return (
        f"no Temporal worker polls task queue {target.task_queue}: the run goes on when one "
        f"does; start one with: oarlock temporal worker --address {address} --task-queue "
        f"{target.task_queue}"
    )


# -- Temporal's side --------------------------------------------------------------------
def sdk() -> Any:
    """:mod:`oarlock.temporal._client`, imported now (a run Temporal drives)."""
    try:
        from oarlock.temporal import _client
    except ImportError as exc:
        raise ConfigError(
            f"a run on Temporal needs oarlock[temporal] installed ({exc})",
            code="temporal_missing",
        ) from None
    return _client


async def _reach(api: Any, doc: RunDocument, target: TemporalTarget, what: str) -> Any:
    """A client of the frontend of the run's workflow; one that cannot be reached is
    refused naming the rule that sends ``what`` (a decision, a cancel...) there."""
    address = frontend(target)
    try:
        return await api.connect(address, target.namespace)
    except ConfigError as exc:
        raise ConfigError(
            f"run {doc.id} is driven by Temporal (its drivenBy member), so its {what} goes "
            f"through its workflow: {exc}",
            code=exc.code,
        ) from None


async def _settle(
    api: Any, client: Any, target: TemporalTarget, run_id: str, *, address: str, told: Told
) -> None:
    """Wait until the run's workflow has taken its steps (the run is done, or waits for a
    decision); at once, saying how to start a worker, when none polls its task queue."""
    if await api.has_worker(client, target.task_queue):
        await api.settled(client, run_id)
    else:
        told(_advice(address, target))


async def start(
    store: RunStore,
    agent: Agent,
    input: str,
    target: TemporalTarget,
    *,
    agent_ref: str | None = None,
    tags: dict[str, str] | None = None,
    wait: bool = True,
    told: Told | None = None,
) -> RunDocument:
    """A new run driven by Temporal at ``target`` (``run --on temporal``): stored, its
    workflow started, then (with ``wait``) waited on until it is done or waits for a
    decision, at once when no worker polls its task queue."""
    say = told or _log.info
    api = sdk()
    client = await api.connect(target.address, target.namespace)
    doc: RunDocument = await api.start_run(
        client, store, agent, input, target, agent_ref=agent_ref, tags=tags
    )
    if wait:
        await _settle(api, client, target, doc.id, address=target.address, told=say)
        return (await store.load(doc.id)).document
    say(f"run {doc.id} started on Temporal (task queue {target.task_queue})")
    if not await api.has_worker(client, target.task_queue):
        say(_advice(target.address, target))
    return doc


async def decide(
    store: RunStore,
    run_id: str,
    call_id: str,
    decision: str,
    *,
    native: Native,
    reason: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
    response: str | None = None,
    by: str = "human",
    principal: str | None = None,
    expires_in: float | None = None,
    wait: bool = False,
    own_key: bool = False,
    told: Told | None = None,
    engine: str = NATIVE,
) -> RunDocument:
    """A decision on the run: ``native()`` for a run the caller's engine drives, else the
    decision update of the run's workflow, which returns once a worker has stored it
    (then, with ``wait``, until the workflow has taken the run's next steps). ``own_key``:
    the caller asked to sign with a key of its own (``approve --key``), refused for a run
    Temporal drives, whose worker signs what it stores."""
    check_decision(decision, reason)
    stored = await store.load(run_id)
    target = driver(stored.document, "decide", engine)
    if target is None:
        return await native()
    doc = stored.document
    if doc.status != "waiting_approval":
        raise DecisionRefused(
            f"run {run_id} is {doc.status}, not waiting for approval", code="run_not_waiting"
        )
    if own_key:
        raise UsageError(
            f"run {run_id} is driven by Temporal: the worker that stores a decision signs it "
            "(oarlock temporal worker --key); decide without a key of your own"
        )
    if by != "human":
        raise UsageError(
            f"run {run_id} is driven by Temporal: only its workflow decides by policy (a "
            "deadline that lapsed); send a human's decision"
        )
    api, address = sdk(), frontend(target)
    client = await _reach(api, doc, target, "decision")
    if not await api.has_worker(client, target.task_queue):
        raise ConfigError(
            f"run {run_id} is driven by Temporal and no worker polls its task queue "
            f"{target.task_queue}: a worker stores the decision; start one with: oarlock "
            f"temporal worker --address {address} --task-queue {target.task_queue}",
            code="temporal_no_worker",
        )
    await api.decide_run(client, doc, call_id, decision, reason=reason,
                         edited_arguments=edited_arguments, response=response,
                         principal=principal, expires_in=expires_in)  # fmt: skip
    (told or _log.info)(f"{call_id}: {decision}")
    if wait:
        await api.settled(client, run_id)
    return (await store.load(run_id)).document


async def cancel(
    store: RunStore,
    run_id: str,
    reason: str | None,
    *,
    native: Native,
    wait: bool = False,
    told: Told | None = None,
    engine: str = NATIVE,
) -> RunDocument:
    """Cancel the run: ``native()`` (in the store) for a run the caller's engine drives,
    one that has ended (refused as any ended run is) and one whose workflow has no
    execution running (nothing else drives it); else its workflow's cancel signal (then,
    with ``wait``, until the workflow has cancelled the run, at once when no worker polls
    its task queue)."""
    stored = await store.load(run_id)
    target = driver(stored.document, "cancel", engine)
    if target is None or stored.document.status in core.TERMINAL:
        return await native()
    say, api, address = told or _log.info, sdk(), frontend(target)
    client = await _reach(api, stored.document, target, "cancel")
    if not await api.cancel_run(client, run_id, reason):
        return await native()
    say(f"run {run_id}: cancellation sent to its workflow")
    if wait:
        if await api.has_worker(client, target.task_queue):
            await api.ended(client, run_id)
        else:
            say(_advice(address, target))
    return (await store.load(run_id)).document


async def again(
    store: RunStore,
    run_id: str,
    text: str | None,
    *,
    native: Native,
    on_commit: EventHook | None = None,
    clock: Callable[[], str] | None = None,
    told: Told | None = None,
    engine: str = NATIVE,
) -> RunDocument:
    """``continue`` (given ``text``) or ``retry``: ``native()`` for a run the caller's
    engine drives; else the same transition committed to the store, a new execution of
    the run's workflow started (refused while one still runs:
    ``temporal_workflow_running``) and waited on, at once when no worker polls its task
    queue."""
    stored = await store.load(run_id)
    target = driver(stored.document, "retry" if text is None else "continue", engine)
    if target is None:
        return await native()
    api, address = sdk(), frontend(target)
    client = await _reach(api, stored.document, target, "retry" if text is None else "continue")
    await api.restart_run(client, store, run_id, text, on_commit=on_commit, clock=clock)
    await _settle(api, client, target, run_id, address=address, told=told or _log.info)
    return (await store.load(run_id)).document


# -- the runner's side ------------------------------------------------------------------
class Dispatched(Conversations, Decisions):
    """The runner's actions on a stored run (decide, continue, retry, cancel), each going
    where the run is driven (see the module); its ``resume`` asks :func:`driver` in its
    drive. ``drives`` names the engine whose runs the runner takes the steps of:
    ``native``, or ``temporal`` for the runner of a Temporal worker's activities."""

    drives: ClassVar[str] = NATIVE

    if TYPE_CHECKING:  # the runner's

        def _told(self, doc: RunDocument, events: list[Event]) -> None: ...

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
        """Record one decision (see :meth:`Decisions.decide`); a denial needs a reason
        (DecisionRefused, ``reason_required``). For a run Temporal drives, the decision is
        its workflow's update, stored and signed by a worker of its task queue (this
        runner's ``approver`` only names the default principal); ``resume`` then waits
        until the workflow has taken the run's next steps (``deps`` are the worker's)."""
        here = super().decide

        async def native() -> RunDocument:
            return await here(
                run_id, call_id, decision, reason=reason, edited_arguments=edited_arguments,
                response=response, by=by, principal=principal, expires_in=expires_in,
                resume=resume, deps=deps,
            )  # fmt: skip

        who = principal or (self.approver.principal if self.approver is not None else None)
        return await decide(
            self.store, run_id, call_id, decision, native=native, reason=reason,
            edited_arguments=edited_arguments, response=response, by=by, principal=who,
            expires_in=expires_in, wait=resume, engine=self.drives,
        )  # fmt: skip

    async def continue_run(self, run_id: str, text: str, *, deps: Any = None) -> RunDocument:
        """Continue a completed run with a new user message and drive it on (see
        :meth:`Conversations.continue_run`); a run Temporal drives goes on in a new
        execution of its workflow, waited on."""
        here = super().continue_run
        return await again(
            self.store, run_id, text, native=lambda: here(run_id, text, deps=deps),
            on_commit=self._told, clock=self.clock, engine=self.drives,
        )  # fmt: skip

    async def retry(self, run_id: str, *, deps: Any = None) -> RunDocument:
        """Run again a failed or halted run (see :meth:`Conversations.retry`); a run
        Temporal drives runs again in a new execution of its workflow, waited on."""
        here = super().retry
        return await again(
            self.store, run_id, None, native=lambda: here(run_id, deps=deps),
            on_commit=self._told, clock=self.clock, engine=self.drives,
        )  # fmt: skip

    async def cancel(self, run_id: str, reason: str | None = None) -> RunDocument:
        """Cancel a live run; the calls it left waiting for a decision go on the ledger as
        cancelled. A run Temporal drives is cancelled by its workflow (its cancel signal),
        waited on."""

        async def native() -> RunDocument:
            doc = await cancel_run(
                self.store, run_id, reason, clock=self.clock, on_commit=self._told
            )
            await record_settled_calls(self.agent, self.executor, doc, self._ctx(doc))
            return doc

        return await cancel(
            self.store, run_id, reason, native=native, wait=True, engine=self.drives
        )
