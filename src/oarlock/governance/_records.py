"""The records the governed executor keeps besides invocations and receipts.

Invocations and receipts are the published tool-invocation-v1 and tool-receipt-v1 formats
(plain JSON objects, validated before they are stored). The records here are oarlock's
own, each tagged with a versioned ``type`` so that a reader refuses one it does not know:

* ``oarlock-approval/2``: an approval bound to one call of one run: the tool, the
  arguments hash it covers (after any edit), the scope, who decided (a human principal or
  a policy rule), when, and an optional expiry. Used at most once. A human's approval is
  signed: ``keyId`` names the approver's Ed25519 key and ``signature`` is its signature
  over the JCS form of the record without ``signature`` (see
  :mod:`oarlock.governance._approvers`); a policy's standing approval carries the
  ``policyVersion`` (the policy's digest) it was granted under. ``oarlock-approval/1``
  records (unsigned) are still read, and are refused where a signature is needed.
* ``oarlock-reconciliation/2``: an operator's statement about an Uncertain receipt
  (``succeeded`` or ``not-applied``) with evidence. Appended; receipts are never edited.
  One that changes an earlier statement names it in ``supersedes`` (an invocation's
  statements form one line: each after the first supersedes the one before). Records of
  ``oarlock-reconciliation/1`` (without ``supersedes``) are still read.
* :class:`Claim`: the idempotency claim on (tenant, tool, key), taken before a tool runs.

And :class:`CallOutcome`, kept nowhere: how a call ended, as the executor's observers are
told.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from oarlock.errors import ConflictError, IntegrityError
from oarlock.formats._jcs import canonicalize, digest, digest_bytes

__all__ = [
    "APPROVAL_TYPE",
    "RECONCILIATION_TYPE",
    "Approval",
    "CallOutcome",
    "Claim",
    "Reconciliation",
    "StoredReceipt",
    "check_supersedes",
    "new_uuid",
    "run_uuid",
    "step_uuid",
]

APPROVAL_TYPE = "oarlock-approval/2"
_APPROVAL_TYPES = frozenset({"oarlock-approval/1", APPROVAL_TYPE})
RECONCILIATION_TYPE = "oarlock-reconciliation/2"
_RECONCILIATION_TYPES = frozenset({"oarlock-reconciliation/1", RECONCILIATION_TYPE})
_NAMESPACE = uuid.UUID("6f0a7c3e-4d52-5a8e-9b1f-0a4c6e8d2b17")


def new_uuid() -> str:
    """A random (version 4) UUID's text: what ``str(uuid.uuid4())`` gives, in half the time
    (three are made for each tool call)."""
    return uuid_text(os.urandom(16))


def uuid_text(random: bytes) -> str:
    """The text of the version-4 UUID made of 16 random bytes (``uuid.UUID(bytes=random,
    version=4)``)."""
    return _text(random.hex(), "4")


def _text(h: str, version: str) -> str:
    """The UUID of the first 32 hex digits ``h`` with its version and RFC 4122 variant set,
    as ``str(uuid.UUID(hex=h[:32], version=...))`` writes it."""
    variant = "89ab"[int(h[16], 16) & 3]
    return f"{h[:8]}-{h[8:12]}-{version}{h[13:16]}-{variant}{h[17:20]}-{h[20:32]}"


_NAMESPACE_BYTES = _NAMESPACE.bytes


def name_uuid(name: str) -> str:
    """``str(uuid.uuid5(_NAMESPACE, name))``, without the UUID objects it makes (one name
    is hashed for each tool call)."""
    return _text(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).hexdigest(), "5")


@lru_cache(maxsize=4096)
def run_uuid(run_id: str) -> str:
    """The run's id as a UUID: itself when it is one, else a name-based UUID of it."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return name_uuid(f"run:{run_id}")


def step_uuid(run_id: str, turn: int) -> str:
    """A stable id for one turn of one run (the same in every process that resumes it)."""
    return name_uuid(f"step:{run_id}:{turn}")


