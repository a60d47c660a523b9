"""The governed executor's records in the run database (SQLite).

Each record is written once, as a ledger entry (its JCS text, sequence number, previous
hash and entry hash); the tables ``invocations``, ``claims``, ``approvals``, ``receipts``
and ``reconciliations`` index it by ``ledger_seq``. A method is one ``BEGIN IMMEDIATE``
transaction that reads the ledger's head and appends to it, so writers in several
processes extend one chain without forks. The idempotency claim is a unique insert
(``ON CONFLICT DO NOTHING``, then a look at who holds the key), never select-then-insert.

What is flushed to disk before a method returns: reconciliations, checkpoints and the
claim of a side-effecting call (it must be durable before the effect starts). A ``read``
or ``sandbox`` claim, a receipt, a read recorded after it ran (``record``: its claim,
invocation and receipt; or ``write_records``, in the transaction of its step's save), a
refused call and an approval are committed atomically but flushed by the next flushed
commit, which the runner makes before anything is acknowledged: the run document that
records the decision or hands the result to the model. A power cut before
that loses the receipt and the run's step together; the resumed run then finds a
side-effecting call's durable claim without a receipt (Uncertain), or runs a read again.
A killed process loses nothing: WAL commits survive it.

Ledger rows (schema version 5 on): ``entry_hash`` and ``prev_hash`` are the 32 bytes of
the SHA-256, not ``sha256:`` and 64 hex digits (so is a claim's ``arguments_hash``), and a
body of 512 bytes of JCS or more is stored compressed: a BLOB of one format byte (1) and a
raw DEFLATE stream (RFC 1951, a 2 KB window) made with a preset dictionary
(``_DICTIONARIES[1]``: the member names and common values of the governance records;
fixed, since the rows written with it must stay readable: another dictionary is another
format byte). An invocation record of 812 bytes takes about 307. Compressing one costs 20
to 35 microseconds of a run's time (8 in a loop of its own, where the caches stay warm),
whatever its size: a receipt of 403 bytes (168 compressed) is kept as JCS text, as are the
smaller records, so that a tool call pays for one compression (3 to 4% of a durable turn's
CPU time; compressing both records took 5 to 8%). Rows written before keep their form (JCS
text, hash text) and are read as they are; so is a hand-edited row in either.
``prev_hash`` stays stored, though it is the previous row's ``entry_hash``: with it, the
rows after a removed one still verify, and a broken link is told from an edited entry.

A write fenced by a lease (``fence=``) first reads the run's lease epoch in its own
transaction and raises LeaseLost, writing nothing, when the run has left it. A claim
records its run and epoch; ``claim_of`` gives the run's current epoch beside it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oarlock.errors import CanonicalizationError, ConflictError, IntegrityError, NotFound
from oarlock.formats._jcs import canonicalize, forget, loads_jcs, remember
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
from oarlock.governance._store import ClaimHeld, Recorded, artifact_ref, claim_held
from oarlock.store._packing import Packing
from oarlock.store._sqlite import _store_error, named_queries

if TYPE_CHECKING:
    from oarlock.store._queue import Lease
    from oarlock.store._sqlite import SQLiteStore

__all__ = ["SQLiteGovernanceStore"]

_FILE = "sqlite_governance.sql"
_SAFE = frozenset({"read", "sandbox"})


# The preset dictionaries of stored ledger bodies, by format byte. Fixed once rows use one:
# the strings a record most often repeats come last (DEFLATE codes near distances shorter).
_DICTIONARIES: dict[int, bytes] = {
    1: (
        '{"approvalId":"","argumentsHash":"sha256:","decidedAt":"","decidedBy":"human",'
        '"expiresAt":"","keyId":"ed25519:","policyVersion":"sha256:","principal":"",'
        '"runId":"","scope":{"tenantId":"default"},"signature":"","toolCallId":"call_",'
        '"toolId":"","type":"oarlock-approval/2"}'
        '{"at":"","by":"","evidence":"","invocationId":"","outcome":"not-applied",'
        '"reconciliationId":"","supersedes":"","type":"oarlock-reconciliation/2"}'
        '"decidedBy":"policy","outcome":"succeeded"'
        '"effect":{"effectHash":"sha256:","externalReference":"","kind":"","reversible":false},'
        '"error":{"code":"","message":""},"status":"Failed","status":"Denied",'
        '"status":"TimedOut","status":"Uncertain","approvalId":"","mcpServerId":"",'
        '"sandbox":{"egressProfile":"","workspaceId":""},"timeoutSeconds":'
        '"effect":"deny","effect":"require_approval","ruleId":"",'
        '"sideEffectClass":"sandbox","sideEffectClass":"shared-write",'
        '"sideEffectClass":"external","sideEffectClass":"production",'
        '"sideEffectClass":"publication","sideEffectClass":"spend",'
        '{"agentId":"","arguments":{},"argumentsHash":"sha256:","attemptId":"",'
        '"idempotencyKey":"run::call:call_","invocationId":"","policyDecision":{'
        '"decisionId":"","effect":"allow","evaluatedAt":"20","policyId":"oarlock-default",'
        '"policyVersion":"sha256:","reasons":["no rule matched; \'read\' calls are allowed"]},'
        '"runId":"","schemaVersion":"1","scope":{"tenantId":"default"},'
        '"sideEffectClass":"read","stepId":"","toolId":""}'
        '{"finishedAt":"20","invocationId":"","receiptHash":"sha256:",'
        '"resultRef":"sha256:","sanitized":true,"startedAt":"20","status":"Succeeded",'
        '"usage":{"bytesIn":,"bytesOut":,"durationMs":0}}'
    ).encode("ascii"),
}
_PACKING = Packing(_DICTIONARIES, 1)
_PACK_FROM = 512  # bytes of JCS from which a body is compressed
# what a stored body may expand to: more is a row made to exhaust memory, read as corrupt
_MAX_BODY = 64 * 1024 * 1024
_HASH = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)


_QUERIES = named_queries(_FILE)


def _q(name: str) -> str:
    return _QUERIES[name]


def pack_body(jcs: bytes) -> bytes | str:
    """The stored form of a ledger body (its JCS bytes): see the module documentation."""
    if len(jcs) < _PACK_FROM:
        return jcs.decode("utf-8")
    return _PACKING.pack(jcs)


def unpack_body(stored: Any) -> Any:
    """The JSON text or bytes of a stored ledger body, either form; ``stored`` itself
    when it is no compressed body, and None when it is one that does not decompress (or
    would expand beyond ``_MAX_BODY``)."""
    if not isinstance(stored, bytes) or not _PACKING.known(stored):
        return stored
    return _PACKING.unpack(stored, _MAX_BODY)


def pack_hash(text: str) -> bytes | str:
    """The stored form of a hash: the 32 bytes of ``sha256:`` and 64 lowercase hex
    digits, any other text as it is (so that it reads back the same)."""
    return bytes.fromhex(text[7:]) if _HASH.fullmatch(text) else text


def unpack_hash(stored: Any) -> Any:
    """An entry hash as text, from either stored form (32 bytes, or the text itself)."""
    return "sha256:" + stored.hex() if isinstance(stored, bytes) else stored


def _body(stored: Any, what: str) -> dict[str, Any]:
    try:
        value = loads_jcs(unpack_body(stored))
    except (TypeError, ValueError, CanonicalizationError):
        raise IntegrityError(f"stored {what} is not JSON", code="record_corrupt") from None
    if not isinstance(value, dict):
        raise IntegrityError(f"stored {what} is not a JSON object", code="record_corrupt")
    return value


def _claim(row: sqlite3.Row) -> Claim:
    return Claim(
        tenant_id=row["tenant_id"],
        tool_id=row["tool_id"],
        idempotency_key=row["idempotency_key"],
        invocation_id=row["invocation_id"],
        arguments_hash=unpack_hash(row["arguments_hash"]),
        owner=row["owner"],
        claimed_at=row["claimed_at"],
        lease_until=row["lease_until"],
        run_id=row["run_id"],
        epoch=row["epoch"],
    )


def _claim_params(claim: Claim) -> dict[str, Any]:
    return {
        "tenant_id": claim.tenant_id,
        "tool_id": claim.tool_id,
        "idempotency_key": claim.idempotency_key,
        "invocation_id": claim.invocation_id,
        "arguments_hash": pack_hash(claim.arguments_hash),
        "owner": claim.owner,
        "claimed_at": claim.claimed_at,
        "lease_until": claim.lease_until,
        "run_id": claim.run_id,
        "epoch": claim.epoch,
    }


class SQLiteGovernanceStore:
    """A :class:`~oarlock.governance.GovernanceStore` sharing a :class:`SQLiteStore`'s
    connection and file."""

    def __init__(self, runs: SQLiteStore) -> None:
        self._runs = runs

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _fenced(conn: sqlite3.Connection, fence: Lease | None) -> None:
        """Refuse a write whose lease the run has left; call inside the write transaction."""
        if fence is None:
            return
        row = conn.execute(_q("run_epoch"), {"run_id": fence.run_id}).fetchone()
        current = None if row is None else row[0]
        if current != fence.epoch:
            from oarlock.store._leases import lease_lost

            raise lease_lost(fence, current)

    def _append(
        self,
        conn: sqlite3.Connection,
        kind: str,
        at: str,
        body: dict[str, Any],
        after: tuple[int, str] | None = None,
    ) -> tuple[int, str]:
        """Append one entry after the current head (``after``, the sequence number and hash
        of an entry this transaction appended last, or else read from the ledger); its
        sequence number and hash. Call inside a write transaction."""
        if after is None:
            head = conn.execute(_q("ledger_head")).fetchone()
            after = (0, GENESIS_HASH) if head is None else (head[0], unpack_hash(head[1]))
        seq, prev = after[0] + 1, after[1]
        jcs = canonicalize(body)
        hashed = entry_hash_canonical(seq, kind, at, jcs, prev)
        conn.execute(
            _q("ledger_append"),
            {
                "seq": seq,
                "kind": kind,
                "at": at,
                "body": pack_body(jcs),
                "prev_hash": pack_hash(prev),
                "entry_hash": pack_hash(hashed),
            },
        )
        return seq, hashed

    def _read(self, name: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        try:
            return self._runs.db().execute(_q(name), params).fetchall()
        except sqlite3.Error as exc:
            raise _store_error(exc, f"reading governance records ({name})") from exc

    def _insert_invocation(
        self, conn: sqlite3.Connection, invocation: dict[str, Any], at: str
    ) -> tuple[int, str]:
        """Append the invocation and index it; its ledger entry's number and hash."""
        entry = self._append(conn, "invocation", at, invocation)
        conn.execute(
            _q("insert_invocation"),
            {
                "invocation_id": invocation["invocationId"],
                "run_id": invocation["runId"],
                "ledger_seq": entry[0],
            },
        )
        return entry

    def _insert_approval(self, conn: sqlite3.Connection, approval: Approval, at: str) -> None:
        seq, _ = self._append(conn, "approval", at, approval.to_json())
        try:
            conn.execute(
                _q("insert_approval"),
                {
                    "approval_id": approval.approval_id,
                    "run_id": approval.run_id,
                    "tool_call_id": approval.tool_call_id,
                    "ledger_seq": seq,
                },
            )
        except sqlite3.IntegrityError:
            raise ConflictError(
                f"call {approval.tool_call_id} of run {approval.run_id} is already decided",
                code="already_decided",
            ) from None

    # -- writes -------------------------------------------------------------------------
    async def record_approval(self, approval: Approval) -> None:
        # flushed by the run's commit of the decision, which follows at once and before
        # the decision is acknowledged; lost with it in a power cut, never without it
        with self._runs.transaction("recording an approval", flush=False):
            self._insert_approval(self._runs.db(), approval, approval.decided_at)

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
        conn = self._runs.db()
        flush = invocation["sideEffectClass"] not in _SAFE
        with self._runs.transaction("claiming an idempotency key", flush=flush):
            self._fenced(conn, fence)
            taken = conn.execute(_q("insert_claim"), _claim_params(claim)).rowcount == 1
            if not taken:
                return self._held(conn, claim.tenant_id, claim.tool_id, claim.idempotency_key)
            if grant is not None:
                self._insert_approval(conn, grant, at)
                approval_id = grant.approval_id
            if approval_id is not None:
                params = {"approval_id": approval_id, "invocation_id": invocation["invocationId"]}
                if conn.execute(_q("use_approval"), params).rowcount != 1:
                    raise ConflictError(
                        f"approval {approval_id} was used already", code="approval_used"
                    )
            self._insert_invocation(conn, invocation, at)
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
        conn = self._runs.db()
        params = _claim_params(claim) | {
            "stale_invocation_id": stale.invocation_id,
            "stale_owner": stale.owner,
        }
        with self._runs.transaction("taking over a stale claim", flush=False):
            self._fenced(conn, fence)
            if conn.execute(_q("take_over"), params).rowcount != 1:
                return False
            self._insert_invocation(conn, invocation, at)
        return True

    async def finish(
        self,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> None:
        conn = self._runs.db()
        with self._runs.transaction("writing a receipt", flush=False):
            self._fenced(conn, fence)
            self._insert_receipt(conn, receipt, result, at)

    def _insert_receipt(
        self,
        conn: sqlite3.Connection,
        receipt: dict[str, Any],
        result: bytes | None,
        at: str,
        after: tuple[int, str] | None = None,
    ) -> None:
        """Store the receipt (and its result). ``after``: the ledger entry of its invocation,
        appended by this very transaction, which so has no receipt yet: nothing to look up,
        neither the receipt nor the ledger's head."""
        invocation_id = receipt["invocationId"]
        if after is None and conn.execute(
            _q("receipt_status"), {"invocation_id": invocation_id}
        ).fetchone():
            raise ConflictError(
                f"invocation {invocation_id} has a receipt already", code="receipt_exists"
            )
        if result is not None:
            conn.execute(_q("insert_artifact"), {"ref": artifact_ref(result), "data": result})
        seq, _ = self._append(conn, "receipt", at, receipt, after)
        try:
            conn.execute(
                _q("insert_receipt"),
                {"invocation_id": invocation_id, "status": receipt["status"], "ledger_seq": seq},
            )
        except sqlite3.IntegrityError:
            raise NotFound(f"no invocation {invocation_id}") from None

    async def refuse(
        self,
        invocation: dict[str, Any],
        receipt: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> None:
        conn = self._runs.db()
        with self._runs.transaction("recording a refused call", flush=False):
            self._fenced(conn, fence)
            entry = self._insert_invocation(conn, invocation, at)
            self._insert_receipt(conn, receipt, None, at, entry)

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
        conn = self._runs.db()
        with self._runs.transaction("recording a call", flush=False):
            self._fenced(conn, fence)
            if not self._record(conn, invocation, claim, receipt, result=result, at=at):
                return self._held(conn, claim.tenant_id, claim.tool_id, claim.idempotency_key)
        return None

    def write_records(self, conn: sqlite3.Connection, records: Sequence[Recorded]) -> None:
        """Write the records a run's save carries (:class:`Recorded`), inside its
        transaction; a held key raises :func:`claim_held`, and the save rolls back."""
        for r in records:
            remember(r.receipt, r.receipt_jcs)
            try:
                if not self._record(
                    conn, r.invocation, r.claim, r.receipt, result=r.result, at=r.at
                ):
                    raise claim_held(r)
            finally:
                forget(r.receipt)

    def _record(
        self,
        conn: sqlite3.Connection,
        invocation: dict[str, Any],
        claim: Claim,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
    ) -> bool:
        """Claim the key, then append the invocation and the receipt; False (nothing
        written) when the key is held."""
        if conn.execute(_q("insert_claim"), _claim_params(claim)).rowcount != 1:
            return False
        entry = self._insert_invocation(conn, invocation, at)
        self._insert_receipt(conn, receipt, result, receipt["finishedAt"], entry)
        return True

    async def reconcile(self, reconciliation: Reconciliation) -> None:
        conn = self._runs.db()
        invocation_id = reconciliation.invocation_id
        with self._runs.transaction("recording a reconciliation"):
            row = conn.execute(_q("receipt_status"), {"invocation_id": invocation_id}).fetchone()
            if row is None:
                raise NotFound(f"no receipt for invocation {invocation_id}")
            if row[0] != "Uncertain":
                raise ConflictError(
                    f"invocation {invocation_id} is {row[0]}, not Uncertain", code="not_uncertain"
                )
            latest = conn.execute(
                _q("latest_reconciliation"), {"invocation_id": invocation_id}
            ).fetchone()
            check_supersedes(
                reconciliation,
                None if latest is None else Reconciliation.from_json(_body(latest[0], "record")),
            )
            seq, _ = self._append(
                conn, "reconciliation", reconciliation.at, reconciliation.to_json()
            )
            conn.execute(
                _q("insert_reconciliation"),
                {
                    "reconciliation_id": reconciliation.reconciliation_id,
                    "invocation_id": invocation_id,
                    "ledger_seq": seq,
                },
            )

    async def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        body = json.dumps(checkpoint.to_json(), separators=(",", ":"))
        with self._runs.transaction("storing a checkpoint"):
            self._runs.db().execute(_q("insert_checkpoint"), {"seq": checkpoint.seq, "body": body})

    # -- reads --------------------------------------------------------------------------
    def _held(
        self, conn: sqlite3.Connection, tenant_id: str, tool_id: str, key: str
    ) -> ClaimHeld | None:
        row = conn.execute(
            _q("claim_of"),
            {"tenant_id": tenant_id, "tool_id": tool_id, "idempotency_key": key},
        ).fetchone()
        if row is None:
            return None
        receipt = None if row["receipt"] is None else _body(row["receipt"], "receipt")
        return ClaimHeld(_claim(row), receipt, row["run_epoch"])

    async def claim_of(self, tenant_id: str, tool_id: str, key: str) -> ClaimHeld | None:
        return self._held(self._runs.db(), tenant_id, tool_id, key)

    async def approval_for(self, run_id: str, tool_call_id: str) -> tuple[Approval, str | None]:
        rows = self._read("approval_for", {"run_id": run_id, "tool_call_id": tool_call_id})
        if not rows:
            raise NotFound(f"no approval for call {tool_call_id} of run {run_id}")
        return Approval.from_json(_body(rows[0][0], "approval")), rows[0][1]

    async def load(self, invocation_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        rows = self._read("load_invocation", {"invocation_id": invocation_id})
        if not rows:
            raise NotFound(f"no invocation {invocation_id}")
        receipt = rows[0]["receipt"]
        return _body(rows[0]["invocation"], "invocation"), (
            None if receipt is None else _body(receipt, "receipt")
        )

    async def reconciliations(self, invocation_id: str) -> list[Reconciliation]:
        rows = self._read("reconciliations", {"invocation_id": invocation_id})
        return [Reconciliation.from_json(_body(r[0], "reconciliation")) for r in rows]

    async def receipts(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[StoredReceipt]:
        rows = self._read(
            "list_receipts", {"run_id": run_id, "status": status, "limit": max(limit, 0)}
        )
        receipts = [_body(row["receipt"], "receipt") for row in rows]
        ids = json.dumps([r["invocationId"] for r in receipts])
        notes: dict[str, list[Reconciliation]] = {}
        for invocation_id, body in self._read("reconciliations_of_many", {"invocation_ids": ids}):
            notes.setdefault(invocation_id, []).append(
                Reconciliation.from_json(_body(body, "reconciliation"))
            )
        return [
            StoredReceipt(
                _body(row["invocation"], "invocation"),
                receipt,
                tuple(notes.get(receipt["invocationId"], ())),
            )
            for row, receipt in zip(rows, receipts, strict=True)
        ]

    async def open_claims(self) -> list[Claim]:
        return [_claim(row) for row in self._read("open_claims", {})]

    async def artifact(self, ref: str) -> bytes:
        rows = self._read("artifact", {"ref": ref})
        if not rows:
            raise NotFound(f"no artifact {ref}")
        data = bytes(rows[0][0])
        if artifact_ref(data) != ref:
            raise IntegrityError(
                f"artifact {ref} does not match its content", code="record_corrupt"
            )
        return data

    async def chains(self) -> list[str]:
        return [DEFAULT_CHAIN] if self._read("ledger_head", {}) else []

    async def ledger(self, chain: str | None = None) -> list[LedgerEntry]:
        if chain not in (None, DEFAULT_CHAIN):
            return []
        return self._entries(self._read("ledger_all", {}))

    async def approval_ledger(self, run_id: str, tool_call_id: str) -> list[LedgerEntry]:
        rows = self._read("approval_ledger", {"run_id": run_id, "tool_call_id": tool_call_id})
        return self._entries(rows)

    @staticmethod
    def _entries(rows: Any) -> list[LedgerEntry]:
        entries = []
        for row in rows:
            stored = row["body"]
            try:
                body = loads_jcs(unpack_body(stored))
            except (TypeError, ValueError, CanonicalizationError):
                shown = stored.hex() if isinstance(stored, bytes) else str(stored)
                body = {"unreadable": shown}
            entries.append(
                LedgerEntry(
                    seq=row["seq"],
                    kind=row["kind"],
                    at=row["at"],
                    body=body,
                    prev_hash=unpack_hash(row["prev_hash"]),
                    entry_hash=unpack_hash(row["entry_hash"]),
                )
            )
        return entries

    async def checkpoints(self) -> list[Checkpoint]:
        return [
            Checkpoint.from_json(_body(r[0], "checkpoint")) for r in self._read("checkpoints", {})
        ]
