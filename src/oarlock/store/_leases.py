"""What the stores' run queues share: the refusals of fenced writes and busy runs, the
deadline of a waiting run's approvals, and the wake-ups of ``wait_for_work`` within one
process."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from oarlock.errors import LeaseLost, RunBusy

if TYPE_CHECKING:  # asyncio loads with the first wait: commands that only read skip it
    import asyncio

    from oarlock.formats._models import RunDocument
    from oarlock.store._queue import Lease, RunQueue

_QUEUE_METHODS = (
    "claim",
    "claim_run",
    "renew",
    "release",
    "heartbeat",
    "workers",
    "leases",
    "wait_for_work",
)


def as_queue(store: object) -> RunQueue | None:
    """``store`` when it is a run queue (it has every method of the protocol, as
    ``isinstance(store, RunQueue)`` tells, without that check's cost on every call)."""
    if all(callable(getattr(store, name, None)) for name in _QUEUE_METHODS):
        return cast("RunQueue", store)
    return None

__all__ = [
    "Wakeups",
    "approval_due",
    "as_queue",
    "approval_due_json",
    "lease_lost",
    "process_holder",
    "run_busy",
    "time_text",
]


def time_text(seconds: float) -> str:
    """A time in seconds since the epoch as RFC 3339 UTC, to the millisecond."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def lease_lost(lease: Lease, current: int | None) -> LeaseLost:
    """The refusal of a write fenced by ``lease`` when the run is at epoch ``current``
    (None: there is no such run)."""
    where = "no longer exists" if current is None else f"is at lease epoch {current} now"
    return LeaseLost(
        f"the lease of {lease.owner} on run {lease.run_id} (epoch {lease.epoch}) was lost: "
        f"the run {where}; nothing was written"
    )


def run_busy(run_id: str, owner: str, until: float) -> RunBusy:
    """The refusal of a claim of a run that ``owner`` holds until ``until``."""
    return RunBusy(f"run {run_id} is being driven by {owner} until {time_text(until)}")


def process_holder() -> str:
    """This process as a lease holder when it drives a run itself: ``proc:HOST:PID``."""
    from oarlock.governance._owner import host_name

    return f"proc:{host_name()}:{os.getpid()}"


def _seconds(text: object) -> float | None:
    from oarlock.formats._time import parse_rfc3339

    parsed = parse_rfc3339(text) if isinstance(text, str) else None
    return None if parsed is None else parsed[0].timestamp() + float(parsed[1])


def approval_due(document: RunDocument) -> float | None:
    """The earliest ``expiresAt`` (seconds since the epoch) of the undecided approvals of a
    run waiting for them; None for a run that is not waiting or has no deadline."""
    if document.status != "waiting_approval":
        return None
    found = [
        _seconds((pending.model_extra or {}).get("expiresAt"))
        for pending in document.pending_approvals
        if pending.decision is None
    ]
    return min((due for due in found if due is not None), default=None)


def approval_due_json(document: dict[str, Any]) -> float | None:
    """:func:`approval_due` of a run document as JSON (camelCase members)."""
    if document.get("status") != "waiting_approval":
        return None
    found = [
        _seconds(pending.get("expiresAt"))
        for pending in document.get("pendingApprovals") or ()
        if isinstance(pending, dict) and pending.get("decision") is None
    ]
    return min((due for due in found if due is not None), default=None)


class Wakeups:
    """The ``wait_for_work`` calls waiting in this process, on any thread's event loop;
    :meth:`wake` (called when a write made a run runnable) ends their wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def wake(self) -> None:
        with self._lock:
            waiting = list(self._waiting)
        for loop, event in waiting:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def waiter(self) -> Iterator[asyncio.Event]:
        """An event set by the next :meth:`wake`, registered while the block runs."""
        import asyncio

        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiting.add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._waiting.discard(entry)
