"""On PostgreSQL, a drive gives its own lease back in its last save (the save that leaves
the run at rest): the same fenced statement and commit (``save(release=True)``), not a
statement of its own; a worker's lease is left to the worker; and a save that releases
releases nothing when its fence or its version does not hold."""

from __future__ import annotations

import collections
from typing import Any

import psycopg
import pytest

import pgtest
from helpers import echo_agent
from oarlock.engine import Runner
from oarlock.errors import ConflictError, LeaseLost, UsageError
from oarlock.store import Event
from oarlock.store._postgres import PostgresStore


@pytest.fixture
def url() -> str:
    return pgtest.new_database()


def lease_of(url: str, run_id: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lease_owner, lease_until, lease_epoch, ready_at FROM runs WHERE id = %s",
            [run_id],
        ).fetchone()
    assert row is not None
    return tuple(row)


async def test_the_last_save_gives_the_drives_lease_back_in_its_statement(url: str) -> None:
    async with PostgresStore(url) as store:
        sent: collections.Counter[str] = collections.Counter()
        real = store.release

        async def release(lease: Any) -> None:
            sent["release"] += 1
            await real(lease)

        store.release = release  # type: ignore[method-assign]
        doc = await Runner(echo_agent("a", 1), store).start("go")
        assert doc.status == "completed" and sent["release"] == 0
        owner, until, epoch, ready = lease_of(url, doc.id)
        assert (owner, until, ready) == (None, None, None) and epoch == 1
        # the run is free: another drive takes it at once (the next epoch)
        again = await Runner(echo_agent("a", 1), store).resume(doc.id)
        assert again.status == "completed" and lease_of(url, doc.id)[2] == 2


async def test_a_workers_lease_is_left_held_after_the_last_save(url: str) -> None:
    async with PostgresStore(url) as store:
        agent = echo_agent("a", 1)
        doc = await Runner(agent, store).submit("go")
        [lease] = await store.claim("worker:w:1:a", limit=1, lease_seconds=30)
        done = await Runner(agent, store, lease=lease).resume(doc.id)
        assert done.status == "completed"
        owner, until, epoch, _ = lease_of(url, doc.id)
        assert (owner, epoch) == (lease.owner, lease.epoch) and until is not None
        await store.release(lease)  # the worker gives it back
        assert lease_of(url, doc.id)[0] is None


async def test_a_save_that_releases_is_fenced_and_compared_as_any_save(url: str) -> None:
    async with PostgresStore(url) as store:
        doc = await Runner(echo_agent("a", 1), store).submit("go")
        stored = await store.load(doc.id)
        with pytest.raises(UsageError):
            await store.save(stored.document, stored.version, [], release=True)
        first = await store.claim_run(doc.id, "proc:h:1", lease_seconds=30)
        # a stale version: refused, the lease kept
        with pytest.raises(ConflictError):
            await store.save(stored.document, stored.version + 5, [], lease=first, release=True)
        assert lease_of(url, doc.id)[:3:2] == (first.owner, first.epoch)
        # a lease another took since: refused, the other's lease kept
        await store.release(first)
        second = await store.claim_run(doc.id, "proc:h:2", lease_seconds=30)
        with pytest.raises(LeaseLost):
            await store.save(stored.document, stored.version, [], lease=first, release=True)
        assert lease_of(url, doc.id)[:3:2] == (second.owner, second.epoch)
        # the holder's: saved, events added, and the lease given back; a running run is
        # runnable again from now, as after release
        event = Event("note", "t", {"n": 1})
        with psycopg.connect(url, autocommit=True) as listener:
            listener.execute("LISTEN oarlock_work")
            version = await store.save(
                stored.document, stored.version, [event], lease=second, release=True
            )
            woken = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        assert version == stored.version + 1 and woken == ["default"]
        owner, until, epoch, ready = lease_of(url, doc.id)
        assert (owner, until, epoch) == (None, None, second.epoch)
        assert stored.document.status == "running" and ready is not None
        assert (await store.events(doc.id))[-1].data == {"n": 1}
        [lease] = await store.claim("worker:w:1:a", limit=1, lease_seconds=30)
        assert lease.run_id == doc.id and lease.epoch == second.epoch + 1
