"""Agents: a name, instructions, a model, tools, limits and prices."""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oarlock._config import Problems, need_number, need_whole
from oarlock.engine._output import OutputSpec
from oarlock.errors import ConfigError
from oarlock.governance._approvers import TrustedApprovers
from oarlock.governance._policy import PolicyEngine
from oarlock.models._base import ModelAdapter
from oarlock.models._pricing import Price, PricingTable
from oarlock.tools._tool import Tool, Toolset

if TYPE_CHECKING:
    from oarlock.engine._result import RunResult
    from oarlock.engine._runner import Runner
    from oarlock.formats._models import Message
    from oarlock.sandbox._runner import SandboxRunner
    from oarlock.tools._mcp import MCPServerConfig

__all__ = ["Agent", "Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """When a run halts. ``max_turns`` counts model responses; the budget limits are
    checked after each model response, before the next request: a run whose spend has
    reached a limit halts (``halted_budget``) instead of asking the model again."""

    max_turns: int | None = None
    max_cost_usd: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        """Refuses what would quietly turn a limit off or break the turn loop: NaN and the
        infinities, booleans, strings, fractions of a turn or a token."""
        problems = Problems()
        for name in ("max_turns", "max_input_tokens", "max_output_tokens"):
            if getattr(self, name) is not None:
                problems.check(need_whole, getattr(self, name), f"limits.{name}")
        if self.max_cost_usd is not None:
            problems.check(need_number, self.max_cost_usd, "limits.max_cost_usd")
        if problems:
            raise problems.error("limits")


def _caller_module() -> str | None:
    """The module that made the agent (the frame above ``Agent.__init__``)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("oarlock."):
        frame = frame.f_back  # type: ignore[assignment]
    return None if frame is None else frame.f_globals.get("__name__")


class Agent:
    """What a runner runs. ``price`` is the model's price, or None when the table has none
    (then a cost limit is refused here, and costs are marked unknown, never zero).

    The tenant, project, environment, principal and labels make the execution scope of
    every tool call; ``policy`` governs the calls (the default policy when None).
    ``approvers`` are the keys whose signed approvals its calls accept; when None, only
    approvals signed in the same process (see :mod:`oarlock.governance._approvers`).
    ``engine`` says what drives the runs the command line starts: ``native`` (the command
    and oarlock's workers) or ``temporal`` (a Temporal cluster's workers, see
    :mod:`oarlock.temporal`); an agent file sets it with its ``engine`` key."""

    engine: str = "native"

    def __init__(
        self,
        name: str,
        model: ModelAdapter | str,
        *,
        instructions: str = "",
        tools: Iterable[Tool | Callable[..., Any]] | Toolset = (),
        limits: Limits | None = None,
        prices: Mapping[str, Price] | None = None,
        tenant: str = "default",
        project: str | None = None,
        environment: str | None = None,
        principal: str | None = None,
        labels: Mapping[str, str] | None = None,
        policy: PolicyEngine | None = None,
        mcp_servers: Sequence[MCPServerConfig] = (),
        approvers: TrustedApprovers | None = None,
        sandbox: SandboxRunner | None = None,
        output_type: Any = None,
        output_retries: int = 3,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError("an agent needs a name (a non-empty string)")
        if isinstance(model, str):
            from oarlock.models._registry import model_for

            model = model_for(model)
        self.name, self.model, self.instructions = name, model, instructions
        self.tools = tools if isinstance(tools, Toolset) else Toolset(tools)
        self.limits = limits or Limits()
        self.pricing = PricingTable(prices)
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError("an agent's tenant must be a non-empty string")
        self.tenant, self.policy, self.approvers = tenant, policy, approvers
        self.sandbox = sandbox
        self.output = OutputSpec(output_type, retries=output_retries)
        self._module = _caller_module()
        self._quick: Runner | None = None
        self.mcp_servers = tuple(mcp_servers)
        scope: dict[str, Any] = {"tenantId": tenant}
        for key, value in (
            ("projectId", project),
            ("environment", environment),
            ("principalId", principal),
        ):
            if value is not None:
                scope[key] = value
        if labels:
            scope["labels"] = dict(labels)
        self.scope: Mapping[str, Any] = scope
        self.price = self.pricing.price(model.model_id)
        if self.limits.max_cost_usd is not None:
            self.pricing.require(model.model_id)

    @property
    def ref(self) -> str | None:
        """Where another process finds this agent: ``module:name`` for an agent bound to a
        name at the top level of the module that made it (not ``__main__``), else None."""
        module = sys.modules.get(self._module or "")
        if module is None or self._module == "__main__":
            return None
        for name, value in vars(module).items():
            if value is self and not name.startswith("_"):
                return f"{self._module}:{name}"
        return None

    async def run(
        self,
        input: str,
        *,
        deps: Any = None,
        message_history: Sequence[Message] = (),
        tags: dict[str, str] | None = None,
    ) -> RunResult[Any]:
        """Run ``input`` on a store in memory kept by the agent (for quick use; a durable
        run is ``Runner(agent, store).run(...)``) until it finishes or waits for a human."""
        return await self._runner().run(
            input, deps=deps, message_history=message_history, tags=tags
        )

    def run_sync(
        self,
        input: str,
        *,
        deps: Any = None,
        message_history: Sequence[Message] = (),
        tags: dict[str, str] | None = None,
    ) -> RunResult[Any]:
        """:meth:`run` from code that is not async (a script; a notebook)."""
        from oarlock.engine._result import synchronously

        return synchronously(
            self.run(input, deps=deps, message_history=message_history, tags=tags)
        )

    def _runner(self) -> Runner:
        if self._quick is None:
            from oarlock.engine._runner import Runner
            from oarlock.store._memory import MemoryStore

            self._quick = Runner(self, MemoryStore())
        return self._quick

    def with_model(self, model: ModelAdapter) -> Agent:
        """This agent (tools, limits, scope, policy, prices) with another model. The
        toolset is its own, so that MCP tools one of them connects do not appear in the
        other. As when the agent is made, a cost limit needs the model's price: a model
        without one is refused (``unpriced_model``), never run as if it were free."""
        if self.limits.max_cost_usd is not None:
            self.pricing.require(model.model_id)
        other = copy.copy(self)
        other.model, other.tools, other._quick = model, Toolset(self.tools), None
        other.price = self.pricing.price(model.model_id)
        return other

    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[Agent]:
        """The agent with its MCP servers started and their tools (``server.tool``) added;
        the servers stop when the block ends. Without MCP servers, the agent as it is."""
        if not self.mcp_servers:
            yield self
            return
        from oarlock.tools._mcp import connect_mcp

        async with await connect_mcp(list(self.mcp_servers)) as mcp:
            for t in mcp.tools:
                self.tools.add(t)
            try:
                yield self
            finally:
                for t in mcp.tools:
                    self.tools.remove(t.name)
