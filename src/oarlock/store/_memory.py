"""An in-memory store, for tests and for users who need no durability."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from oarlock.errors import ConflictError, NotFound
from oarlock.store._base import Event, RunSummary, StoredRun, event_rows

if TYPE_CHECKING:  # pydantic loads on first use, not when oarlock.store is imported
    from oarlock.formats._models import RunDocument
    from oarlock.governance._store import MemoryGovernanceStore

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keeps serialized copies, so that callers can never alias stored state."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[bytes, int, str | None]] = {}
        self._events: dict[str, list[tuple[str, str, str]]] = {}  # (kind, at, JSON data)
        self._governance: MemoryGovernanceStore | None = None

    def governance(self) -> MemoryGovernanceStore:
        """The governance records of these runs, in memory too."""
        if self._governance is None:
            from oarlock.governance._store import MemoryGovernanceStore

            self._governance = MemoryGovernanceStore()
        return self._governance

    async def create(
        self, document: RunDocument, events: list[Event], *, agent_ref: str | None = None
    ) -> int:
        run_id = document.id
        if run_id in self._runs:
            raise ConflictError(f"run {run_id} already exists")
        from oarlock.formats._codec import dump_json

        raw, rows = dump_json(document), event_rows(run_id, events)
        self._runs[run_id] = (raw, 1, agent_ref)
        self._events[run_id] = rows
        return 1

    async def load(self, run_id: str) -> StoredRun:
        try:
            raw, version, agent_ref = self._runs[run_id]
        except KeyError:
            raise NotFound(f"no run {run_id}") from None
        from oarlock.formats._codec import parse_json
        from oarlock.formats._models import RunDocument

        return StoredRun(parse_json(RunDocument, raw), version, agent_ref)

    async def save(self, document: RunDocument, expected_version: int, events: list[Event]) -> int:
        run_id = document.id
        try:
            _, version, agent_ref = self._runs[run_id]
        except KeyError:
            raise NotFound(f"no run {run_id}") from None
        if version != expected_version:
            raise ConflictError(
                f"run {run_id} changed: stored version {version}, expected {expected_version}"
            )
        from oarlock.formats._codec import dump_json

        raw, rows = dump_json(document), event_rows(run_id, events)
        self._runs[run_id] = (raw, version + 1, agent_ref)
        self._events[run_id].extend(rows)
        return version + 1

    async def events(self, run_id: str) -> list[Event]:
        if run_id not in self._events:
            raise NotFound(f"no run {run_id}")
        return [
            Event(kind, at, json.loads(data), seq)
            for seq, (kind, at, data) in enumerate(self._events[run_id], 1)
        ]

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        out = []
        for raw, _, _ in self._runs.values():
            doc = json.loads(raw)
            run_tags = doc.get("tags", {})
            if status is not None and doc["status"] != status:
                continue
            if tags and any(run_tags.get(k) != v for k, v in tags.items()):
                continue
            out.append(
                RunSummary(
                    doc["id"],
                    doc["agent"],
                    doc["status"],
                    run_tags,
                    doc["turns"],
                    doc["createdAt"],
                    doc["updatedAt"],
                )
            )
        out.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return out[:limit]

    async def close(self) -> None:
        return None
