"""``oarlock temporal worker``, and what ``run --on temporal``, ``approve``, ``deny``,
``respond``, ``cancel``, ``continue`` and ``retry`` do for a run that Temporal drives
(``oarlock[temporal]``).

A run driven by Temporal names its frontend, namespace and task queue in its document
(``drivenBy``); ``$OARLOCK_TEMPORAL_ADDRESS`` replaces the frontend's address when set.
A decision is sent as the run's decision update (stored by the worker through the same
decision path as a native run's before the command returns), a cancellation as its
cancel signal. A continuation or a retry commits the native path's transition to the
store, then starts a new execution of the run's workflow (the earlier one has closed)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oarlock._render import line
from oarlock.cli import EXIT_OK, refused
from oarlock.errors import ConfigError, OarlockError, UsageError

if TYPE_CHECKING:
    from temporalio.client import Client

    from oarlock.engine._agent import Agent
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import RunStore
    from oarlock.temporal import TemporalTarget

__all__ = ["cancel", "decide", "default_address", "dispatch", "restart", "start"]

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_QUEUE = "oarlock"


def default_address() -> str:
    return os.environ.get("OARLOCK_TEMPORAL_ADDRESS") or DEFAULT_ADDRESS


def _module() -> Any:
    try:
        from oarlock import temporal
    except ImportError as exc:
        raise ConfigError(
            f"running on Temporal needs oarlock[temporal] installed ({exc})",
            code="temporal_missing",
        ) from None
    return temporal


async def _client(target: TemporalTarget) -> Client:
    address = os.environ.get("OARLOCK_TEMPORAL_ADDRESS") or target.address
    client: Client = await _module().connect(address, target.namespace)
    return client


async def start(
    args: argparse.Namespace, store: RunStore, agent: Agent, agent_file: str, tags: dict[str, str]
) -> RunDocument:
    """``run --on temporal``: store the run, start its workflow, and (unless
    ``--detach``) wait until it is done or waits for a decision."""
    temporal = _module()
    target = temporal.TemporalTarget(
        args.address or default_address(), args.task_queue or DEFAULT_QUEUE, args.namespace
    )
    client = await _client(target)
    doc: RunDocument = await temporal.start_run(
        client, store, agent, args.input, target, agent_ref=agent_file, tags=tags
    )
    if args.detach:
        print(f"run {line(doc.id)} started on Temporal (task queue {line(target.task_queue)})")
        await _worker_advice(client, target)
        return doc
    return await _settled(client, store, doc.id, target)


async def _worker_advice(client: Client, target: TemporalTarget) -> bool:
    """Say how to start a worker when none polls the run's task queue; whether one does."""
    if await _module().has_worker(client, target.task_queue):
        return True
    print(
        f"no Temporal worker polls task queue {line(target.task_queue)}: the run goes on when "
        f"one does; start one with: oarlock temporal worker --address {line(target.address)} "
        f"--task-queue {line(target.task_queue)}"
    )
    return False


async def _settled(
    client: Client, store: RunStore, run_id: str, target: TemporalTarget
) -> RunDocument:
    """The run once its workflow is done or waits (at once when no worker polls)."""
    if await _worker_advice(client, target):
        await _module().settled(client, run_id)
    stored = await store.load(run_id)
    return stored.document


async def decide(args: argparse.Namespace, store: RunStore, doc: RunDocument) -> RunDocument:
    """A decision on a run Temporal drives: the run's decision update."""
    from oarlock.cli._keys import principal_default
    from oarlock.cli._runs import _edited
    from oarlock.errors import DecisionRefused

    temporal = _module()
    target = temporal.driven_by(doc)
    if doc.status != "waiting_approval":
        raise DecisionRefused(
            f"run {doc.id} is {doc.status}, not waiting for approval", code="run_not_waiting"
        )
    if getattr(args, "key", None):
        raise UsageError(
            f"run {doc.id} is driven by Temporal: its worker signs the approvals it stores "
            "(oarlock temporal worker --key); approve without --key"
        )
    client = await _client(target)
    await temporal.decide_run(
        client,
        doc,
        args.call_id,
        args.decision,
        reason=args.reason,
        edited_arguments=_edited(getattr(args, "edit", None)),
        response=getattr(args, "text", None),
        principal=args.principal or principal_default(),
        expires_in=getattr(args, "expires_in", None),
    )
    print(f"{line(args.call_id)}: {args.decision}", flush=True)
    if args.no_resume:
        return (await store.load(doc.id)).document
    return await _settled(client, store, doc.id, target)


async def restart(store: RunStore, doc: RunDocument, text: str | None) -> RunDocument:
    """``continue`` (given ``text``) or ``retry`` of a run Temporal drives: the same
    transition as for a native run committed to the store, then a new execution of its
    workflow, waited on as ``run --on temporal`` waits."""
    from oarlock.telemetry._setup import default_observer

    temporal = _module()
    target = temporal.driven_by(doc)
    client = await _client(target)
    await temporal.restart_run(client, store, doc.id, text, on_commit=default_observer().committed)
    return await _settled(client, store, doc.id, target)


async def cancel(doc: RunDocument, reason: str | None) -> None:
    temporal = _module()
    client = await _client(temporal.driven_by(doc))
    await temporal.cancel_run(client, doc.id, reason)


def _agents(folder: str | None) -> dict[str, Agent]:
    """The agent files of ``folder`` (``*.yaml``, ``*.yml``), by agent name."""
    if folder is None:
        return {}
    from oarlock.engine._agentfile import load_agent

    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"--agents {line(folder)}: not a folder")
    agents: dict[str, Agent] = {}
    for path in sorted([*root.glob("*.yaml"), *root.glob("*.yml")]):
        agent = load_agent(str(path.resolve()))
        if agent.name in agents:
            raise ConfigError(f"--agents: two agent files name agent {agent.name!r}")
        agents[agent.name] = agent
    return agents


async def _work(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from oarlock.cli._runs import open_store

    temporal = _module()
    agents = _agents(args.agents)
    approver = None
    if args.key:
        from oarlock.governance._approvers import ApproverKey

        approver = ApproverKey.load(Path(args.key).expanduser(), args.principal or "")
    store = open_store(args, create=True)
    try:
        client = await temporal.connect(args.address, args.namespace)
        worker, activities = temporal.make_worker(
            client, store, args.task_queue, agents=agents, approver=approver, drain=args.drain
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(
            f"temporal worker started: {line(args.address)}, namespace "
            f"{line(args.namespace)}, task queue {line(args.task_queue)}",
            flush=True,
        )
        try:
            async with worker:
                await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await activities.aclose()
        print("temporal worker stopped", flush=True)
    finally:
        await store.close()
    return EXIT_OK


def dispatch(args: argparse.Namespace) -> int:
    import asyncio

    try:
        return asyncio.run(_work(args))
    except OarlockError as exc:
        return refused(exc)
