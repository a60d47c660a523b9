"""Running a program from a tool, so that a timeout or a cancellation stops all of it.

The program starts in a session (and process group) of its own. When the call is cancelled,
which is how the governed executor enforces a tool's ``timeout_seconds``, the whole group
is killed with SIGKILL and reaped before the cancellation goes on: a shell's children and
grandchildren do not outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from oarlock.errors import ToolError

__all__ = ["ProcessResult", "run_process"]


@dataclass(frozen=True, slots=True)
class ProcessResult:
    returncode: int
    stdout: str
    stderr: str


async def run_process(
    *argv: str,
    input: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> ProcessResult:
    """Run ``argv`` to completion and return its output (decoded as UTF-8).

    With ``check``, a non-zero exit raises :class:`~oarlock.errors.ToolError` (code
    ``process_failed``) carrying the end of its stderr."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate(None if input is None else input.encode())
    except BaseException:  # cancelled (a timeout) or failing: take the whole group down
        _kill_group(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.shield(proc.wait())
        raise
    result = ProcessResult(
        proc.returncode if proc.returncode is not None else -1,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )
    _kill_group(proc.pid)  # whatever it left running in its group goes with it
    if check and result.returncode != 0:
        raise ToolError(
            f"{argv[0]} exited with {result.returncode}: {result.stderr[-500:].strip()}",
            code="process_failed",
        )
    return result


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
