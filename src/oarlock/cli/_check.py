"""``oarlock check AGENT_FILE``: load an agent file as a run would (its keys, tools, model,
policy and MCP server entries), start each MCP server and list its tools (each bounded by
``--timeout``; ``--no-connect`` skips this), and report every problem found, each naming
the file, the key and the rule broken. Exit 0 with a summary when there is none, 1 with
the list when there are problems, 2 for a usage error.

Loading an agent file imports the modules its tools name (their top-level code runs), and
connecting starts the MCP servers' commands: check only files you would run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import sys
from typing import TYPE_CHECKING

from oarlock._input import max_input_bytes
from oarlock._render import line
from oarlock.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from oarlock.errors import ConfigError, ToolError, UsageError

if TYPE_CHECKING:
    from oarlock.engine._agentfile import AgentFileCheck
    from oarlock.governance._policy import PolicyEngine
    from oarlock.tools._mcp import MCPServerConfig
    from oarlock.tools._tool import Tool

__all__ = ["run_check"]


def _fail(message: str) -> int:
    print(f"oarlock: {line(message)}", file=sys.stderr)
    return EXIT_USAGE


def run_check(args: argparse.Namespace) -> int:
    timeout = args.timeout
    if not (math.isfinite(timeout) and timeout > 0):
        return _fail(f"--timeout must be a number of seconds above 0, not {timeout}")
    try:
        max_input_bytes()
    except UsageError as exc:
        return _fail(str(exc))
    path = args.agent_file
    if not os.path.lexists(path):
        return _fail(f"no such agent file: {path}")
    from oarlock.engine._agentfile import check_agent_file

    checked = check_agent_file(path)
    problems = list(checked.problems)
    servers: dict[str, list[Tool]] = {}
    if checked.mcp_servers and not args.no_connect:
        servers, found = asyncio.run(_connect_all(checked, timeout))
        problems.extend(found)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        print(f"{line(path)}: {count}")
        for problem in problems:
            print(f"  {line(problem)}")
        return EXIT_INVALID
    _summary(checked, servers, connected=not args.no_connect)
    return EXIT_OK


async def _connect_all(
    checked: AgentFileCheck, timeout: float
) -> tuple[dict[str, list[Tool]], list[str]]:
    """Start every MCP server at once, list its tools, stop it; the tools of each server
    that started, and a problem for each that did not (or whose tools clash)."""
    outcomes = await asyncio.gather(*(_probe(c, timeout) for c in checked.mcp_servers))
    servers: dict[str, list[Tool]] = {}
    problems: list[str] = []
    names = {t.name for t in checked.tools}
    for config, (tools, found) in zip(checked.mcp_servers, outcomes, strict=True):
        problems.extend(f"{checked.path}: {p}" for p in found)
        if tools is None:
            continue
        servers[config.name] = tools
        for t in tools:
            if t.name in names:
                problems.append(
                    f"{checked.path}: mcp_servers.{config.name}: the tool {t.name!r} has the "
                    "name of another tool of the agent"
                )
            names.add(t.name)
    return servers, problems


async def _probe(config: MCPServerConfig, timeout: float) -> tuple[list[Tool] | None, list[str]]:
    from oarlock.tools._mcp import MCPConnection, MCPTools

    where = f"mcp_servers.{config.name}"
    start = min(config.start_timeout_seconds, timeout)
    conn = MCPConnection(dataclasses.replace(config, start_timeout_seconds=start))
    try:
        async with asyncio.timeout(timeout + 1.0):
            await conn.start()
        return MCPTools([conn]).tools, []
    except TimeoutError:
        return None, [f"{where}: did not start and list its tools within {timeout:g} s"]
    except ToolError as exc:
        return None, [f"{where}: {exc.message}"]
    except ConfigError as exc:
        return None, list(exc.problems)
    finally:
        await conn.aclose()


def _rule(t: Tool) -> str:
    if t.side_effect not in ("read", "sandbox"):
        return ", needs approval"
    rule = t.needs_approval
    if rule is True:
        return ", needs approval"
    if callable(rule):
        return f", needs approval when {getattr(rule, '__name__', 'its predicate')} says so"
    return ""


def _tool_lines(tools: list[Tool]) -> list[str]:
    width = max((len(t.name) for t in tools), default=0)
    return [f"    {line(t.name).ljust(width)}  {t.side_effect}{_rule(t)}" for t in tools]


def _policy(policy: PolicyEngine | None) -> str:
    if policy is None:
        return "none: the default (read and sandbox calls run, the others need an approval)"
    return f"{line(policy.policy_id)}, version {line(policy.version)}"


def _summary(checked: AgentFileCheck, servers: dict[str, list[Tool]], *, connected: bool) -> None:
    agent = checked.agent
    if agent is None:  # pragma: no cover - an agent file without problems has an agent
        return
    limits = [
        f"{name} {getattr(agent.limits, name)}"
        for name in ("max_turns", "max_cost_usd", "max_input_tokens", "max_output_tokens")
        if getattr(agent.limits, name) is not None
    ]
    print(f"{line(checked.path)}: ok")
    print(f"  agent   {line(agent.name)} (tenant {line(agent.tenant)})")
    print(f"  model   {line(agent.model.model_id)}")
    print(f"  policy  {_policy(agent.policy)}")
    if agent.approvers is None:
        print("  approve signed by the deciding process, or the user's approvers file")
    else:
        keys = agent.approvers.entries()
        who = ", ".join(sorted({p for k in keys for p in k.principals}))
        print(f"  approve {len(keys)} key{'' if len(keys) == 1 else 's'} ({line(who) or '-'})")
    print(f"  limits  {', '.join(limits) or 'none'}")
    tools = list(agent.tools)
    print(f"  tools   {len(tools)}")
    for text in _tool_lines(tools):
        print(text)
    for config in agent.mcp_servers:
        head = f"  mcp     {line(config.name)} ({line(config.target)})"
        if not connected:
            print(f"{head}: not started (--no-connect)")
            continue
        listed = servers.get(config.name, [])
        print(f"{head}: {len(listed)} tool{'' if len(listed) == 1 else 's'}")
        for text in _tool_lines(listed):
            print(text)
