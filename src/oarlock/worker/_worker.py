"""The worker: drives many runs at once in one asyncio process, claimed from a run queue.

A worker claims up to its free slots (``RunQueue.claim``, fair across tenants), drives each
run with a :class:`~oarlock.engine.Runner` under the run's lease, and between claims waits
for work (``wait_for_work``, at most ``poll`` seconds). One timer, every ``heartbeat``
seconds, records that the worker is alive, renews the lease of every run it holds, releases
the leases of dead processes of this host (so that their runs need not wait for their
deadline), and, in the one worker that holds the sweep's leader row, denies the approvals
whose deadline passed, which makes those runs runnable.

A drive ends when its run finishes or waits for a human, and its lease is released. It is
stopped (its task cancelled) when its lease turns out lost (nothing more of it is written:
the runner's writes are fenced), when it outlasts ``max_run_time`` (the run then fails), or
when a shutdown's drain runs out. The runner of a stopped drive leaves the run as committed;
a tool call in flight is recorded as after a crash (Uncertain for a side-effecting call).

Shutdown (``stop``, which the command binds to SIGTERM and SIGINT): claim nothing more; let
each run in hand finish the step it is taking (a drive ends between steps and hands its run
back) within ``drain`` seconds, then stop what is left; release every lease; record a last
heartbeat dated 1970-01-01 so that ``oarlock workers`` shows the worker gone at once. A
second ``stop`` stops every drive at once.

The agent of a run is the one the worker was given for its name (``agents``), else its agent
file (the run's ``agent_ref``, with the model it was started with), loaded once and kept
until the file changes; an agent with MCP servers is connected once, for the worker's life.
A run whose agent cannot be loaded fails, saying why. A drive that fails on an error of the
store (or one nobody expected) keeps its lease unrenewed: the run is claimed again once the
lease runs out, not at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oarlock.engine import _core as core
from oarlock.engine._lease import release_dead
from oarlock.engine._observe import RunObserver
from oarlock.engine._run_agents import RunAgents
from oarlock.engine._runner import Runner, update_run
from oarlock.errors import ConflictError, LeaseLost, OarlockError, UsageError
from oarlock.formats._time import now_rfc3339
from oarlock.store._base import Event
from oarlock.store._queue import Lease, RunQueue, Sweeping, WorkerInfo
from oarlock.worker._settings import WorkerSettings

if TYPE_CHECKING:
    from oarlock.engine._agent import Agent
    from oarlock.formats._models import RunDocument
    from oarlock.store._base import RunStore, StoredRun

__all__ = ["SWEEP_ROLE", "Worker", "WorkerEvent", "worker_id"]

SWEEP_ROLE = "approval-expiry"
GONE = "1970-01-01T00:00:00Z"  # the last heartbeat of a worker that stopped
_SWEEP_BATCH = 100
_FALLBACK_WAITING = 1000  # runs looked through per sweep by a store without Sweeping


def worker_id() -> str:
    """A new worker's id: ``worker:HOST:PID:RANDOM``."""
    return f"worker:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """Something a worker did: ``kind`` (``started``, ``claimed``, ``finished``,
    ``handed_back``, ``lease_lost``, ``failed``, ``expired``, ``recovered``, ``error``,
    ``stopping``, ``stopped``), the run concerned (if any), and a detail."""

    kind: str
    run_id: str | None = None
    detail: str = ""


@dataclass(slots=True)
class _Drive:
    lease: Lease
    task: asyncio.Task[None] | None = None
    reason: str | None = None  # why the worker stopped it: lease_lost, overtime, shutdown
    timer: asyncio.TimerHandle | None = None


class Worker:
    """Drives the runs of ``store`` (a run store that is a run queue) as its ``settings``
    say; ``agents`` gives the agent of each agent name it knows (runs of other agents load
    their agent file); ``on_event`` hears what it does; ``observer`` is told of its drives
    and commits (by default :func:`oarlock.telemetry.default_observer`)."""

    def __init__(
        self,
        store: RunStore,
        settings: WorkerSettings | None = None,
        *,
        agents: Mapping[str, Agent] | None = None,
        owner: str | None = None,
        on_event: Callable[[WorkerEvent], None] | None = None,
        observer: RunObserver | None = None,
    ) -> None:
        if not isinstance(store, RunQueue):
            raise UsageError("a worker needs a store that is a run queue (memory, SQLite)")
        self.store: RunStore = store
        self.queue: RunQueue = store
        self.settings = settings or WorkerSettings()
        self.owner = owner or worker_id()
        self.started_at = now_rfc3339()
        self._agents = RunAgents(agents)
        self._drives: dict[str, _Drive] = {}
        self._on_event = on_event
        if observer is None:
            from oarlock.telemetry._setup import default_observer

            observer = default_observer()
        self.observer: RunObserver = observer
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._sweeping: asyncio.Task[None] | None = None

    # -- control ------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopping

    def held(self) -> list[str]:
        """The runs this worker drives now."""
        return sorted(self._drives)

    def stop(self) -> None:
        """Shut down gracefully (see the module); called again, stop every drive now.
        Call it from the worker's event loop (a signal handler added to it, a task)."""
        if self._stopping:
            self._stop_all("shutdown")
            return
        self._stopping = True
        self._emit("stopping", None, f"draining {len(self._drives)} run(s)")
        if self._wake is not None:
            self._wake.set()

    def _emit(self, kind: str, run_id: str | None = None, detail: str = "") -> None:
        if self._on_event is not None:
            self._on_event(WorkerEvent(kind, run_id, detail))

    # -- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Work until :meth:`stop`; returns once every lease is released."""
        self._wake = asyncio.Event()
        s = self.settings
        await self._beat()
        self._emit(
            "started",
            None,
            f"concurrency {s.concurrency}, queues {_names(s.queues)}, tenants "
            f"{_names(s.tenants)}, heartbeat {s.heartbeat:g} s, lease {s.lease:g} s",
        )
        heart = asyncio.ensure_future(self._heartbeats())
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            self._stop_all("shutdown")
            await asyncio.gather(*self._tasks(), return_exceptions=True)
            for task in (heart, self._sweeping):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            await self._beat(gone=True)
            await self._agents.aclose()
            self._emit("stopped")

    def _tasks(self) -> list[asyncio.Task[None]]:
        return [d.task for d in self._drives.values() if d.task is not None]

    async def _claim_loop(self) -> None:
        s = self.settings
        while not self._stopping:
            free = s.concurrency - len(self._drives)
            looking = free > 0
            if looking:
                try:
                    got = await self.queue.claim(
                        self.owner,
                        limit=free,
                        lease_seconds=s.lease,
                        tenants=s.tenants,
                        queues=s.queues,
                    )
                except OarlockError as exc:
                    self._emit("error", None, f"claiming failed: {exc}")
                    got = []
                for lease in got:
                    self._start(lease)
                if got and len(got) == free:
                    continue  # every slot taken: wait for one to free
                if self._stopping:
                    break
            await self._idle(looking)

    async def _idle(self, looking: bool) -> None:
        """Until a drive ends or the worker stops, or (with a free slot) work may have
        appeared or ``poll`` passed."""
        assert self._wake is not None
        waits: set[asyncio.Future[object]] = {asyncio.ensure_future(self._wake.wait())}
        if looking:
            waits.add(asyncio.ensure_future(self.queue.wait_for_work(self.settings.poll)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        self._wake.clear()

    async def _drain(self) -> None:
        tasks = self._tasks()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.settings.drain)
        if pending:
            self._emit("stopping", None, f"drain time over: stopping {len(pending)} run(s)")

    def _stop_all(self, reason: str) -> None:
        for drive in list(self._drives.values()):
            self._cancel(drive, reason)

    @staticmethod
    def _cancel(drive: _Drive, reason: str) -> None:
        if drive.task is not None and not drive.task.done():
            drive.reason = drive.reason or reason
            drive.task.cancel()

    # -- one run ------------------------------------------------------------------------
    def _start(self, lease: Lease) -> None:
        drive = _Drive(lease)
        self._drives[lease.run_id] = drive
        self._emit("claimed", lease.run_id, f"epoch {lease.epoch}, tenant {lease.tenant}")
        drive.task = asyncio.ensure_future(self._drive(drive))
        if self.settings.max_run_time is not None:
            drive.timer = asyncio.get_running_loop().call_later(
                self.settings.max_run_time, self._cancel, drive, "overtime"
            )

    async def _drive(self, drive: _Drive) -> None:
        lease, run_id = drive.lease, drive.lease.run_id
        release = True
        try:
            doc = await self._resume(lease)
            if doc is not None:
                kind = "handed_back" if doc.status == "running" else "finished"
                self._emit(kind, run_id, doc.status)
        except asyncio.CancelledError:
            if drive.reason is None:
                raise
            release = await self._stopped(drive)
        except LeaseLost:
            drive.reason, release = "lease_lost", False
            self._emit("lease_lost", run_id, "another holds the run now; nothing more written")
        except ConflictError as exc:  # another writer won a step: claimed again later
            release = False
            self._emit("error", run_id, f"{exc}")
        except OarlockError as exc:  # the store failed: claimed again once the lease is out
            release = False
            self._emit("error", run_id, f"{exc}")
        except Exception as exc:
            release = False
            self._emit("error", run_id, f"unexpected error: {type(exc).__name__}: {exc}")
        finally:
            if drive.timer is not None:
                drive.timer.cancel()
            self._drives.pop(run_id, None)
            if self._wake is not None:
                self._wake.set()
            if release:
                with contextlib.suppress(Exception):  # else its lease runs out
                    await asyncio.shield(self.queue.release(lease))

    async def _resume(self, lease: Lease) -> RunDocument | None:
        stored = await self.store.load(lease.run_id)
        try:
            agent = await self._agent(stored)
        except OarlockError as exc:
            await self._fail(lease, f"the worker could not load the run's agent: {exc}")
            return None
        runner = Runner(
            agent,
            self.store,
            lease=lease,
            watch_interval=self.settings.poll,
            pause=lambda: self._stopping,
            observer=self.observer,
        )
        try:
            return await runner.resume(lease.run_id)
        except ConflictError as exc:
            if exc.code != "wrong_agent":
                raise
            await self._fail(lease, f"the worker could not drive the run: {exc}")
            return None

    async def _stopped(self, drive: _Drive) -> bool:
        """Say why a drive was stopped, fail an overtime run; whether to release it."""
        run_id = drive.lease.run_id
        if drive.reason == "lease_lost":
            self._emit("lease_lost", run_id, "another holds the run now; nothing more written")
            return False
        if drive.reason == "overtime":
            limit = self.settings.max_run_time
            await self._fail(drive.lease, f"stopped after the maximum run time of {limit:g} s")
            return True
        self._emit("handed_back", run_id, "stopped by the shutdown")
        return True

    async def _fail(self, lease: Lease, message: str) -> None:
        def apply(doc: RunDocument) -> list[Event]:
            return core.fail(doc, message, now_rfc3339()) if doc.status == "running" else []

        try:
            await update_run(
                self.store, lease.run_id, apply, lease=lease, on_commit=self.observer.committed
            )
        except LeaseLost:
            self._emit("lease_lost", lease.run_id, "another holds the run now")
            return
        self._emit("failed", lease.run_id, message)

    async def _agent(self, stored: StoredRun) -> Agent:
        return await self._agents.of(stored)

    # -- the heartbeat ------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat)
            try:
                await self._beat()
            except Exception as exc:  # the next beat tries again; a lease may yet hold
                self._emit("error", None, f"heartbeat failed: {type(exc).__name__}: {exc}")

    async def _beat(self, *, gone: bool = False) -> None:
        info = WorkerInfo(
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            heartbeat_at=GONE if gone else now_rfc3339(),
            concurrency=self.settings.concurrency,
        )
        try:
            await self.queue.heartbeat(info)
        except OarlockError as exc:
            self._emit("error", None, f"heartbeat failed: {exc}")
        if gone:
            return
        await self._renew()
        await self._recover()
        if self._sweeping is None or self._sweeping.done():  # never in the way of renewals
            self._sweeping = asyncio.ensure_future(self._sweep())

    async def _renew(self) -> None:
        drives = [d for d in self._drives.values() if d.reason is None]
        renewed = await asyncio.gather(
            *(self.queue.renew(d.lease, self.settings.lease) for d in drives),
            return_exceptions=True,
        )
        for drive, outcome in zip(drives, renewed, strict=True):
            if self._drives.get(drive.lease.run_id) is not drive:
                continue  # it ended meanwhile (and gave its lease back)
            if isinstance(outcome, LeaseLost):
                self._cancel(drive, "lease_lost")
            elif isinstance(outcome, Exception):  # tried again at the next heartbeat
                self._emit("error", drive.lease.run_id, f"renewing its lease failed: {outcome}")

    async def _recover(self) -> None:
        try:
            released = await release_dead(self.queue)
        except OarlockError as exc:
            self._emit("error", None, f"looking for dead holders failed: {exc}")
            return
        for run_id in released:
            self._emit("recovered", run_id, "its holder, a process of this host, is gone")

    async def _sweep(self) -> None:
        """Deny lapsed approvals, if this worker is the one that sweeps."""
        try:
            due = await self._due()
            for run_id in due:
                denied: list[int] = []

                def expire(doc: RunDocument, denied: list[int] = denied) -> list[Event]:
                    events = core.expire_approvals(doc, now_rfc3339())
                    denied.append(len(events))
                    return events

                await update_run(self.store, run_id, expire, on_commit=self.observer.committed)
                if denied and denied[-1]:
                    self._emit("expired", run_id, "approvals past their deadline denied")
        except OarlockError as exc:
            self._emit("error", None, f"the approval sweep failed: {exc}")

    async def _due(self) -> list[str]:
        store = self.store
        if isinstance(store, Sweeping):
            if not await store.lead(SWEEP_ROLE, self.owner, ttl_seconds=self.settings.lease):
                return []
            return await store.lapsed_approvals(now=time.time(), limit=_SWEEP_BATCH)
        live = await self.queue.workers(within_seconds=self.settings.lease)
        if not live or min(w.owner for w in live) != self.owner:
            return []
        waiting = await store.list_runs(status="waiting_approval", limit=_FALLBACK_WAITING)
        return [r.id for r in waiting]


def _names(names: tuple[str, ...] | None) -> str:
    return "all" if names is None else ", ".join(names)
