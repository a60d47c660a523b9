"""Fakes for tests, shipped for users: the scripted and function models, the in-memory
stores, and store wrappers that validate every run document, invocation and receipt before
it is written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from oarlock.errors import DocumentInvalid
from oarlock.formats._codec import dump, dump_run_json
from oarlock.formats._models import RunDocument
from oarlock.formats._report import Kind
from oarlock.formats._validate import validate
from oarlock.governance._ledger import Checkpoint, LedgerEntry
from oarlock.governance._records import Approval, Claim, Reconciliation, StoredReceipt
from oarlock.governance._store import (
    ClaimHeld,
    GovernanceStore,
    MemoryGovernanceStore,
    Recorded,
)
from oarlock.models._function import FunctionModel
from oarlock.models._scripted import ScriptedModel
from oarlock.store._base import Event, RunStore, RunSummary, StoredRun
from oarlock.store._memory import MemoryStore
from oarlock.store._queue import Lease, RunQueue, WorkerInfo

__all__ = [
    "FunctionModel",
    "MemoryGovernanceStore",
    "MemoryStore",
    "ScriptedModel",
    "ValidatingGovernanceStore",
    "ValidatingQueueStore",
    "ValidatingStore",
]


class ValidatingStore:
    """Wraps a store and refuses to write a document that fails ``oarlock validate``
    (schema and semantic rules): a test that runs through it proves every step valid. It is
    a run queue (its queue methods pass through) exactly when ``inner`` is one."""

    def __new__(cls, inner: RunStore) -> ValidatingStore:
        if cls is ValidatingStore and isinstance(inner, RunQueue):
            return super().__new__(ValidatingQueueStore)
        return super().__new__(cls)

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner
        self.writes = 0
        self._governance: ValidatingGovernanceStore | None = None

    @property
    def saves_records(self) -> bool:
        """Whether ``save`` takes ``records=`` (the inner store's does): they are validated
        as the governance wrapper validates them, then passed on."""
        return getattr(self.inner, "saves_records", False) is True

    def _check(self, document: RunDocument) -> None:
        whole = dump(document)
        report = validate(whole, "run")
        if not report.valid:
            raise DocumentInvalid(report)
        if json.loads(dump_run_json(document)) != whole:
            raise AssertionError(
                f"run {document.id}: a message was changed after it was committed (the "
                "stores write each message's JSON once; see formats._codec.dump_run_json)"
            )
        self.writes += 1

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
        self._check(document)
        return await self.inner.create(
            document, events, agent_ref=agent_ref, tenant=tenant, queue=queue, flush=flush
        )

    async def load(self, run_id: str) -> StoredRun:
        return await self.inner.load(run_id)

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
        self._check(document)
        if not records:
            return await self.inner.save(
                document, expected_version, events, lease=lease, flush=flush
            )
        governance = self.governance()
        for r in records:
            governance._check(r.invocation, "invocation")
            governance._check(r.receipt, "receipt")
        saving: Any = self.inner.save  # a store that saves_records
        return int(await saving(
            document, expected_version, events, lease=lease, flush=flush, records=records
        ))  # fmt: skip

    async def events(self, run_id: str) -> list[Event]:
        return await self.inner.events(run_id)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        tags: dict[str, str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[RunSummary]:
        return await self.inner.list_runs(status=status, tags=tags, limit=limit, tenant=tenant)

    async def ids_starting(self, prefix: str, *, limit: int = 10) -> list[str]:
        return await self.inner.ids_starting(prefix, limit=limit)

    def governance(self) -> ValidatingGovernanceStore:
        if self._governance is None:
            self._governance = ValidatingGovernanceStore(self.inner.governance())
        return self._governance

    async def close(self) -> None:
        await self.inner.close()


class ValidatingQueueStore(ValidatingStore):
    """A :class:`ValidatingStore` of a run queue: the queue's methods pass through."""

    @property
    def queue(self) -> RunQueue:
        assert isinstance(self.inner, RunQueue)
        return self.inner

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_seconds: float,
        tenants: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Lease]:
        return await self.queue.claim(
            owner, limit=limit, lease_seconds=lease_seconds, tenants=tenants, queues=queues
        )

    async def claim_run(self, run_id: str, owner: str, *, lease_seconds: float) -> Lease:
        return await self.queue.claim_run(run_id, owner, lease_seconds=lease_seconds)

    async def renew(self, lease: Lease, lease_seconds: float) -> Lease:
        return await self.queue.renew(lease, lease_seconds)

    async def release(self, lease: Lease) -> None:
        await self.queue.release(lease)

    async def heartbeat(self, worker: WorkerInfo) -> None:
        await self.queue.heartbeat(worker)

    async def workers(self, *, within_seconds: float) -> list[WorkerInfo]:
        return await self.queue.workers(within_seconds=within_seconds)

    async def leases(self) -> list[Lease]:
        return await self.queue.leases()

    async def wait_for_work(self, timeout: float) -> None:
        await self.queue.wait_for_work(timeout)


