"""The store protocol: runs (the current document, a version for optimistic concurrency)
and an append-only event log per run.

Every method that changes state is durable when it returns. ``save`` succeeds only if the
stored version is the one the caller read; otherwise it raises :class:`ConflictError` and
changes nothing, so two writers racing on one run cannot both win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from oarlock.errors import StoreError
from oarlock.store._json import compact as _compact

if TYPE_CHECKING:  # annotations only: the read-only CLI commands load no pydantic
    from oarlock.formats._models import RunDocument
    from oarlock.governance._store import GovernanceStore
    from oarlock.store._queue import Lease

__all__ = ["EVENT_KINDS", "Event", "RunStore", "RunSummary", "StoredRun", "event_rows"]

EVENT_KINDS = frozenset(
    {
        "run_created",
        "model_responded",
        "tool_called",
        "approval_requested",
        "approval_decided",
        "status_changed",
        "user_message",
    }
)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's event log. ``seq`` is assigned by the store (1, 2, ...)."""

    kind: str
    at: str
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0




def event_rows(run_id: str, events: list[Event]) -> list[tuple[str, str, str]]:
    """Each event as (kind, at, data as compact JSON text), serialized before a store
    changes anything, so that data that is not JSON changes nothing (StoreError)."""
    try:
        return [
            (ev.kind, ev.at, _compact(ev.data))
            for ev in events
        ]
    except (TypeError, ValueError) as exc:
        raise StoreError(f"event data of run {run_id} is not JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as stored: its document, version and where its agent is defined (an agent
    file's path or a ``module:attribute`` import path), so any process can resume it."""

    document: RunDocument
    version: int
    agent_ref: str | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run as ``list_runs`` gives it; ``holder`` and ``lease_until`` (seconds since the
    epoch) name the live lease on it, if any."""

    id: str
    agent: str
    status: str
    tags: dict[str, str]
    turns: int
    created_at: str
    updated_at: str
    tenant: str = "default"
    holder: str | None = None
    lease_until: float | None = None


@runtime_checkable
class RunStore(Protocol):
    """Where runs live. Implementations: memory (``oarlock.testing``), SQLite, PostgreSQL.

    A store whose ``saves_records`` is True (the three shipped) also takes ``records=``
    on ``save``: the records of the step's calls that ran before they were claimed
    (:class:`~oarlock.governance.Recorded`), written in the save's transaction, after its
    checks, by its own governance store; a key held already refuses the save
    (ConflictError, code ``claim_held``). The runner passes them only to such a store,
    when its executor keeps its records in that store's ``governance()``."""

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
        """Store a new run at version 1, of ``tenant``, in ``queue`` (runnable at once if
        its status is ``running``). Raises ConflictError if the id exists. ``flush`` as
        for :meth:`save`."""
        ...

    async def load(self, run_id: str) -> StoredRun:
        """The run's current document and version. Raises NotFound."""
        ...

    async def save(
        self,
        document: RunDocument,
        expected_version: int,
        events: list[Event],
        *,
        lease: Lease | None = None,
        flush: bool = True,
    ) -> int:
        """Replace the document and append ``events`` in one transaction, if the stored
        version is ``expected_version``; returns the new version. Raises ConflictError
        (nothing changed) or NotFound. With a ``lease``, the write is fenced: the run's
        lease epoch and owner must still be the lease's, checked in the same transaction,
        else :class:`~oarlock.errors.LeaseLost` and nothing is written.

        ``flush=False``: committed (atomic, visible to every reader, kept if the process is
        killed) without waiting for the disk; the store's next flushed commit makes it
        durable too, since its log is flushed in order. Only for a commit whose loss in a
        power cut makes work run again and nothing else (see the runner's flush rule)."""
        ...

    async def events(self, run_id: str) -> list[Event]:
        """The run's events in order. Raises NotFound."""
        ...

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        """Runs, newest first, filtered by status, by every given tag and by tenant."""
        ...

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        """The ids of at most ``limit`` runs that start with ``prefix``, in order (a run
        named by the start of its id, as ``git`` names commits)."""
        ...

    def governance(self) -> GovernanceStore:
        """Where the governed executor keeps its records, beside these runs."""
        ...

    async def close(self) -> None: ...
