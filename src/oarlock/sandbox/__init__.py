"""Sandboxed execution of ``sandbox``-class tools: every such call runs in a child process
isolated from the host (see :mod:`oarlock.sandbox._runner`), in the run's workspace, under
limits, with an egress profile.

The built-in tools (``shell``, ``python``, ``read_file``, ``write_file``) are named
``sandbox.shell`` and so on; name them in an agent file as ``oarlock.sandbox:shell``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

if TYPE_CHECKING:
    from oarlock.sandbox._call import Program, SandboxOutcome, SandboxSpec, call_sandboxed
    from oarlock.sandbox._host import HostSupport, host_support
    from oarlock.sandbox._limits import DEFAULT_LIMITS, SandboxLimits
    from oarlock.sandbox._runner import (
        EGRESS_PROFILES,
        SandboxResult,
        SandboxRunner,
        SandboxUnavailable,
    )
    from oarlock.sandbox._tools import BUILTIN_TOOLS, python, shell
    from oarlock.sandbox._tools import read_file_tool as read_file
    from oarlock.sandbox._tools import write_file_tool as write_file
    from oarlock.sandbox._workspace import Workspaces

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_LIMITS",
    "EGRESS_PROFILES",
    "HostSupport",
    "Program",
    "SandboxLimits",
    "SandboxOutcome",
    "SandboxResult",
    "SandboxRunner",
    "SandboxSpec",
    "SandboxUnavailable",
    "Workspaces",
    "call_sandboxed",
    "host_support",
    "python",
    "read_file",
    "shell",
    "write_file",
]

_WHERE = {
    "Program": "_call",
    "SandboxOutcome": "_call",
    "SandboxSpec": "_call",
    "call_sandboxed": "_call",
    "HostSupport": "_host",
    "host_support": "_host",
    "DEFAULT_LIMITS": "_limits",
    "SandboxLimits": "_limits",
    "EGRESS_PROFILES": "_runner",
    "SandboxResult": "_runner",
    "SandboxRunner": "_runner",
    "SandboxUnavailable": "_runner",
    "BUILTIN_TOOLS": "_tools",
    "python": "_tools",
    "shell": "_tools",
    "Workspaces": "_workspace",
}


def __getattr__(name: str) -> object:
    if name in ("read_file", "write_file"):
        from oarlock.sandbox import _tools

        value = _tools.read_file_tool if name == "read_file" else _tools.write_file_tool
        globals()[name] = value
        return value
    return _lazy_getattr(name)


_lazy_getattr, __dir__ = lazy_exports(__name__, _WHERE, globals())