class ValidatingGovernanceStore:
    """Wraps a governance store and refuses to write an invocation or receipt that fails
    ``oarlock validate`` (schema and rules); reads pass through. The executor builds its
    records valid by construction; a test that runs it through this wrapper proves it."""

    def __init__(self, inner: GovernanceStore) -> None:
        self.inner = inner
        self.checked = 0

    def _check(self, record: dict[str, Any], kind: Kind) -> None:
        report = validate(record, kind)
        if not report.valid:
            raise DocumentInvalid(report)
        self.checked += 1

    async def record_approval(self, approval: Approval) -> None:
        await self.inner.record_approval(approval)

    async def approval_for(self, run_id: str, tool_call_id: str) -> tuple[Approval, str | None]:
        return await self.inner.approval_for(run_id, tool_call_id)

    async def begin(
        self,
        invocation: dict[str, Any],
        claim: Claim,
        *,
        approval_id: str | None,
        grant: Approval | None,
        at: str,
        fence: Lease | None = None,
    ) -> ClaimHeld | None:
        self._check(invocation, "invocation")
        return await self.inner.begin(
            invocation, claim, approval_id=approval_id, grant=grant, at=at, fence=fence
        )

    async def take_over(
        self,
        stale: Claim,
        claim: Claim,
        invocation: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> bool:
        self._check(invocation, "invocation")
        return await self.inner.take_over(stale, claim, invocation, at, fence=fence)

    async def finish(
        self,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> None:
        self._check(receipt, "receipt")
        await self.inner.finish(receipt, result=result, at=at, fence=fence)

    async def refuse(
        self,
        invocation: dict[str, Any],
        receipt: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> None:
        self._check(invocation, "invocation")
        self._check(receipt, "receipt")
        await self.inner.refuse(invocation, receipt, at, fence=fence)

    async def record(
        self,
        invocation: dict[str, Any],
        claim: Claim,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> ClaimHeld | None:
        self._check(invocation, "invocation")
        self._check(receipt, "receipt")
        return await self.inner.record(
            invocation, claim, receipt, result=result, at=at, fence=fence
        )

    async def claim_of(self, tenant_id: str, tool_id: str, key: str) -> ClaimHeld | None:
        return await self.inner.claim_of(tenant_id, tool_id, key)

    async def load(self, invocation_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        return await self.inner.load(invocation_id)

    async def reconcile(self, reconciliation: Reconciliation) -> None:
        await self.inner.reconcile(reconciliation)

    async def reconciliations(self, invocation_id: str) -> list[Reconciliation]:
        return await self.inner.reconciliations(invocation_id)

    async def receipts(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[StoredReceipt]:
        return await self.inner.receipts(run_id=run_id, status=status, limit=limit)

    async def open_claims(self) -> list[Claim]:
        return await self.inner.open_claims()

    async def artifact(self, ref: str) -> bytes:
        return await self.inner.artifact(ref)

    async def ledger(self, chain: str | None = None) -> list[LedgerEntry]:
        return await self.inner.ledger(chain)

    async def approval_ledger(self, run_id: str, tool_call_id: str) -> list[LedgerEntry]:
        return await self.inner.approval_ledger(run_id, tool_call_id)

    async def chains(self) -> list[str]:
        return await self.inner.chains()

    async def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self.inner.add_checkpoint(checkpoint)

    async def checkpoints(self) -> list[Checkpoint]:
        return await self.inner.checkpoints()
