"""Where runs live: the store protocol and its implementations."""

from oarlock.store._base import EVENT_KINDS, Event, RunStore, RunSummary, StoredRun
from oarlock.store._memory import MemoryStore
from oarlock.store._sqlite import SQLiteStore, default_db_path

__all__ = [
    "EVENT_KINDS",
    "Event",
    "MemoryStore",
    "RunStore",
    "RunSummary",
    "SQLiteStore",
    "StoredRun",
    "default_db_path",
]
