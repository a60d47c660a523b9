"""Workers as real processes on one database (an SQLite file, or PostgreSQL): killed at
random and restarted, paused past their lease, flooded by one tenant, stopped by SIGTERM.
What must hold: every run ends, no side effect happens twice for one idempotency key,
every stored document and record is valid, the ledger verifies, and a worker whose lease
passed to another cannot write.

Timings are loose on purpose (the machine may be loaded): what is asserted is order and
outcome, and a wait bounded by the poll interval where the claim is a promise."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from worker_fleet import (
    Db,
    WorkerProcess,
    agent_file,
    effects,
    environment,
    fleet_folder,
    oarlock,
    open_db,
    runs,
    wait_until,
)

import pgtest
from oarlock.engine import Runner
from oarlock.engine._agentfile import load_agent

FAST = ("--poll", "0.2", "--heartbeat", "0.2", "--lease", "1")
TERMINAL = {"completed", "failed", "halted_budget", "halted_max_turns", "cancelled"}


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    """The database the workers share: an SQLite file, or a PostgreSQL database of its
    own."""
    if request.param == "sqlite":
        return tmp_path / "runs.db"
    return pgtest.new_database()


def submit(db: Db, files: list[Path], *, queue: str = "default") -> list[str]:
    """Submit one run of each agent file (as ``oarlock run --detach`` does)."""

    async def go() -> list[str]:
        async with open_db(db) as store:
            ids = []
            for path in files:
                doc = await Runner(load_agent(path), store).submit(
                    f"refund {path.stem}", agent_ref=str(path), queue=queue)
                ids.append(doc.id)
            return ids

    return asyncio.run(go())


def ledger_and_documents(db: Db, env: dict[str, str], tmp: Path, ids: list[str]) -> None:
    """Every run exported passes ``oarlock validate``; ``audit verify`` passes."""
    folder = tmp / "exported"
    folder.mkdir(exist_ok=True)
    for run_id in ids:
        out = oarlock(db, env, "runs", "export", run_id)
        assert out.returncode == 0, out.stderr
        (folder / f"{run_id}.json").write_text(out.stdout)
    valid = oarlock(db, env, "validate", str(folder))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    verified = oarlock(db, env, "audit", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def receipts(db: Db) -> list[dict[str, Any]]:
    """Every receipt, with its invocation's tool and idempotency key."""

    async def go() -> list[dict[str, Any]]:
        async with open_db(db, create=False) as store:
            return [
                {"tool": r.invocation["toolId"], "key": r.invocation["idempotencyKey"],
                 "status": r.status, "invocationId": r.invocation_id}
                for r in await store.governance().receipts(limit=100_000)
            ]

    return asyncio.run(go())


def held_statuses(db: Db) -> list[tuple[str, str | None]]:
    """Each run's status and holder, read in this process (quicker than the command)."""

    async def go() -> list[tuple[str, str | None]]:
        async with open_db(db, create=False) as store:
            return [(r.status, r.holder) for r in await store.list_runs(limit=10_000)]

    return asyncio.run(go())


def open_claims(db: Db) -> list[str]:
    """The tools of the claims without a receipt."""

    async def go() -> list[str]:
        async with open_db(db, create=False) as store:
            return [c.tool_id for c in await store.governance().open_claims()]

    return asyncio.run(go())


