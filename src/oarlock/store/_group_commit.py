"""Group commit: writes that reach an SQLite store in the same turn of the event loop share
one transaction, and so one flush of the disk.

A write that need not wait for the disk (a lease's claim, renewal or release, a step of
``read`` results) says so (``flush=False``); a batch of such writes alone commits without a
flush, and one that holds any other write is flushed. Such a write commits at once, without
waiting for the next turn of the loop, when nothing could share its transaction: no write
is waiting and no callback is ready to run before that turn (it has no flush to share).

A flush (``synchronous=FULL``) costs about 0.25 ms to several ms on the virtual disks this
runs on, and the store's methods run on the event loop; without grouping, a thousand runs
in one process commit one after another, each waiting for its own flush. Each write still
returns only once the transaction holding it is committed, so nothing is acknowledged
before it is durable. Each write runs under its own savepoint: one that is refused (a
version conflict, a missing run) is rolled back alone and its caller gets the refusal; the
others commit. A failure of the transaction itself fails every write of the batch, and
none of them is stored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from oarlock.errors import ConflictError, NotFound

if TYPE_CHECKING:  # asyncio loads with the first write: commands that only read skip it
    import asyncio

__all__ = ["GroupCommit", "Write"]

T = TypeVar("T")
Write = Callable[[sqlite3.Connection], Any]
"""One write: runs inside the shared transaction; returns the caller's result, or raises
ConflictError or NotFound to refuse (its own changes are then rolled back)."""


class _Store(Protocol):
    def db(self) -> sqlite3.Connection: ...

    def transaction(self, doing: str, *, flush: bool = True) -> AbstractContextManager[None]: ...


class GroupCommit:
    """The writes waiting for the next commit of one store."""

    def __init__(self, store: _Store) -> None:
        self._store = store
        self._queue: list[tuple[Write, asyncio.Future[Any]]] = []
        self._flush = False  # whether the waiting batch must be flushed

    async def submit(self, write: Callable[[sqlite3.Connection], T], *, flush: bool = True) -> T:
        """Run ``write`` in the next shared transaction; its result once that is committed
        (flushed to the disk, unless no write of the batch needed it)."""
        import asyncio

        loop = asyncio.get_running_loop()
        if not flush and not self._queue and not getattr(loop, "_ready", True):
            return self._alone(write)
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append((write, future))
        self._flush = self._flush or flush
        if len(self._queue) == 1:
            loop.call_soon(self.flush)
        return await future

    def _alone(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """Commit a write that need not wait for the disk at once, when no other write
        could share its transaction: none is waiting, and no callback is ready to run
        before the next turn of the loop would commit it (``_ready``, the queue of
        asyncio's own loop; another loop's writes are always grouped)."""
        [outcome] = self._commit([write], False)
        return outcome  # type: ignore[no-any-return]

    def flush(self) -> None:
        """Commit what is waiting, now (the event loop calls this; so does ``close``)."""
        batch, self._queue = self._queue, []
        flush, self._flush = self._flush, False
        if not batch:
            return
        try:
            outcomes = self._commit([write for write, _ in batch], flush)
        except BaseException as exc:  # nothing of the batch is stored
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # its caller was cancelled: the write stands all the same
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _commit(self, writes: list[Write], flush: bool) -> list[Any]:
        conn = self._store.db()
        if len(writes) == 1:  # no savepoint needed: a refusal rolls back the transaction
            with self._store.transaction("saving a run", flush=flush):
                return [writes[0](conn)]
        outcomes: list[Any] = []
        with self._store.transaction(f"saving {len(writes)} runs", flush=flush):
            for write in writes:
                conn.execute("SAVEPOINT oarlock_write")
                try:
                    outcomes.append(write(conn))
                except (ConflictError, NotFound) as refused:
                    conn.execute("ROLLBACK TO oarlock_write")
                    outcomes.append(refused)
                conn.execute("RELEASE oarlock_write")
        return outcomes
