"""The run queue of the PostgreSQL store (the protocol is :mod:`oarlock.store._queue`).

A claim is one statement: ``UPDATE runs ... FROM (the runs chosen, each lane's candidates
locked FOR UPDATE SKIP LOCKED) RETURNING ...``, so two claimers never take one run and
neither waits for the other. Each claim increments the run's lease epoch.

Fairness, round-robin across tenants, as the protocol states it and the other stores keep
it: each running run is ready from when it became runnable (created or saved running,
released) or from the deadline of the lease that holds it (``ready_at``, see the migration
0002); a tenant was last served at the latest claim of any of its runs (``claimed_at``).
A claim walks the index of ready runs lane by lane (a queue and a tenant), reads at most
``limit`` of each lane's oldest runnable runs, and serves the tenants in turn: the one
served longest ago (never first) gives its oldest run, then the next, round again. That
tells how many runs each lane gives; those are then locked, each lane's oldest first,
skipping rows another claimer has locked, so that claimers at once take the next runs of
each lane, and none locks a row it does not take.

Leases, heartbeats and the runnable test use the database's clock, so that workers on
machines whose clocks differ agree on when a lease ends.

Wake-ups: the statement that makes a run runnable (a create or save that makes it
running, a release of a running run, a save that gives back the lease of a running run)
sends ``NOTIFY oarlock_work`` with the tenant as payload, delivered when it commits.
:meth:`wait_for_work` listens on a connection of its own; a listener made anew (the
first wait, or after its connection was lost) looks once whether some run is runnable
already and returns at once if so, so that a run made runnable while it connected, by
this process or another, is not missed until the next poll.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oarlock.errors import NotFound, RunBusy, StoreError, UsageError
from oarlock.store._leases import lease_lost, run_busy
from oarlock.store._postgres_base import PgBase, pg_queries
from oarlock.store._queue import Lease, WorkerInfo

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresQueue"]

_CHANNEL = "oarlock_work"


def _q(name: str) -> str:
    return pg_queries("postgres_queries.sql")[name]


def _seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{what} must be a number of seconds", code="usage")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{what} must be a finite number of seconds above 0", code="usage")
    return float(value)


def _names(values: Sequence[str] | None, what: str) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise UsageError(f"{what} must be a list of names", code="usage")
    return list(values)


def _lease(row: dict[str, Any]) -> Lease:
    return Lease(
        run_id=row["id"],
        owner=row["lease_owner"],
        epoch=int(row["lease_epoch"]),
        until=float(row["lease_until"]),
        tenant=row["tenant"],
        queue=row["queue"],
        agent_ref=row["agent_ref"],
    )


class PostgresQueue(PgBase):
    """Leases on runnable runs, in the PostgreSQL store."""

    async def _rows(
        self, doing: str, name: str, params: dict[str, Any], *, idempotent: bool = False
    ) -> list[dict[str, Any]]:
        """The rows of one writing statement, committed alone (run again on a new
        connection if the connection fails, even mid-commit, when ``idempotent``)."""

        async def work(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
            from psycopg.rows import dict_row

            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(_q(name), params)
            return await cur.fetchall() if cur.description else []

        return await self.run(doing, work, transaction=False, idempotent=idempotent)

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        tenants: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Lease]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise UsageError("limit must be a whole number of runs, 0 or more", code="usage")
        params = {
            "owner": owner,
            "limit": limit,
            "seconds": _seconds(lease_seconds, "lease_seconds"),
            "tenants": _names(tenants, "tenants"),
            "queues": _names(queues, "queues"),
        }
        if limit == 0:
            return []
        rows = await self._rows("claiming runs", "claim_runs", params)
        rows.sort(key=lambda r: (int(r["turn"]), int(r["first"])))
        return [_lease(row) for row in rows]

    async def claim_run(self, run_id: str, owner: str, *, lease_seconds: float) -> Lease:
        params = {
            "id": run_id,
            "owner": owner,
            "seconds": _seconds(lease_seconds, "lease_seconds"),
        }
        for _ in range(3):  # the holder may let go between the two statements
            rows = await self._rows(f"claiming run {run_id}", "claim_run", params)
            if rows:
                return _lease(rows[0])
            held = await self.fetch(f"reading run {run_id}", _q("holder"), {"id": run_id})
            if not held:
                raise NotFound(f"no run {run_id}")
            holder, until = held[0]["lease_owner"], held[0]["lease_until"]
            if holder is not None and isinstance(until, int | float):
                raise run_busy(run_id, str(holder), float(until))
        raise RunBusy(f"run {run_id} is being driven by another process")

    async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        params = {
            "id": lease.run_id,
            "epoch": lease.epoch,
            "owner": lease.owner,
            "seconds": _seconds(lease_seconds, "lease_seconds"),
        }
        rows = await self._rows(  # run again, it renews again: idempotent
            f"renewing the lease on run {lease.run_id}", "renew", params, idempotent=True)
        if not rows:
            held = await self.fetch(
                f"reading run {lease.run_id}", _q("holder"), {"id": lease.run_id})
            raise lease_lost(lease, int(held[0]["lease_epoch"]) if held else None)
        from dataclasses import replace

        return replace(lease, until=float(rows[0]["lease_until"]))

    async def release(self, lease: Lease) -> None:
        params = {"id": lease.run_id, "epoch": lease.epoch, "owner": lease.owner}
        await self._rows(  # run again, it finds the lease gone: idempotent
            f"releasing run {lease.run_id}", "release", params, idempotent=True)

    async def heartbeat(self, worker: WorkerInfo) -> None:
        """Recorded on the database's clock, minus the age of ``worker.heartbeat_at`` on
        this machine's clock (none for a beat of now; a stopping worker's beat of 1970
        leaves it listed as gone)."""
        from oarlock.formats._time import parse_rfc3339

        parsed = parse_rfc3339(worker.heartbeat_at)
        if parsed is None:
            raise UsageError(
                f"heartbeat time {worker.heartbeat_at!r} is not an RFC 3339 date-time",
                code="usage",
            )
        age = max(0.0, time.time() - (parsed[0].timestamp() + float(parsed[1])))
        params = {
            "age": age,
            "owner": worker.owner,
            "host": worker.host,
            "pid": worker.pid,
            "started_at": worker.started_at,
            "concurrency": worker.concurrency,
        }
        await self._rows(
            f"recording the heartbeat of {worker.owner}", "heartbeat", params, idempotent=True)

    async def workers(self, *, within_seconds: float) -> list[WorkerInfo]:
        within = _seconds(within_seconds, "within_seconds")
        rows = await self.fetch("listing workers", _q("workers"), {"within": within})
        return [
            WorkerInfo(
                owner=row["owner"],
                host=row["host"],
                pid=int(row["pid"]),
                started_at=row["started_at"],
                heartbeat_at=row["heartbeat_at"],
                concurrency=int(row["concurrency"]),
                held=tuple(row["held"] or ()),
            )
            for row in rows
        ]

    async def leases(self) -> list[Lease]:
        return [_lease(row) for row in await self.fetch("listing leases", _q("leases"))]

    async def wait_for_work(self, timeout: float) -> None:
        import psycopg

        timeout = max(0.0, float(timeout)) if math.isfinite(timeout) else 0.0
        await self._pool()  # the schema is checked, and this loop's state exists
        here = self._here
        assert here is not None
        if here.listener is None or here.listener.closed:
            listener: AsyncConnection[Any] | None = None
            try:
                listener = await self.connect()
                await listener.execute(f"LISTEN {_CHANNEL}")
                found = await (await listener.execute(_q("runnable"))).fetchone()
            except (psycopg.Error, OSError, StoreError):
                if listener is not None:
                    await listener.close()
                await asyncio.sleep(timeout)  # the server is away: poll, do not spin
                return
            here.listener = listener
            if found is not None:  # made runnable before this looked (perhaps after LISTEN:
                # its notification is in, and would wake the next wait for nothing)
                async for _ in listener.notifies(timeout=0):
                    pass
                return
        try:
            async for _ in here.listener.notifies(timeout=timeout, stop_after=1):
                break
        except psycopg.Error:
            await here.listener.close()
            here.listener = None  # a new listener next time; work may have appeared

    # -- the approval sweep (oarlock.store._queue.Sweeping) -----------------------------
    async def lead(self, role: str, owner: str, *, ttl_seconds: float) -> bool:
        """On the database's clock, as the leases."""
        ttl = _seconds(ttl_seconds, "ttl_seconds")
        params = {"role": role, "owner": owner, "ttl": ttl, "margin": ttl / 10}
        rows = await self._rows(f"leading {role}", "lead", params)
        return bool(rows)

    async def lapsed_approvals(self, *, now: float, limit: int) -> list[str]:
        params = {"now": float(now), "limit": max(int(limit), 0)}
        rows = await self.fetch("finding lapsed approvals", _q("lapsed_approvals"), params)
        return [row["id"] for row in rows]

    async def _after_migration(self, conn: AsyncConnection[Any], version: int) -> None:
        """Version 2: the waiting runs' approval deadlines, read from their documents (a
        document that is not a JSON object gets none)."""
        if version != 2:
            return
        import json

        from oarlock.store._leases import approval_due_json

        rows = await (await conn.execute(_q("waiting_runs"))).fetchall()
        for run_id, raw in rows:
            try:
                document = json.loads(bytes(raw))
            except ValueError:
                continue
            due = approval_due_json(document) if isinstance(document, dict) else None
            if due is not None:
                await conn.execute(_q("set_approval_due"), {"id": run_id, "due": due})
