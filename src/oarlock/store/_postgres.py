"""A durable store in a PostgreSQL database, shared by many processes on many machines.

``PostgresStore("postgresql://user@host/db")`` keeps runs, their events, the run queue
(leases, workers) and the governed executor's records (see
:mod:`oarlock.store._postgres_governance`) in one database, through psycopg 3 (async) and a
``psycopg_pool`` pool (:mod:`oarlock.store._postgres_base`). Install it with
``pip install 'oarlock[postgres]'``.

Every change is committed before the method returns. ``create`` and ``save`` are one
statement each (the run's row, its events, when it is ready to be claimed, the deadline
of its approvals and the wake-up of the workers together), committed with
``synchronous_commit`` as the server sets it (``on`` by default: flushed to disk, and to a
synchronous standby if there is one), or off when not ``flush``. ``save`` is a
compare-and-swap on the run's version; given a lease, it is fenced too: the run's lease
epoch and owner must be the lease's, in the same statement, else :class:`LeaseLost`. A
drive's last save (the run left at rest) gives the drive's lease back in that statement
(``release=True``, :func:`oarlock.engine._lease.save_releasing`): one commit fewer, and a
release that happens only if the save does.

Durability, as the SQLite store has it: what this store commits with
``synchronous_commit`` on: runs and events, claims of runs (``claim``, ``claim_run``: an
epoch handed out must never be handed out again after a crash), the idempotency claim of a
side-effecting call (durable before the effect starts), reconciliations and checkpoints.
What it commits with ``synchronous_commit`` off (atomic, and durable with the next
synchronous commit, since the WAL is flushed in order; the SQLite store commits the same
records without a flush): a ``read`` or ``sandbox`` claim, the take-over of a stale
claim, a receipt, a refused call, an approval, and a creation or save without ``flush``.
A transaction of several statements sets it with ``SET LOCAL``; a write that is one
statement (a save, a creation, the usual claim and receipt: see
:mod:`oarlock.store._postgres_governance`) with ``set_config('synchronous_commit', 'off',
true)`` before it writes anything, which lasts until its own transaction commits (the
setting in effect at the commit decides, as the PostgreSQL documentation states). The
runner makes a synchronous commit (the run document that records the decision or hands
the result to the model) before anything is acknowledged, so a crash of the server loses
them only together with the run's step. A killed client loses nothing that was committed.

Multi-tenant: runs carry a tenant (``create(..., tenant=)``) and a queue; every table is
keyed or indexed by tenant where its records carry one, and the ledger has one hash
chain per tenant. A query crosses tenants only where it says so: ``list_runs`` without
``tenant``, ``claim`` without ``tenants``, ``leases``, ``workers``, and the governance
listings (``receipts``, ``open_claims``).

The SQL lives in ``sql/postgres_queries.sql`` and ``sql/postgres_governance.sql`` (named
queries) and ``sql/postgres_migrations/`` (the schema, one numbered file per version,
recorded in the table ``oarlock_schema``). A database of a newer schema is refused;
``create=False`` refuses a database without oarlock's tables (commands that only read
never make them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from oarlock.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    LeaseLost,
    NotFound,
    StoreError,
    UsageError,
)
from oarlock.store._json import compact as _compact
from oarlock.store._postgres_base import pg_queries, run_again
from oarlock.store._postgres_queue import PostgresQueue

if TYPE_CHECKING:
    from types import TracebackType

    from psycopg import AsyncConnection

    from oarlock.formats._models import RunDocument
    from oarlock.governance._store import Recorded
    from oarlock.store._base import Event, RunSummary, StoredRun
    from oarlock.store._postgres_governance import PostgresGovernanceStore
    from oarlock.store._queue import Lease

__all__ = ["PostgresStore"]


def _q(name: str) -> str:
    return pg_queries("postgres_queries.sql")[name]


class _RecordsApart(StoreError):
    """The save's statement did not write the records it carried, and wrote nothing."""


