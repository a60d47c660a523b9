"""Group commit: writes that reach an SQLite store in the same turn of the event loop share
one transaction, and so one flush of the disk.

A write that need not wait for the disk (a lease's claim, renewal or release, a step of
``read`` results) says so (``flush=False``); a batch of such writes alone commits without a
flush, and one that holds any other write is flushed.

A write commits at once, without waiting for the next turn of the loop, when nothing could
share its transaction: no write is waiting, no callback is ready to run and no timer is due
before that turn would commit it (what runs in that turn before the commit is what is ready
now; what the turn finds ready, its sockets and timers, runs after the commit). That saves
the turn's two passes of the loop (a run's drive waits for each save), and changes no
batch. It needs asyncio's own loop (its queue of ready callbacks, its timers); on another
loop every write waits for the turn. A drive whose model and tools never wait would then
not give the loop a turn at all: after ``_AT_ONCE`` such commits in a row, the next waits
for its turn, so the loop polls its sockets at least that often.

A flush (``synchronous=FULL``) costs about 0.25 ms to several ms on the virtual disks this
runs on, and the store's methods run on the event loop; without grouping, a thousand runs
in one process commit one after another, each waiting for its own flush. Each write still
returns only once the transaction holding it is committed, so nothing is acknowledged
before it is durable. Each write runs under its own savepoint: one that is refused (a
version conflict, a missing run) is rolled back alone and its caller gets the refusal; the
others commit. A write that never refuses (``refuses=False``: a lease's release, which
changes nothing when the lease has moved on) runs without one. A failure of the transaction
itself fails every write of the batch, and none of them is stored.
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
_AT_ONCE = 16  # commits at once in a row, at most, before one waits for a turn of the loop
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
        self._queue: list[tuple[Write, asyncio.Future[Any], bool]] = []
        self._flush = False  # whether the waiting batch must be flushed
        self._at_once = 0  # writes committed at once in a row

    async def submit(
        self, write: Callable[[sqlite3.Connection], T], *, flush: bool = True, refuses: bool = True
    ) -> T:
        """Run ``write`` in the next shared transaction; its result once that is committed
        (flushed to the disk, unless no write of the batch needed it). ``refuses=False``:
        the write never raises ConflictError or NotFound, and needs no savepoint."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._now(loop):
            [outcome] = self._commit([(write, refuses)], flush)
            return outcome  # type: ignore[no-any-return]
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append((write, future, refuses))
        self._flush = self._flush or flush
        if len(self._queue) == 1:
            loop.call_soon(self.flush)
        return await future

    def _now(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a write may commit at once (see the module): no write waits, nothing
        is ready (``_ready``) or due (``_scheduled``, a heap of timers) on asyncio's loop,
        and fewer than ``_AT_ONCE`` writes in a row did so."""
        ready = getattr(loop, "_ready", None)
        timers = getattr(loop, "_scheduled", None)
        alone = (
            not self._queue
            and ready is not None
            and not ready
            and timers is not None
            and (not timers or timers[0].when() > loop.time())
            and self._at_once < _AT_ONCE
        )
        self._at_once = self._at_once + 1 if alone else 0
        return alone

    def flush(self) -> None:
        """Commit what is waiting, now (the event loop calls this; so does ``close``)."""
        batch, self._queue = self._queue, []
        flush, self._flush = self._flush, False
        if not batch:
            return
        try:
            outcomes = self._commit([(write, refuses) for write, _, refuses in batch], flush)
        except BaseException as exc:  # nothing of the batch is stored
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future, _), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # its caller was cancelled: the write stands all the same
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _commit(self, writes: list[tuple[Write, bool]], flush: bool) -> list[Any]:
        conn = self._store.db()
        if len(writes) == 1:  # no savepoint needed: a refusal rolls back the transaction
            with self._store.transaction("saving a run", flush=flush):
                return [writes[0][0](conn)]
        outcomes: list[Any] = []
        with self._store.transaction(f"saving {len(writes)} runs", flush=flush):
            for write, refuses in writes:
                if not refuses:
                    outcomes.append(write(conn))
                    continue
                conn.execute("SAVEPOINT oarlock_write")
                try:
                    outcomes.append(write(conn))
                except (ConflictError, NotFound) as refused:
                    conn.execute("ROLLBACK TO oarlock_write")
                    outcomes.append(refused)
                conn.execute("RELEASE oarlock_write")
        return outcomes
