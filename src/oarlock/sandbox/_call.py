"""One ``sandbox``-class tool call, from the governed executor to the sandbox and back.

A tool of the class says how it runs in the sandbox with a :class:`SandboxSpec`: its egress
profile, its limits (over the runner's defaults), the host variables it may see, the hosts
an ``allowlist`` opens, and, for the built-in tools, the program to run (or the confined
file operation). A Python tool with no program of its own runs in a child interpreter in
the sandbox (:mod:`oarlock.sandbox._child`): it must be importable, a function or tool at
the top level of a module, never one defined in ``__main__`` or inside another function.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from oarlock.errors import OarlockError, ToolError
from oarlock.sandbox._runner import (
    EGRESS_PROFILES,
    SandboxResult,
    SandboxRunner,
    SandboxUnavailable,
    interpreter_folders,
)
from oarlock.sandbox._workspace import Workspace

__all__ = [
    "HostOperation",
    "Program",
    "SandboxOutcome",
    "SandboxSpec",
    "call_sandboxed",
    "check_runnable",
]


@dataclass(frozen=True, slots=True)
class Program:
    """A program to run in the workspace: its argv and standard input."""

    argv: tuple[str, ...]
    stdin: bytes | None = None
    report_exit: bool = True  # a non-zero exit is a result the model sees, not a failure


HostOperation = Callable[[Workspace, dict[str, Any]], str]
"""A confined operation on the workspace done by oarlock itself (reading or writing a
file), with no program started."""


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    egress: str = "none"
    limits: Mapping[str, Any] | None = None
    env: tuple[str, ...] = ()  # host variables passed through, by name
    allow_hosts: tuple[str, ...] = ()
    program: Callable[[dict[str, Any]], Program] | None = None
    host: HostOperation | None = None

    def __post_init__(self) -> None:
        if self.egress not in EGRESS_PROFILES:
            raise ToolError(
                f"unknown egress profile {self.egress!r} ({', '.join(EGRESS_PROFILES)})",
                code="sandbox_invalid",
            )


@dataclass(frozen=True, slots=True)
class SandboxOutcome:
    status: Literal["Succeeded", "Failed", "TimedOut"]
    text: str | None = None
    error: tuple[str, str] | None = None
    result: SandboxResult | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def usage(self) -> dict[str, Any]:
        """The ``usage.sandbox`` member of the receipt."""
        data = dict(self.detail)
        if self.result is not None:
            data.update(self.result.to_json())
        return data


async def call_sandboxed(
    runner: SandboxRunner,
    tool: Any,
    arguments: dict[str, Any],
    *,
    workspace_id: str,
    egress: str,
    require: str | None = None,
) -> SandboxOutcome:
    """Run ``tool`` with ``arguments`` in the workspace under ``egress`` (and at least the
    isolation ``require`` names); raises SandboxUnavailable when the call cannot be
    isolated so (it then never ran). Anything else that goes wrong, arguments no program
    can be given (a NUL, a command too long) or a process that cannot be started
    (``spawn_failed``) included, is a Failed outcome the model reads."""
    spec: SandboxSpec = tool.sandbox or SandboxSpec()
    detail = {"workspaceId": workspace_id, "egressProfile": egress}
    if spec.host is not None:
        detail["isolation"] = "workspace"
        try:
            workspace = runner.workspaces.ensure(workspace_id)
            return SandboxOutcome("Succeeded", spec.host(workspace, arguments), detail=detail)
        except SandboxUnavailable:
            raise
        except OarlockError as exc:
            return SandboxOutcome("Failed", error=(exc.code, exc.message), detail=detail)
        except (OSError, ValueError) as exc:
            return SandboxOutcome("Failed", error=("io_error", _why(exc)), detail=detail)
    limits = runner.limits.merged(spec.limits)
    if tool.timeout_seconds is not None:
        limits = limits.merged(
            {"timeout_seconds": min(limits.timeout_seconds, tool.timeout_seconds)}
        )
    env = {name: os.environ[name] for name in spec.env if name in os.environ}
    if spec.program is not None:
        try:
            program = spec.program(arguments)
        except SandboxUnavailable:
            raise
        except ToolError as exc:  # arguments no program can be given: it never ran
            return SandboxOutcome("Failed", error=(exc.code, exc.message), detail=detail)
        readable: list[Path] = []
    else:
        program, readable = _python_program(tool, arguments)
    try:
        result = await runner.run(
            program.argv,
            workspace_id=workspace_id,
            limits=limits,
            egress=egress,
            env=env,
            stdin=program.stdin,
            readable=readable,
            allow_hosts=spec.allow_hosts,
            require=require,
        )
    except SandboxUnavailable:
        raise
    except OarlockError as exc:  # its workspace could not be had: it never ran
        return SandboxOutcome("Failed", error=(exc.code, exc.message), detail=detail)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        message = f"the sandbox's process could not be started: {_why(exc)}"
        return SandboxOutcome("Failed", error=("spawn_failed", message), detail=detail)
    return _outcome(result, program, spec.program is None, detail)


def _why(exc: BaseException) -> str:
    """An error's readable message (an OSError's text, without its file names)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _outcome(
    result: SandboxResult, program: Program, python: bool, detail: dict[str, Any]
) -> SandboxOutcome:
    if result.error_code == "timeout":
        message = f"no answer within {result.limits.timeout_seconds} s; the sandbox was killed"
        return SandboxOutcome("TimedOut", error=("timeout", message), result=result, detail=detail)
    if result.error_code is not None:
        why = _tail(result.stderr) or result.error_code.replace("_", " ")
        return SandboxOutcome(
            "Failed", error=(result.error_code, why), result=result, detail=detail
        )
    if python:
        return _python_outcome(result, detail)
    if result.exit_code != 0 and not program.report_exit:
        error = ("exit_status", f"exit status {result.exit_code}: {_tail(result.stderr)}")
        return SandboxOutcome("Failed", error=error, result=result, detail=detail)
    return SandboxOutcome("Succeeded", _report(result), result=result, detail=detail)


