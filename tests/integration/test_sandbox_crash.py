"""No path runs a ``sandbox``-class call outside its sandbox: a driver process
(sandbox_crash_driver.py) runs an agent whose tool is a ``sandbox``-class Python tool and
SIGKILLs itself at every point of the call (before its claim, while the sandboxed program
runs, after it ended and before its receipt, right after its receipt); the run is then
recovered by another process: ``oarlock resume``, ``oarlock retry`` (the run marked failed
as a crashed ``oarlock run`` leaves it), and an ``oarlock worker``.

Every time the tool ran, it ran in the sandbox: its result says so (the workspace as its
folder, no host variable, not root), its marks are in the workspace and never in the
host's folder, every receipt records the isolation its invocation planned, and ``oarlock
audit verify`` (which checks that too) passes. The tool's canary variable is set in every
process of the test; a call run in the host's process would print it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from oarlock.governance._records import StoredReceipt, run_uuid
from oarlock.sandbox._host import host_support
from oarlock.store import SQLiteStore

DRIVER = Path(__file__).with_name("sandbox_crash_driver.py")
TIMEOUT = 90
CANARY = "sk-canary-0123456789abcdefghij"

TOOLS = '''
"""A sandbox-class tool that says where it runs and leaves a mark where it runs."""

import json
import os
import time

from oarlock.tools import tool


@tool(side_effect="sandbox", sandbox={"limits": {"timeout_seconds": 30}})
def probe(tag: str) -> str:
    """Say where this call runs.

    Args:
        tag: A tag.
    """
    with open("ran.log", "a", encoding="utf-8") as f:
        f.write(tag + "\\n")
    time.sleep(4)
    status = open("/proc/self/status", encoding="ascii").read()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return json.dumps({
        "cwd": os.getcwd(),
        "uid": os.getuid(),
        "canary": os.environ.get("OPENAI_API_KEY"),
        "noNewPrivs": fields.get("NoNewPrivs", "").strip(),
    })
'''

SCRIPT = """
turns:
  - tool_calls:
      - {name: probe, arguments: {tag: first}}
  - text: Probed.
"""

AGENT = """
name: sandbox-crash
instructions: Probe the sandbox.
model: scripted:probe.script.yaml
tools:
  - box_tools:probe
sandbox:
  workspaces: workspaces
limits: {max_turns: 4}
"""


def write_agent(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # as an agent folder is: the tool's module is read by its own user
    (folder / "box_tools.py").write_text(textwrap.dedent(TOOLS), "utf-8")
    (folder / "probe.script.yaml").write_text(SCRIPT, "utf-8")
    agent = folder / "probe.yaml"
    agent.write_text(AGENT, "utf-8")
    return agent


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "OARLOCK_DB"}
    out["OPENAI_API_KEY"] = CANARY  # a call run in the host's process would see it
    return out


def drive(agent: Path, db: Path, run_id: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DRIVER), str(agent), str(db), run_id, mode],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env(),
        cwd=agent.parent,
        check=False,
    )


def cli(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env(),
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        check=False,
    )


def stored(db: Path, run_id: str) -> tuple[Any, list[StoredReceipt]]:
    async def go() -> tuple[Any, list[StoredReceipt]]:
        async with SQLiteStore(db) as store:
            doc = (await store.load(run_id)).document
            found = await store.governance().receipts(run_id=run_uuid(run_id), limit=1000)
            return doc, found

    return asyncio.run(go())


def mark_failed(db: Path, run_id: str) -> None:
    """What a crashed ``oarlock run`` leaves: the run failed, its call's claim open."""

    async def go() -> None:
        async with SQLiteStore(db) as store:
            got = await store.load(run_id)
            doc = got.document
            doc.status = "failed"
            doc.error = "the process stopped"
            await store.save(doc, got.version, [])

    asyncio.run(go())


def assert_every_run_was_sandboxed(folder: Path, db: Path, run_id: str) -> None:
    doc, receipts = stored(db, run_id)
    assert doc.status == "completed", doc.status
    results = [
        part
        for message in doc.messages
        for part in getattr(message, "content", []) or []
        if getattr(part, "type", None) == "tool_result"
    ]
    assert results, "the probe's call has no result"
    for part in results:
        text = part.content if isinstance(part.content, str) else json.dumps(part.content)
        assert CANARY not in text, text  # never the host's environment
        if '"cwd"' in text:
            payload = json.loads(text[text.index("{") : text.rindex("}") + 1])
            assert payload["cwd"] == "/workspace", payload
            assert payload["canary"] is None and payload["noNewPrivs"] == "1", payload
            if os.geteuid() == 0:
                assert payload["uid"] != 0, payload
    assert not (folder / "ran.log").exists()  # the host's folder never saw the tool
    assert receipts, "no receipt on the ledger"
    for item in receipts:
        box = (item.receipt.get("usage") or {}).get("sandbox")
        if item.status in ("Succeeded", "TimedOut") or (
            item.status == "Failed" and box and "exitCode" in box
        ):
            planned = item.invocation["sandbox"]
            assert box["isolation"] == planned["isolation"] == "bubblewrap", (box, planned)
            assert box["egressProfile"] == planned["egressProfile"] == "none"
    marks = list((folder / "workspaces").rglob("ran.log"))
    assert marks, "the tool never ran in a workspace"
    verified = cli(db, "audit", "verify", cwd=folder)
    assert verified.returncode == 0, verified.stdout + verified.stderr


