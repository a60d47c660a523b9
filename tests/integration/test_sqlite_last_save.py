"""On SQLite, a drive gives its own lease back in the transaction of its last save (the
save that leaves the run at rest), flushed with it, not in a commit of its own; a worker's
lease is left to the worker; and a renewal that finds the lease given back so does not turn
the finished drive into a lost lease."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from helpers import echo_agent
from oarlock.engine import Runner
from oarlock.engine._lease import Hold, _Renewal
from oarlock.errors import LeaseLost
from oarlock.store import SQLiteStore
from oarlock.store._queue import Lease


def transactions(store: SQLiteStore) -> list[list[str]]:
    """The statements of each transaction the store runs from now on."""
    found: list[list[str]] = []

    def trace(sql: str) -> None:
        if sql == "BEGIN IMMEDIATE":
            found.append([])
        elif found and not sql.startswith("PRAGMA"):
            lines = [line for line in sql.split("\n") if not line.startswith("--")]
            found[-1].append(" ".join(lines))

    store.db().set_trace_callback(trace)
    return found


def lease_of(store: SQLiteStore, run_id: str) -> tuple[Any, ...]:
    row = store.db().execute(
        "SELECT lease_owner, lease_until, lease_epoch, ready_at FROM runs WHERE id = ?", (run_id,)
    ).fetchone()
    return tuple(row)


async def test_the_last_save_gives_the_drives_lease_back_in_its_transaction(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "l.db") as store:
        seen = transactions(store)
        doc = await Runner(echo_agent("a", 1), store).start("go")
        assert doc.status == "completed"
        last = seen[-1]
        assert last[-1] == "COMMIT"
        saves = [i for i, sql in enumerate(last) if "UPDATE runs SET agent = " in sql]
        releases = [i for i, sql in enumerate(last) if "SET lease_owner = NULL" in sql]
        assert saves and len(releases) == 1 and max(saves) < releases[0]
        # the save under its savepoint; the release, which refuses nothing, under none
        assert last.count("SAVEPOINT oarlock_write") == 1
        assert not any("SET lease_owner = NULL" in sql for tx in seen[:-1] for sql in tx)
        owner, until, epoch, ready = lease_of(store, doc.id)
        assert (owner, until, ready) == (None, None, None) and epoch == 1
        # the run is free: another drive takes it at once (the next epoch)
        again = await Runner(echo_agent("a", 1), store).resume(doc.id)
        assert again.status == "completed" and lease_of(store, doc.id)[2] == 2


async def test_a_workers_lease_is_left_held_after_the_last_save(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "w.db") as store:
        agent = echo_agent("a", 1)
        doc = await Runner(agent, store).submit("go")
        [lease] = await store.claim("worker:w:1:a", limit=1, lease_seconds=30)
        done = await Runner(agent, store, lease=lease).resume(doc.id)
        assert done.status == "completed"
        owner, until, epoch, _ = lease_of(store, doc.id)
        assert (owner, epoch) == (lease.owner, lease.epoch) and until is not None
        await store.release(lease)  # the worker gives it back
        assert lease_of(store, doc.id)[0] is None


class _GoneQueue:
    """A queue whose renewal finds the lease gone: given back by the drive's last save
    while the renewal waited for the store."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    async def renew(self, lease: Lease, seconds: float) -> Lease:
        self.hold.released = True
        raise LeaseLost("the run left the lease's epoch")


async def test_a_renewal_after_the_last_save_gave_the_lease_back_ends_nothing() -> None:
    finished = asyncio.Event()
    task = asyncio.ensure_future(finished.wait())
    hold = Hold(Lease("r", "proc:h:1", 1, 0.0))
    renewal = _Renewal(_GoneQueue(hold), hold, task, 0.03)  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # a renewal falls due, and finds the lease given back
    assert renewal.renewing is not None
    await renewal.renewing
    assert hold.lost is None and not task.cancelled()
    await asyncio.sleep(0.05)  # none is made after that
    assert renewal.renewing.done() and hold.lost is None
    renewal.stop()
    finished.set()
    await task


async def test_no_renewal_is_made_once_the_lease_was_given_back() -> None:
    task = asyncio.ensure_future(asyncio.sleep(0.2))
    hold = Hold(Lease("r", "proc:h:1", 1, 0.0), released=True)
    renewal = _Renewal(_GoneQueue(hold), hold, task, 0.03)  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert renewal.renewing is None and hold.lost is None and not task.cancelled()
    renewal.stop()
    task.cancel()