def seal(receipt: dict[str, Any]) -> bytes:
    """Set the receipt's ``receiptHash`` (the digest of the receipt without it, which must
    not hold one yet) and return the JCS bytes of the receipt with it. JCS writes an
    object's members sorted, and a receipt's other members' names all sort before
    ``receiptHash`` (``effect``, ``error``, ``finishedAt``, ``invocationId``) or after it:
    the two halves, written once, make both forms."""
    low = {k: v for k, v in receipt.items() if k < "receiptHash"}
    high = {k: v for k, v in receipt.items() if k > "receiptHash"}
    try:
        head, tail = canonicalize(low)[:-1], canonicalize(high)[1:]
    except Exception:  # no canonical form: refused by the whole, as it says
        head = tail = b""
    if len(head) < 2 or len(tail) < 2:  # that, or a half without members (exact too)
        receipt["receiptHash"] = digest(receipt)
        return canonicalize(receipt)
    digest_ = digest_bytes(head + b"," + tail)
    receipt["receiptHash"] = digest_
    return b"".join((head, b',"receiptHash":"', digest_.encode(), b'",', tail))


def _str(data: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise IntegrityError(f"{what}: '{key}' must be a non-empty string", code="record_invalid")
    return value


@dataclass(frozen=True, slots=True)
class Approval:
    approval_id: str
    run_id: str
    tool_call_id: str
    tool_id: str
    arguments_hash: str
    scope: dict[str, Any]
    decided_by: Literal["human", "policy"]
    principal: str  # the human's id, or the policy rule's id
    decided_at: str
    expires_at: str | None = None
    policy_version: str | None = None
    key_id: str | None = None  # the approver's key, for a signed approval
    signature: str | None = None  # base64 Ed25519 signature of signed_body()

    def signed_body(self) -> dict[str, Any]:
        """What the approver's signature covers: the record without ``signature``."""
        data = self.to_json()
        data.pop("signature", None)
        return data

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": APPROVAL_TYPE,
            "approvalId": self.approval_id,
            "runId": self.run_id,
            "toolCallId": self.tool_call_id,
            "toolId": self.tool_id,
            "argumentsHash": self.arguments_hash,
            "scope": self.scope,
            "decidedBy": self.decided_by,
            "principal": self.principal,
            "decidedAt": self.decided_at,
        }
        if self.expires_at is not None:
            data["expiresAt"] = self.expires_at
        if self.policy_version is not None:
            data["policyVersion"] = self.policy_version
        if self.key_id is not None:
            data["keyId"] = self.key_id
        if self.signature is not None:
            data["signature"] = self.signature
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Approval:
        what = "approval record"
        if data.get("type") not in _APPROVAL_TYPES:
            known = " and ".join(sorted(_APPROVAL_TYPES))
            raise IntegrityError(
                f"{what} has type {data.get('type')!r}; this oarlock reads {known}",
                code="record_invalid",
            )
        decided_by = data.get("decidedBy")
        scope = data.get("scope")
        if decided_by not in ("human", "policy") or not isinstance(scope, dict):
            raise IntegrityError(f"{what} has no valid decidedBy or scope", code="record_invalid")
        return cls(
            approval_id=_str(data, "approvalId", what),
            run_id=_str(data, "runId", what),
            tool_call_id=_str(data, "toolCallId", what),
            tool_id=_str(data, "toolId", what),
            arguments_hash=_str(data, "argumentsHash", what),
            scope=scope,
            decided_by=decided_by,
            principal=_str(data, "principal", what),
            decided_at=_str(data, "decidedAt", what),
            expires_at=_str(data, "expiresAt", what, optional=True),
            policy_version=_str(data, "policyVersion", what, optional=True),
            key_id=_str(data, "keyId", what, optional=True),
            signature=_str(data, "signature", what, optional=True),
        )