def test_workers_killed_at_random_and_restarted_finish_every_run_once(
    tmp_path: Path, db: Db
) -> None:
    folder = fleet_folder(tmp_path)
    orders = [f"A-{i:03d}" for i in range(30)]
    env = environment(tmp_path, PAY_SECONDS="0.5", LOOK_SECONDS="0.05")  # kills land in pay
    ids = submit(db, [agent_file(folder, order) for order in orders])
    rng = random.Random(12)
    workers = [WorkerProcess(db, env, "--concurrency", "2", *FAST) for _ in range(3)]
    every = list(workers)
    kills = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            listed = held_statuses(db)
            if all(status in TERMINAL for status, _ in listed):
                break
            holders = {holder.split(":")[2] for _, holder in listed if holder}
            busy = [i for i, w in enumerate(workers) if str(w.pid) in holders]
            if kills < 8 and busy:  # a worker that holds runs now; then let the fleet finish
                victim = rng.choice(busy)
                workers[victim].kill()  # SIGKILL, whatever it was doing
                kills += 1
                workers[victim] = WorkerProcess(db, env, "--concurrency", "2", *FAST)
                every.append(workers[victim])
            time.sleep(rng.uniform(0.1, 0.3))
        final = runs(db, env)
    finally:
        codes = [w.stop() for w in workers]
    assert kills == 8
    assert codes == [0, 0, 0]  # the last ones stopped gracefully
    assert {r["status"] for r in final} == {"completed"}, final
    claimed = [t.split(":")[0] for w in every for t in w.lines if t.endswith(": claimed")
               or ": claimed (" in t]
    assert len(claimed) > len(ids)  # runs of killed workers were claimed again
    assert sorted(r["id"] for r in final) == sorted(ids)
    paid: dict[str, int] = {}
    for effect in effects(tmp_path):
        paid[effect["order"]] = paid.get(effect["order"], 0) + 1
    assert all(count == 1 for count in paid.values()), paid  # never twice per key
    pay_receipts = [r for r in receipts(db) if r["tool"] == "pay"]
    by_key: dict[str, list[str]] = {}
    for r in pay_receipts:
        by_key.setdefault(r["key"], []).append(r["status"])
    assert sorted(by_key) == sorted(f"pay:{o}" for o in orders)
    for key, statuses in by_key.items():
        order = key.removeprefix("pay:")
        assert statuses in (["Succeeded"], ["Uncertain"]), (key, statuses)
        if statuses == ["Succeeded"]:
            assert paid.get(order) == 1, key  # a success is an effect made once
    ledger_and_documents(db, env, tmp_path, ids)


def test_a_worker_paused_past_its_lease_cannot_write_when_it_wakes(
    tmp_path: Path, db: Db
) -> None:
    folder = fleet_folder(tmp_path)
    env = environment(tmp_path, PAY_SECONDS="2")
    [run_id] = submit(db, [agent_file(folder, "S-1")])
    first = WorkerProcess(db, env, "--concurrency", "1", *FAST)
    second: WorkerProcess | None = None
    try:
        wait_until(lambda: "pay" in open_claims(db), every=0.05)  # inside pay, claim taken
        first.signal(signal.SIGSTOP)
        time.sleep(1.5)  # past its lease
        second = WorkerProcess(db, env, "--concurrency", "1", *FAST)
        wait_until(lambda: runs(db, env)[0]["status"] == "completed")
        second.stop()
        before = _everything(db, env, run_id)
        [pay] = [r for r in receipts(db) if r["tool"] == "pay"]
        assert pay["status"] == "Uncertain"  # the successor never ran it again
        first.signal(signal.SIGCONT)
        first.wait_for(f"run {run_id}: lease lost")
        assert _everything(db, env, run_id) == before  # nothing it wrote landed
        assert first.stop() == 0
    finally:
        first.signal(signal.SIGCONT) if first.proc.poll() is None else None
        first.kill()
        if second is not None:
            second.kill()
    assert len(effects(tmp_path)) <= 1  # the paused call's own effect, at most
    ledger_and_documents(db, env, tmp_path, [run_id])


def _everything(db: Db, env: dict[str, str], run_id: str) -> tuple[Any, ...]:
    """The run as exported and shown, its receipts and the whole ledger."""
    exported = oarlock(db, env, "runs", "export", run_id).stdout
    show = oarlock(db, env, "runs", "show", run_id).stdout

    async def go() -> list[Any]:
        async with open_db(db, create=False) as store:
            return [(e.seq, e.entry_hash) for e in await store.governance().ledger()]

    return exported, show, receipts(db), asyncio.run(go())


