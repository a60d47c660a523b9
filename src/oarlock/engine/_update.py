"""Changing a stored run outside a drive: read, change and save, again on a conflict
(``update_run``), and the cancellation of a live run from any process (``cancel_run``).
The runner's decisions, failures and cancellations go through them too."""

from __future__ import annotations

from collections.abc import Callable

from oarlock.engine import _core as core
from oarlock.errors import ConflictError, LeaseLost
from oarlock.formats._models import RunDocument
from oarlock.formats._time import now_rfc3339
from oarlock.store._base import Event, RunStore, StoredRun
from oarlock.store._queue import Lease

__all__ = ["EventHook", "cancel_run", "update_run"]

EventHook = Callable[[RunDocument, list[Event]], None]


async def update_run(
    store: RunStore,
    run_id: str,
    apply: Callable[[RunDocument], list[Event]],
    *,
    on_commit: EventHook | None = None,
    loaded: StoredRun | None = None,
    lease: Lease | None = None,
) -> RunDocument:
    """Read, change and save a run; when another writer got there first, read it again and
    apply the change to what it wrote (which may now refuse it). Nothing is lost.
    ``loaded``, a copy the caller has just read and not changed, saves the first read;
    ``lease``, the lease of the caller's drive, fences the save (LeaseLost)."""
    for _ in range(8):
        stored = loaded if loaded is not None else await store.load(run_id)
        loaded = None
        doc = stored.document
        doc.format = "oar/0.2"
        events = apply(doc)
        if not events:  # nothing changed: nothing to write
            return doc
        try:
            await store.save(doc, stored.version, events, lease=lease)
        except LeaseLost:
            raise
        except ConflictError:
            continue
        if on_commit is not None:
            on_commit(doc, events)
        return doc
    raise ConflictError(f"run {run_id} kept changing; try again", code="busy")


async def cancel_run(
    store: RunStore,
    run_id: str,
    reason: str | None = None,
    *,
    clock: Callable[[], str] = now_rfc3339,
    on_commit: EventHook | None = None,
) -> RunDocument:
    """Cancel a live run from any process; a runner driving it stops at its next look."""
    return await update_run(
        store, run_id, lambda d: core.cancel(d, clock(), reason), on_commit=on_commit
    )
