"""Fakes for tests, shipped for users: the scripted model, the in-memory store, and a store
wrapper that validates every document before it is written."""

from __future__ import annotations

from oarlock.errors import DocumentInvalid
from oarlock.formats._codec import dump
from oarlock.formats._models import RunDocument
from oarlock.formats._validate import validate
from oarlock.governance._store import GovernanceStore, MemoryGovernanceStore
from oarlock.models._scripted import ScriptedModel
from oarlock.store._base import Event, RunStore, RunSummary, StoredRun
from oarlock.store._memory import MemoryStore

__all__ = ["MemoryGovernanceStore", "MemoryStore", "ScriptedModel", "ValidatingStore"]


class ValidatingStore:
    """Wraps a store and refuses to write a document that fails ``oarlock validate``
    (schema and semantic rules): a test that runs through it proves every step valid."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner
        self.writes = 0

    def _check(self, document: RunDocument) -> None:
        report = validate(dump(document), "run")
        if not report.valid:
            raise DocumentInvalid(report)
        self.writes += 1

    async def create(
        self, document: RunDocument, events: list[Event], *, agent_ref: str | None = None
    ) -> int:
        self._check(document)
        return await self.inner.create(document, events, agent_ref=agent_ref)

    async def load(self, run_id: str) -> StoredRun:
        return await self.inner.load(run_id)

    async def save(self, document: RunDocument, expected_version: int, events: list[Event]) -> int:
        self._check(document)
        return await self.inner.save(document, expected_version, events)

    async def events(self, run_id: str) -> list[Event]:
        return await self.inner.events(run_id)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        return await self.inner.list_runs(status=status, tags=tags, limit=limit)

    def governance(self) -> GovernanceStore:
        return self.inner.governance()

    async def close(self) -> None:
        await self.inner.close()