def test_one_tenant_flooding_the_queue_does_not_delay_another(tmp_path: Path, db: Db) -> None:
    folder = fleet_folder(tmp_path)
    env = environment(tmp_path, LOOK_SECONDS="0.2")
    flood = agent_file(folder, "F", tenant="flood", pays=False)
    submit(db, [flood] * 150)
    poll = 2.0  # the promise: claimed within one poll interval (a loaded machine is slow)
    worker = WorkerProcess(db, env, "--concurrency", "2", "--poll", f"{poll:g}",
                           "--heartbeat", "0.5", "--lease", "5")
    try:
        wait_until(lambda: worker.said(": claimed"), every=0.02)
        time.sleep(0.5)  # the flood is being worked through
        queued = [r for r in runs(db, env) if r["status"] == "running" and not r["holder"]]
        [lone] = submit(db, [agent_file(folder, "L", tenant="lone", pays=False)])
        submitted = time.monotonic()
        ahead = sum(": claimed" in text for text in worker.lines)
        worker.wait_for(f"run {lone}: claimed", timeout=10)
        waited = time.monotonic() - submitted
    finally:
        worker.stop()
    assert len(queued) > 100  # the flood waiting in the queue when the lone run came
    assert waited < poll  # within the poll interval all the same
    claims = [text for text in worker.lines if ": claimed" in text]
    # the next claim once it was queued (or the one after, if a claim was under way)
    assert claims.index(f"run {lone}: claimed (epoch 1, tenant lone)") <= ahead + 1, claims


def test_sigterm_hands_runs_back_between_steps_and_another_worker_finishes(
    tmp_path: Path, db: Db
) -> None:
    folder = fleet_folder(tmp_path)
    env = environment(tmp_path, LOOK_SECONDS="0.6", PAY_SECONDS="0.1")
    ids = submit(db, [agent_file(folder, f"T-{i}") for i in range(3)])
    worker = WorkerProcess(db, env, "--concurrency", "3", *FAST)
    wait_until(lambda: sum(": claimed" in t for t in worker.lines) == 3, every=0.02)
    time.sleep(0.2)  # inside their first step (a look of 0.6 s)
    t0 = time.monotonic()
    assert worker.stop() == 0
    assert time.monotonic() - t0 < 5
    listed = {r["id"]: r for r in runs(db, env)}
    assert {r["status"] for r in listed.values()} == {"running"}
    assert all(r["holder"] is None for r in listed.values())  # every lease given back
    assert all(r["turns"] >= 1 for r in listed.values())  # the step in flight was finished
    assert all(worker.said(f"run {i}: handed back") for i in ids)
    assert worker.lines[-1].endswith("stopped")
    gone = oarlock(db, env, "workers", "--json")
    assert json.loads(gone.stdout) == []
    finisher = WorkerProcess(db, env, "--concurrency", "3", *FAST)
    try:
        wait_until(lambda: {r["status"] for r in runs(db, env)} == {"completed"})
    finally:
        assert finisher.stop() == 0
    assert sorted(e["order"] for e in effects(tmp_path)) == ["T-0", "T-1", "T-2"]
    ledger_and_documents(db, env, tmp_path, ids)


@pytest.mark.parametrize("ttl", [1])
def test_a_lapsed_approval_is_denied_by_a_worker_without_a_resume(
    tmp_path: Path, db: Db, ttl: int
) -> None:
    folder = fleet_folder(tmp_path)
    env = environment(tmp_path)
    path = agent_file(folder, "E-1", approval_ttl=ttl)
    started = oarlock(db, env, "run", str(path), "refund E-1")
    assert started.returncode == 0, started.stderr
    [run] = runs(db, env)
    assert run["status"] == "waiting_approval"
    worker = WorkerProcess(db, env, *FAST)
    try:
        worker.wait_for(f"run {run['id']}: approvals past their deadline denied", timeout=20)
        wait_until(lambda: runs(db, env)[0]["status"] == "completed")
    finally:
        assert worker.stop() == 0
    assert effects(tmp_path) == []  # the refund never ran
    show = oarlock(db, env, "runs", "show", run["id"]).stdout
    assert "denied by policy: expired: no decision by" in show
    ledger_and_documents(db, env, tmp_path, [run["id"]])


