"""Concurrent duplicates of one governed call: threads (each with its own event loop and,
for SQLite, its own connection to one file) and spawned processes, released together by
a barrier, all execute a slow tool under the same idempotency key with the same
arguments. The tool must run once; every caller gets its result (the waiters replay the
one receipt), and every caller sees the same receipt for the key.

Also: the same key in another tenant is another key; the same key with other arguments
is refused and changes nothing; a repeated call replays the prior receipt.

A note on which duplicates race here. A ``spend`` call needs an approval, found by (run,
tool call id). Duplicates with the *same call id in the same run* share that approval and
race on it: the one that finds its approval used re-reads the claim and waits for the
holder's receipt (``test_duplicate_of_a_running_spend_call_waits_instead_of_approval_used``
makes that race happen every time). The barrier tests make the ``spend`` duplicates from
several runs (same key, same arguments, same tool call, each run with its own approval),
and the same call of one run with an approval-free (``read``) tool; the same spend call
of one run is checked too: the tool runs once.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import executor_driver as drv
import pytest

import pgtest
from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.governance import (
    CallContext,
    GovernedExecutor,
    MemoryGovernanceStore,
    verify_chain,
)
from oarlock.governance._ledger import LedgerEntry, verify_chains
from oarlock.governance._records import Claim, StoredReceipt
from oarlock.governance._sanitize import unfence
from oarlock.governance._store import ClaimHeld, GovernanceStore
from oarlock.store import SQLiteStore
from oarlock.tools import Tool, tool

THREADS = 8
PROCESSES = 6
TIMEOUT = 60
DELAY = 0.2
WAIT = 60.0  # duplicate_wait: far longer than any waiter needs, so none times out
KEY = f"charge:{drv.ARGUMENTS['order_id']}"
EXPECTED = json.dumps(drv.charge_result(**drv.ARGUMENTS))
STORES = ("sqlite", "postgres", "memory")


def make_simulate(effects: Path, delay: float = DELAY) -> Tool:
    """An approval-free (``read``) slow tool keyed like ``charge``."""

    @tool(side_effect="read", idempotency_key=lambda a: f"charge:{a['order_id']}")
    def simulate(order_id: str, amount: int) -> dict[str, Any]:
        """Simulate a charge.

        Args:
            order_id: The order id.
            amount: The amount, in cents.
        """
        time.sleep(delay)
        drv.append_line(effects, f"simulate {order_id} {amount}")
        return drv.charge_result(order_id, amount)

    return simulate


# --- harness -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    tool: Tool
    call: ToolCallPart
    arguments: dict[str, Any]
    ctx: CallContext


@dataclass(frozen=True)
class Outcome:
    job: Job
    result: ToolResultPart
    held: ClaimHeld | None


Opener = Callable[[], tuple[GovernanceStore, Callable[[], Awaitable[None]]]]


def create_schema(db: Path) -> None:
    """Create the database before the racers open it: several connections opening a new
    file at once can fail (see ``test_opening_a_new_file_waits_for_a_concurrent_writer``)."""
    asyncio.run(SQLiteStore(db).close())


def database(kind: str, tmp_path: Path) -> Path | str:
    """Where the racers keep their records: an SQLite file (its schema made), or a
    PostgreSQL database of the test's own."""
    if kind == "postgres":
        return pgtest.new_database()
    db = tmp_path / "gov.db"
    if kind == "sqlite":
        create_schema(db)
    return db


def opener(kind: str, db: Path | str) -> Opener:
    """Makes each caller's store: its own SQLite connection or PostgreSQL pool, or the one
    shared memory store."""
    if kind in ("sqlite", "postgres"):

        def open_db() -> tuple[GovernanceStore, Callable[[], Awaitable[None]]]:
            runs = drv.open_runs(db)
            return runs.governance(), runs.close

        return open_db
    shared = MemoryGovernanceStore()

    async def nothing() -> None:
        return None

    return lambda: (shared, nothing)


def run_threads(count: int, open_store: Opener, job: Callable[[int], Job]) -> list[Outcome]:
    """``count`` threads, each with its own event loop and store, released together."""
    barrier = threading.Barrier(count, timeout=TIMEOUT)
    outcomes: list[Outcome | None] = [None] * count
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        async def go() -> Outcome:
            store, close = open_store()
            try:
                the = job(i)
                executor = GovernedExecutor(store, policy=drv.POLICY, duplicate_wait=WAIT)
                barrier.wait()
                part = await executor.execute(the.tool, the.call, the.arguments, the.ctx)
                key = the.tool.idempotency_key(the.arguments) if the.tool.idempotency_key else ""
                held = await store.claim_of(the.ctx.tenant, the.tool.name, key)
                return Outcome(the, part, held)
            finally:
                await close()

        try:
            outcomes[i] = asyncio.run(go())
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors
    return [o for o in outcomes if o is not None]