def _python_outcome(result: SandboxResult, detail: dict[str, Any]) -> SandboxOutcome:
    try:
        outcome = json.loads(result.stdout)
        ok = outcome["ok"]
    except (ValueError, KeyError, TypeError):
        why = _tail(result.stderr) or f"exit status {result.exit_code}"
        return SandboxOutcome("Failed", error=("sandbox_child", why), result=result, detail=detail)
    if ok is True and isinstance(outcome.get("text"), str):
        return SandboxOutcome("Succeeded", outcome["text"], result=result, detail=detail)
    code = str(outcome.get("error") or "Error")
    message = f"{code}: {outcome.get('message', '')}"
    return SandboxOutcome("Failed", error=(code, message), result=result, detail=detail)


def _tail(data: bytes, limit: int = 2000) -> str:
    return data[-limit:].decode("utf-8", "replace").strip()


def _report(result: SandboxResult) -> str:
    """What a program's run tells the model: its exit status and both streams."""
    parts = [f"exit status {result.exit_code}"]
    for name, data in (("stdout", result.stdout), ("stderr", result.stderr)):
        if data:
            parts.append(f"--- {name} ---\n{data.decode('utf-8', 'replace')}")
    if result.dropped:
        parts.append(f"[{result.dropped} bytes of output not kept]")
    return "\n".join(parts)


def check_runnable(tool: Any) -> None:
    """SandboxUnavailable unless the tool can run in the sandbox: a built-in, or a Python
    tool a child interpreter can import (top level of a module that is a file)."""
    spec: SandboxSpec | None = tool.sandbox
    if spec is not None and (spec.program is not None or spec.host is not None):
        return
    if getattr(tool, "context_param", None) is not None:
        raise SandboxUnavailable(
            f"tool {tool.name!r} takes the run's context, whose dependencies cannot cross "
            "into the sandbox"
        )
    if getattr(tool, "mcp_server_id", None) is not None:
        raise SandboxUnavailable(
            f"tool {tool.name!r} runs in its MCP server's process, which the sandbox runner "
            "cannot isolate: give it another class in the agent file (side_effects)"
        )
    _origin(tool)


def _origin(tool: Any) -> tuple[str, str, Path]:
    fn = tool.fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        raise SandboxUnavailable(
            f"tool {tool.name!r} is not importable ({module}:{qualname}); a sandboxed tool "
            "must be defined at the top level of a module"
        )
    origin = getattr(sys.modules.get(module), "__file__", None)
    if origin is None:
        raise SandboxUnavailable(f"tool {tool.name!r}: its module {module!r} has no file")
    return module, qualname, Path(origin).resolve()


def _python_program(tool: Any, arguments: dict[str, Any]) -> tuple[Program, list[Path]]:
    """The child interpreter's program for a Python tool, and the folders it must see."""
    from pydantic_core import to_jsonable_python

    module, qualname, origin = _origin(tool)
    root, packages, shown = _module_root(module, origin)
    spec = {
        "module": module,
        "qualname": qualname,
        "packages": packages,
        "path": [str(root)],
        "arguments": to_jsonable_python(arguments),
    }
    argv = (sys.executable, "-I", "-m", "oarlock.sandbox._child")
    stdin = json.dumps(spec, ensure_ascii=True).encode()
    return Program(argv, stdin, report_exit=False), [*interpreter_folders(), shown]


def _module_root(module: str, origin: Path) -> tuple[Path, dict[str, str], Path]:
    """(the folder to put on the child's path for ``module``, the private packages of
    agent-file folders to recreate there (see :mod:`oarlock.engine._agentfile`), the one
    path of it the sandbox shows): the module's own file, or the folder of the top-level
    package it is in, never the folder around it (an agent's ``.env``, its run database)."""
    parts = module.split(".")
    package = origin.name == "__init__.py"
    private = parts[0].startswith("_oarlock_agent_")
    names = parts[1:] if private else parts  # below the folder on the path
    base = origin.parent
    for _ in range(len(names) - 1 + (1 if package else 0)):
        base = base.parent
    shown = base / names[0] if len(names) > 1 or package else origin
    return base, ({parts[0]: str(base)} if private else {}), shown
