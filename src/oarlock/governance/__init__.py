"""Governance: the executor every tool call passes (policy, exact approvals, idempotency,
receipts), the sanitizer, and the hash-chained ledger."""

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
from oarlock.governance._store import GovernanceStore, MemoryGovernanceStore

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


def __getattr__(name: str) -> object:
    if name == "CedarPolicy":
        from oarlock.governance._cedar import CedarPolicy

        return CedarPolicy
    raise AttributeError(f"module 'oarlock.governance' has no attribute {name!r}")
