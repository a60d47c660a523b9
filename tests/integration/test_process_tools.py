"""A tool that runs a program: on timeout its whole process group is killed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from oarlock.errors import ToolError
from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, MemoryGovernanceStore, unfence
from oarlock.tools import run_process, tool

CTX = CallContext("run-p", "agent", {"tenantId": "acme"}, 1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


async def test_a_timed_out_program_and_its_children_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    @tool(side_effect="read", timeout_seconds=0.5)
    async def build() -> str:
        """Runs a build that never ends."""
        script = (
            f"sleep 60 & echo $! >> {pids}; sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
        )
        result = await run_process("sh", "-c", script)
        return result.stdout

    call = ToolCallPart(type="tool_call", id="b1", name="build", arguments={})
    store = MemoryGovernanceStore()
    result = await GovernedExecutor(store).execute(build, call, {}, CTX)
    assert result.is_error and "timed out" in result.content
    (item,) = await store.receipts()
    assert item.receipt["status"] == "TimedOut"
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3
    deadline = time.monotonic() + 5
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in started)


async def test_output_and_failure_of_a_program() -> None:
    ok = await run_process("sh", "-c", "cat; echo err >&2", input="hello")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "hello", "err\n")
    with pytest.raises(ToolError) as err:
        await run_process("sh", "-c", "echo nope >&2; exit 3")
    assert err.value.code == "process_failed" and "nope" in str(err.value)
    assert (await run_process("sh", "-c", "exit 4", check=False)).returncode == 4


async def test_a_program_tool_result_reaches_the_model_fenced() -> None:
    @tool(side_effect="read")
    async def echo(text: str) -> str:
        """Echo through a program."""
        return (await run_process("printf", "%s", text)).stdout

    call = ToolCallPart(type="tool_call", id="e1", name="echo", arguments={"text": "hi"})
    result = await GovernedExecutor(MemoryGovernanceStore()).execute(
        echo, call, {"text": "hi"}, CTX
    )
    assert unfence(result.content) == "hi"
