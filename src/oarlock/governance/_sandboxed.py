"""How the governed executor hands a ``sandbox``-class call to the sandbox runner.

Before anything is claimed, the call is planned: its workspace (the run's), its egress
profile (the policy rule's if it names one, else the tool's, else ``none``; ``host`` only
when a policy rule grants it) and the least isolation the policy accepts. A call that
cannot be isolated so is refused (``sandbox_unavailable``, ``egress_not_granted``) and never
runs. Then the runner runs it (:func:`oarlock.sandbox.call_sandboxed`); a tool cannot opt
out, and its receipt records the isolation, the egress profile, the limits, the exit status
or signal and the bytes of output kept and dropped (``usage.sandbox``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oarlock.errors import OarlockError, ToolError

if TYPE_CHECKING:
    from oarlock.governance._calls import _Call, _Outcome
    from oarlock.governance._policy import PolicyVerdict
    from oarlock.sandbox._runner import SandboxRunner
    from oarlock.tools._tool import Tool

__all__ = ["SandboxPlan", "SandboxRefused", "plan_sandbox", "run_planned"]


class SandboxRefused(ToolError):
    """The call cannot run in the sandbox as required; it was not run."""


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    workspace_id: str
    egress: str
    isolation: str  # what the runner will apply (``workspace``: oarlock's own confined
    # file operation, no program started)

    def invocation_member(self) -> dict[str, Any]:
        """The invocation's ``sandbox`` member: the workspace, the egress profile and the
        isolation the call is to run under, which its receipt's ``usage.sandbox`` must
        match (:func:`oarlock.formats.sandbox_problem`)."""
        return {
            "workspaceId": self.workspace_id,
            "egressProfile": self.egress,
            "isolation": self.isolation,
        }


def plan_sandbox(
    runner: SandboxRunner, tool: Tool, verdict: PolicyVerdict, workspace_id: str
) -> SandboxPlan:
    """The plan of a call, or SandboxRefused naming the rule it cannot meet."""
    from oarlock.sandbox._call import check_runnable
    from oarlock.sandbox._runner import SandboxUnavailable

    wanted = tool.sandbox.egress if tool.sandbox is not None else "none"
    egress = verdict.sandbox_egress or wanted
    if egress == "host" and verdict.sandbox_egress != "host":
        raise SandboxRefused(
            f"tool {tool.name!r} asks for the host's network, which only a policy rule can "
            "grant (sandbox: {egress: host})",
            code="egress_not_granted",
        )
    try:
        isolation = runner.choose(egress, require=verdict.sandbox_isolation)
        check_runnable(tool)
    except SandboxUnavailable as exc:
        raise SandboxRefused(exc.message, code="sandbox_unavailable") from None
    if tool.sandbox is not None and tool.sandbox.host is not None:
        isolation = "workspace"  # oarlock's own confined file operation: no program starts
    return SandboxPlan(workspace_id, egress, isolation)


async def run_planned(runner: SandboxRunner, c: _Call, out: _Outcome) -> None:
    """Run the call ``c`` in the sandbox its plan names and put what happened in ``out``
    (status, text, error, ``usage.sandbox``); its limits include the tool's timeout, which
    the sandbox enforces by killing it. A call with no plan is refused: no path runs a
    ``sandbox``-class call any other way. Any failure of the sandbox itself is a result,
    never a crash; a cancellation is recorded in ``out`` and raised again."""
    from oarlock.sandbox._call import call_sandboxed
    from oarlock.sandbox._runner import SandboxUnavailable

    plan = c.sandbox
    out.status = "Failed"
    if plan is None:
        out.error = (
            "sandbox_unavailable",
            f"tool {c.tool.name!r} is of the sandbox class and no sandbox was planned for "
            "this call; it was not run",
        )
        return
    try:
        done = await call_sandboxed(
            runner,
            c.tool,
            c.arguments,
            workspace_id=plan.workspace_id,
            egress=plan.egress,
            require=plan.isolation,
        )
    except SandboxUnavailable as exc:  # isolation lost since the plan: it never ran
        out.error = (exc.code, exc.message)
        return
    except asyncio.CancelledError:
        out.error = ("cancelled", "the call was cancelled while it ran")
        raise
    except Exception as exc:  # the sandbox's own failure: a result, never a crash
        code = exc.code if isinstance(exc, OarlockError) else "sandbox_failed"
        out.error = (code, f"{type(exc).__name__}: {exc}")
        return
    out.status, out.text, out.error = done.status, done.text, done.error
    out.sandbox = done.usage()
