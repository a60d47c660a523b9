"""A durable store in one SQLite file.

Each method runs sqlite3 synchronously on the event loop: the work itself takes about
0.1 ms, and the flush ``synchronous=FULL`` forces took from about 0.25 ms to 4 ms on the
development machine's virtual disk, during which the loop waits. As no method awaits
inside a transaction, coroutines sharing a store cannot interleave their transactions.
Every change is committed (WAL, ``synchronous=FULL``) before the method returns. Writes
take the write lock up front (``BEGIN IMMEDIATE``), so concurrent writers in other
processes wait (``busy_timeout``) instead of failing, and ``save`` is a compare-and-swap on
the run's version. ``create`` and ``save`` calls made in the same turn of the event loop
share one transaction and one flush (``_group_commit``): each returns once it is committed.

The store is a run queue too (``_sqlite_queue``): its lease operations (claims, renewals,
releases), workers' heartbeats and leader rows commit without waiting for the disk
(``synchronous=NORMAL``, unless a save shares their transaction): a lease lost in a power
cut only expires, and the run is claimed again; nothing was done under a claim the disk
lost, since its holder's first fenced save is flushed and a side-effecting call's claim is
flushed before the tool starts. A fenced ``save`` (``lease=``) is the same statement with
the lease's epoch and owner in its condition. A turn's save (the run goes on running, its
status and creation time as stored) assigns neither, so that SQLite rewrites no index
entry; when they changed, the save assigns them (``save_run_fenced``). Every save first
leaves the run's tags as stored (a condition, not an assignment), so that its statement
holds no copy of the trigger that rewrites ``run_tags``, which a fresh connection compiles
into each statement that assigns tags (60 us of the first decision and turn saves of a
resumed run); a save whose tags changed assigns them.

The document of a run at rest (any status but ``running``) is stored compressed: a zlib
stream (RFC 1950, whose Adler-32 makes a damaged stream fail to decompress rather than
yield other bytes). Every tool result repeats the same fence and every message the same
members: the 4.5 KB document of a 10-turn run takes 0.8 KB, the 41 KB of a 100-turn run
3.5 KB. A stored document is compressed when it is a BLOB that does not start with ``{``;
anything else is JSON (running runs, and the documents written before schema version 3).
zlib is imported on first use.

A running run is saved twice a turn, so a running document of 8 KB of JSON or more
(``_sqlite_rows.SPLIT_FROM``; a smaller one is written whole, which costs less than rows
of its own) is stored in two parts (schema version 7 on): ``runs.document`` holds it
without its messages, JSON, and the table
``messages`` holds the JSON of each message, numbered from 0, with their count in
``runs.message_rows``. A save appends the messages the run gained since the save before,
as far as this store object knows them: the bytes of each message it wrote or loaded (the
document's own cache of them, which gives the very bytes object again for a message that
did not change; a load gives the document the rows' bytes) and the version they were
stored at; when it does not know (another process saved, a message was replaced, a save
failed), it writes every row again. A document saved whole is remembered too (its version,
the column's bytes and its messages' JSON, for the last ``_WHOLES_KEPT`` runs whose
messages take less than ``SPLIT_FROM`` bytes, so that what is kept stays bounded): a load that
finds that version and those very bytes gives the document's cache the messages' JSON, so
the next save serializes only what the run gained (a resume after its decision: 20 messages
of a 10-turn run, 70 us). Before,
the whole document was written at every save: past about 4 KB it spills into overflow
pages that SQLite frees and allocates again at each save, with the free list's page and
the file's header; a save of a 120-message run wrote 27 pages, and writes 5 now, as one of
a 30-message run does (10 before). A 100-turn run of the compare workload took 15% less
time a turn (alternating processes). A run at rest is stored whole (compressed) and its
rows deleted, as every row written before version 7 is whole (``message_rows`` NULL). A
load reads the run and its rows in one statement (one snapshot) and refuses rows that are
missing or out of order (IntegrityError).

An event's data of 512 bytes of JSON or more is stored compressed (schema version 6 on),
as a large ledger body is: a BLOB of a format byte (2) and a raw DEFLATE stream made with
a preset dictionary of the members of events (``_EVENT_DICTIONARY``; see ``_packing``).
Each event is a row of its own, written in the save that makes it, so each is compressed
alone: the dictionary gives it the member names it cannot find in itself. The events of a
turn (200 to 300 bytes each) stay JSON text: packing them took 2.6 KB off a 10-turn run's
5.5 KB, but each compression sets up a DEFLATE stream with its dictionary, and the turn
on SQLite took 16% more CPU time (alternating rounds in one process). Events written
before, and smaller ones, are JSON text; a BLOB that starts with ``{`` is JSON too, and any
other BLOB must be whole and of a known format, else reading the run's events raises
IntegrityError.

The database file is created readable and writable by its owner only (0600; SQLite gives its
``-wal``, ``-shm`` and journal files the same mode), and every folder made for it is 0700.
An existing file or folder keeps its mode. ``create=False`` opens only a database that
exists (for commands that only read, so that a mistyped path is reported, not created).

The SQL lives in ``sql/sqlite_queries.sql`` (named queries) and ``sql/sqlite_migrations/``
(the schema, one numbered file per version, recorded in ``PRAGMA user_version``).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import cache
from operator import is_
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from oarlock.errors import ConflictError, FormatError, IntegrityError, NotFound, StoreError
from oarlock.formats._runcheck import conforming_run
from oarlock.store._group_commit import GroupCommit
from oarlock.store._json import compact as _compact
from oarlock.store._leases import Wakeups
from oarlock.store._sqlite_queue import SQLiteQueue
from oarlock.store._sqlite_rows import (  # the columns' stored forms (the tests use some)
    SPLIT_FROM,
    Parts,
    _columns,
    _event_data,
    _event_rows,
    _stored_json,
    _stored_parts,
    _summary,
    _unpack,
)

if TYPE_CHECKING:  # pydantic and the store's dataclasses load on first use, not on import:
    # the read-only CLI commands (read_document, read_events, read_runs) need neither
    from oarlock.formats._models import RunDocument
    from oarlock.governance._store import Recorded
    from oarlock.store._base import Event, RunSummary, StoredRun
    from oarlock.store._queue import Lease
    from oarlock.store._sqlite_governance import SQLiteGovernanceStore

__all__ = ["SQLiteStore", "default_db_path", "named_queries", "schema_version"]

_MESSAGES_KEPT = 65_536  # runs whose stored messages a store remembers, at most
_WHOLES_KEPT = 1_024  # runs whose document saved whole a store remembers, at most
T = TypeVar("T")

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")
_BUSY_TIMEOUT = 5.0  # seconds: the connection's busy_timeout, set by sqlite3.connect
# Beside this module, as the package data ships (read directly: importlib.resources would
# cost the read-only commands some 4 ms of imports at start).
_SQL = Path(__file__).with_name("sql")


def default_db_path() -> Path:
    """``$OARLOCK_DB``, else ``$XDG_DATA_HOME/oarlock/oarlock.db``, else
    ``~/.local/share/oarlock/oarlock.db``."""
    if explicit := os.environ.get("OARLOCK_DB"):
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "oarlock" / "oarlock.db"


@cache
def named_queries(filename: str = "sqlite_queries.sql") -> Mapping[str, str]:
    """The named queries of one file in ``sql/``, read once."""
    text = (_SQL / filename).read_text("utf-8")
    parts = _NAME.split(text)  # [preamble, name1, sql1, name2, sql2, ...]
    queries = {name: sql.strip() for name, sql in zip(parts[1::2], parts[2::2], strict=True)}
    if len(queries) != len(parts) // 2:
        raise StoreError(f"{filename} names a query twice", code="schema_invalid")
    return queries


@cache
def _migrations() -> tuple[tuple[int, str], ...]:
    """``(version, sql)`` for every migration file, in order; versions are 1, 2, ..."""
    folder = _SQL / "sqlite_migrations"
    found = sorted(
        (int(m.group(1)), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if (m := _MIGRATION.match(entry.name))
    )
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise StoreError("sqlite migrations are not numbered 1, 2, ...", code="schema_invalid")
    return tuple(found)


def schema_version() -> int:
    """The newest schema version this code knows."""
    return len(_migrations())


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration script (``executescript`` would commit)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer
            buffer = ""
    if buffer.strip():
        yield buffer


def _made_folder(folder: Path) -> None:
    """Make ``folder`` and its missing parents, each 0700 whatever the umask; an existing
    folder is left as it is. StoreError when a parent is a file or cannot be written."""
    missing: list[Path] = []
    here = folder
    while not here.exists():
        if here.is_symlink():  # a dangling link: mkdir would fail on it as on a file
            break
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    if here.exists() and not here.is_dir():
        raise StoreError(
            f"cannot create the database in {folder}: {here} is a file, not a folder",
            code="db_path_invalid",
        )
    for part in reversed(missing):
        try:
            os.mkdir(part, 0o700)
        except FileExistsError:
            if not part.is_dir():
                raise StoreError(
                    f"cannot create the database in {folder}: {part} is not a folder",
                    code="db_path_invalid",
                ) from None
            continue
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder {part} for the database: "
                f"{exc.strerror or type(exc).__name__}",
                code="db_unwritable",
            ) from None
        os.chmod(part, 0o700)


def _made_file(path: Path) -> None:
    """Create the database file, empty and 0600, unless it exists (then it keeps its
    mode). SQLite takes an empty file for a new database."""
    _made_folder(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(
            f"cannot create the database {path}: {exc.strerror or type(exc).__name__}",
            code="db_unwritable",
        ) from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
    finally:
        os.close(fd)


def _connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """A connection to ``path``; with ``create=False`` SQLite itself refuses to create the
    file (``mode=rw``), so a database removed after the check is not made again."""
    if str(path) == ":memory:":
        return sqlite3.connect(":memory:", timeout=_BUSY_TIMEOUT, isolation_level=None)
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a database file", code="db_path_invalid")
    if create:
        _made_file(path)
        return sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None)
    if not path.exists():
        raise NotFound(f"no database at {path}", code="no_database")
    from urllib.parse import quote

    uri = "file:" + quote(os.fsencode(path.absolute())) + "?mode=rw"
    return sqlite3.connect(uri, timeout=_BUSY_TIMEOUT, uri=True, isolation_level=None)


def _keep(kept: dict[str, T], most: int, run_id: str, value: T) -> None:
    """Remember ``value`` for ``run_id`` in ``kept``, which holds ``most`` runs at most:
    past that it forgets them all (what a store remembers of the runs it wrote or loaded,
    see the module: one it no longer knows is written or serialized whole again)."""
    if len(kept) >= most:
        kept.clear()
    kept[run_id] = value


def _store_error(exc: sqlite3.Error, doing: str) -> StoreError:
    busy = getattr(exc, "sqlite_errorname", "") in {"SQLITE_BUSY", "SQLITE_LOCKED"}
    return StoreError(f"sqlite failed while {doing}: {exc}", code="store_busy" if busy else None)




def _write_messages(
    conn: sqlite3.Connection, run_id: str, parts: Parts | None, stored: tuple[int, int] | None
) -> int | None:
    """The run's message rows after a save (inside its transaction), and the run's number:
    ``stored``, the run's number and how many of ``parts`` it has as rows already, the rest
    appended; when that is not known (None), every row anew; none at all for a document
    stored whole (``parts`` None)."""
    q = named_queries()
    if parts is None:
        conn.execute(q["drop_run_messages"], {"id": run_id})
        return None
    if stored is None:
        (num,) = conn.execute(q["run_num"], {"id": run_id}).fetchone()
        conn.execute(q["drop_messages"], {"num": num})
        start = 0
    else:
        num, start = stored
    if start == len(parts) - 1:  # the usual save: one message more
        conn.execute(q["append_message"], {"num": num, "idx": start, "data": parts[start]})
    elif start < len(parts):
        conn.executemany(
            q["append_message"],
            [{"num": num, "idx": i, "data": parts[i]} for i in range(start, len(parts))],
        )
    return int(num)


def _backfill_due(conn: sqlite3.Connection) -> None:
    """Give the waiting runs of a file migrated to version 4 their ``approval_due``."""
    from oarlock.store._leases import approval_due_json

    rows = conn.execute("SELECT num, document FROM runs WHERE status = 'waiting_approval'")
    for num, stored in rows.fetchall():
        try:
            raw = _unpack(str(num), stored)
            document = json.loads(raw) if isinstance(raw, str | bytes) else None
        except (IntegrityError, TypeError, ValueError):
            continue  # a corrupt document is reported when it is read
        due = approval_due_json(document) if isinstance(document, dict) else None
        if due is not None:
            conn.execute("UPDATE runs SET approval_due = ? WHERE num = ?", (due, num))


class _Transaction:
    """A write transaction of :class:`SQLiteStore` (see ``SQLiteStore._transaction``): a
    plain context manager, as every write of the store enters one (a generator-based one
    costs a generator and its frames each time)."""

    __slots__ = ("_conn", "_doing", "_flush", "_store")

    def __init__(
        self, store: SQLiteStore, conn: sqlite3.Connection, doing: str, flush: bool
    ) -> None:
        self._store, self._conn, self._doing, self._flush = store, conn, doing, flush

    def __enter__(self) -> None:
        store, conn = self._store, self._conn
        try:
            if self._flush != store._flushing:
                conn.execute("PRAGMA synchronous = FULL" if self._flush else _NORMAL)
                store._flushing = self._flush
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            SQLiteStore._rollback(conn)
            raise _store_error(exc, self._doing) from exc

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        if exc is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as failed:
                SQLiteStore._rollback(conn)
                raise _store_error(failed, self._doing) from failed
            return
        SQLiteStore._rollback(conn)
        if isinstance(exc, sqlite3.Error):
            raise _store_error(exc, self._doing) from exc


_NORMAL = "PRAGMA synchronous = NORMAL"


class SQLiteStore(SQLiteQueue):
    """A :class:`~oarlock.store.RunStore` in the SQLite database at ``path``, created
    (0600, in folders made 0700) unless ``create=False``, which raises
    :class:`~oarlock.errors.NotFound` (code ``no_database``) when there is none."""

    saves_records = True  # its save writes the records of a step's calls (``records=``)

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._governance: SQLiteGovernanceStore | None = None
        self._messages: dict[str, tuple[int, int, Parts]] = {}  # see _stored_messages
        self._wholes: dict[str, tuple[int, bytes, Parts]] = {}  # see _whole_as_saved
        self._flushing: bool | None = None  # synchronous FULL, NORMAL, unset (_transaction)
        self._group = GroupCommit(self)
        self._wakeups = Wakeups()
        try:
            conn = _connect(self.path, create=create)
        except sqlite3.Error as exc:
            raise _store_error(exc, f"opening {self.path}") from exc
        except OSError as exc:  # a name too long, a folder that cannot be read
            raise StoreError(
                f"cannot open the database {self.path}: {exc.strerror or type(exc).__name__}",
                code="db_unusable",
            ) from None
        try:
            self._open(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _open(self, conn: sqlite3.Connection) -> None:
        conn.row_factory = sqlite3.Row
        try:
            found = self._refuse_newer(conn)  # before any PRAGMA that writes to the file
            self._wal(conn)
            self._migrate(conn, found)
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise _store_error(exc, f"opening {self.path}") from exc

    @staticmethod
    def _wal(conn: sqlite3.Connection) -> None:
        """Switch to WAL. The switch needs the file to itself, and SQLite does not wait
        for that (no busy handler): retry while another connection writes."""
        deadline = time.monotonic() + _BUSY_TIMEOUT
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorname", "") in {"SQLITE_BUSY", "SQLITE_LOCKED"}
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _refuse_newer(self, conn: sqlite3.Connection) -> int:
        found: int = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > schema_version():
            raise StoreError(
                f"database {self.path} has schema version {found}, but this version of "
                f"oarlock knows versions up to {schema_version()}: upgrade oarlock to use it",
                code="schema_too_new",
            )
        return found

    def _migrate(self, conn: sqlite3.Connection, found: int) -> None:
        """Apply the migrations the file lacks, in one transaction, with foreign keys off
        (the switch works only outside a transaction): a migration may rebuild a table
        (create the new one, copy, drop the old, rename), and dropping a parent table with
        foreign keys on would delete its children's rows. A rebuild keeps every key by
        construction; the keys are not checked as a whole, so that a file whose ledger lost
        rows (which ``oarlock audit verify`` reports) still opens. ``found`` is the file's
        version as read when it was opened."""
        if found == schema_version():
            return
        conn.execute("PRAGMA foreign_keys = OFF")
        with self._transaction(conn, "migrating the schema"):
            current = self._refuse_newer(conn)  # another process may have migrated
            empty = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
            for version, script in _migrations()[current:]:
                for statement in _statements(script):
                    conn.execute(statement)
                if version == 4:
                    _backfill_due(conn)
                conn.execute(f"PRAGMA user_version = {version:d}")
        if empty:  # a new file: give back the pages of the tables that 0003 rebuilt
            conn.execute("VACUUM")

    def db(self) -> sqlite3.Connection:
        """The open connection (StoreError once closed)."""
        return self._db()

    def transaction(self, doing: str, *, flush: bool = True) -> AbstractContextManager[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on the open connection."""
        return self._transaction(self._db(), doing, flush=flush)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the store at {self.path} is closed", code="store_closed")
        return self._conn

    def _transaction(
        self, conn: sqlite3.Connection, doing: str, *, flush: bool = True
    ) -> _Transaction:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any error.

        ``flush=False`` commits without waiting for the disk (``synchronous=NORMAL``): the
        commit is atomic and survives the process being killed, and the next flushed
        commit makes it durable too, since the WAL is flushed in order. Only records whose
        loss in a power cut is safe use it (see the governance store). ``synchronous`` is a
        setting of the connection, set by the first transaction and then only when one needs
        the other value (every write of this store is such a transaction). Until then it
        is SQLite's default (FULL; NORMAL in some builds): either flushes the checkpoint a
        connection that only read may run when it closes."""
        return _Transaction(self, conn, doing, flush)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def _query(self, name: str, params: Mapping[str, Any], doing: str) -> list[sqlite3.Row]:
        try:
            return self._db().execute(named_queries()[name], params).fetchall()
        except sqlite3.Error as exc:
            raise _store_error(exc, doing) from exc

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
        run_id, q = document.id, named_queries()
        (columns, _), rows = _columns(document), _event_rows(document.id, events)
        params = {**columns, "agent_ref": agent_ref, "tenant": tenant, "queue": queue}

        def write(conn: sqlite3.Connection) -> int:
            try:
                conn.execute(q["create_run"], {**params, "now": time.time()})
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorname == "SQLITE_CONSTRAINT_UNIQUE":  # runs.id
                    raise ConflictError(f"run {run_id} already exists") from None
                raise
            conn.executemany(q["append_event"], rows)
            return 1

        version = await self._group.submit(write, flush=flush)
        if document.status == "running":
            self._wakeups.wake()
        return version

    async def load(self, run_id: str) -> StoredRun:
        rows = self._query("load_run", {"id": run_id}, f"loading run {run_id}")
        if not rows:
            raise NotFound(f"no run {run_id}")
        _, version, agent_ref, *_ = rows[0]
        from oarlock.store._base import StoredRun

        raw, parts = _stored_parts(run_id, rows)
        document = self._document(run_id, raw)
        if parts is not None:
            self._kept_as_loaded(document, version, rows[0][6], parts)
        elif (whole := self._wholes.get(run_id)) is not None:
            self._whole_as_saved(document, version, rows[0][0], whole)
        return StoredRun(document, version, agent_ref)

    @staticmethod
    def _whole_as_saved(
        document: RunDocument, version: int, stored: object, whole: tuple[int, bytes, Parts]
    ) -> None:
        """A document stored whole that is the very one this store saved (the same version,
        the column's very bytes): give its cache of its messages' JSON the bytes that
        save had, so that its next save serializes only what it gains (a resume after its
        decision in this process, a drive after a save that handed the run back)."""
        if whole[0] == version and whole[1] == stored:
            from oarlock.formats._codec import adopt_run_parts

            adopt_run_parts(document, list(whole[2]))

    def _kept_as_loaded(self, document: RunDocument, version: int, num: int, parts: Parts) -> None:
        """Remember a loaded document's message rows as this store's own, and give the
        document's cache of its messages' JSON those very bytes, so that its next save
        appends what it gains rather than writing every row again (a worker's drive, a
        Temporal activity, each load a run before they save it)."""
        from oarlock.formats._codec import adopt_run_parts

        if adopt_run_parts(document, list(parts)):
            _keep(self._messages, _MESSAGES_KEPT, document.id, (version, num, parts))

    def read_document(self, run_id: str) -> dict[str, Any]:
        """The run's document as stored: JSON, with its camelCase members. For commands that
        only read, synchronously and without pydantic: the document must be JSON that passes
        the run schema (compiled ahead of time) and carry ``run_id``. One that does not is
        parsed as :meth:`load` parses it, so it is refused with the same IntegrityError (or
        shown, if only the quick check refused it). Raises NotFound."""
        rows = self._query("load_run", {"id": run_id}, f"loading run {run_id}")
        if not rows:
            raise NotFound(f"no run {run_id}")
        raw = _stored_json(run_id, rows)
        document = conforming_run(raw) if isinstance(raw, bytes | str) else None
        if document is not None and document["id"] == run_id:
            return document
        from oarlock.formats._codec import dump

        return dump(self._document(run_id, raw))

    @staticmethod
    def _document(run_id: str, raw: object) -> RunDocument:
        """The stored document, or IntegrityError: never a document we cannot trust."""
        from oarlock.formats._codec import parse_json
        from oarlock.formats._models import RunDocument

        if not isinstance(raw, bytes | str):
            raise IntegrityError(f"run {run_id}: stored document is not JSON text")
        try:
            document = parse_json(RunDocument, raw)
        except FormatError as exc:
            raise IntegrityError(f"run {run_id}: stored document is corrupt: {exc}") from None
        if document.id != run_id:
            raise IntegrityError(f"run {run_id}: stored document has id {document.id}")
        return document

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
        of the step's calls that ran before they were claimed, written in the save's own
        transaction (:class:`~oarlock.governance.Recorded`)."""
        run_id, q = document.id, named_queries()
        columns, messages = _columns(document, split=True)
        parts = None if columns["message_rows"] is None else messages  # stored as rows
        rows = _event_rows(run_id, events)
        params = {**columns, "expected_version": expected_version}
        stored = self._stored_messages(run_id, expected_version, parts)
        # each first as the run's tags (and a turn's status and creation time) stored, then
        # assigning them (see the queries)
        if lease is None:  # a decision or another writer: runnable from now, if free
            queries: tuple[str, ...] = (q["save_run_same_tags"], q["save_run"])
        elif document.status == "running":  # a turn
            queries = (q["save_run_fenced_turn"], q["save_run_fenced"])
            params |= {"epoch": lease.epoch, "owner": lease.owner}
        else:
            queries = (q["save_run_fenced_at_rest_same_tags"], q["save_run_fenced_at_rest"])
            params |= {"epoch": lease.epoch, "owner": lease.owner}

        def write(conn: sqlite3.Connection) -> tuple[int, int | None]:
            if lease is None:
                params["now"] = time.time()
            if all(conn.execute(query, params).rowcount != 1 for query in queries):
                self._refuse_save(conn, run_id, expected_version, lease)
            if records:
                self.governance().write_records(conn, records)
            num = _write_messages(conn, run_id, parts, stored) if rewrites else None
            conn.executemany(q["append_event"], rows)
            return expected_version + 1, num

        # until this save is committed, what is stored is not known; a document stored
        # whole while it runs leaves rows only where this store wrote some (another
        # process's are not read while message_rows is NULL; at rest they all go)
        had = self._messages.pop(run_id, None)
        self._wholes.pop(run_id, None)
        rewrites = parts is not None or had is not None or document.status != "running"
        version, num = await self._group.submit(write, flush=flush)
        if parts is not None and num is not None:
            _keep(self._messages, _MESSAGES_KEPT, run_id, (version, num, parts))
        elif parts is None and sum(map(len, messages)) < SPLIT_FROM:
            _keep(self._wholes, _WHOLES_KEPT, run_id, (version, columns["document"], messages))
        if lease is None and document.status == "running":
            self._wakeups.wake()
        return version

    def _stored_messages(
        self, run_id: str, version: int, parts: Parts | None
    ) -> tuple[int, int] | None:
        """The run's number and how many of ``parts`` it has stored as rows at ``version``,
        as this store wrote them (the very bytes objects, which the document's cache gives
        again for the messages it did not change); None when that is not known."""
        if parts is None:
            return None
        kept = self._messages.get(run_id)
        if kept is None or kept[0] != version or len(kept[2]) > len(parts):
            return None
        return (kept[1], len(kept[2])) if all(map(is_, kept[2], parts)) else None

    @staticmethod
    def _refuse_save(
        conn: sqlite3.Connection, run_id: str, expected: int, lease: Lease | None
    ) -> None:
        row = conn.execute(named_queries()["run_version"], {"id": run_id}).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id}")
        version, epoch, owner = row
        if lease is not None and (epoch != lease.epoch or owner != lease.owner):
            from oarlock.store._leases import lease_lost

            raise lease_lost(lease, epoch)
        raise ConflictError(f"run {run_id} changed: stored version {version}, expected {expected}")

    async def events(self, run_id: str) -> list[Event]:
        from oarlock.store._base import Event

        return [Event(e["kind"], e["at"], e["data"], e["seq"]) for e in self.read_events(run_id)]

    def read_events(self, run_id: str) -> list[dict[str, Any]]:
        """:meth:`events`, synchronously and as JSON: each event's ``seq``, ``kind``, ``at``
        and ``data`` (for commands that only read)."""
        rows = self._query("list_events", {"id": run_id}, f"reading events of run {run_id}")
        if not rows:
            raise NotFound(f"no run {run_id}")
        return [
            {
                "seq": row["seq"],
                "kind": row["kind"],
                "at": row["at"],
                "data": _event_data(run_id, row["seq"], row["data"]),
            }
            for row in rows
            if row["seq"] is not None
        ]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        from oarlock.store._base import RunSummary

        runs = self.read_runs(status=status, tags=tags, limit=limit, tenant=tenant)
        return [RunSummary(**r) for r in runs]

    def read_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`list_runs`, synchronously and as JSON: each run's :class:`RunSummary`
        members, in order (for commands that only read)."""
        params: dict[str, Any] = {
            "status": status,
            "limit": max(limit, 0),
            "tenant": tenant,
            "now": time.time(),
        }
        if tags:
            name = "list_runs_by_tags"
            params |= {"tags": _compact(tags), "tag_count": len(tags)}
        else:
            name = "list_runs" if status is None else "list_runs_by_status"
        return [_summary(row) for row in self._query(name, params, "listing runs")]

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        return self.read_ids_starting(prefix, limit=limit)

    def read_ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        """:meth:`ids_starting`, synchronously (for commands that only read): a range of
        the id index, from ``prefix`` to the first string past every one it starts."""
        params = {"low": prefix, "high": prefix + "\U0010ffff", "limit": max(limit, 0)}
        rows = self._query("ids_starting", params, "finding runs by the start of their id")
        return [row["id"] for row in rows]

    def governance(self) -> SQLiteGovernanceStore:
        """The governed executor's records, in this database."""
        from oarlock.store._sqlite_governance import SQLiteGovernanceStore

        if self._governance is None:
            self._governance = SQLiteGovernanceStore(self)
        return self._governance

    async def close(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        """:meth:`close`, synchronously (for commands that only read). Writes waiting for
        their group commit are committed first."""
        if self._conn is not None:
            self._group.flush()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_now()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
