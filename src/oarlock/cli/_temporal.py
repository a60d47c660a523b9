"""``oarlock temporal worker`` (``oarlock[temporal]``): a Temporal worker driving the
runs of the database whose workflows it polls for.

What the other commands do for a run that Temporal drives (``run --on temporal``,
``approve``, ``deny``, ``respond``, ``cancel``, ``continue``, ``retry``, and ``resume``
refused) is decided by :mod:`oarlock.engine._dispatch`, the one dispatch of the command
line, the server and the Python API; this module imports nothing of the other commands'
but the store they open."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from oarlock._render import line
from oarlock.cli import EXIT_OK, refused
from oarlock.errors import ConfigError, OarlockError, UsageError

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent

__all__ = ["dispatch"]


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
    from oarlock.engine._dispatch import sdk

    temporal = sdk()
    agents = _agents(args.agents)
    approver = None
    if args.key:
        from oarlock.governance._approvers import ApproverKey

        approver = ApproverKey.load(Path(args.key).expanduser(), args.principal or "")
    client = await temporal.connect(args.address, args.namespace)  # else no database made
    store = open_store(args, create=True)
    try:
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
