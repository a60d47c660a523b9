"""oarlock: durable, governed LLM agent runs.

    from oarlock import Agent, tool

    @tool(side_effect="read")
    def balance(account: str) -> str: ...

    agent = Agent("support", "openai:gpt-4.1", tools=[balance])
    result = agent.run_sync("What is the balance of account 7?")

The public surface is re-exported here and loaded on first use, so that ``import oarlock``
(and the ``oarlock`` command) start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # formats
    "RunDocument": "oarlock.formats",
    "ToolInvocation": "oarlock.formats",
    "ToolReceipt": "oarlock.formats",
    "ExecutionScope": "oarlock.formats",
    "PolicyDecision": "oarlock.formats",
    "Report": "oarlock.formats",
    "Problem": "oarlock.formats",
    "canonicalize": "oarlock.formats",
    "digest": "oarlock.formats",
    "validate": "oarlock.formats",
    "ensure_valid": "oarlock.formats",
    "upgrade": "oarlock.formats",
    "downgrade": "oarlock.formats",
    "parse_run": "oarlock.formats",
    "dump_run": "oarlock.formats",
    # errors
    "OarlockError": "oarlock.errors",
    "FormatError": "oarlock.errors",
    "CanonicalizationError": "oarlock.errors",
    "DocumentInvalid": "oarlock.errors",
    "UpgradeError": "oarlock.errors",
    # building and running agents
    "Agent": "oarlock.engine",
    "Limits": "oarlock.engine",
    "Runner": "oarlock.engine",
    "RunResult": "oarlock.engine",
    "RunContext": "oarlock.tools",
    "tool": "oarlock.tools",
    "model_for": "oarlock.models",
}

__all__ = [
    "Agent",
    "CanonicalizationError",
    "DocumentInvalid",
    "ExecutionScope",
    "FormatError",
    "Limits",
    "OarlockError",
    "PolicyDecision",
    "Problem",
    "Report",
    "RunContext",
    "RunDocument",
    "RunResult",
    "Runner",
    "ToolInvocation",
    "ToolReceipt",
    "UpgradeError",
    "__version__",
    "canonicalize",
    "digest",
    "downgrade",
    "dump_run",
    "ensure_valid",
    "model_for",
    "parse_run",
    "tool",
    "upgrade",
    "validate",
]

if TYPE_CHECKING:
    from oarlock.engine import Agent, Limits, Runner, RunResult
    from oarlock.errors import (
        CanonicalizationError,
        DocumentInvalid,
        FormatError,
        OarlockError,
        UpgradeError,
    )
    from oarlock.formats import (
        ExecutionScope,
        PolicyDecision,
        Problem,
        Report,
        RunDocument,
        ToolInvocation,
        ToolReceipt,
        canonicalize,
        digest,
        downgrade,
        dump_run,
        ensure_valid,
        parse_run,
        upgrade,
        validate,
    )
    from oarlock.models import model_for
    from oarlock.tools import RunContext, tool


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
