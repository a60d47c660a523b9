"""A database writer cannot replay a genuine approval: an approver approves a ``spend``
call and it runs once; the writer then resets what the rows say of the approval's use
(its ``used_by``, the call's idempotency claim, the run document as it was when the
approval was given) and resumes the run. The executor reads the approval's use from the
ledger, not from those rows: the call is refused (``approval_used``) and the tool does not
run again. A writer who also removes the ledger entries of the first use breaks the chain
where the executor reads it (``ledger_broken``): refused too. ``audit verify`` reports an
approval carried by two invocations (``approval_reused``). On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgtest
from oarlock.engine import Agent, Runner
from oarlock.formats import dump_run, parse_run
from oarlock.governance import verify_chain
from oarlock.governance._ledger import next_entry
from oarlock.store import SQLiteStore
from oarlock.store._postgres import PostgresStore
from oarlock.testing import ScriptedModel
from oarlock.tools import tool

RAN: list[str] = []


@tool(side_effect="spend")
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    RAN.append(order_id)
    return f"refunded {amount} on {order_id}"


TURNS = [
    {"tool_calls": [{"name": "refund", "arguments": {"order_id": "A1", "amount": 80},
                     "id": "c_refund"}]},
    {"text": "done"},
    {"text": "done again"},
]  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "runs.db") if request.param == "sqlite" else pgtest.new_database()


def store_of(target: str) -> Any:
    return PostgresStore(target) if target.startswith("postgresql") else SQLiteStore(target)


def sql(target: str, *statements: str) -> None:
    """What a database writer does, behind oarlock's back."""
    if target.startswith("postgresql"):
        with psycopg.connect(target, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    conn = sqlite3.connect(target)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


async def approved_once(target: str) -> tuple[Runner, Any, str]:
    """A run whose refund was approved and ran once; the document as it stood right
    after the approval (JSON), which the writer puts back."""
    RAN.clear()
    store = store_of(target)
    runner = Runner(Agent("desk", ScriptedModel(TURNS), tools=[refund]), store)
    await runner.start("refund A1", run_id="r1")
    await runner.decide("r1", "c_refund", "approved", principal="user:ana")
    snapshot = dump_run((await store.load("r1")).document)
    done = await runner.resume("r1")
    assert done.status == "completed" and RAN == ["A1"]
    return runner, store, snapshot


async def put_back(store: Any, snapshot: str) -> None:
    stored = await store.load("r1")
    await store.save(parse_run(snapshot), stored.version, [])


def reset_rows(target: str) -> None:
    sql(target, "UPDATE approvals SET used_by = NULL", "DELETE FROM claims")


def refused_code(doc: Any) -> str:
    result = doc.messages[2].content[0]
    assert result.is_error, result.content
    return str(result.content)


def test_a_replayed_approval_is_refused_by_the_ledger(target: str) -> None:
    async def go() -> None:
        runner, store, snapshot = await approved_once(target)
        reset_rows(target)
        await put_back(store, snapshot)
        doc = await runner.resume("r1")
        assert RAN == ["A1"]  # not again
        assert "(approval_used)" in refused_code(doc)
        report = verify_chain(await store.governance().ledger())
        assert report.ok, report.problems
        await store.close()

    asyncio.run(go())


def test_removing_the_first_use_from_the_ledger_is_refused_too(target: str) -> None:
    async def go() -> None:
        runner, store, snapshot = await approved_once(target)
        entries = await store.governance().ledger()
        used = next(e.seq for e in entries if e.kind == "invocation")
        reset_rows(target)
        # the first use goes: its invocation's and receipt's rows, and the invocation's
        # ledger entry (the chain now has a gap where it was; removing every entry from it
        # to the end instead is a truncation, which only a checkpoint kept outside the
        # database shows: see docs/security.md)
        sql(
            target,
            "DELETE FROM receipts",
            "DELETE FROM invocations",
            f"DELETE FROM ledger WHERE seq = {used}",
        )
        await put_back(store, snapshot)
        doc = await runner.resume("r1")
        assert RAN == ["A1"]
        assert "(ledger_broken)" in refused_code(doc)
        await store.close()

    asyncio.run(go())


def test_audit_verify_reports_an_approval_carried_by_two_invocations() -> None:
    at = "2026-12-04T10:00:00Z"
    invocation: Callable[[str], dict[str, Any]] = lambda n: {  # noqa: E731
        "invocationId": n, "sideEffectClass": "spend", "approvalId": "a-1"}  # fmt: skip
    first = next_entry(None, "approval", at, {"approvalId": "a-1"})
    second = next_entry(first, "invocation", at, invocation("i-1"))
    third = next_entry(second, "invocation", at, invocation("i-2"))
    report = verify_chain([first, second, third])
    assert [p.code for p in report.problems] == ["approval_reused"]
    again = next_entry(second, "approval", at, {"approvalId": "a-1"})
    codes = [p.code for p in verify_chain([first, second, again]).problems]
    assert codes == ["approval_duplicated"]
    reads = [first, next_entry(first, "invocation", at, {**invocation("i-1"),
                                                          "sideEffectClass": "read"})]  # fmt: skip
    reads.append(next_entry(reads[1], "invocation", at, {**reads[1].body, "invocationId": "i-2"}))
    assert verify_chain(reads).ok  # a new attempt of a read may carry its approval again