pytestmark = pytest.mark.skipif(
    not host_support().bubblewrap, reason=f"no bubblewrap here: {host_support().notes}"
)

MODES = ["before-claim", "in-child", "after-child", "after-receipt"]


@pytest.mark.parametrize("mode", MODES)
def test_a_call_cut_off_is_resumed_in_its_sandbox(tmp_path: Path, mode: str) -> None:
    agent = write_agent(tmp_path)
    db = tmp_path / "runs.db"
    crashed = drive(agent, db, "box-run", mode)
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    resumed = cli(db, "resume", "box-run", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stdout + resumed.stderr
    assert_every_run_was_sandboxed(tmp_path, db, "box-run")


@pytest.mark.parametrize("mode", ["in-child", "after-child"])
def test_a_failed_run_retried_runs_its_call_in_its_sandbox(tmp_path: Path, mode: str) -> None:
    agent = write_agent(tmp_path)
    db = tmp_path / "runs.db"
    crashed = drive(agent, db, "box-run", mode)
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    mark_failed(db, "box-run")
    retried = cli(db, "retry", "box-run", cwd=tmp_path)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "Traceback" not in retried.stdout + retried.stderr
    assert_every_run_was_sandboxed(tmp_path, db, "box-run")


def test_a_worker_killed_mid_call_hands_the_call_to_the_next_in_its_sandbox(
    tmp_path: Path,
) -> None:
    agent = write_agent(tmp_path)
    db = tmp_path / "runs.db"
    submitted = cli(db, "run", "--detach", str(agent), "Probe the sandbox.", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = submitted.stdout.split()[1]  # "run ID submitted to queue default"
    worker = [sys.executable, "-m", "oarlock.cli", "--db", str(db), "worker"]
    opts = ["--lease", "2", "--heartbeat", "0.5", "--poll", "0.2"]
    first = subprocess.Popen(
        [*worker, *opts], cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "workspaces").rglob("ran.log")):  # the program is running
            assert time.monotonic() < deadline, "the first worker never started the call"
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        first.kill()
        first.communicate()
    second = subprocess.Popen(
        [*worker, *opts], cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while stored(db, run_id)[0].status != "completed":
            assert time.monotonic() < deadline, "the second worker never finished the run"
            assert second.poll() is None, second.communicate()
            time.sleep(0.3)
    finally:
        second.terminate()
        out, err = second.communicate(timeout=30)
    assert b"Traceback" not in out + err, err
    assert_every_run_was_sandboxed(tmp_path, db, run_id)


@pytest.mark.timeout(240)
def test_a_temporal_worker_killed_mid_call_has_its_activity_retried_in_the_sandbox(
    tmp_path: Path,
) -> None:
    from temporal_env import TemporalWorkerProcess, address, dev_server

    from oarlock.engine._agentfile import load_agent
    from oarlock.temporal import RunOptions, TemporalTarget, start_run

    agent = write_agent(tmp_path)
    db = tmp_path / "runs.db"
    options = RunOptions(heartbeat_seconds=2.0, model_seconds=30.0, tool_seconds=60.0,
                         store_seconds=30.0)  # fmt: skip

    async def main() -> str:
        async with await dev_server() as server:
            target = address(server)
            first = TemporalWorkerProcess(db, env(), target, "box")
            second = None
            try:
                async with SQLiteStore(db, create=True) as store:
                    doc = await start_run(
                        server.client, store, load_agent(str(agent)), "Probe the sandbox.",
                        TemporalTarget(target, "box"), agent_ref=str(agent), options=options,
                    )  # fmt: skip
                deadline = time.monotonic() + 60
                while not list((tmp_path / "workspaces").rglob("ran.log")):
                    assert time.monotonic() < deadline, first.lines
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                first.kill()
                second = TemporalWorkerProcess(db, env(), target, "box")
                handle = server.client.get_workflow_handle(doc.id)
                done = await asyncio.wait_for(handle.result(), 120)
                assert done["status"] == "completed", done
            finally:
                for worker in (first, second):
                    if worker is not None:
                        worker.stop()
                        assert not any("Traceback" in x for x in worker.lines), worker.lines
            return doc.id

    run_id = asyncio.run(main())
    marks = [p.read_text().split() for p in (tmp_path / "workspaces").rglob("ran.log")]
    assert [len(m) for m in marks] == [2]  # run again in the sandbox, as a safe call is
    assert_every_run_was_sandboxed(tmp_path, db, run_id)
