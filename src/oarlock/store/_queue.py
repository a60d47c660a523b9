"""Runs as work: leases that workers take on runnable runs, and the fence every write of a
lease holder carries.

A run is **runnable** when its document's status is ``running`` and no live lease holds
it: a new run (``Runner.submit``, ``oarlock run --detach``), a run whose last decision was
just recorded, a run whose worker stopped renewing its lease. A worker **claims** runnable
runs (one statement: the rows are locked, skipping rows another claimer holds, then
updated), which gives each a :class:`Lease`: the worker's id, the run's **lease epoch**
(incremented by every claim of that run, never reused) and a deadline. The holder renews
the lease while it drives the run and releases it when the run stops (finished, waiting
for a human, or the worker shutting down).

Every write the holder makes for the run is **fenced** by its lease: the run's document
and events (``RunStore.save(..., lease=)``) and the governance records of its tool calls
(``GovernanceStore.begin/take_over/finish/refuse(..., fence=)``) are written only if the
run's lease epoch is still the lease's, checked in the same transaction; otherwise
:class:`~oarlock.errors.LeaseLost` is raised and nothing is written. A worker that wakes
after its lease passed to another (a long GC pause, SIGSTOP, a network partition) cannot
change anything. An idempotency claim records the epoch it was taken under; a claim of an
epoch the run has left is stale whatever its process is doing, and is recovered as after
a crash (Uncertain for a side-effecting call, a new attempt for a ``read`` or ``sandbox``
one).

Writes without a lease (a decision, a cancellation, a single-process ``Runner`` without a
queue) are not fenced: the version check of ``save`` orders them with the holder's.

Fairness: a claim takes runs round-robin across tenants, so one tenant with many queued
runs does not starve another. Each tenant's runnable runs are taken in the order they
became runnable (then in the order they were created). Tenants take turns: the tenant
served longest ago (whose latest claim of any of its runs is oldest; never served comes
first) gives its first run, then the next tenant its first, and so on; a claim of more runs
than there are tenants goes round again (each tenant's second run, in the same order). So
a tenant with 10,000 queued runs and another with one, each served once, alternate.

Optional: :class:`Sweeping` lets one worker at a time deny the approvals whose deadline
passed without a resume, reading only the runs concerned. A store without it is still a
``RunQueue``; workers then take the live worker with the smallest id as the one that
sweeps, and look through the newest waiting runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Lease", "RunQueue", "Sweeping", "WorkerInfo"]


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on one run, until ``until`` (seconds since the epoch)."""

    run_id: str
    owner: str  # the worker's id
    epoch: int  # the run's lease epoch: 1 for its first claim, then 2, 3, ...
    until: float
    tenant: str = "default"
    queue: str = "default"
    agent_ref: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker, as its heartbeats record it."""

    owner: str
    host: str
    pid: int
    started_at: str
    heartbeat_at: str
    concurrency: int
    held: tuple[str, ...] = ()  # the runs it holds


@runtime_checkable
class RunQueue(Protocol):
    """Runnable runs, claimed under leases. Implemented beside ``RunStore`` by the memory,
    SQLite and PostgreSQL stores."""

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        tenants: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Lease]:
        """Take up to ``limit`` runnable runs (of these tenants and queues, if given),
        fairly across tenants, in one atomic step; each gets a lease of ``lease_seconds``
        with the run's next epoch. Runs another claimer holds are skipped, never waited
        for."""
        ...

    async def claim_run(self, run_id: str, owner: str, *, lease_seconds: float) -> Lease:
        """Take this run's lease, whatever its status, unless another owner holds it live
        (``RunBusy``, naming the holder and its deadline). Raises NotFound."""
        ...

    async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        """Extend a lease still held (same epoch); ``LeaseLost`` otherwise."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the run back (runnable again if its status is ``running``); nothing
        happens if the lease was lost already."""
        ...

    async def heartbeat(self, worker: WorkerInfo) -> None:
        """Record that ``worker`` is alive (its row is created or refreshed)."""
        ...

    async def workers(self, *, within_seconds: float) -> list[WorkerInfo]:
        """Workers whose last heartbeat is at most ``within_seconds`` old, with the runs
        they hold."""
        ...

    async def leases(self) -> list[Lease]:
        """Every lease that has not expired (for ``oarlock runs list``)."""
        ...

    async def wait_for_work(self, timeout: float) -> None:
        """Return when runnable work may have appeared (PostgreSQL: a ``NOTIFY`` sent in
        the transaction that made a run runnable; in one process: the write itself), or
        after ``timeout`` seconds. A hint only: a worker claims after it either way, so a
        lost notification delays work by one poll interval at most."""
        ...


@runtime_checkable
class Sweeping(Protocol):
    """What the approval sweep of workers uses, where a store offers it (memory, SQLite,
    PostgreSQL)."""

    async def lead(self, role: str, owner: str, *, ttl_seconds: float) -> bool:
        """Hold the leader row of ``role`` for ``ttl_seconds`` from now: True when
        ``owner`` holds it (it was free, expired, or already ``owner``'s), else False. An
        expired row is taken over only once it has been expired for a tenth of
        ``ttl_seconds`` more (a margin for clocks that disagree)."""
        ...

    async def lapsed_approvals(self, *, now: float, limit: int) -> list[str]:
        """Ids of runs waiting for approval whose earliest undecided approval's
        ``expiresAt`` is at or before ``now`` (seconds since the epoch), oldest deadline
        first."""
        ...
