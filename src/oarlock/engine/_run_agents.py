"""The agents of the runs a long-lived process drives (a worker, a Temporal worker): the
agents it was given by name, else each run's agent file loaded once and loaded again when
the file changes, with their MCP servers started once for the process's life."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.store._base import StoredRun

__all__ = ["RunAgents"]


class RunAgents:
    """``await agents.of(stored)``: the agent that drives a stored run. ``aclose()`` stops
    the MCP servers it started."""

    def __init__(self, given: Mapping[str, Agent] | None = None) -> None:
        self._given = dict(given or {})
        self._loaded: dict[tuple[str, str], tuple[int, Agent]] = {}
        self._connected: set[int] = set()
        self._stack = contextlib.AsyncExitStack()

    async def of(self, stored: StoredRun) -> Agent:
        doc = stored.document
        given = self._given.get(doc.agent)
        if given is not None:
            return await self._connect(given)
        from oarlock.engine._agentfile import run_agent

        ref = stored.agent_ref or ""
        try:
            stamp = os.stat(ref).st_mtime_ns if ref else 0
        except OSError:
            stamp = -1  # the load says what is wrong with it
        key = (ref, doc.model)
        cached = self._loaded.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        agent = await self._connect(run_agent(stored.agent_ref, doc.model, doc.id))
        self._loaded[key] = (stamp, agent)
        return agent

    async def _connect(self, agent: Agent) -> Agent:
        """The agent with its MCP servers started, once for the process's life."""
        if agent.mcp_servers and id(agent) not in self._connected:
            await self._stack.enter_async_context(agent.connected())
            self._connected.add(id(agent))
        return agent

    async def aclose(self) -> None:
        await self._stack.aclose()
