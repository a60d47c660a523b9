"""An in-memory store, for tests and for users who need no durability.

It is a run queue too (:mod:`oarlock.store._queue`), and its governance store checks fences
against its runs' lease epochs: every state change happens under one lock, shared with
the governance store, so a fence is checked and a record written in one step, and threads
with event loops of their own may share the store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oarlock.errors import ConflictError, NotFound
from oarlock.store._base import Event, RunSummary, StoredRun, event_rows
from oarlock.store._leases import Wakeups, approval_due, lease_lost, run_busy
from oarlock.store._queue import Lease, WorkerInfo

if TYPE_CHECKING:  # pydantic loads on first use, not when oarlock.store is imported
    from oarlock.formats._models import RunDocument
    from oarlock.governance._store import MemoryGovernanceStore, Recorded

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Run:
    raw: bytes
    version: int
    agent_ref: str | None
    status: str
    tenant: str
    queue: str
    num: int  # order of creation
    ready_at: float  # runnable from then on (while running): see the SQLite schema, 0004
    due: float | None = None  # earliest deadline of an undecided approval, while waiting
    owner: str | None = None
    epoch: int = 0
    until: float | None = None


class MemoryStore:
    """Keeps serialized copies, so that callers can never alias stored state."""

    saves_records = True  # its save writes the records of a step's calls (``records=``)

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._events: dict[str, list[tuple[str, str, str]]] = {}  # (kind, at, JSON data)
        self._governance: MemoryGovernanceStore | None = None
        self._served: dict[str, float] = {}  # tenant -> time of its latest claim
        self._workers: dict[str, WorkerInfo] = {}
        self._leaders: dict[str, tuple[str, float]] = {}  # role -> (owner, until)
        self._wakeups = Wakeups()

    def governance(self) -> MemoryGovernanceStore:
        """The governance records of these runs, in memory too, fenced by their leases."""
        with self.lock:
            if self._governance is None:
                from oarlock.governance._store import MemoryGovernanceStore

                self._governance = MemoryGovernanceStore(runs=self)
            return self._governance

    def epoch_of(self, run_id: str) -> int | None:
        run = self._runs.get(run_id)
        return None if run is None else run.epoch

    # -- runs ---------------------------------------------------------------------------
    async def create(
        self,
        document: RunDocument,
        events: list[Event],
        *,
        agent_ref: str | None = None,
        tenant: str = "default",
        queue: str = "default",
        flush: bool = True,
    ) -> int:
        from oarlock.formats._codec import dump_run_json

        run_id = document.id
        raw, rows = dump_run_json(document), event_rows(run_id, events)
        with self.lock:
            if run_id in self._runs:
                raise ConflictError(f"run {run_id} already exists")
            self._runs[run_id] = _Run(
                raw,
                1,
                agent_ref,
                document.status,
                tenant,
                queue,
                len(self._runs) + 1,
                time.time(),
                approval_due(document),
            )
            self._events[run_id] = rows
            if document.status == "running":
                self._wakeups.wake()
        return 1

    async def load(self, run_id: str) -> StoredRun:
        with self.lock:
            try:
                run = self._runs[run_id]
            except KeyError:
                raise NotFound(f"no run {run_id}") from None
            raw, version, agent_ref = run.raw, run.version, run.agent_ref
        from oarlock.formats._codec import parse_json
        from oarlock.formats._models import RunDocument

        return StoredRun(parse_json(RunDocument, raw), version, agent_ref)

    async def save(
        self,
        document: RunDocument,
        expected_version: int,
        events: list[Event],
        *,
        lease: Lease | None = None,
        flush: bool = True,
        records: Sequence[Recorded] = (),
    ) -> int:
        """As :meth:`RunStore.save <oarlock.store.RunStore.save>`; ``records``: the records
        of the step's calls that ran before they were claimed, written with it or not at
        all (:class:`~oarlock.governance.Recorded`)."""
        from oarlock.formats._codec import dump_run_json

        run_id = document.id
        raw, rows = dump_run_json(document), event_rows(run_id, events)
        due = approval_due(document)
        with self.lock:
            run = self._runs.get(run_id)
            if run is None:
                raise NotFound(f"no run {run_id}")
            if lease is not None and (run.epoch != lease.epoch or run.owner != lease.owner):
                raise lease_lost(lease, run.epoch)
            if run.version != expected_version:
                raise ConflictError(
                    f"run {run_id} changed: stored version {run.version}, "
                    f"expected {expected_version}"
                )
            if records:
                self.governance().write_records(records)
            run.raw, run.version, run.status, run.due = raw, run.version + 1, document.status, due
            if lease is None:  # a decision or another writer: runnable from now, if free
                run.ready_at = max(run.ready_at, time.time())
                if run.status == "running":
                    self._wakeups.wake()
            self._events[run_id].extend(rows)
            return run.version

    async def events(self, run_id: str) -> list[Event]:
        with self.lock:
            if run_id not in self._events:
                raise NotFound(f"no run {run_id}")
            rows = list(self._events[run_id])
        return [
            Event(kind, at, json.loads(data), seq) for seq, (kind, at, data) in enumerate(rows, 1)
        ]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        now = time.time()
        with self.lock:
            runs = list(self._runs.values())
        out = []
        for run in runs:
            if tenant is not None and run.tenant != tenant:
                continue
            doc = json.loads(run.raw)
            run_tags = doc.get("tags", {})
            if status is not None and doc["status"] != status:
                continue
            if tags and any(run_tags.get(k) != v for k, v in tags.items()):
                continue
            live = run.owner is not None and run.until is not None and run.until > now
            out.append(
                RunSummary(
                    doc["id"],
                    doc["agent"],
                    doc["status"],
                    run_tags,
                    doc["turns"],
                    doc["createdAt"],
                    doc["updatedAt"],
                    run.tenant,
                    run.owner if live else None,
                    run.until if live else None,
                )
            )
        out.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return out[: max(limit, 0)]

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        with self.lock:
            ids = sorted(i for i in self._runs if i.startswith(prefix))
        return ids[: max(limit, 0)]

    async def close(self) -> None:
        return None

    # -- the queue ----------------------------------------------------------------------
    @staticmethod
    def _lease(run_id: str, run: _Run) -> Lease:
        owner, until = run.owner or "", run.until or 0.0
        return Lease(run_id, owner, run.epoch, until, run.tenant, run.queue, run.agent_ref)

    def _take(self, run_id: str, run: _Run, owner: str, now: float, seconds: float) -> Lease:
        run.owner, run.epoch, run.until = owner, run.epoch + 1, now + seconds
        run.ready_at = run.until
        self._served[run.tenant] = now
        return self._lease(run_id, run)

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        tenants: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Lease]:
        now = time.time()
        with self.lock:
            lanes: dict[str, list[tuple[float, int, str]]] = {}
            for run_id, run in self._runs.items():
                if run.status != "running" or run.ready_at > now:
                    continue
                if tenants is not None and run.tenant not in tenants:
                    continue
                if queues is not None and run.queue not in queues:
                    continue
                lanes.setdefault(run.tenant, []).append((run.ready_at, run.num, run_id))
            for lane in lanes.values():
                lane.sort()
            order = sorted(
                lanes,
                key=lambda t: (t in self._served, self._served.get(t, 0.0), lanes[t][0], t),
            )
            picked: list[str] = []
            depth = 0
            while len(picked) < limit and any(depth < len(lanes[t]) for t in order):
                picked += [lanes[t][depth][2] for t in order if depth < len(lanes[t])]
                depth += 1
            return [
                self._take(run_id, self._runs[run_id], owner, now, lease_seconds)
                for run_id in picked[: max(limit, 0)]
            ]

    async def claim_run(self, run_id: str, owner: str, *, lease_seconds: float) -> Lease:
        now = time.time()
        with self.lock:
            run = self._runs.get(run_id)
            if run is None:
                raise NotFound(f"no run {run_id}")
            holder, until = run.owner, run.until
            if holder is not None and holder != owner and until is not None and until > now:
                raise run_busy(run_id, holder, until)
            return self._take(run_id, run, owner, now, lease_seconds)

    def _holding(self, lease: Lease) -> _Run:
        run = self._runs.get(lease.run_id)
        if run is None or run.epoch != lease.epoch or run.owner != lease.owner:
            raise lease_lost(lease, None if run is None else run.epoch)
        return run

    async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        with self.lock:
            run = self._holding(lease)
            run.until = run.ready_at = time.time() + lease_seconds
            return self._lease(lease.run_id, run)

    async def release(self, lease: Lease) -> None:
        with self.lock:
            try:
                run = self._holding(lease)
            except ConflictError:
                return
            run.owner = run.until = None
            run.ready_at = time.time()
            if run.status == "running":
                self._wakeups.wake()

    async def heartbeat(self, worker: WorkerInfo) -> None:
        with self.lock:
            self._workers[worker.owner] = worker

    async def workers(self, *, within_seconds: float) -> list[WorkerInfo]:
        from dataclasses import replace

        from oarlock.formats._time import parse_rfc3339

        now = time.time()
        with self.lock:
            held: dict[str, list[str]] = {}
            for run_id, run in self._runs.items():
                if run.owner is not None and run.until is not None and run.until > now:
                    held.setdefault(run.owner, []).append(run_id)
            out = []
            for worker in self._workers.values():
                parsed = parse_rfc3339(worker.heartbeat_at)
                beat = 0.0 if parsed is None else parsed[0].timestamp() + float(parsed[1])
                if now - beat <= within_seconds:
                    out.append(replace(worker, held=tuple(sorted(held.get(worker.owner, ())))))
        return sorted(out, key=lambda w: w.owner)

    async def leases(self) -> list[Lease]:
        now = time.time()
        with self.lock:
            return [
                self._lease(run_id, run)
                for run_id, run in self._runs.items()
                if run.owner is not None and run.until is not None and run.until > now
            ]

    async def wait_for_work(self, timeout: float) -> None:
        with self._wakeups.waiter() as woken, contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), max(timeout, 0.0))

    # -- sweeping -----------------------------------------------------------------------
    async def lead(self, role: str, owner: str, *, ttl_seconds: float) -> bool:
        now = time.time()
        with self.lock:
            holder = self._leaders.get(role)
            if holder is None or holder[0] == owner or holder[1] + ttl_seconds / 10 < now:
                self._leaders[role] = (owner, now + ttl_seconds)
                return True
            return False

    async def lapsed_approvals(self, *, now: float, limit: int) -> list[str]:
        with self.lock:
            due = sorted(
                (run.due, run.num, run_id)
                for run_id, run in self._runs.items()
                if run.due is not None and run.due <= now and run.status == "waiting_approval"
            )
        return [run_id for _, _, run_id in due[: max(limit, 0)]]
