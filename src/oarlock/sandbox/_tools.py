"""The built-in sandbox tools: a shell command line, a Python script, and reading and
writing files of the run's workspace. Each runs only in the sandbox (the governed executor
hands every ``sandbox``-class call to the sandbox runner); calling one directly fails."""

from __future__ import annotations

from typing import Any

from oarlock.errors import ToolError
from oarlock.sandbox._call import Program, SandboxSpec
from oarlock.sandbox._workspace import Workspace, read_file, write_file
from oarlock.tools._tool import Tool, tool

__all__ = ["BUILTIN_TOOLS", "python", "read_file_tool", "shell", "write_file_tool"]

_READ_MAX = 256 * 1024
_ARGV_MAX = 100_000  # bytes of a command line passed as one argument
_SOURCE_MAX = 1 << 20  # bytes of a command line or a script
_FROM_STDIN = 'eval "$(cat)" </dev/null'


def _outside(**_: Any) -> str:
    raise ToolError("this tool runs only in the sandbox, through the governed executor",
                    code="sandbox_only")  # fmt: skip


def _text(arguments: dict[str, Any], name: str, *, what: str) -> bytes:
    """The argument ``name`` as UTF-8, or ToolError ``argument_refused`` saying why not:
    not a string, a lone surrogate, or, for a command line or a script (``what``), a NUL
    (no program can be given one) or more than ``_SOURCE_MAX`` bytes."""
    value = arguments.get(name)
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string", code="argument_refused")
    if what and "\0" in value:
        raise ToolError(
            f"the {what} holds a NUL character (at {value.index(chr(0))}), which no "
            "program can be given; remove it",
            code="argument_refused",
        )
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"{name} is not valid text (a lone surrogate at {exc.start}); refused",
            code="argument_refused",
        ) from None
    if what and len(data) > _SOURCE_MAX:
        raise ToolError(
            f"the {what} is {len(data)} bytes, over the {_SOURCE_MAX} a call takes: write "
            "it to files (sandbox.write_file) and run them",
            code="argument_refused",
        )
    return data


def _shell(arguments: dict[str, Any]) -> Program:
    command = _text(arguments, "command", what="command line")
    if len(command) <= _ARGV_MAX:
        return Program(("/bin/sh", "-c", command.decode("utf-8")))
    # too long for one argument of a program (Linux: 128 KiB): the shell reads it whole
    # from its standard input, then runs it with /dev/null there, as a short one has
    return Program(("/bin/sh", "-c", _FROM_STDIN), command)


def _python(arguments: dict[str, Any]) -> Program:
    return Program(("python3", "-I", "-"), _text(arguments, "code", what="script"))


def _read(workspace: Workspace, arguments: dict[str, Any]) -> str:
    data, size = read_file(workspace, arguments["path"], max_bytes=_READ_MAX)
    text = data.decode("utf-8", "replace")
    if size > len(data):
        text += f"\n[{size - len(data)} more bytes not read]"
    return text


def _write(workspace: Workspace, arguments: dict[str, Any]) -> str:
    content = _text(arguments, "content", what="")
    written = write_file(workspace, arguments["path"], content)
    return f"wrote {written} bytes to {arguments['path']}"


def _sandboxed(t: Tool, spec: SandboxSpec) -> Tool:
    t.sandbox = spec
    return t


def _shell_fn(command: str) -> str:
    """Run a shell command line (``/bin/sh -c``) in the run's workspace, isolated from the
    host, with no network; returns its exit status and output.

    Args:
        command: The command line.
    """
    return _outside(command=command)


def _python_fn(code: str) -> str:
    """Run a Python 3 script in the run's workspace, isolated from the host, with no
    network; returns its exit status and output.

    Args:
        code: The script's source.
    """
    return _outside(code=code)


def _read_fn(path: str) -> str:
    """Read a text file of the run's workspace.

    Args:
        path: A path inside the workspace, like ``data/input.csv``.
    """
    return _outside(path=path)


def _write_fn(path: str, content: str) -> str:
    """Write a text file in the run's workspace (folders on the way are made).

    Args:
        path: A path inside the workspace, like ``src/main.py``.
        content: The file's text.
    """
    return _outside(path=path, content=content)


shell = _sandboxed(
    tool(name="sandbox.shell", side_effect="sandbox")(_shell_fn), SandboxSpec(program=_shell)
)
python = _sandboxed(
    tool(name="sandbox.python", side_effect="sandbox")(_python_fn), SandboxSpec(program=_python)
)
read_file_tool = _sandboxed(
    tool(name="sandbox.read_file", side_effect="sandbox")(_read_fn), SandboxSpec(host=_read)
)
write_file_tool = _sandboxed(
    tool(name="sandbox.write_file", side_effect="sandbox")(_write_fn), SandboxSpec(host=_write)
)
BUILTIN_TOOLS = (shell, python, read_file_tool, write_file_tool)