@dataclass(frozen=True, slots=True)
class Reconciliation:
    reconciliation_id: str
    invocation_id: str
    outcome: Literal["succeeded", "not-applied"]
    evidence: str
    by: str
    at: str
    supersedes: str | None = None  # the reconciliation this one replaces

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": RECONCILIATION_TYPE,
            "reconciliationId": self.reconciliation_id,
            "invocationId": self.invocation_id,
            "outcome": self.outcome,
            "evidence": self.evidence,
            "by": self.by,
            "at": self.at,
        }
        if self.supersedes is not None:
            data["supersedes"] = self.supersedes
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reconciliation:
        what = "reconciliation record"
        outcome = data.get("outcome")
        if data.get("type") not in _RECONCILIATION_TYPES or outcome not in (
            "succeeded",
            "not-applied",
        ):
            raise IntegrityError(f"{what} has an unknown type or outcome", code="record_invalid")
        return cls(
            reconciliation_id=_str(data, "reconciliationId", what),
            invocation_id=_str(data, "invocationId", what),
            outcome=outcome,
            evidence=_str(data, "evidence", what),
            by=_str(data, "by", what),
            at=_str(data, "at", what),
            supersedes=_str(data, "supersedes", what, optional=True),
        )


def check_supersedes(new: Reconciliation, latest: Reconciliation | None) -> None:
    """Refuse a statement that would silently contradict or repeat the latest one: a
    second statement must name the latest in ``supersedes`` (ConflictError, code
    ``already_reconciled`` or ``not_latest``), and a first one cannot supersede anything
    (``nothing_to_supersede``)."""
    if latest is None:
        if new.supersedes is not None:
            raise ConflictError(
                f"invocation {new.invocation_id} has no reconciliation to supersede",
                code="nothing_to_supersede",
            )
        return
    if new.supersedes is None:
        raise ConflictError(
            f"invocation {new.invocation_id} was already reconciled as {latest.outcome} by "
            f"{latest.by} at {latest.at}; to change that, supersede it (--supersede)",
            code="already_reconciled",
        )
    if new.supersedes != latest.reconciliation_id:
        raise ConflictError(
            f"reconciliation {new.supersedes} is not the latest of invocation "
            f"{new.invocation_id} ({latest.reconciliation_id} is)",
            code="not_latest",
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds an idempotency key. ``owner`` names the process (host, pid and start
    time); ``lease_until`` (seconds since the epoch) bounds how long it may hold it.
    ``run_id`` is the run document's id the call belongs to, and ``epoch`` the run's lease
    epoch the claim was taken under (None when the run was driven without a lease): once
    the run's epoch has moved on, the claim is stale whatever its process is doing."""

    tenant_id: str
    tool_id: str
    idempotency_key: str
    invocation_id: str
    arguments_hash: str
    owner: str
    claimed_at: str
    lease_until: float
    run_id: str | None = None
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """A receipt with its invocation and any reconciliations, as ``receipts show`` and the
    executor's replay read them."""

    invocation: dict[str, Any]
    receipt: dict[str, Any]
    reconciliations: tuple[Reconciliation, ...] = ()

    @property
    def status(self) -> str:
        return str(self.receipt["status"])

    @property
    def invocation_id(self) -> str:
        return str(self.receipt["invocationId"])

    def row(self) -> dict[str, Any]:
        """The receipt as one row of a listing (``receipts list --json``, the HTTP API)."""
        inv, rec = self.invocation, self.receipt
        return {
            "invocationId": rec["invocationId"],
            "status": rec["status"],
            "tool": inv["toolId"],
            "runId": inv["runId"],
            "finishedAt": rec.get("finishedAt"),
            "effect": rec.get("effect"),
            "error": rec.get("error"),
            "reconciled": [r.outcome for r in self.reconciliations],
        }


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How a call ended, as the executor's observers are told: the invocation record it
    was given (with its policy decision, key and approval), the receipt it ends with, and
    whether that receipt is an earlier one replayed (the call was not run again)."""

    run_id: str
    call_id: str
    invocation: Mapping[str, Any]
    receipt: Mapping[str, Any]
    replayed: bool = False

    @property
    def status(self) -> str:
        return str(self.receipt.get("status", ""))
