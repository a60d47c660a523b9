"""Group commit on real files: saves made in the same turn of the event loop share one
transaction; each returns only once it is committed; a refused save is rolled back alone; a
failed transaction stores none of its saves."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from oarlock.errors import ConflictError, NotFound, StoreError
from oarlock.formats import RunDocument, dump_run, parse_run
from oarlock.store import Event, SQLiteStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"


def make_doc(run_id: str, **members: Any) -> RunDocument:
    return parse_run({**dump_run(parse_run(EXAMPLE.read_bytes())), "id": run_id, **members})


def commits(store: SQLiteStore) -> list[str]:
    """Record every COMMIT the store's connection runs from now on."""
    seen: list[str] = []
    store.db().set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
    return seen


def versions(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, version FROM runs").fetchall())
    finally:
        conn.close()


async def test_concurrent_creates_and_saves_share_one_commit_each_batch(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    ids = [f"run-{i}" for i in range(40)]
    async with SQLiteStore(path) as store:
        seen = commits(store)
        created = await asyncio.gather(*(store.create(make_doc(i), []) for i in ids))
        assert created == [1] * len(ids)
        assert len(seen) == 1  # forty runs, one transaction, one flush
        saved = await asyncio.gather(
            *(store.save(make_doc(i, turns=3), 1, [Event("x", "t", {"n": i})]) for i in ids)
        )
        assert saved == [2] * len(ids)
        assert len(seen) == 2
        assert [len(await store.events(i)) for i in ids] == [1] * len(ids)
    # what each call acknowledged is on disk, seen from a new connection
    assert versions(path) == dict.fromkeys(ids, 2)


async def test_a_refused_save_in_a_batch_is_rolled_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with SQLiteStore(path) as store:
        await asyncio.gather(store.create(make_doc("a"), []), store.create(make_doc("b"), []))
        seen = commits(store)
        outcomes = await asyncio.gather(
            store.save(make_doc("a", turns=3), 1, [Event("x", "t", {})]),
            store.save(make_doc("b", turns=3), 7, [Event("x", "t", {})]),  # stale version
            store.save(make_doc("nobody", turns=3), 1, []),
            store.create(make_doc("a"), []),  # exists already
            return_exceptions=True,
        )
        assert len(seen) == 1
        assert outcomes[0] == 2
        assert isinstance(outcomes[1], ConflictError)
        assert isinstance(outcomes[2], NotFound)
        assert isinstance(outcomes[3], ConflictError)
        assert await store.events("b") == []  # the refused save's events went with it
        assert len(await store.events("a")) == 1
    assert versions(path) == {"a": 2, "b": 1}


async def test_a_release_runs_without_a_savepoint_beside_a_refused_save(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with SQLiteStore(path) as store:
        await store.create(make_doc("a", status="running", pendingApprovals=[]), [])
        lease = await store.claim_run("a", "proc:h:1", lease_seconds=30)
        statements: list[str] = []
        store.db().set_trace_callback(statements.append)
        outcomes = await asyncio.gather(
            store.save(make_doc("a", turns=3), 9, [Event("x", "t", {})]),  # stale version
            store.release(lease),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], ConflictError) and outcomes[1] is None
        # one transaction: the refused save under its savepoint, rolled back; the release
        assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
        assert statements.count("SAVEPOINT oarlock_write") == 1
        assert statements.count("ROLLBACK TO oarlock_write") == 1
        assert await store.leases() == []
        assert await store.events("a") == []
    assert versions(path) == {"a": 1}


async def test_two_saves_of_one_run_in_one_batch_the_second_conflicts(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with SQLiteStore(path) as store:
        await store.create(make_doc("a"), [])
        first, second = await asyncio.gather(
            store.save(make_doc("a", turns=3), 1, []),
            store.save(make_doc("a", turns=4), 1, []),
            return_exceptions=True,
        )
        assert first == 2 and isinstance(second, ConflictError)
        assert (await store.load("a")).document.turns == 3


async def test_a_failed_transaction_stores_none_of_its_saves(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with SQLiteStore(path) as store:
        await asyncio.gather(store.create(make_doc("a"), []), store.create(make_doc("b"), []))
        # another connection holds the write lock past the busy timeout: BEGIN fails
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        store.db().execute("PRAGMA busy_timeout = 50")
        try:
            outcomes = await asyncio.gather(
                store.save(make_doc("a", turns=3), 1, []),
                store.save(make_doc("b", turns=3), 1, []),
                return_exceptions=True,
            )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert all(isinstance(o, StoreError) and o.code == "store_busy" for o in outcomes)
    assert versions(path) == {"a": 1, "b": 1}


async def test_close_commits_what_waits_and_a_cancelled_caller_does_not_undo_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "g.db"
    store = SQLiteStore(path)
    await store.create(make_doc("a"), [])
    pending = asyncio.ensure_future(store.save(make_doc("a", turns=3), 1, []))
    await asyncio.sleep(0)  # the save is queued, its commit not run yet
    pending.cancel()
    await store.close()  # commits the queued save before closing
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert versions(path) == {"a": 2}



async def test_a_write_commits_at_once_when_none_could_share_it(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    async with SQLiteStore(path) as store:
        await store.create(make_doc("a"), [])
        await store.create(make_doc("b"), [])
        seen = commits(store)
        loop = asyncio.get_running_loop()
        turns: list[int] = []
        loop.call_soon(turns.append, 1)  # ready: a callback that runs before the next turn
        # ... so this save waits for that turn, and another save may share its commit
        assert await store.save(make_doc("a", turns=3), 1, [], flush=False) == 2
        assert turns == [1] and len(seen) == 1
        # nothing ready, nothing waiting: committed without giving the loop a turn,
        # flushed or not
        for version, flush in ((1, False), (2, True)):
            save = store.save(make_doc("b", turns=3 + version), version, [], flush=flush)
            with pytest.raises(StopIteration) as done:
                save.send(None)
            assert done.value.value == version + 1
        assert len(seen) == 3 and versions(path) == {"a": 2, "b": 3}
        # saves gathered in one turn still share one commit
        await asyncio.gather(
            store.save(make_doc("a", turns=4), 2, []),
            store.save(make_doc("b", turns=6), 3, [], flush=False),
        )
        assert len(seen) == 4
        with pytest.raises(ConflictError):  # refused at once, as in a batch
            await store.save(make_doc("a", turns=5), 2, [])
        # a timer that is due: the save waits for the turn that runs it
        loop.call_later(0, turns.append, 2)
        assert await store.save(make_doc("a", turns=5), 3, []) == 4
        assert turns == [1, 2]
    assert versions(path) == {"a": 4, "b": 4}


async def test_writes_at_once_give_the_loop_a_turn_every_so_often(tmp_path: Path) -> None:
    from oarlock.store._group_commit import _AT_ONCE

    async with SQLiteStore(tmp_path / "g.db") as store:
        await store.create(make_doc("a"), [])
        seen = commits(store)
        waited = []
        for version in range(1, 2 * _AT_ONCE + 3):
            save = store.save(make_doc("a", turns=version), version, [], flush=False)
            try:
                save.send(None)
            except StopIteration:
                continue
            waited.append(version)  # it waits for a turn of the loop: let it have one
            await asyncio.sleep(0)
            with pytest.raises(StopIteration):
                save.send(None)
        assert len(seen) == 2 * _AT_ONCE + 2
        assert len(waited) == 2