def _apart(exc: Exception) -> bool:
    """Whether a save with records failed on them (oarlock_record_all's OA001, a held key's
    unique violation, text a JSON parameter cannot carry), not on the save itself."""
    import psycopg

    return isinstance(exc, psycopg.errors.UniqueViolation | psycopg.DataError) or (
        getattr(exc, "sqlstate", None) == "OA001")  # fmt: skip


_ascii = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(value, separators=(",", ":"))``, its encoder made once (json.dumps makes
one per call when given separators)."""


def _event_columns(run_id: str, events: list[Event]) -> dict[str, Any]:
    """The events as one parameter, serialized before anything is written: ``events``, a
    JSON array of ``[kind, time, data as JSON text]`` (unpacked by the statement with
    ``json_array_elements``), and ``count``, its length. One text parameter costs the
    client one C-encoded ``json.dumps``, where three ``text[]`` arrays were escaped
    element by element. Data holding a lone surrogate is written with JSON escapes
    (PostgreSQL text is UTF-8); a kind or time holding NUL, which PostgreSQL text cannot
    hold, is refused."""
    from oarlock.store._base import event_rows

    rows = []
    for (kind, at, text), event in zip(event_rows(run_id, events), events, strict=True):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _ascii(event.data)  # noqa: PLW2901
        if "\x00" in kind or "\x00" in at:
            raise StoreError(
                f"event of run {run_id}: PostgreSQL text cannot hold NUL (0x00)",
                code="store_refused",
            )
        rows.append((kind, at, text))
    return {"count": len(rows), "events": _compact(rows)}


def _columns(document: RunDocument) -> dict[str, Any]:
    from oarlock.formats._codec import dump_run_json
    from oarlock.store._leases import approval_due

    return {
        "approval_due": approval_due(document),
        "id": document.id,
        "agent": document.agent,
        "status": document.status,
        "turns": document.turns,
        "tags": _ascii(document.tags or {}),
        "created_at": document.created_at,
        "updated_at": document.updated_at,
        "document": dump_run_json(document),
    }


def _document(run_id: str, raw: object) -> RunDocument:
    """The stored document, or IntegrityError: never a document we cannot trust."""
    from oarlock.formats._codec import parse_json
    from oarlock.formats._models import RunDocument

    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if not isinstance(raw, bytes | str):
        raise IntegrityError(f"run {run_id}: stored document is not JSON text")
    try:
        document = parse_json(RunDocument, raw)
    except FormatError as exc:
        raise IntegrityError(f"run {run_id}: stored document is corrupt: {exc}") from None
    if document.id != run_id:
        raise IntegrityError(f"run {run_id}: stored document has id {document.id}")
    return document


def _event_data(run_id: str, text: object) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise IntegrityError(f"run {run_id}: stored event data is not a JSON object")
    return value


def _text(run_id: str, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise IntegrityError(f"run {run_id}: stored {what} is not text")
    return value


def _summary(row: dict[str, Any]) -> RunSummary:
    from oarlock.store._base import RunSummary

    run_id = _text("?", row["id"], "id")
    tags = row["tags"]
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise IntegrityError(f"run {run_id}: stored tags are not an object of strings")
    turns, until = row["turns"], row["lease_until"]
    if type(turns) is not int:
        raise IntegrityError(f"run {run_id}: stored turns is not a number")
    return RunSummary(
        id=run_id,
        agent=_text(run_id, row["agent"], "agent"),
        status=_text(run_id, row["status"], "status"),
        tags=tags,
        turns=turns,
        created_at=_text(run_id, row["created_at"], "created_at"),
        updated_at=_text(run_id, row["updated_at"], "updated_at"),
        tenant=_text(run_id, row["tenant"], "tenant"),
        holder=row["holder"] if isinstance(row["holder"], str) else None,
        lease_until=float(until) if isinstance(until, int | float) else None,
    )


class PostgresStore(PostgresQueue):
    """A :class:`~oarlock.store.RunStore` and :class:`~oarlock.store._queue.RunQueue` in
    the PostgreSQL database at ``url`` (``postgresql://`` or ``postgres://``). Its tables
    are made on first use unless ``create=False``, which raises
    :class:`~oarlock.errors.NotFound` (code ``no_database``) for a database without them.
    Nothing connects until the first call."""

    # a drive's last save gives its lease back in the same statement (save(release=True))
    saves_releasing = True
    saves_records = True  # its save writes the records of a step's calls (``records=``)

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__(
            url,
            create=create,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )
        self._governance: PostgresGovernanceStore | None = None

    async def open(self) -> Self:
        """Connect and check the schema now (refusing a newer one, making or migrating
        as the store may), rather than on first use."""
        await self._pool()
        return self

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
        run_id = document.id
        params = {
            **_columns(document),
            **_event_columns(run_id, events),
            "agent_ref": agent_ref,
            "tenant": tenant,
            "queue": queue,
            "lazy": not flush,
        }

        async def write(conn: AsyncConnection[Any]) -> int:
            import psycopg

            if run_again():  # this creation's first try may have committed
                cur = await conn.execute(_q("saved_state"), {"id": run_id})
                if (row := await cur.fetchone()) is not None and (
                    row[0] == 1 and bytes(row[1]) == params["document"]):  # fmt: skip
                    return 1
            try:
                await conn.execute(_q("create_run"), params)
            except psycopg.errors.UniqueViolation:
                raise ConflictError(f"run {run_id} already exists") from None
            return 1

        # one statement, which commits itself (with synchronous_commit off unless flush)
        doing = f"creating run {run_id}"
        try:
            return await self.run(doing, write, transaction=False)
        except StoreError as exc:
            if exc.code != "commit_unknown":
                raise
        # the connection was lost while the creation committed: read the run back
        if await self._saved(run_id, 1, params["document"]):
            return 1
        return await self.run(doing, write, transaction=False)

    async def load(self, run_id: str) -> StoredRun:
        from oarlock.store._base import StoredRun

        rows = await self.fetch(f"loading run {run_id}", _q("load_run"), {"id": run_id})
        if not rows:
            raise NotFound(f"no run {run_id}")
        row = rows[0]
        version, agent_ref = row["version"], row["agent_ref"]
        if type(version) is not int or not (agent_ref is None or isinstance(agent_ref, str)):
            raise IntegrityError(f"run {run_id}: stored version or agent_ref is corrupt")
        return StoredRun(_document(run_id, row["document"]), version, agent_ref)

    async def save(
        self,
        document: RunDocument,
        expected_version: int,
        events: list[Event],
        *,
        lease: Lease | None = None,
        flush: bool = True,
        release: bool = False,
        records: Sequence[Recorded] = (),
    ) -> int:
        """As :meth:`RunStore.save <oarlock.store.RunStore.save>`; with ``release``, the
        ``lease`` is also given back in the same statement (fenced as the save is, in its
        commit: a drive's last save, see :func:`oarlock.engine._lease.save_releasing`).

        ``records``: the records of the step's calls that ran before they were claimed
        (:class:`~oarlock.governance.Recorded`), written by the same statement, only if
        the run is saved. When that statement cannot write them (a key held, text whose
        entry hash is made in Python), it rolls back whole; then one transaction writes
        them as ``record`` writes them (a held key refuses the save: ConflictError, code
        ``claim_held``), and saves the run."""
        run_id = document.id
        if lease is not None and lease.run_id != run_id:
            raise LeaseLost(f"the lease given is on run {lease.run_id}, not on run {run_id}")
        if release and lease is None:
            raise UsageError("a save that releases a lease needs the lease", code="usage")
        params = {
            **_columns(document),
            **_event_columns(run_id, events),
            "expected_version": expected_version,
            "epoch": None if lease is None else lease.epoch,
            "owner": None if lease is None else lease.owner,
            "lazy": not flush,
            "release": release,
            "records": None,
            "results": None,
        }
        if records:
            from oarlock.store._postgres_governance import records_params

            try:
                return await self._save(run_id, expected_version, lease, params | (
                    records_params(records)))  # fmt: skip
            except _RecordsApart:
                return await self._save(run_id, expected_version, lease, params, records)
        return await self._save(run_id, expected_version, lease, params)

    async def _save(
        self,
        run_id: str,
        expected_version: int,
        lease: Lease | None,
        params: dict[str, Any],
        records: Sequence[Recorded] = (),
    ) -> int:
        """The save, one statement; with ``records``, a transaction that writes them
        first (see :meth:`save`)."""
        async def write(conn: AsyncConnection[Any]) -> int:
            import psycopg

            if records:
                await self.governance().write_records(conn, records)
            try:
                cur = await conn.execute(_q("save_run"), params)
            except psycopg.DatabaseError as exc:
                if params["records"] is None or not _apart(exc):
                    raise
                raise _RecordsApart(f"run {run_id}: its calls' records are written apart") from None
            if await cur.fetchone() is None:
                await self._refuse_save(conn, run_id, expected_version, lease, params["document"])
            return expected_version + 1

        doing, apart = f"saving run {run_id}", bool(records)
        sync = not params["lazy"]
        try:  # one statement, which commits itself (synchronous_commit off unless flush)
            return await self.run(doing, write, transaction=apart, sync=sync)
        except StoreError as exc:
            if exc.code != "commit_unknown":
                raise
        # the connection was lost while the save committed: read the run back
        if await self._saved(run_id, expected_version + 1, params["document"]):
            return expected_version + 1
        # not stored: run it again (the version and the fence are checked again)
        return await self.run(doing, write, transaction=apart, sync=sync)

    async def _saved(self, run_id: str, version: int, document: bytes) -> bool:
        """Whether the run is stored at ``version`` with exactly ``document``: a save
        whose commit's outcome was unknown committed."""
        rows = await self.fetch(
            f"reading run {run_id} back", _q("saved_state"), {"id": run_id}
        )
        return bool(rows) and rows[0]["version"] == version and (
            bytes(rows[0]["document"]) == document)

    @staticmethod
    async def _refuse_save(
        conn: AsyncConnection[Any],
        run_id: str,
        expected: int,
        lease: Lease | None,
        document: bytes,
    ) -> None:
        """Refuse a save the compare-and-swap did not take, saying why; unless it runs
        again after the server ended its connection as it committed (:func:`run_again`)
        and the run is at the version after ``expected`` with this very ``document``:
        its first try committed, and it stands."""
        row = await (
            await conn.execute(_q("run_state"), {"id": run_id, "document": document})
        ).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id}")
        version, epoch, owner, ours = row
        if ours and version == expected + 1 and run_again():
            return
        if lease is not None and (epoch, owner) != (lease.epoch, lease.owner):
            from oarlock.store._leases import lease_lost

            raise lease_lost(lease, int(epoch))
        raise ConflictError(f"run {run_id} changed: stored version {version}, expected {expected}")

    async def events(self, run_id: str) -> list[Event]:
        from oarlock.store._base import Event

        rows = await self.fetch(
            f"reading events of run {run_id}", _q("list_events"), {"id": run_id}
        )
        if not rows:
            raise NotFound(f"no run {run_id}")
        out = []
        for row in rows:
            if row["seq"] is None:
                continue
            if type(row["seq"]) is not int:
                raise IntegrityError(f"run {run_id}: stored event seq is not a number")
            out.append(
                Event(
                    _text(run_id, row["kind"], "event kind"),
                    _text(run_id, row["at"], "event time"),
                    _event_data(run_id, row["data"]),
                    row["seq"],
                )
            )
        return out

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        params = {
            "status": status,
            "tenant": tenant,
            "tags": _compact(tags) if tags else None,
            "limit": max(limit, 0),
        }
        rows = await self.fetch("listing runs", _q("list_runs"), params)
        return [_summary(row) for row in rows]

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        params = {"prefix": prefix, "limit": max(limit, 0)}
        rows = await self.fetch(
            "finding runs by the start of their id", _q("ids_starting"), params
        )
        return [row["id"] for row in rows]

    def governance(self) -> PostgresGovernanceStore:
        """The governed executor's records, in this database."""
        from oarlock.store._postgres_governance import PostgresGovernanceStore

        if self._governance is None:
            self._governance = PostgresGovernanceStore(self)
        return self._governance

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