@dataclass(frozen=True)
class State:
    receipts: list[StoredReceipt]
    ledger: list[LedgerEntry]
    open_claims: list[Claim]
    chains: dict[str, list[LedgerEntry]]

    def verifies(self) -> bool:
        """Every chain of the ledger verifies."""
        return all(r.ok for r in verify_chains(self.chains).values())


async def state_of(store: GovernanceStore) -> State:
    chains = {name: await store.ledger(name) for name in await store.chains()}
    return State(
        await store.receipts(), await store.ledger(), await store.open_claims(), chains
    )


def read_state(open_store: Opener) -> State:
    async def go() -> State:
        store, close = open_store()
        try:
            return await state_of(store)
        finally:
            await close()

    return asyncio.run(go())


def lines_of(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines() if path.exists() else []


def assert_ran_once_for_everyone(
    outcomes: list[Outcome], state: State, effects: Path, ledger_kinds: list[str]
) -> StoredReceipt:
    assert len(lines_of(effects)) == 1, lines_of(effects)
    for o in outcomes:
        assert "idempotency_in_progress" not in o.result.content  # no waiter timed out
        assert not o.result.is_error, o.result.content
        assert o.result.tool_call_id == o.job.call.id
        assert unfence(o.result.content) == EXPECTED
    (stored,) = state.receipts  # the callers that did not run it wrote nothing
    assert stored.status == "Succeeded"
    for o in outcomes:
        assert o.held is not None
        assert o.held.claim.invocation_id == stored.invocation_id
        assert o.held.receipt == stored.receipt
    assert [e.kind for e in state.ledger] == ledger_kinds
    assert state.open_claims == []
    assert verify_chain(state.ledger).ok and state.verifies()
    return stored


# --- (a) threads -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_threads_one_spend_call_from_many_runs_runs_once(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    open_store = opener(kind, db)

    def job(i: int) -> Job:
        ctx = drv.context(run_id=f"run-{i}")
        return Job(
            drv.make_charge(effects, DELAY),
            drv.make_call("charge", drv.ARGUMENTS),
            dict(drv.ARGUMENTS),
            ctx,
        )

    outcomes = run_threads(THREADS, open_store, job)
    assert len(outcomes) == THREADS
    state = read_state(open_store)
    stored = assert_ran_once_for_everyone(
        outcomes, state, effects, ["approval", "invocation", "receipt"]
    )
    assert stored.receipt["effect"]["kind"] == "unreported"
    assert stored.invocation["idempotencyKey"] == KEY


@pytest.mark.parametrize("kind", STORES)
def test_threads_same_call_of_one_run_runs_once(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    open_store = opener(kind, db)

    def job(i: int) -> Job:
        return Job(
            make_simulate(effects),
            drv.make_call("simulate", drv.ARGUMENTS),
            dict(drv.ARGUMENTS),
            drv.context(),
        )

    outcomes = run_threads(THREADS, open_store, job)
    assert len(outcomes) == THREADS
    state = read_state(open_store)
    assert_ran_once_for_everyone(outcomes, state, effects, ["invocation", "receipt"])


@pytest.mark.parametrize("kind", STORES)
def test_threads_same_spend_call_of_one_run_never_runs_twice(tmp_path: Path, kind: str) -> None:
    """Duplicates sharing one approval: one run of the tool, one Succeeded receipt, and
    every caller either gets its result or a refusal."""
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    open_store = opener(kind, db)

    def job(i: int) -> Job:
        return Job(
            drv.make_charge(effects, DELAY),
            drv.make_call("charge", drv.ARGUMENTS),
            dict(drv.ARGUMENTS),
            drv.context(),
        )

    outcomes = run_threads(THREADS, open_store, job)
    state = read_state(open_store)
    assert len(lines_of(effects)) == 1
    succeeded = [r for r in state.receipts if r.status == "Succeeded"]
    assert len(succeeded) == 1
    refused = [o for o in outcomes if o.result.is_error]
    assert len(state.receipts) == 1 + len(refused)
    assert all(r.status in ("Succeeded", "Denied") for r in state.receipts)
    for o in outcomes:
        assert o.held is not None
        assert o.held.claim.invocation_id == succeeded[0].invocation_id
        if not o.result.is_error:
            assert unfence(o.result.content) == EXPECTED
            assert o.held.receipt == succeeded[0].receipt
        else:  # refused at once: the receipt may not have been written yet
            assert "was not run" in o.result.content
            assert o.held.receipt in (None, succeeded[0].receipt)
    assert verify_chain(state.ledger).ok and state.verifies()


# --- (b) processes -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_processes_one_spend_call_from_many_runs_runs_once(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    outs = [tmp_path / f"out-{i}.json" for i in range(PROCESSES)]
    procs = [
        ctx.Process(
            target=drv.process_worker,
            args=(f"run-{i}", str(db), str(effects), barrier, str(outs[i]), WAIT),
            daemon=True,
        )
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(TIMEOUT)
        assert not any(p.is_alive() for p in procs), "a process hung"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(TIMEOUT)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    reports = [json.loads(out.read_text("utf-8")) for out in outs]
    assert len({r["pid"] for r in reports}) == PROCESSES
    assert len(lines_of(effects)) == 1
    state = read_state(opener(kind, db))
    (stored,) = state.receipts
    assert stored.status == "Succeeded"
    for r in reports:
        result = r["result"]
        assert "idempotency_in_progress" not in result["content"]
        assert result["is_error"] is False, result
        assert unfence(result["content"]) == EXPECTED
        assert r["receipt"] == stored.receipt
    assert [e.kind for e in state.ledger] == ["approval", "invocation", "receipt"]
    assert state.open_claims == []
    assert verify_chain(state.ledger).ok and state.verifies()


# --- (c) tenants -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_same_key_in_another_tenant_runs_independently(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    open_store = opener(kind, db)
    tenants = ("acme", "globex")

    def job(i: int) -> Job:
        tenant = tenants[i % 2]
        ctx = drv.context(run_id=f"run-{tenant}-{i}", tenant=tenant)
        return Job(
            drv.make_charge(effects, DELAY),
            drv.make_call("charge", drv.ARGUMENTS),
            dict(drv.ARGUMENTS),
            ctx,
        )

    outcomes = run_threads(6, open_store, job)
    assert len(lines_of(effects)) == 2
    state = read_state(open_store)
    assert len(state.receipts) == 2
    by_tenant = {r.invocation["scope"]["tenantId"]: r for r in state.receipts}
    assert set(by_tenant) == set(tenants)
    assert all(r.status == "Succeeded" for r in state.receipts)
    assert all(r.invocation["idempotencyKey"] == KEY for r in state.receipts)
    for o in outcomes:
        assert not o.result.is_error, o.result.content
        assert unfence(o.result.content) == EXPECTED
        assert o.held is not None
        assert o.held.claim.tenant_id == o.job.ctx.tenant
        assert o.held.receipt == by_tenant[o.job.ctx.tenant].receipt
    assert state.verifies()
    # one chain per tenant on PostgreSQL, one chain on SQLite
    assert sorted(state.chains) == (sorted(tenants) if kind == "postgres" else ["default"])


# --- (d) other arguments, (e) replay -----------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_same_key_other_arguments_is_refused_and_changes_nothing(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    charge = drv.make_charge(effects)
    open_store = opener(kind, db)
    other = {"order_id": drv.ARGUMENTS["order_id"], "amount": 9999}

    async def go() -> None:
        store, close = open_store()
        try:
            executor = GovernedExecutor(store, policy=drv.POLICY)
            first = await executor.execute(
                charge, drv.make_call("charge", drv.ARGUMENTS), dict(drv.ARGUMENTS), drv.context()
            )
            assert not first.is_error
            before = await store.claim_of(drv.TENANT, "charge", KEY)
            assert before is not None
            assert before.receipt is not None

            # a new call of the same run, and a call of another run, with other arguments
            for call_id, run_id in (("c2", drv.RUN_ID), ("c1", "another-run")):
                refused = await executor.execute(
                    charge,
                    drv.make_call("charge", other, call_id),
                    dict(other),
                    drv.context(run_id=run_id),
                )
                assert refused.is_error
                assert refused.tool_call_id == call_id
                assert "(idempotency_mismatch)" in refused.content
                assert before.claim.invocation_id in refused.content

            assert len(lines_of(effects)) == 1  # the tool did not run again
            after = await store.claim_of(drv.TENANT, "charge", KEY)
            assert after == before  # same claim, same receipt
            _, receipt = await store.load(before.claim.invocation_id)
            assert receipt == before.receipt
            assert receipt["receiptHash"] == before.receipt["receiptHash"]

            state = await state_of(store)
            denied = [r for r in state.receipts if r.status == "Denied"]
            assert len(state.receipts) == 3
            assert len(denied) == 2
            for r in denied:
                assert r.receipt["error"]["code"] == "idempotency_mismatch"
                assert r.invocation["arguments"] == other
                assert r.invocation["idempotencyKey"] == KEY
                assert r.invocation["invocationId"] != before.claim.invocation_id
                assert r.invocation["approvalId"] == str(uuid.UUID(int=0))
                assert "resultRef" not in r.receipt
            assert verify_chain(state.ledger).ok and state.verifies()
        finally:
            await close()

    asyncio.run(go())


@pytest.mark.parametrize("kind", STORES)
def test_repeated_call_replays_the_prior_receipt(tmp_path: Path, kind: str) -> None:
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    charge = drv.make_charge(effects)
    open_store = opener(kind, db)

    async def go() -> None:
        store, close = open_store()
        try:
            executor = GovernedExecutor(store, policy=drv.POLICY)
            call = drv.make_call("charge", drv.ARGUMENTS)
            first = await executor.execute(charge, call, dict(drv.ARGUMENTS), drv.context())
            assert not first.is_error
            held = await store.claim_of(drv.TENANT, "charge", KEY)
            assert held is not None
            state = await state_of(store)

            # the same call again, and the same key and arguments from another run
            for run_id in (drv.RUN_ID, "another-run"):
                again = await executor.execute(
                    charge, call, dict(drv.ARGUMENTS), drv.context(run_id=run_id)
                )
                assert not again.is_error
                assert unfence(again.content) == unfence(first.content) == EXPECTED
                assert await state_of(store) == state  # a replay stores nothing

            assert len(lines_of(effects)) == 1
            (stored,) = state.receipts
            assert stored.invocation_id == held.claim.invocation_id
            assert stored.receipt == held.receipt
            invocation, receipt = await store.load(held.claim.invocation_id)
            assert receipt == held.receipt
            assert invocation == stored.invocation
            assert [e.kind for e in state.ledger] == ["approval", "invocation", "receipt"]
            assert verify_chain(state.ledger).ok and state.verifies()
        finally:
            await close()

    asyncio.run(go())


# --- the approval race, deterministically --------------------------------------------------


class _Gated(drv.CrashingStore):
    """Holds ``approval_for`` until ``released`` is set (the other caller has begun)."""

    def __init__(self, inner: GovernanceStore, released: asyncio.Event) -> None:
        super().__init__(inner, "none")
        self.released = released

    async def approval_for(self, run_id: str, tool_call_id: str) -> Any:
        await self.released.wait()
        return await self.inner.approval_for(run_id, tool_call_id)


class _Signalling(drv.CrashingStore):
    """Sets ``begun`` once its ``begin`` has committed the claim."""

    def __init__(self, inner: GovernanceStore, begun: asyncio.Event) -> None:
        super().__init__(inner, "none")
        self.begun = begun

    async def begin(self, *args: Any, **kwargs: Any) -> ClaimHeld | None:
        held = await self.inner.begin(*args, **kwargs)
        self.begun.set()
        return held


@pytest.mark.parametrize("kind", STORES)
def test_duplicate_of_a_running_spend_call_waits_instead_of_approval_used(
    tmp_path: Path, kind: str
) -> None:
    """B reads the key (free), then A takes the claim and uses the call's approval, then B
    reads the approval: B must wait for A's receipt and replay it, as any duplicate does."""
    db, effects = database(kind, tmp_path), tmp_path / "effects"
    charge = drv.make_charge(effects)
    open_store = opener(kind, db)

    async def go() -> None:
        begun = asyncio.Event()
        store_a, close_a = open_store()
        store_b, close_b = open_store()  # the same store in memory, a second connection else
        try:
            a = GovernedExecutor(_Signalling(store_a, begun), policy=drv.POLICY)
            b = GovernedExecutor(_Gated(store_b, begun), policy=drv.POLICY, duplicate_wait=WAIT)
            call = drv.make_call("charge", drv.ARGUMENTS)
            task_b = asyncio.create_task(
                b.execute(charge, call, dict(drv.ARGUMENTS), drv.context())
            )
            await asyncio.sleep(0)  # B has read the key and waits in approval_for
            result_a = await a.execute(charge, call, dict(drv.ARGUMENTS), drv.context())
            result_b = await asyncio.wait_for(task_b, TIMEOUT)
            assert not result_a.is_error
            assert len(lines_of(effects)) == 1
            assert not result_b.is_error, result_b.content
            assert unfence(result_b.content) == EXPECTED
            assert [r.status for r in await store_a.receipts()] == ["Succeeded"]
        finally:
            await close_a()
            await close_b()

    asyncio.run(go())


# --- opening a new database file while another connection writes ---------------------------


def test_opening_a_new_file_waits_for_a_concurrent_writer(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    writer = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    try:
        writer.execute("CREATE TABLE probe (x)")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO probe VALUES (1)")
        release = threading.Timer(0.5, writer.execute, ("COMMIT",))
        release.start()
        try:
            started = time.monotonic()
            store = SQLiteStore(db)  # busy_timeout is 5 s: it should wait out the writer
            asyncio.run(store.close())
            assert time.monotonic() - started >= 0.4
        finally:
            release.join(TIMEOUT)
    finally:
        writer.close()
