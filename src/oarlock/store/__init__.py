"""Where runs live: the store protocol and its implementations.

Names load on first use, so that a command that only reads a run (``oarlock runs show``)
loads only what it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

if TYPE_CHECKING:
    from oarlock.store._base import EVENT_KINDS, Event, RunStore, RunSummary, StoredRun
    from oarlock.store._memory import MemoryStore
    from oarlock.store._postgres import PostgresStore
    from oarlock.store._sqlite import SQLiteStore, default_db_path

__all__ = [
    "EVENT_KINDS",
    "Event",
    "MemoryStore",
    "PostgresStore",
    "RunStore",
    "RunSummary",
    "SQLiteStore",
    "StoredRun",
    "default_db_path",
]

_WHERE = {
    "EVENT_KINDS": "_base",
    "Event": "_base",
    "RunStore": "_base",
    "RunSummary": "_base",
    "StoredRun": "_base",
    "MemoryStore": "_memory",
    "PostgresStore": "_postgres",
    "SQLiteStore": "_sqlite",
    "default_db_path": "_sqlite",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())
