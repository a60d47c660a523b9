"""The run queue of the SQLite store: leases with epochs, workers' heartbeats, leader rows
and the wake-ups of ``wait_for_work`` (see :mod:`oarlock.store._queue`).

Each method is one statement in one ``BEGIN IMMEDIATE`` transaction, which holds SQLite's
write lock: a claim finds the runnable runs and leases them in one ``UPDATE ... WHERE num IN
(SELECT ...) RETURNING``, so no two claimers, in this process or another, take one run.
Claims, renewals and releases go through the group commit with the runs' saves and commit
without a flush unless a save shares their transaction: a lease lost in a power cut only
expires (the run is claimed again, and every write of its former holder is refused), and
a claim lost with it was never acted on, since the holder's first fenced write is flushed.
Heartbeats and leader rows are unflushed too, for the same reason.

``wait_for_work`` returns when a write of this process made a run runnable, or when another
connection committed (``PRAGMA data_version`` moved, looked at every 50 ms) and some run is
runnable, or after its timeout.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from oarlock.errors import NotFound

if TYPE_CHECKING:
    from oarlock.store._group_commit import GroupCommit
    from oarlock.store._leases import Wakeups
    from oarlock.store._queue import Lease, WorkerInfo

__all__ = ["SQLiteQueue"]

T = TypeVar("T")
_FILE = "sqlite_queue.sql"
_LOOK_EVERY = 0.05  # seconds between looks at PRAGMA data_version in wait_for_work
_FORGET_AFTER = 86400.0  # a worker silent for a day is forgotten


def _q(name: str) -> str:
    from oarlock.store._sqlite import named_queries

    return named_queries(_FILE)[name]


def _seconds(text: str) -> float:
    from oarlock.formats._time import parse_rfc3339

    parsed = parse_rfc3339(text)
    if parsed is None:
        from oarlock.errors import UsageError

        raise UsageError(f"heartbeat time {text!r} is not an RFC 3339 date-time")
    return parsed[0].timestamp() + float(parsed[1])


def _json_list(values: Sequence[str] | None) -> str | None:
    return None if values is None else json.dumps(list(values))


class SQLiteQueue:
    """The queue methods of :class:`~oarlock.store.SQLiteStore` (a base class of it)."""

    _group: GroupCommit
    _wakeups: Wakeups
    # writes made in one turn of the event loop share a transaction, in the order made
    # (the group commit): a drive's lease is released in its last save's transaction
    commits_together = True

    def db(self) -> sqlite3.Connection:  # pragma: no cover - SQLiteStore's
        raise NotImplementedError


    def _read(self, name: str, params: Mapping[str, Any], doing: str) -> list[sqlite3.Row]:
        from oarlock.store._sqlite import _store_error

        try:
            return self.db().execute(_q(name), params).fetchall()
        except sqlite3.Error as exc:
            raise _store_error(exc, doing) from exc

    async def _lease_write(
        self, write: Callable[[sqlite3.Connection], T], *, refuses: bool = True
    ) -> T:
        return await self._group.submit(write, flush=False, refuses=refuses)

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        tenants: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Lease]:
        from oarlock.store._queue import Lease

        if limit <= 0:
            return []
        params: dict[str, Any] = {
            "owner": owner,
            "limit": limit,
            "tenants": _json_list(tenants),
            "queues": _json_list(queues),
        }

        def write(conn: sqlite3.Connection) -> list[Lease]:
            now = time.time()
            until = now + lease_seconds
            rows = conn.execute(_q("claim"), {**params, "now": now, "until": until}).fetchall()
            return [Lease(r[0], owner, r[1], until, r[2], r[3], r[4]) for r in rows]

        return await self._lease_write(write)

    async def claim_run(self, run_id: str, owner: str, *, lease_seconds: float) -> Lease:
        from oarlock.store._leases import run_busy
        from oarlock.store._queue import Lease

        def write(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            until = now + lease_seconds
            params = {"id": run_id, "owner": owner, "now": now, "until": until}
            row = conn.execute(_q("claim_run"), params).fetchone()
            if row is not None:
                return Lease(run_id, owner, row[0], until, row[1], row[2], row[3])
            held = conn.execute(_q("lease_of"), {"id": run_id}).fetchone()
            if held is None:
                raise NotFound(f"no run {run_id}")
            raise run_busy(run_id, held[0], held[2])

        return await self._lease_write(write)

    async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        from dataclasses import replace

        params = {"id": lease.run_id, "epoch": lease.epoch, "owner": lease.owner}

        def write(conn: sqlite3.Connection) -> Lease:
            until = time.time() + lease_seconds
            if conn.execute(_q("renew"), {**params, "until": until}).fetchone() is None:
                self._lost(conn, lease)
            return replace(lease, until=until)

        return await self._lease_write(write)

    @staticmethod
    def _lost(conn: sqlite3.Connection, lease: Lease) -> None:
        from oarlock.store._leases import lease_lost

        row = conn.execute(_q("lease_of"), {"id": lease.run_id}).fetchone()
        raise lease_lost(lease, None if row is None else row[1])

    async def release(self, lease: Lease) -> None:
        params = {"id": lease.run_id, "epoch": lease.epoch, "owner": lease.owner}

        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(_q("release"), {**params, "now": time.time()}).fetchone()
            return row is not None and row[0] == "running"

        if await self._lease_write(write, refuses=False):  # a lease moved on: no row
            self._wakeups.wake()

    async def heartbeat(self, worker: WorkerInfo) -> None:
        beat = _seconds(worker.heartbeat_at)
        params = {
            "owner": worker.owner,
            "host": worker.host,
            "pid": worker.pid,
            "started_at": worker.started_at,
            "heartbeat_at": worker.heartbeat_at,
            "heartbeat": beat,
            "concurrency": worker.concurrency,
        }

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(_q("heartbeat"), params)
            conn.execute(_q("forget_workers"), {"before": beat - _FORGET_AFTER})

        await self._lease_write(write)

    async def workers(self, *, within_seconds: float) -> list[WorkerInfo]:
        from oarlock.store._queue import WorkerInfo

        now = time.time()
        rows = self._read(
            "workers", {"now": now, "since": now - within_seconds}, "listing workers"
        )
        return [
            WorkerInfo(
                owner=row["owner"],
                host=row["host"],
                pid=row["pid"],
                started_at=row["started_at"],
                heartbeat_at=row["heartbeat_at"],
                concurrency=row["concurrency"],
                held=tuple(json.loads(row["held"])),
            )
            for row in rows
        ]

    async def leases(self) -> list[Lease]:
        from oarlock.store._queue import Lease

        rows = self._read("leases", {"now": time.time()}, "listing leases")
        return [Lease(*row) for row in rows]

    async def wait_for_work(self, timeout: float) -> None:
        import asyncio

        deadline = time.monotonic() + max(timeout, 0.0)
        with self._wakeups.waiter() as woken:
            seen = self._data_version()
            while (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(woken.wait(), min(left, _LOOK_EVERY))
                except TimeoutError:
                    pass
                else:
                    return
                version = self._data_version()
                if version != seen:
                    seen = version
                    if self._read("runnable", {"now": time.time()}, "looking for work"):
                        return

    def _data_version(self) -> int:
        version: int = self._read_pragma("PRAGMA data_version")
        return version

    def _read_pragma(self, pragma: str) -> Any:
        from oarlock.store._sqlite import _store_error

        try:
            return self.db().execute(pragma).fetchone()[0]
        except sqlite3.Error as exc:
            raise _store_error(exc, "looking for work") from exc

    # -- the approval sweep (oarlock.store._queue.Sweeping) -----------------------------
    async def lead(self, role: str, owner: str, *, ttl_seconds: float) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            now = time.time()
            params = {
                "role": role,
                "owner": owner,
                "until": now + ttl_seconds,
                "now": now,
                "margin": ttl_seconds / 10,
            }
            return conn.execute(_q("lead"), params).fetchone() is not None

        return await self._lease_write(write)

    async def lapsed_approvals(self, *, now: float, limit: int) -> list[str]:
        rows = self._read(
            "lapsed_approvals", {"now": now, "limit": max(limit, 0)}, "finding lapsed approvals"
        )
        return [row[0] for row in rows]
