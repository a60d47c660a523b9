"""Live updates: what changed in each tenant's inbox, told to its event streams and its
webhook.

One watcher per app looks at every tenant's pending approvals every ``interval`` seconds
(through :meth:`Service.pending`, the same read as the API's list; runs change in any
process, so the database is what is watched) and turns the differences into events:
``approval_requested`` (a new pending approval), ``approval_decided`` (one that left the
pending list, with its decision) and ``run_status`` (the status of a run that had one).
Each event gets an id ``BOOT-N`` (the watcher's start and a counter); the latest
``history`` events of each tenant are kept, so that a stream that comes back with
``Last-Event-ID`` gets what it missed. An id of another boot, or one older than the
history, gets a ``snapshot`` (every pending approval) instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oarlock.errors import OarlockError
from oarlock.server._tokens import Principal

if TYPE_CHECKING:
    from oarlock.server._service import Service

__all__ = ["Hub", "HubEvent"]

log = logging.getLogger("oarlock.server")


@dataclass(frozen=True, slots=True)
class HubEvent:
    id: str
    kind: str
    data: dict[str, Any]


@dataclass
class _Tenant:
    pending: dict[tuple[str, str], dict[str, Any]] | None = None  # None: not looked yet
    history: deque[HubEvent] = field(default_factory=lambda: deque(maxlen=1000))
    listeners: set[asyncio.Queue[HubEvent | None]] = field(default_factory=set)


class Hub:
    """The watcher and the fan-out to streams and webhooks (``on_event``)."""

    def __init__(
        self,
        service: Service,
        tenants: set[str],
        *,
        interval: float = 1.0,
        on_event: Callable[[str, HubEvent], None] | None = None,
    ) -> None:
        self.service, self.interval, self.on_event = service, interval, on_event
        self.boot = str(int(time.time() * 1000))
        self._count = 0
        self._tenants = {t: _Tenant() for t in tenants}
        self._task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.closing = False  # set when the server begins to shut down (a signal)
        self.ping = 15.0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        self.closed.set()
        for tenant in self._tenants.values():
            for queue in tenant.listeners:
                queue.put_nowait(None)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while not self.closed.is_set():
            for name in list(self._tenants):
                try:
                    await self.look(name)
                except OarlockError as exc:
                    log.warning("watching tenant %s: %s", name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), self.interval)

    async def look(self, tenant: str) -> None:
        """Compare the tenant's pending approvals with the last look; tell what changed."""
        state = self._tenants.setdefault(tenant, _Tenant())
        who = Principal("hub", tenant, "viewer", "")
        now = {
            (a["runId"], a["toolCallId"]): a for a in await self.service.pending(who, limit=100_000)
        }
        before, state.pending = state.pending, now
        if before is None:
            return
        for key, item in now.items():
            if key not in before:
                self._emit(tenant, "approval_requested", item)
        for key in before.keys() - now.keys():
            await self._gone(tenant, who, *key)

    async def _gone(self, tenant: str, who: Principal, run_id: str, call_id: str) -> None:
        try:
            _, _, item = await self.service.approval(who, run_id, call_id)
        except OarlockError:
            return  # the run is gone
        self._emit(tenant, "approval_decided", item)
        self._emit(tenant, "run_status", {"runId": run_id, "status": item["runStatus"]})

    def _emit(self, tenant: str, kind: str, data: dict[str, Any]) -> None:
        self._count += 1
        event = HubEvent(f"{self.boot}-{self._count}", kind, data)
        state = self._tenants[tenant]
        state.history.append(event)
        for queue in state.listeners:
            queue.put_nowait(event)
        if self.on_event is not None:
            self.on_event(tenant, event)

    def _missed(self, tenant: str, last: str | None) -> list[HubEvent] | None:
        """The events after ``last`` still in the history; None when they cannot all be
        told (no id, another boot's, or older than the history)."""
        if not last:
            return None
        boot, _, n = last.partition("-")
        if boot != self.boot or not (n.isascii() and n.isdigit()):  # not "²": int() refuses it
            return None
        history = self._tenants[tenant].history
        number = int(n)
        if history and int(history[0].id.partition("-")[2]) > number + 1:
            return None
        return [e for e in history if int(e.id.partition("-")[2]) > number]

    async def subscribe(
        self, principal: Principal, last_event_id: str | None
    ) -> AsyncIterator[HubEvent | None]:
        """The tenant's events from ``last_event_id`` on (or a snapshot first), until
        the hub stops or the server begins to shut down; None every ``ping`` seconds
        without one (a keep-alive)."""
        tenant = self._tenants.setdefault(principal.tenant, _Tenant())
        queue: asyncio.Queue[HubEvent | None] = asyncio.Queue()
        tenant.listeners.add(queue)
        try:
            missed = self._missed(principal.tenant, last_event_id)
            if missed is None:
                pending = await self.service.pending(principal, limit=100_000)
                last = tenant.history[-1].id if tenant.history else f"{self.boot}-0"
                yield HubEvent(last, "snapshot", {"approvals": pending})
            else:
                for event in missed:
                    yield event
            quiet = 0.0
            while not (self.closed.is_set() or self.closing):
                try:
                    news = await asyncio.wait_for(queue.get(), 0.25)
                except TimeoutError:
                    quiet += 0.25
                    if quiet >= self.ping:
                        quiet = 0.0
                        yield None
                    continue
                quiet = 0.0
                if news is None:
                    return
                yield news
        finally:
            tenant.listeners.discard(queue)
