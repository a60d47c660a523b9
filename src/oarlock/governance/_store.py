"""Where the governed executor keeps its records: claims, invocations, approvals, receipts,
reconciliations, result artifacts and the hash-chained ledger.

Every method that changes state is one transaction, durable when it returns, and appends
what it stores to the ledger in that same transaction, so the ledger and the records can
never disagree after a crash. The writes of a call (``begin``, ``take_over``, ``finish``,
``refuse``) take a ``fence``: the lease of the worker driving the run. With one, the run
``fence.run_id`` (the run document's id) must still have lease epoch ``fence.epoch``,
checked in the same transaction, else :class:`~oarlock.errors.LeaseLost` and nothing is
written. :class:`MemoryGovernanceStore` is the fake shipped for
tests; the SQLite store keeps the same records in the run database.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from oarlock.errors import ConflictError, NotFound
from oarlock.formats._jcs import canonicalize, digest_bytes, forget, loads_jcs, remember
from oarlock.governance._ledger import (
    DEFAULT_CHAIN,
    GENESIS_HASH,
    Checkpoint,
    LedgerEntry,
    entry_hash_canonical,
)
from oarlock.governance._records import (
    Approval,
    Claim,
    Reconciliation,
    StoredReceipt,
    check_supersedes,
)

if TYPE_CHECKING:
    from oarlock.store._queue import Lease

__all__ = [
    "ClaimHeld",
    "GovernanceStore",
    "MemoryGovernanceStore",
    "Recorded",
    "RunEpochs",
    "artifact_ref",
    "claim_held",
]


def artifact_ref(data: bytes) -> str:
    """The content address of a result: ``sha256:<hex>`` of its bytes."""
    return digest_bytes(data)


@dataclass(frozen=True, slots=True)
class ClaimHeld:
    """The key is already claimed: by ``claim``, with ``receipt`` once it has one.
    ``run_epoch`` is the current lease epoch of the claim's run (None when the claim names
    no run or the store has no such run)."""

    claim: Claim
    receipt: dict[str, Any] | None
    run_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """The one write of a call that ran before it was claimed (what :meth:`GovernanceStore.
    record` takes), left to the save of the step that holds its result: a store whose
    ``save`` takes ``records=`` writes them in that save's transaction, after the save's own
    checks, so that the step and its calls' records are stored together or not at all.
    ``receipt_jcs``: the receipt's canonical bytes, as its hash was taken over them."""

    invocation: dict[str, Any]
    claim: Claim
    receipt: dict[str, Any]
    result: bytes | None
    at: str
    receipt_jcs: bytes


def claim_held(record: Recorded) -> ConflictError:
    """The refusal of a save whose call's key is held already: no earlier attempt of a call
    made in the drive that received it can hold its key, so nothing is written, and the run
    is resumed from what was stored (where its calls are claimed before they run)."""
    claim = record.claim
    return ConflictError(
        f"idempotency key {claim.idempotency_key!r} of tool {claim.tool_id!r} is held "
        "already; the step is not saved",
        code="claim_held",
    )


