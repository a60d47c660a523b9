"""What the PostgreSQL stores share: the URL, connections, transactions and the schema.

Connections come from a ``psycopg_pool.AsyncConnectionPool`` of autocommit connections.
A pool belongs to the event loop that opened it, and is closed with it: beside the pool
runs a task that closes it when it is cancelled, as ``asyncio.run`` cancels every task
when its coroutine ends (or when :meth:`close` cancels it). A store used from a later
event loop (a second ``asyncio.run``) opens a pool there, so that a store outlives the
loops that use it, as the SQLite store does. It is used from one event loop at a time.

A write is one statement (committed alone) or one transaction; either way the method
returns after the commit. A connection the server ended (``pg_terminate_backend``, a
restart) is found when it is next used: a transaction that fails before its ``COMMIT``
was sent changed nothing and is run again on a new connection, once the pool has dropped
its dead connections (``pool.check()``, which tests every idle one at once), up to five
tries: a connection that another task was using when every one was ended comes back to
the pool dead a moment later, and may be the one handed out next. (The pool does not test
a connection as it hands it out: its own loop for that waits 1, 2, 4, 8 ... s after each
dead one, so that ten connections ended at once would keep a caller waiting half a
minute.) So is a single statement refused because its connection was already ended (SQLSTATE class
57P), and an idempotent one (a read, a lease's renewal or release, a heartbeat) whatever
the moment it failed. A failure while another commit was under way leaves its outcome
unknown: ``StoreError`` with code ``commit_unknown``, never acknowledged.

The URL's password never reaches output: it is registered as a secret
(:func:`oarlock._secrets.register_url`) when the store is made, and :func:`display_url`
is the form every message uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from oarlock._secrets import redact, register_url
from oarlock.errors import NotFound, StoreError, UsageError
from oarlock.store._dburl import POSTGRES_SCHEMES, is_postgres_url

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "POSTGRES_SCHEMES",
    "SLOW",
    "Slow",
    "PgBase",
    "display_url",
    "is_postgres_url",
    "pg_queries",
    "pg_schema_version",
    "run_again",
]

T = TypeVar("T")
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")
_SQL = Path(__file__).with_name("sql")
# SQLSTATE 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now: the
# server ended the connection before it ran anything sent on it
_ENDED = frozenset({"57P01", "57P02", "57P03"})
_RETRIES = 5
_AGAIN: ContextVar[bool] = ContextVar("oarlock_pg_again", default=False)


class Slow:
    """What a fast write returns when it wrote nothing and the work must run (:data:`SLOW`)."""

    def __repr__(self) -> str:
        return "SLOW"


SLOW = Slow()


def run_again() -> bool:
    """Whether the work under way runs again after the server ended its connection as it
    committed: the error came in the commit's place, and the first try may have committed
    all the same. A write that then finds its own record (its invocation's claim or
    receipt) lets it stand rather than refusing a duplicate."""
    return _AGAIN.get()


def display_url(url: str) -> str:
    """``url`` as messages show it: its password (and any secret query parameter)
    replaced by ``[redacted]``."""
    register_url(url)
    return redact(url)


@cache
def pg_queries(filename: str) -> Mapping[str, str]:
    """The named queries of one file in ``sql/``, read once."""
    text = (_SQL / filename).read_text("utf-8")
    parts = _NAME.split(text)
    queries = {name: sql.strip() for name, sql in zip(parts[1::2], parts[2::2], strict=True)}
    if len(queries) != len(parts) // 2:
        raise StoreError(f"{filename} names a query twice", code="schema_invalid")
    return queries


@cache
def _migrations() -> tuple[tuple[int, str], ...]:
    folder = _SQL / "postgres_migrations"
    found = sorted(
        (int(m.group(1)), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if (m := _MIGRATION.match(entry.name))
    )
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise StoreError("postgres migrations are not numbered 1, 2, ...", code="schema_invalid")
    return tuple(found)


def pg_schema_version() -> int:
    """The newest PostgreSQL schema version this code knows."""
    return len(_migrations())


def _q(name: str) -> str:
    return pg_queries("postgres_queries.sql")[name]


def _import_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StoreError(
            "a postgresql:// database needs psycopg and psycopg_pool: "
            "pip install 'oarlock[postgres]'",
            code="postgres_missing",
        ) from None


@dataclass
class _Here:
    """The pool of one event loop, and every connection it made (to close them should
    the loop go away without closing the pool)."""

    loop: asyncio.AbstractEventLoop
    pool: AsyncConnectionPool[AsyncConnection[Any]]
    made: weakref.WeakSet[AsyncConnection[Any]] = field(default_factory=weakref.WeakSet)
    listener: AsyncConnection[Any] | None = None
    guard: asyncio.Task[None] | None = None

    async def watch(self) -> None:
        """Wait until cancelled (by ``asyncio.run`` ending, or by ``close``), then close
        the listener and the pool, in this loop."""
        try:
            await asyncio.Future()
        except asyncio.CancelledError:
            await self.shut()
            raise

    async def shut(self) -> None:
        """Close the listener and the pool (once; a second call does nothing)."""
        if self.listener is not None:
            with contextlib.suppress(Exception):
                await self.listener.close()
        await self.pool.close(timeout=2.0)

    def abandon(self) -> None:
        """Close every connection of a loop that is gone, without it (``finish`` closes
        the socket; there is no loop left to run the pool's ``close``)."""
        connections = list(self.made)
        if self.listener is not None:
            connections.append(self.listener)
        for conn in connections:
            if not conn.closed:
                conn.pgconn.finish()


class PgBase:
    """A PostgreSQL database at ``url``: its pool, transactions and schema."""

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
        if not is_postgres_url(url):
            raise UsageError(
                f"{display_url(str(url))} is not a postgresql:// or postgres:// URL",
                code="usage",
            )
        if not (1 <= min_size <= max_size):
            raise UsageError("a pool needs 1 <= min_size <= max_size", code="usage")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise UsageError(f"{name} must be a number of seconds above 0", code="usage")
        register_url(url)
        _import_psycopg()
        self.url = url
        self.display = display_url(url)
        self._create = create
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._here: _Here | None = None
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._schema_ready = False
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display!r})"

    # -- connections ----------------------------------------------------------------------
    def _conninfo_kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,
            "connect_timeout": max(1, math.ceil(self._connect_timeout)),
            "application_name": "oarlock",
        }

    async def connect(self) -> AsyncConnection[Any]:
        """A new connection of its own (autocommit), outside the pool."""
        import psycopg

        try:
            return await psycopg.AsyncConnection.connect(self.url, **self._conninfo_kwargs())
        except psycopg.Error as exc:
            raise self._unavailable(exc, "connecting") from None

    def _unavailable(self, exc: BaseException, doing: str) -> StoreError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(
            f"cannot reach PostgreSQL at {self.display} while {doing}: {redact(reason)}",
            code="store_unavailable",
        )

    async def _pool(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        if self._closed:
            raise StoreError(f"the store at {self.display} is closed", code="store_closed")
        loop = asyncio.get_running_loop()
        here = self._here
        if here is not None and here.loop is loop:
            return here.pool
        if here is not None:
            if here.loop.is_running():
                raise StoreError(
                    "a PostgreSQL store is used from one event loop at a time",
                    code="store_busy",
                )
            here.abandon()
            self._here = None
        opening = self._opening
        if opening is not None and opening[0] is loop:  # another task of this loop opens it
            try:
                await asyncio.shield(opening[1])
            except asyncio.CancelledError:
                if not opening[1].cancelled():
                    raise  # this task was cancelled, not the opening
            return await self._pool()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieved)
        self._opening = (loop, done)
        try:
            pool = await self._open_pool(loop)
        except asyncio.CancelledError:
            done.cancel()  # the next task to ask opens it
            raise
        except BaseException as exc:
            done.set_exception(exc)
            raise
        finally:
            self._opening = None
        done.set_result(None)
        return pool

    async def _open_pool(
        self, loop: asyncio.AbstractEventLoop
    ) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """The pool of ``loop``, opened once however many of its tasks ask at once."""
        if not self._schema_ready:
            await self._prepare_schema()
        from psycopg_pool import AsyncConnectionPool, PoolTimeout

        made: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()

        async def configure(conn: AsyncConnection[Any]) -> None:
            made.add(conn)

        min_size, max_size = self._sizes
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            self.url,
            kwargs=self._conninfo_kwargs(),
            min_size=min_size,
            max_size=max_size,
            open=False,
            configure=configure,
            timeout=self._timeout,
            name="oarlock",
        )
        # wait for the first connections: a request that found the pool empty would start
        # one more in the background, whose connect a loop that ends at once would cut off
        # halfway (a socket then left open until the garbage collector finds it)
        try:
            await pool.open(wait=True, timeout=self._timeout)
        except PoolTimeout as exc:
            await pool.close(timeout=0)
            raise self._unavailable(exc, "opening a pool of connections") from None
        here = _Here(loop, pool, made)
        here.guard = loop.create_task(here.watch(), name="oarlock-pool-guard")
        self._here = here
        return pool

    async def run(
        self,
        doing: str,
        work: Callable[[AsyncConnection[Any]], Awaitable[T]],
        *,
        transaction: bool = True,
        sync: bool = True,
        idempotent: bool = False,
        fast: Callable[[AsyncConnection[Any]], Awaitable[T | Slow]] | None = None,
    ) -> T:
        """``work`` on a pooled connection: inside ``BEGIN`` ... ``COMMIT`` when
        ``transaction`` (with ``synchronous_commit = off`` unless ``sync``), else as
        autocommit statements (one write at most, or ``idempotent``: reads, or a write
        that, run again after it committed, changes nothing more).

        Given ``fast``, that runs first on the connection: one autocommit statement that
        does the usual case of the work in one round trip (committed as it ends, which
        makes it the moment of the commit), or writes nothing and returns :data:`SLOW`,
        and then ``work`` runs as above, in the same attempt.

        A failure of the connection before anything could have been committed (or of
        idempotent work, whenever) is retried on a new connection; OarlockErrors that
        ``work`` raises (a refusal) roll back and pass through; any other failure of the
        database is a StoreError. A failure that the server reported in a commit's place
        (it ended the connection) is taken for no commit, and the work run again knows it
        (:func:`run_again`): should the commit have gone through, the work finds its own
        records."""
        pool = await self._pool()
        again = _AGAIN.set(False)
        try:
            return await self._attempts(
                pool,
                doing,
                work,
                transaction=transaction,
                sync=sync,
                idempotent=idempotent,
                fast=fast,
            )
        finally:
            _AGAIN.reset(again)

    async def _attempts(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        doing: str,
        work: Callable[[AsyncConnection[Any]], Awaitable[T]],
        *,
        transaction: bool,
        sync: bool,
        idempotent: bool,
        fast: Callable[[AsyncConnection[Any]], Awaitable[T | Slow]] | None,
    ) -> T:
        import psycopg
        from psycopg_pool import PoolTimeout

        for attempt in range(_RETRIES):
            committing = not transaction and not idempotent  # one statement is its commit
            try:
                # getconn and putconn, not the pool's connection(): its context manager and
                # the connection's (a commit or rollback that has nothing to do here: a
                # transaction is committed or rolled back below, and the pool rolls back
                # or drops a connection that comes back otherwise) cost a statement twice
                # the pool's own work
                conn = await pool.getconn()
                try:
                    if fast is not None:
                        committing = True
                        done = await fast(conn)
                        if not isinstance(done, Slow):
                            return done
                        committing = not transaction and not idempotent  # nothing written
                    if not transaction:
                        return await work(conn)
                    await conn.execute(
                        "BEGIN" if sync else "BEGIN; SET LOCAL synchronous_commit TO off"
                    )
                    try:
                        result = await work(conn)
                    except BaseException:
                        await self._rollback(conn)
                        raise
                    committing = True
                    await conn.execute("COMMIT")
                    return result
                finally:
                    await pool.putconn(conn)
            except PoolTimeout as exc:
                raise self._unavailable(exc, doing) from None
            except psycopg.OperationalError as exc:
                state = getattr(exc, "sqlstate", None)
                lost = state is None or state.startswith("08") or state in _ENDED
                if lost and committing and state not in _ENDED:
                    raise StoreError(
                        f"the connection to PostgreSQL at {self.display} was lost while "
                        f"committing ({doing}): the change may or may not be stored",
                        code="commit_unknown",
                    ) from None
                if attempt + 1 < _RETRIES:  # nothing was committed: run it again
                    if committing:  # ... as far as the server said: it ended the connection
                        _AGAIN.set(True)
                    if lost:
                        await pool.check()  # drop the pool's dead connections
                    continue
                if lost:
                    raise self._unavailable(exc, doing) from None
                raise _db_error(exc, doing) from None
            except psycopg.Error as exc:
                raise _db_error(exc, doing) from None
            except UnicodeError as exc:
                raise StoreError(
                    f"cannot store text that is not valid Unicode while {doing}: {exc}",
                    code="store_refused",
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    async def _rollback(conn: AsyncConnection[Any]) -> None:
        import psycopg

        if conn.closed or conn.broken:
            return
        # a connection that cannot roll back is dropped by the pool
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")

    async def fetch(
        self, doing: str, query: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of one read-only statement, as dicts."""

        async def work(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
            from psycopg.rows import dict_row

            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchall()

        return await self.run(doing, work, transaction=False, idempotent=True)

    async def close(self) -> None:
        """Close the pool (and the listener) of this loop; connections of a loop that is
        gone are closed too."""
        here, self._here = self._here, None
        self._closed = True
        if here is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if here.loop is not running or here.guard is None or here.guard.done():
            here.abandon()
            return
        here.guard.cancel()
        await here.shut()

    # -- schema ---------------------------------------------------------------------------
    async def _prepare_schema(self) -> None:
        """Refuse a newer schema; migrate an older one; make one in a database that has
        none only when ``create``."""
        import psycopg

        conn = await self.connect()
        try:
            found = await self._version(conn)
            if found == pg_schema_version():
                self._schema_ready = True
                return
            if found is None and not self._create:
                raise NotFound(
                    f"no oarlock database at {self.display} (no oarlock tables in it)",
                    code="no_database",
                )
            await self._migrate(conn)
            self._schema_ready = True
        except psycopg.Error as exc:
            raise _db_error(exc, "preparing the schema") from None
        finally:
            await conn.close()

    async def _version(self, conn: AsyncConnection[Any]) -> int | None:
        """The schema version of the database (None without oarlock tables); StoreError
        when it is newer than this code knows."""
        row = await (await conn.execute(_q("schema_exists"))).fetchone()
        if row is None or not row[0]:
            return None
        rows = await (await conn.execute(_q("schema_version"))).fetchall()
        try:
            found = max((int(text) for (text,) in rows), default=0)
        except (TypeError, ValueError):
            raise StoreError(
                f"the schema version recorded at {self.display} is not a number",
                code="schema_invalid",
            ) from None
        if found > pg_schema_version():
            raise StoreError(
                f"database {self.display} has schema version {found}, but this version of "
                f"oarlock knows versions up to {pg_schema_version()}: upgrade oarlock to use it",
                code="schema_too_new",
            )
        return found

    async def _migrate(self, conn: AsyncConnection[Any]) -> None:
        """Apply the migrations the database lacks, in one transaction, one process at a
        time (an advisory lock); another process may have migrated meanwhile."""
        async with conn.transaction():
            await conn.execute(_q("schema_lock"))
            await conn.execute(_q("schema_table"))
            current = await self._version(conn) or 0
            for version, script in _migrations()[current:]:
                await conn.execute(script.encode("utf-8"))
                await self._after_migration(conn, version)
                await conn.execute(_q("schema_record"), {"version": version})

    async def _after_migration(self, conn: AsyncConnection[Any], version: int) -> None:
        """What migrating to ``version`` does beyond its script (in the same transaction),
        where a subclass needs it."""


def _retrieved(done: asyncio.Future[None]) -> None:
    """Mark the outcome of an opening as seen (the task that failed raised it)."""
    if not done.cancelled():
        done.exception()


def _db_error(exc: BaseException, doing: str) -> StoreError:
    text = str(exc).strip().splitlines()
    reason = text[0] if text else type(exc).__name__
    return StoreError(f"postgresql failed while {doing}: {redact(reason)}")