def conversation(db: Db, run_id: str) -> list[str]:
    """The parts of the run's messages: ``user:text``, ``assistant:call:TOOL``,
    ``user:result:TOOL``, ``assistant:text``."""

    async def go() -> list[str]:
        async with open_db(db, create=False) as store:
            doc = (await store.load(run_id)).document
        out = []
        for message in doc.messages:
            for part in message.content:
                name = getattr(part, "name", None) or getattr(part, "tool_name", None)
                kind = {"tool_call": "call", "tool_result": "result"}.get(part.type, part.type)
                out.append(":".join([message.role, kind, *([name] if name else [])]))
        return out

    return asyncio.run(go())


def test_every_connection_ended_again_and_again_the_workers_reconnect_and_finish(
    tmp_path: Path,
) -> None:
    """Six times while runs are in flight, every connection to the database is ended from
    another connection (``pg_terminate_backend``, as a restart of the server would): the
    workers reconnect and carry on, every run completes with each of its steps once, no
    side effect is made twice, and a pay is left Uncertain only where its worker said
    that the run's drive failed."""
    url = pgtest.new_database()
    folder = fleet_folder(tmp_path)
    orders = [f"P-{i:02d}" for i in range(24)]
    env = environment(tmp_path, PAY_SECONDS="0.3", LOOK_SECONDS="0.2")
    ids = submit(url, [agent_file(folder, order) for order in orders])
    settings = ("--concurrency", "3", "--poll", "0.2", "--heartbeat", "0.5", "--lease", "4")
    workers = [WorkerProcess(url, env, *settings) for _ in range(3)]
    ended: list[int] = []
    try:
        for worker in workers:
            worker.wait_for(" started: ")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = held_statuses(url)
            if all(status in TERMINAL for status, _ in listed):
                break
            if len(ended) < 6 and any(holder for _, holder in listed):
                ended.append(pgtest.terminate(url))  # as a restart of the server would
            time.sleep(0.4)
        final = held_statuses(url)
    finally:
        codes = [w.stop() for w in workers]
    lines = [text for w in workers for text in w.lines]
    assert len(ended) == 6 and all(n >= 1 for n in ended), ended
    assert codes == [0, 0, 0], lines
    assert [status for status, _ in final] == ["completed"] * len(ids), (final, lines)
    paid: dict[str, int] = {}
    for effect in effects(tmp_path):
        paid[effect["order"]] = paid.get(effect["order"], 0) + 1
    by_key = {r["key"]: r["status"] for r in receipts(url) if r["tool"] == "pay"}
    assert sorted(by_key) == sorted(f"pay:{o}" for o in orders)
    for order, run_id in zip(orders, ids, strict=True):
        status = by_key[f"pay:{order}"]
        if status == "Succeeded":
            assert paid.get(order) == 1, order  # a success is an effect made once
        else:  # the drive of the run was stopped in the pay, and its worker said so
            assert status == "Uncertain" and paid.get(order, 0) <= 1, (order, status)
            assert any(run_id in text and (": error (" in text or "lease lost" in text)
                       for text in lines), (order, lines)
    steps = ["user:text", "assistant:call:look", "user:result:look", "assistant:call:pay",
             "user:result:pay", "assistant:call:look", "user:result:look", "assistant:text"]
    for run_id in ids:  # every step once: none lost, none taken twice
        assert conversation(url, run_id) == steps, run_id
    ledger_and_documents(url, env, tmp_path, ids)
