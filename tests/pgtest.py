"""PostgreSQL for the tests: a database of its own for every test that asks for one.

The server is ``$OARLOCK_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
the server CI runs beside the tests). A template database holding oarlock's schema is made
once per test session; each :func:`new_database` is a copy of it (``CREATE DATABASE ...
TEMPLATE``, a few milliseconds), dropped when the test ends (``tests/conftest.py``) and
the template when the session ends. Names carry the process id, so that sessions running
at once never share one, and databases left by a session that was killed are dropped by
the next.

An unreachable server fails the test that needs it, loudly: PostgreSQL tests are never
skipped.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from urllib.parse import urlsplit, urlunsplit

import psycopg

SERVER = os.environ.get("OARLOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_PREFIX = "oarlock_t"
_OURS = re.compile(rf"^{_PREFIX}_(\d+)_\w+$")
_lock = threading.Lock()
_numbers = count(1)
_state: dict[str, str] = {}  # "template": the session's template database
_created: list[str] = []
_lasting: list[str] = []  # dropped when the session ends


class ServerUnreachable(AssertionError):
    """The PostgreSQL server of the tests cannot be reached: a failure, never a skip."""


def url_of(database: str) -> str:
    """The URL of ``database`` on the tests' server."""
    parts = urlsplit(SERVER)
    return urlunsplit(parts._replace(path="/" + database))


@contextmanager
def admin() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A connection to the server's own database, for creating and dropping."""
    try:
        conn = psycopg.connect(SERVER, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise ServerUnreachable(
            f"the PostgreSQL tests need the server at {SERVER} (set OARLOCK_TEST_PG): {exc}"
        ) from None
    try:
        yield conn
    finally:
        conn.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drop(conn: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sweep(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Drop the databases of test sessions that are no longer running."""
    for (name,) in conn.execute("SELECT datname FROM pg_database").fetchall():
        m = _OURS.match(str(name))
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            _drop(conn, str(name))


def template() -> str:
    """The name of this session's template database (made on first use)."""
    with _lock:
        if "template" in _state:
            return _state["template"]
        name = f"{_PREFIX}_{os.getpid()}_template"
        with admin() as conn:
            _sweep(conn)
            _drop(conn, name)
            conn.execute(f'CREATE DATABASE "{name}"')
        import asyncio

        from oarlock.store._postgres import PostgresStore

        async def build() -> None:
            store = PostgresStore(url_of(name))
            await store.open()
            await store.close()

        asyncio.run(build())
        _state["template"] = name
        return name


def new_database(*, lasting: bool = False) -> str:
    """The URL of a new database holding oarlock's schema, dropped after the test (or, if
    ``lasting``, for a fixture of a module or the session, when the session ends)."""
    source = template()
    name = f"{_PREFIX}_{os.getpid()}_{next(_numbers)}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    with _lock:
        (_lasting if lasting else _created).append(name)
    return url_of(name)


def empty_database() -> str:
    """The URL of a new database without oarlock's schema, dropped after the test."""
    name = f"{_PREFIX}_{os.getpid()}_{next(_numbers)}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    with _lock:
        _created.append(name)
    return url_of(name)


def drop_created() -> None:
    """Drop the databases made since the last call (the end of a test)."""
    with _lock:
        names, _created[:] = list(_created), []
    if names:
        with admin() as conn:
            for name in names:
                _drop(conn, name)


def drop_template() -> None:
    """Drop the session's template and its lasting databases."""
    with _lock:
        names, _lasting[:] = list(_lasting), []
        template = _state.pop("template", None)
    if template is not None:
        names.append(template)
    if names:
        with admin() as conn:
            for name in names:
                _drop(conn, name)


def terminate(url: str) -> int:
    """End every connection to the database of ``url`` (``pg_terminate_backend``), as a
    server restart would; how many were ended."""
    database = urlsplit(url).path.lstrip("/")
    with admin() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return sum(1 for (ended,) in rows if ended)
