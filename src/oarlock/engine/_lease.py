"""How a runner holds a run while it drives it, when its store is a run queue.

A drive (``start``, ``resume``, the resume after a decision) takes the run's lease
(``claim_run``) before it reads the run, renews it on a timer while it drives (every third
of the lease's length; a drive shorter than that renews nothing), and releases it when the
drive ends, however it ends. Every save of the drive and every governance write of its tool
calls carries the lease. When a renewal finds the lease lost (the run was claimed by
another after this process stalled past the deadline), the drive is cancelled at once, and
the caller gets :class:`~oarlock.errors.LeaseLost`; a fenced write that finds it lost raises
the same. Nothing more of the drive is written either way.

A run held by a process of this host that no longer runs (killed, crashed) need not wait
for its lease's deadline: its lease is released (as that holder, at that epoch, so nothing
happens if the run moved on meanwhile) and claimed again.

A worker gives the runner a lease it holds already (``Runner(lease=...)``): the worker
renews and releases it, and cancels the drive when it is lost.

A drive's last save leaves the run at rest (finished, or waiting for a human). On a queue
whose writes made in one turn of the event loop share one transaction, in the order they
were made (``commits_together``: the SQLite store's group commit), the drive's own lease is
released in that save's transaction (:func:`save_releasing`), not in one of its own after
it: the release is fenced by the lease's epoch and owner as the save is, so it releases
nothing when the save finds the lease lost, and it is flushed with the save. On a queue
whose save can give the lease back itself (``saves_releasing``: the PostgreSQL store's
``save(release=True)``), the last save does, in the same fenced statement and commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from oarlock.errors import LeaseLost, RunBusy

if TYPE_CHECKING:
    from oarlock.formats._models import RunDocument
    from oarlock.store._queue import Lease, RunQueue

__all__ = ["Hold", "drive_held", "release_dead", "save_releasing"]

T = TypeVar("T")


@dataclass(slots=True)
class Hold:
    """The lease a drive holds: ``lease`` (None: not driven under one), whether it is a
    worker's (``given``: never cancelled with the run, never renewed or released here),
    the refusal that ended it, once lost, and whether the drive's last save released it
    (``released``: neither renewed nor released again)."""

    lease: Lease | None = None
    given: bool = False
    lost: LeaseLost | None = None
    released: bool = False


class _Renewal:
    """Renews ``hold``'s lease every third of ``seconds`` until stopped; cancels ``task``
    (the drive's) when the lease turns out lost, which the drive takes back when it ends.
    A failure of the store is tried again at the next turn: the lease may yet hold, and a
    renewal that finds it passed says so."""

    def __init__(
        self, queue: RunQueue, hold: Hold, task: asyncio.Task[Any], seconds: float
    ) -> None:
        self.queue, self.hold, self.task, self.seconds = queue, hold, task, seconds
        self.loop = asyncio.get_running_loop()
        self.renewing: asyncio.Task[None] | None = None
        self.stopped = self.cancelled = False
        self.handle = self.loop.call_later(seconds / 3, self._due)

    def _due(self) -> None:
        if not self.hold.released:
            self.renewing = self.loop.create_task(self._renew())

    async def _renew(self) -> None:
        lease = self.hold.lease
        assert lease is not None
        try:
            self.hold.lease = await self.queue.renew(lease, self.seconds)
        except LeaseLost as lost:
            if self.hold.released:  # given back by the drive's last save meanwhile
                return
            self.hold.lost = lost
            if not self.stopped:
                self.cancelled = self.task.cancel()
            return
        except Exception:  # tried again at the next turn
            pass
        if not self.stopped:
            self.handle = self.loop.call_later(self.seconds / 3, self._due)

    def stop(self) -> None:
        self.stopped = True
        self.handle.cancel()
        if self.renewing is not None:
            self.renewing.cancel()


async def release_dead(queue: RunQueue, run_id: str | None = None) -> list[str]:
    """Release the live leases (of ``run_id``, or of every run) whose holders are processes
    of this host that no longer run; the runs released."""
    from oarlock.governance._owner import holder_dead

    released = []
    for lease in await queue.leases():
        if (run_id is None or lease.run_id == run_id) and holder_dead(lease.owner):
            await queue.release(lease)
            released.append(lease.run_id)
    return released


async def _claim(queue: RunQueue, run_id: str, owner: str, seconds: float) -> Lease:
    try:
        return await queue.claim_run(run_id, owner, lease_seconds=seconds)
    except RunBusy:
        if not await release_dead(queue, run_id):
            raise
    return await queue.claim_run(run_id, owner, lease_seconds=seconds)


async def drive_held(
    queue: RunQueue | None,
    run_id: str,
    drive: Callable[[Hold], Awaitable[RunDocument]],
    *,
    owner: str,
    lease_seconds: float,
    given: Lease | None = None,
    busy: Callable[[], Awaitable[RunDocument]] | None = None,
) -> RunDocument:
    """Run ``drive`` holding the run's lease, as the module says. ``busy``, if given,
    answers for a run another holds live, instead of RunBusy."""
    if given is not None:
        return await drive(Hold(given, given=True))
    if queue is None:
        return await drive(Hold())
    try:
        lease = await _claim(queue, run_id, owner, lease_seconds)
    except RunBusy:
        if busy is None:
            raise
        return await busy()
    hold = Hold(lease)
    task = asyncio.current_task()
    assert task is not None
    renewal = _Renewal(queue, hold, task, lease_seconds)
    try:
        done = await drive(hold)
    except BaseException as stopped:
        if renewal.cancelled:  # the renewal's own cancellation, delivered: taken back
            task.uncancel()
        stop = isinstance(stopped, asyncio.CancelledError | LeaseLost)
        if stop and hold.lost is not None and task.cancelling() == 0:
            raise hold.lost from None
        if isinstance(stopped, LeaseLost):
            hold.lost = stopped
        raise
    finally:
        renewal.stop()
        if hold.lost is None and not hold.released:
            with contextlib.suppress(Exception):  # a release that fails only lets it expire
                if task.cancelling():
                    await asyncio.shield(queue.release(hold.lease or lease))
                else:
                    await queue.release(hold.lease or lease)
    if hold.lost is not None:  # lost while the drive ended on its own
        if renewal.cancelled:
            task.uncancel()
        raise hold.lost
    return done


async def save_releasing(
    queue: RunQueue | None, hold: Hold, save: Callable[[bool], Awaitable[T]]
) -> T:
    """``save(release)``, the drive's last, and the release of the drive's own lease with
    it (see the module): ``save(True)`` where the queue ``saves_releasing`` (the save gives
    the lease back itself), else ``save(False)`` and the release in its transaction where
    the queue ``commits_together``; else ``save(False)`` alone, the lease released when the
    drive ends. The save is made first: its fence sees the lease still held."""
    lease = hold.lease
    if lease is None or hold.given:
        return await save(False)
    if getattr(queue, "saves_releasing", False):
        hold.released = True
        try:
            return await save(True)
        except BaseException:  # not saved, so not released: drive_held releases it
            hold.released = False
            raise
    if not getattr(queue, "commits_together", False):
        return await save(False)
    assert queue is not None
    hold.released = True
    saving = asyncio.ensure_future(save(False))
    releasing = asyncio.ensure_future(queue.release(lease))
    try:
        return await saving
    finally:
        [outcome] = await asyncio.gather(releasing, return_exceptions=True)
        if outcome is not None:  # not released: drive_held releases it
            hold.released = False