@runtime_checkable
class GovernanceStore(Protocol):
    async def record_approval(self, approval: Approval) -> None:
        """Store an approval; one per (run, tool call): a second raises ConflictError
        (code ``already_decided``) and changes nothing."""
        ...

    async def approval_for(self, run_id: str, tool_call_id: str) -> tuple[Approval, str | None]:
        """The approval of a call and the invocation that used it (None if unused).
        Raises NotFound."""
        ...

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
        """In one transaction: take ``claim`` (a unique insert on tenant, tool and key),
        store ``grant`` (a standing approval from policy) if given, mark the approval used
        by this invocation, store the invocation, and append them to the ledger. If the
        key is held, nothing is written and the holder is returned; if the approval was
        used already, ConflictError (code ``approval_used``)."""
        ...

    async def take_over(
        self,
        stale: Claim,
        claim: Claim,
        invocation: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> bool:
        """Replace a stale claim that has no receipt with ``claim`` and store the new
        invocation; False (nothing written) if the claim changed meanwhile."""
        ...

    async def finish(
        self,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> None:
        """Store the result artifact and the receipt and append the receipt to the ledger.
        A second receipt for one invocation raises ConflictError (``receipt_exists``)."""
        ...

    async def refuse(
        self,
        invocation: dict[str, Any],
        receipt: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> None:
        """An invocation that never ran, with its Denied receipt, in one transaction."""
        ...

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
        """:meth:`begin` (no approval) and :meth:`finish` in one transaction, for a call
        that ran before it was claimed (a ``read`` call the policy allows): the claim, the
        invocation's entry at ``at``, the result and the receipt's entry at its
        ``finishedAt``. When the key is held already, nothing is written and the holder
        is returned, as :meth:`begin` returns it."""
        ...

    async def claim_of(self, tenant_id: str, tool_id: str, key: str) -> ClaimHeld | None:
        """Who holds the key, with its receipt and its run's current lease epoch."""
        ...

    async def load(self, invocation_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """An invocation and its receipt (None while it has none). Raises NotFound."""
        ...

    async def reconcile(self, reconciliation: Reconciliation) -> None:
        """Append a reconciliation of an Uncertain receipt (NotFound, or ConflictError
        with code ``not_uncertain`` when the receipt is not Uncertain). A second one must
        supersede the latest (:func:`~oarlock.governance._records.check_supersedes`),
        checked in the same transaction."""
        ...

    async def reconciliations(self, invocation_id: str) -> list[Reconciliation]: ...

    async def receipts(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[StoredReceipt]:
        """Receipts, newest first."""
        ...

    async def open_claims(self) -> list[Claim]:
        """Claims whose invocation has no receipt yet (running, or cut off by a crash)."""
        ...

    async def artifact(self, ref: str) -> bytes:
        """A stored result by its reference. Raises NotFound."""
        ...

    async def approval_ledger(self, run_id: str, tool_call_id: str) -> list[LedgerEntry]:
        """The ledger from the entry of the approval of this call (of run ``run_id``) to
        its chain's head, by sequence number; empty when the call has no approval. The
        executor reads it before it uses the approval for a side-effecting call
        (:func:`oarlock.governance._ledger.approval_ledger_problem`)."""
        ...

    async def ledger(self, chain: str | None = None) -> list[LedgerEntry]:
        """The entries of one ledger chain, by sequence number; without ``chain``, every
        entry of every chain, chain by chain (see :meth:`chains`)."""
        ...

    async def chains(self) -> list[str]:
        """The names of the ledger's chains that hold entries, in order (the memory and
        SQLite stores have one, ``default``; the PostgreSQL store one per tenant)."""
        ...

    async def add_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    async def checkpoints(self) -> list[Checkpoint]: ...


class RunEpochs(Protocol):
    """The runs beside a memory governance store: their lock, shared so that a fence is
    checked and a record written in one step, and each run's lease epoch."""

    @property
    def lock(self) -> threading.RLock: ...

    def epoch_of(self, run_id: str) -> int | None:
        """The run's lease epoch (None: no such run); called with ``lock`` held."""
        ...


class MemoryGovernanceStore:
    """The governance store in memory, safe to share between threads. ``runs`` (the
    memory run store's, when it makes this store) lets fenced writes check the run's lease
    epoch; without it, every fenced write is refused (``LeaseLost``): there is no run whose
    lease could be checked."""

    def __init__(self, *, runs: RunEpochs | None = None) -> None:
        self._runs = runs
        self._lock = runs.lock if runs is not None else threading.RLock()
        self._entries: list[tuple[int, str, str, bytes, str, str]] = []
        self._claims: dict[tuple[str, str, str], Claim] = {}
        self._invocations: dict[str, dict[str, Any]] = {}
        self._receipts: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []  # invocation ids in receipt order
        self._approvals: dict[tuple[str, str], Approval] = {}
        self._used: dict[str, str] = {}
        self._reconciliations: dict[str, list[Reconciliation]] = {}
        self._artifacts: dict[str, bytes] = {}
        self._checkpoints: list[Checkpoint] = []

    def _epoch(self, run_id: str | None) -> int | None:
        return None if run_id is None or self._runs is None else self._runs.epoch_of(run_id)

    def _fenced(self, fence: Lease | None) -> None:
        """Refuse a write whose lease the run has left; call with the lock held."""
        if fence is not None:
            from oarlock.store._leases import lease_lost

            current = self._epoch(fence.run_id)
            if current != fence.epoch:
                raise lease_lost(fence, current)

    def _held(self, claim: Claim) -> ClaimHeld:
        return ClaimHeld(claim, self._receipts.get(claim.invocation_id), self._epoch(claim.run_id))

    def _append(self, kind: str, at: str, body: dict[str, Any]) -> None:
        seq, prev = (
            len(self._entries) + 1,
            self._entries[-1][5] if self._entries else GENESIS_HASH,
        )
        jcs = canonicalize(body)
        self._entries.append(
            (seq, kind, at, jcs, prev, entry_hash_canonical(seq, kind, at, jcs, prev))
        )

    async def record_approval(self, approval: Approval) -> None:
        key = (approval.run_id, approval.tool_call_id)
        with self._lock:
            if key in self._approvals:
                raise ConflictError(
                    f"call {approval.tool_call_id} of run {approval.run_id} is already decided",
                    code="already_decided",
                )
            self._append("approval", approval.decided_at, approval.to_json())
            self._approvals[key] = approval

    async def approval_for(self, run_id: str, tool_call_id: str) -> tuple[Approval, str | None]:
        with self._lock:
            approval = self._approvals.get((run_id, tool_call_id))
            if approval is None:
                raise NotFound(f"no approval for call {tool_call_id} of run {run_id}")
            return approval, self._used.get(approval.approval_id)

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
        key = (claim.tenant_id, claim.tool_id, claim.idempotency_key)
        with self._lock:
            self._fenced(fence)
            held = self._claims.get(key)
            if held is not None:
                return self._held(held)
            if approval_id is not None and approval_id in self._used:
                raise ConflictError(
                    f"approval {approval_id} was used already", code="approval_used"
                )
            if grant is not None:
                if (grant.run_id, grant.tool_call_id) in self._approvals:
                    raise ConflictError("the call has an approval already", code="already_decided")
                self._approvals[(grant.run_id, grant.tool_call_id)] = grant
                self._append("approval", at, grant.to_json())
                approval_id = grant.approval_id
            self._claims[key] = claim
            if approval_id is not None:
                self._used[approval_id] = invocation["invocationId"]
            self._invocations[invocation["invocationId"]] = invocation
            self._append("invocation", at, invocation)
            return None

    async def take_over(
        self,
        stale: Claim,
        claim: Claim,
        invocation: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> bool:
        key = (claim.tenant_id, claim.tool_id, claim.idempotency_key)
        with self._lock:
            self._fenced(fence)
            if self._claims.get(key) != stale or stale.invocation_id in self._receipts:
                return False
            self._claims[key] = claim
            self._invocations[invocation["invocationId"]] = invocation
            self._append("invocation", at, invocation)
            return True

    async def finish(
        self,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> None:
        with self._lock:
            self._fenced(fence)
            self._finish(receipt, result, at)

    def _finish(self, receipt: dict[str, Any], result: bytes | None, at: str) -> None:
        """Store a receipt; the caller holds the lock."""
        invocation_id = receipt["invocationId"]
        if invocation_id not in self._invocations:
            raise NotFound(f"no invocation {invocation_id}")
        if invocation_id in self._receipts:
            raise ConflictError(
                f"invocation {invocation_id} has a receipt already", code="receipt_exists"
            )
        if result is not None:
            self._artifacts.setdefault(artifact_ref(result), result)
        self._receipts[invocation_id] = receipt
        self._order.append(invocation_id)
        self._append("receipt", at, receipt)

    async def refuse(
        self,
        invocation: dict[str, Any],
        receipt: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> None:
        with self._lock:  # one step: the invocation and its receipt, or neither
            self._fenced(fence)
            if receipt["invocationId"] in self._receipts:
                raise ConflictError("the invocation has a receipt already", code="receipt_exists")
            self._invocations[invocation["invocationId"]] = invocation
            self._append("invocation", at, invocation)
            self._finish(receipt, None, at)

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
        key = (claim.tenant_id, claim.tool_id, claim.idempotency_key)
        with self._lock:  # one step: the claim, the invocation and its receipt, or none
            self._fenced(fence)
            held = self._claims.get(key)
            if held is not None:
                return self._held(held)
            if receipt["invocationId"] in self._receipts:
                raise ConflictError("the invocation has a receipt already", code="receipt_exists")
            self._put(invocation, claim, receipt, result, at)
            return None

    def write_records(self, records: Sequence[Recorded]) -> None:
        """Write the records a run's save carries (see :class:`Recorded`), all or none (a
        held key: :func:`claim_held`); the caller holds the lock."""
        keys: set[tuple[str, str, str]] = set()
        for r in records:
            key = (r.claim.tenant_id, r.claim.tool_id, r.claim.idempotency_key)
            if key in self._claims or key in keys or r.invocation["invocationId"] in (
                self._invocations):  # fmt: skip
                raise claim_held(r)
            keys.add(key)
        for r in records:
            remember(r.receipt, r.receipt_jcs)
            try:
                self._put(r.invocation, r.claim, r.receipt, r.result, r.at)
            finally:
                forget(r.receipt)

    def _put(
        self,
        invocation: dict[str, Any],
        claim: Claim,
        receipt: dict[str, Any],
        result: bytes | None,
        at: str,
    ) -> None:
        """Store a call's claim, invocation and receipt (checked free and new); the caller
        holds the lock."""
        self._claims[(claim.tenant_id, claim.tool_id, claim.idempotency_key)] = claim
        self._invocations[invocation["invocationId"]] = invocation
        self._append("invocation", at, invocation)
        self._finish(receipt, result, receipt["finishedAt"])

    async def claim_of(self, tenant_id: str, tool_id: str, key: str) -> ClaimHeld | None:
        with self._lock:
            held = self._claims.get((tenant_id, tool_id, key))
            return None if held is None else self._held(held)

    async def load(self, invocation_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        with self._lock:
            invocation = self._invocations.get(invocation_id)
            if invocation is None:
                raise NotFound(f"no invocation {invocation_id}")
            return invocation, self._receipts.get(invocation_id)

    async def reconcile(self, reconciliation: Reconciliation) -> None:
        invocation_id = reconciliation.invocation_id
        with self._lock:
            receipt = self._receipts.get(invocation_id)
            if receipt is None:
                raise NotFound(f"no receipt for invocation {invocation_id}")
            if receipt["status"] != "Uncertain":
                raise ConflictError(
                    f"invocation {invocation_id} is {receipt['status']}, not Uncertain",
                    code="not_uncertain",
                )
            earlier = self._reconciliations.get(invocation_id)
            check_supersedes(reconciliation, earlier[-1] if earlier else None)
            self._append("reconciliation", reconciliation.at, reconciliation.to_json())
            self._reconciliations.setdefault(invocation_id, []).append(reconciliation)

    async def reconciliations(self, invocation_id: str) -> list[Reconciliation]:
        with self._lock:
            return list(self._reconciliations.get(invocation_id, ()))

    async def receipts(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[StoredReceipt]:
        with self._lock:
            found: list[StoredReceipt] = []
            for invocation_id in reversed(self._order):
                if len(found) >= max(limit, 0):
                    break
                invocation, receipt = (
                    self._invocations[invocation_id],
                    self._receipts[invocation_id],
                )
                if run_id is not None and invocation["runId"] != run_id:
                    continue
                if status is not None and receipt["status"] != status:
                    continue
                recs = tuple(self._reconciliations.get(invocation_id, ()))
                found.append(StoredReceipt(invocation, receipt, recs))
            return found

    async def open_claims(self) -> list[Claim]:
        with self._lock:
            return [c for c in self._claims.values() if c.invocation_id not in self._receipts]

    async def artifact(self, ref: str) -> bytes:
        with self._lock:
            try:
                return self._artifacts[ref]
            except KeyError:
                raise NotFound(f"no artifact {ref}") from None

    async def ledger(self, chain: str | None = None) -> list[LedgerEntry]:
        if chain not in (None, DEFAULT_CHAIN):
            return []
        with self._lock:
            entries = list(self._entries)
        return [LedgerEntry(q, k, a, loads_jcs(b), p, h) for q, k, a, b, p, h in entries]

    async def approval_ledger(self, run_id: str, tool_call_id: str) -> list[LedgerEntry]:
        with self._lock:
            approval = self._approvals.get((run_id, tool_call_id))
            entries = list(self._entries)
        if approval is None:
            return []
        found = [
            LedgerEntry(q, k, a, loads_jcs(b), p, h) for q, k, a, b, p, h in entries
        ]
        first = next(
            (i for i, e in enumerate(found)
             if e.kind == "approval" and e.body.get("approvalId") == approval.approval_id),
            None,
        )  # fmt: skip
        return [] if first is None else found[first:]

    async def chains(self) -> list[str]:
        with self._lock:
            return [DEFAULT_CHAIN] if self._entries else []

    async def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._lock:
            self._checkpoints.append(checkpoint)

    async def checkpoints(self) -> list[Checkpoint]:
        with self._lock:
            return list(self._checkpoints)
