"""Governance: the executor every tool call passes (policy, exact approvals, idempotency,
receipts), the sanitizer, and the hash-chained ledger.

Names load on first use, so that importing one part (the store's records, say) does not
load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oarlock._lazy import lazy_exports

if TYPE_CHECKING:
    from oarlock.governance._cedar import CedarPolicy as CedarPolicy
    from oarlock.governance._executor import CallContext, GovernedExecutor, Review
    from oarlock.governance._ledger import (
        Checkpoint,
        LedgerEntry,
        VerifyReport,
        generate_key,
        load_private_key,
        load_public_key,
        sign_checkpoint,
        verify_chain,
    )
    from oarlock.governance._policy import (
        DEFAULT_POLICY,
        PolicyEngine,
        PolicyRequest,
        PolicyVerdict,
        RulePolicy,
    )
    from oarlock.governance._records import Approval, Claim, Reconciliation, StoredReceipt
    from oarlock.governance._sanitize import fence, sanitize, sanitize_result, unfence
    from oarlock.governance._store import GovernanceStore, MemoryGovernanceStore, Recorded

__all__ = [
    "DEFAULT_POLICY",
    "Approval",
    "CallContext",
    "Checkpoint",
    "Claim",
    "GovernanceStore",
    "GovernedExecutor",
    "LedgerEntry",
    "MemoryGovernanceStore",
    "PolicyEngine",
    "PolicyRequest",
    "PolicyVerdict",
    "Reconciliation",
    "Recorded",
    "Review",
    "RulePolicy",
    "StoredReceipt",
    "VerifyReport",
    "fence",
    "generate_key",
    "load_private_key",
    "load_public_key",
    "sanitize",
    "sanitize_result",
    "sign_checkpoint",
    "unfence",
    "verify_chain",
]

_WHERE = {
    "CallContext": "_executor",
    "GovernedExecutor": "_executor",
    "Review": "_executor",
    "Checkpoint": "_ledger",
    "LedgerEntry": "_ledger",
    "VerifyReport": "_ledger",
    "generate_key": "_ledger",
    "load_private_key": "_ledger",
    "load_public_key": "_ledger",
    "sign_checkpoint": "_ledger",
    "verify_chain": "_ledger",
    "DEFAULT_POLICY": "_policy",
    "PolicyEngine": "_policy",
    "PolicyRequest": "_policy",
    "PolicyVerdict": "_policy",
    "RulePolicy": "_policy",
    "Approval": "_records",
    "Claim": "_records",
    "Reconciliation": "_records",
    "StoredReceipt": "_records",
    "fence": "_sanitize",
    "sanitize": "_sanitize",
    "sanitize_result": "_sanitize",
    "unfence": "_sanitize",
    "GovernanceStore": "_store",
    "MemoryGovernanceStore": "_store",
    "Recorded": "_store",
    "CedarPolicy": "_cedar",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())


