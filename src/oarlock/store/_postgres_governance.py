"""The governed executor's records in the PostgreSQL database.

Each record is written once, as a ledger entry (its JCS text, sequence number, previous
hash and entry hash); the tables ``invocations``, ``claims``, ``approvals``, ``receipts``
and ``reconciliations`` index it by ``(chain, ledger_seq)``.

**One hash chain per tenant.** A record goes to the chain of its tenant: an invocation's
and an approval's ``scope.tenantId`` (``default`` when it names none), a receipt's and a
reconciliation's invocation's. The transaction that stores a record locks its chain's
head row (``ledger_heads``, ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``: made from
the chain's last entry if it has none), appends after it and moves it, so writers of one
tenant extend one chain without forks, and writers of different tenants never wait for
each other. The head is locked last, after the claim and the approval, so that it is held
for as short a time as the transaction allows.

A method is one transaction; the idempotency claim is a unique insert (``ON CONFLICT DO
NOTHING``, then a look at who holds the key), never select-then-insert. A write given a
``fence`` (a worker's lease on the run) first reads the run's lease ``FOR SHARE``: unless
its epoch and owner are the fence's, :class:`~oarlock.errors.LeaseLost` and nothing is
written; the share lock holds a later claim of the run back until this commits.

**One statement per call, usually.** ``begin`` and ``finish``, the two writes of every
governed call, first try the functions ``oarlock_begin`` and ``oarlock_finish`` (migration
0003), and ``record``, the one write of a read that ran before it was claimed, the
function ``oarlock_record`` (migration 0004), which calls the two: one statement, one
round trip, its own transaction, which does the same steps in the same order (the fence,
the claim, the head, the entries with their hashes computed by ``oarlock_entry_hash``,
byte for byte :func:`entry_hash_canonical`, the index rows, the head moved). They do the
usual case only: a fence that does not hold, a claim held, an approval used, an invocation
without one or with a receipt already, a unique key taken, an
entry whose time needs escaping in JSON make them write nothing (they return ``'slow'`` or
roll back with SQLSTATE ``OA001``), and the method's transaction of several statements
runs, on the same connection, and says why it refuses (or, run again after the server
ended the connection as the statement committed, finds its own record and lets it stand).
The statement commits as it ends: a lost connection while it runs leaves the outcome
unknown (``commit_unknown``), as a lost ``COMMIT`` does.

Durability as :mod:`oarlock.store._postgres` states it: the claim of a side-effecting
call, reconciliations and checkpoints are synchronous commits; the rest commit with
``synchronous_commit = off``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oarlock.errors import (
    CanonicalizationError,
    ConflictError,
    IntegrityError,
    NotFound,
)
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
from oarlock.store._postgres_base import SLOW, Slow, pg_queries, run_again

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from oarlock.store._postgres import PostgresStore
    from oarlock.store._queue import Lease

__all__ = ["PostgresGovernanceStore", "chain_of", "records_params"]

_SAFE = frozenset({"read", "sandbox"})
_APPROVAL_KEYS = frozenset({"approvals_run_id_tool_call_id_key", "approvals_pkey"})


def _q(name: str) -> str:
    return pg_queries("postgres_governance.sql")[name]


def chain_of(scope: object) -> str:
    """The ledger chain of a record with this scope: its tenant."""
    tenant = scope.get("tenantId") if isinstance(scope, dict) else None
    return tenant if isinstance(tenant, str) and tenant else DEFAULT_CHAIN


def _body(text: Any, what: str) -> dict[str, Any]:
    try:
        value = loads_jcs(text)
    except (TypeError, ValueError, CanonicalizationError):
        raise IntegrityError(f"stored {what} is not JSON", code="record_corrupt") from None
    if not isinstance(value, dict):
        raise IntegrityError(f"stored {what} is not a JSON object", code="record_corrupt")
    return value


def _claim(row: dict[str, Any]) -> Claim:
    try:
        return Claim(
            tenant_id=row["tenant_id"],
            tool_id=row["tool_id"],
            idempotency_key=row["idempotency_key"],
            invocation_id=row["invocation_id"],
            arguments_hash=row["arguments_hash"],
            owner=row["owner"],
            claimed_at=row["claimed_at"],
            lease_until=float(row["lease_until"]),
            run_id=row["run_id"],
            epoch=None if row["epoch"] is None else int(row["epoch"]),
        )
    except (TypeError, ValueError):
        raise IntegrityError("a stored claim is corrupt", code="record_corrupt") from None


def _claim_params(claim: Claim) -> dict[str, Any]:
    return {
        "tenant_id": claim.tenant_id,
        "tool_id": claim.tool_id,
        "idempotency_key": claim.idempotency_key,
        "invocation_id": claim.invocation_id,
        "arguments_hash": claim.arguments_hash,
        "owner": claim.owner,
        "claimed_at": claim.claimed_at,
        "lease_until": claim.lease_until,
        "run_id": claim.run_id,
        "epoch": claim.epoch,
    }


async def _rows(conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> list[Any]:
    from psycopg.rows import dict_row

    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(_q(name), params)
    return await cur.fetchall() if cur.description else []


async def _count(conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> int:
    cur = await conn.execute(_q(name), params)
    return cur.rowcount


def _fence_params(fence: Lease | None) -> dict[str, Any]:
    if fence is None:
        return {"fence_run": None, "fence_epoch": None, "fence_owner": None}
    return {"fence_run": fence.run_id, "fence_epoch": fence.epoch, "fence_owner": fence.owner}


async def _fast(conn: AsyncConnection[Any], name: str, params: dict[str, Any]) -> bool:
    """Run the one-statement form of a write (``begin_fast``, ``finish_fast``): whether it
    wrote it; if not, it wrote nothing (it returned 'slow', or raised OA001 or a unique
    violation, and its statement rolled back)."""
    import psycopg

    try:
        row = await (await conn.execute(_q(name), params)).fetchone()
    except psycopg.errors.UniqueViolation:
        return False
    except psycopg.DatabaseError as exc:
        if exc.sqlstate != "OA001":
            raise
        return False
    return row is not None and row[0] == "ok"


async def _check_fence(conn: AsyncConnection[Any], fence: Lease | None) -> None:
    """LeaseLost unless the run's lease is still ``fence``'s; the run's row stays locked
    (FOR SHARE) against a claim until the transaction ends."""
    if fence is None:
        return
    from oarlock.store._leases import lease_lost

    row = await (await conn.execute(_q("fence"), {"id": fence.run_id})).fetchone()
    if row is None:
        raise lease_lost(fence, None)
    epoch, owner = row
    if (epoch, owner) != (fence.epoch, fence.owner):
        raise lease_lost(fence, int(epoch))


class _Appender:
    """The entries one transaction appends to one chain, in order, written together after
    the chain's head is locked."""

    def __init__(self, chain: str) -> None:
        self.chain = chain
        self.entries: list[tuple[str, str, bytes, str, dict[str, Any]]] = []

    def add(
        self, kind: str, at: str, body: dict[str, Any], table: str, row: dict[str, Any]
    ) -> None:
        self.entries.append((kind, at, canonicalize(body), table, row))

    async def write(self, conn: AsyncConnection[Any]) -> None:
        head = await _rows(conn, "lock_head", {"chain": self.chain, "genesis": GENESIS_HASH})
        seq, prev = int(head[0]["seq"]), str(head[0]["entry_hash"])
        async with conn.pipeline():  # the writes go in one round trip, under the lock
            for kind, at, jcs, table, row in self.entries:
                seq += 1
                entry = entry_hash_canonical(seq, kind, at, jcs, prev)
                await conn.execute(
                    _q("ledger_append"),
                    {
                        "chain": self.chain,
                        "seq": seq,
                        "kind": kind,
                        "at": at,
                        "body": jcs.decode("utf-8"),
                        "prev_hash": prev,
                        "entry_hash": entry,
                    },
                )
                await conn.execute(_q(table), {**row, "chain": self.chain, "ledger_seq": seq})
                prev = entry
            await conn.execute(
                _q("move_head"), {"chain": self.chain, "seq": seq, "entry_hash": prev}
            )


def _record_args(
    invocation_jcs: bytes,
    invocation: dict[str, Any],
    claim: Claim,
    receipt: dict[str, Any],
    *,
    result: bytes | None,
    at: str,
) -> dict[str, Any]:
    """oarlock_record's arguments for a call's one write (but its fence, ``lazy`` and its
    result's bytes), by name."""
    return {
        **_claim_params(claim),
        "chain": chain_of(invocation.get("scope")),
        "at": at,
        "invocation_body": invocation_jcs.decode("utf-8"),
        "invocation_run": invocation["runId"],
        "status": receipt["status"],
        "finished_at": receipt["finishedAt"],
        "receipt_body": canonicalize(receipt).decode("utf-8"),
        "ref": None if result is None else artifact_ref(result),
    }


def records_params(records: Sequence[Recorded]) -> dict[str, Any]:
    """save_run's ``records`` and ``results`` for the records a save carries."""
    args = []
    for r in records:
        remember(r.receipt, r.receipt_jcs)
        try:
            jcs = canonicalize(r.invocation)
            arg = _record_args(jcs, r.invocation, r.claim, r.receipt, result=r.result, at=r.at)
            args.append(arg)
        finally:
            forget(r.receipt)
    return {"records": json.dumps(args), "results": [r.result for r in records]}


def _invocation_row(invocation: dict[str, Any]) -> dict[str, Any]:
    return {"invocation_id": invocation["invocationId"], "run_id": invocation["runId"]}


def _invocation_appender(invocation: dict[str, Any], at: str) -> _Appender:
    """The entries of a write that stores ``invocation`` (at ``at``) first, on its chain."""
    appender = _Appender(chain_of(invocation.get("scope")))
    appender.add("invocation", at, invocation, "insert_invocation", _invocation_row(invocation))
    return appender


class PostgresGovernanceStore:
    """A :class:`~oarlock.governance.GovernanceStore` beside a :class:`PostgresStore`'s
    runs, sharing its pool."""

    def __init__(self, runs: PostgresStore) -> None:
        self._runs = runs

    async def _read(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._runs.fetch(f"reading governance records ({name})", _q(name), params)

    # -- writes -------------------------------------------------------------------------
    async def record_approval(self, approval: Approval) -> None:
        appender = _Appender(chain_of(approval.scope))
        appender.add(
            "approval",
            approval.decided_at,
            approval.to_json(),
            "insert_approval",
            {
                "approval_id": approval.approval_id,
                "run_id": approval.run_id,
                "tool_call_id": approval.tool_call_id,
                "used_by": None,
            },
        )

        async def work(conn: AsyncConnection[Any]) -> None:
            if run_again():  # this decision's first try may have committed
                params = {"run_id": approval.run_id, "tool_call_id": approval.tool_call_id}
                found = await _rows(conn, "approval_for", params)
                if found and _body(found[0]["body"], "approval") == approval.to_json():
                    return
            await self._write_approval(conn, appender, approval)

        # committed without a flush: the run's commit of the decision follows at once,
        # before the decision is acknowledged (see the module documentation)
        await self._runs.run("recording an approval", work, sync=False)

    @staticmethod
    async def _write_approval(
        conn: AsyncConnection[Any], appender: _Appender, approval: Approval
    ) -> None:
        import psycopg

        try:
            await appender.write(conn)
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name not in _APPROVAL_KEYS:
                raise
            raise ConflictError(
                f"call {approval.tool_call_id} of run {approval.run_id} is already decided",
                code="already_decided",
            ) from None

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
        appender = _Appender(chain_of(invocation.get("scope")))
        invocation_id = invocation["invocationId"]
        if grant is not None:
            appender.add(
                "approval",
                at,
                grant.to_json(),
                "insert_approval",
                {
                    "approval_id": grant.approval_id,
                    "run_id": grant.run_id,
                    "tool_call_id": grant.tool_call_id,
                    "used_by": invocation_id,
                },
            )
        appender.add("invocation", at, invocation, "insert_invocation", _invocation_row(invocation))

        # a side-effecting call's claim is durable before its effect can start
        sync = invocation.get("sideEffectClass") not in _SAFE
        bodies = [jcs.decode("utf-8") for _, _, jcs, _, _ in appender.entries]
        params = {
            **_claim_params(claim),
            **_fence_params(fence),
            "lazy": not sync,
            "approval_id": approval_id,
            "chain": appender.chain,
            "at": at,
            "invocation_body": bodies[-1],
            "invocation_run": invocation["runId"],
            "grant_body": None if grant is None else bodies[0],
            "grant_id": None if grant is None else grant.approval_id,
            "grant_run": None if grant is None else grant.run_id,
            "grant_call": None if grant is None else grant.tool_call_id,
        }

        async def fast(conn: AsyncConnection[Any]) -> ClaimHeld | Slow | None:
            return None if await _fast(conn, "begin_fast", params) else SLOW

        async def work(conn: AsyncConnection[Any]) -> ClaimHeld | None:
            await _check_fence(conn, fence)
            taken, held = await self._take(conn, claim)
            if not taken:
                return held
            if approval_id is not None and grant is None:
                params = {"approval_id": approval_id, "invocation_id": invocation_id}
                if await _count(conn, "use_approval", params) != 1:
                    raise ConflictError(
                        f"approval {approval_id} was used already", code="approval_used"
                    )
            if grant is not None:
                await self._write_approval(conn, appender, grant)
            else:
                await appender.write(conn)
            return None

        return await self._runs.run("claiming an idempotency key", work, sync=sync, fast=fast)

    async def _take(
        self, conn: AsyncConnection[Any], claim: Claim
    ) -> tuple[bool, ClaimHeld | None]:
        """Insert ``claim``: (True, None) when it is taken; else (False, its holder), or
        (False, None) when the holder is this claim's own first try, which committed (see
        run_again): the write it belongs to stands."""
        if await _count(conn, "insert_claim", _claim_params(claim)) == 1:
            return True, None
        held = await self._held(conn, claim.tenant_id, claim.tool_id, claim.idempotency_key)
        if run_again() and held is not None and held.claim.invocation_id == claim.invocation_id:
            return False, None
        return False, held

    async def take_over(
        self,
        stale: Claim,
        claim: Claim,
        invocation: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> bool:
        appender = _invocation_appender(invocation, at)
        params = _claim_params(claim) | {
            "stale_invocation_id": stale.invocation_id,
            "stale_owner": stale.owner,
        }

        async def work(conn: AsyncConnection[Any]) -> bool:
            await _check_fence(conn, fence)
            if await _count(conn, "take_over", params) != 1:
                if run_again():  # this take-over's first try may have committed
                    key = (claim.tenant_id, claim.tool_id, claim.idempotency_key)
                    held = await self._held(conn, *key)
                    return held is not None and held.claim.invocation_id == claim.invocation_id
                return False
            await appender.write(conn)
            return True

        return await self._runs.run("taking over a stale claim", work, sync=False)

    async def finish(
        self,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Lease | None = None,
    ) -> None:
        params = {
            **_fence_params(fence),
            "lazy": True,
            "invocation_id": receipt["invocationId"],
            "status": receipt["status"],
            "at": at,
            "receipt_body": canonicalize(receipt).decode("utf-8"),
            "ref": None if result is None else artifact_ref(result),
            "data": result,
        }

        async def fast(conn: AsyncConnection[Any]) -> Slow | None:
            return None if await _fast(conn, "finish_fast", params) else SLOW

        async def work(conn: AsyncConnection[Any]) -> None:
            await _check_fence(conn, fence)
            await self._insert_receipt(conn, receipt, result, at, None)

        await self._runs.run("writing a receipt", work, sync=False, fast=fast)

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
        appender = _invocation_appender(invocation, at)
        finished = receipt["finishedAt"]
        params = {
            **_record_args(
                appender.entries[0][2], invocation, claim, receipt, result=result, at=at
            ),
            **_fence_params(fence),
            "lazy": True,
            "data": result,
        }

        async def fast(conn: AsyncConnection[Any]) -> ClaimHeld | Slow | None:
            return None if await _fast(conn, "record_fast", params) else SLOW

        async def work(conn: AsyncConnection[Any]) -> ClaimHeld | None:
            await _check_fence(conn, fence)
            taken, held = await self._take(conn, claim)
            if not taken:
                return held
            await self._insert_receipt(conn, receipt, result, finished, appender)
            return None

        return await self._runs.run("recording a call", work, sync=False, fast=fast)

    async def write_records(self, conn: AsyncConnection[Any], records: Sequence[Recorded]) -> None:
        """Write the records a run's save carries (:class:`Recorded`) in its transaction,
        each as ``record`` writes it apart; a held key raises :func:`claim_held`."""
        for r in records:
            taken, held = await self._take(conn, r.claim)
            if held is not None:
                raise claim_held(r)
            if taken:  # else this write's own first try committed (see run_again)
                appender = _invocation_appender(r.invocation, r.at)
                finished = r.receipt["finishedAt"]
                await self._insert_receipt(conn, r.receipt, r.result, finished, appender)

    async def _insert_receipt(
        self,
        conn: AsyncConnection[Any],
        receipt: dict[str, Any],
        result: bytes | None,
        at: str,
        appender: _Appender | None,
    ) -> None:
        """Append ``receipt`` (after what ``appender`` holds, if given: the invocation of
        a refused call, stored in the same transaction) and write them."""
        invocation_id = receipt["invocationId"]
        if appender is None:
            found = await _rows(conn, "invocation_chain", {"invocation_id": invocation_id})
            if not found:
                raise NotFound(f"no invocation {invocation_id}")
            if found[0]["status"] is not None:
                if run_again() and found[0]["status"] == receipt["status"]:
                    return  # this receipt's own first try committed (see run_again)
                raise ConflictError(
                    f"invocation {invocation_id} has a receipt already", code="receipt_exists"
                )
            appender = _Appender(str(found[0]["chain"]))
        if result is not None:
            await conn.execute(_q("insert_artifact"), {"ref": artifact_ref(result), "data": result})
        appender.add(
            "receipt",
            at,
            receipt,
            "insert_receipt",
            {
                "invocation_id": invocation_id,
                "status": receipt["status"],
            },
        )
        import psycopg

        try:
            await appender.write(conn)
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name not in ("receipts_pkey", "invocations_pkey"):
                raise
            if run_again():
                return  # this write's own first try committed (see run_again)
            raise ConflictError(
                f"invocation {invocation_id} has a receipt already", code="receipt_exists"
            ) from None

    async def refuse(
        self,
        invocation: dict[str, Any],
        receipt: dict[str, Any],
        at: str,
        *,
        fence: Lease | None = None,
    ) -> None:
        async def work(conn: AsyncConnection[Any]) -> None:
            await _check_fence(conn, fence)
            appender = _invocation_appender(invocation, at)
            await self._insert_receipt(conn, receipt, None, at, appender)

        await self._runs.run("recording a refused call", work, sync=False)

    async def reconcile(self, reconciliation: Reconciliation) -> None:
        invocation_id = reconciliation.invocation_id

        async def work(conn: AsyncConnection[Any]) -> None:
            found = await _rows(conn, "invocation_chain", {"invocation_id": invocation_id})
            if not found or found[0]["status"] is None:
                raise NotFound(f"no receipt for invocation {invocation_id}")
            if found[0]["status"] != "Uncertain":
                raise ConflictError(
                    f"invocation {invocation_id} is {found[0]['status']}, not Uncertain",
                    code="not_uncertain",
                )
            appender = _Appender(str(found[0]["chain"]))
            # the head is locked before the latest reconciliation is read: two operators
            # reconciling one receipt at once are ordered by it, the second sees the first
            await _rows(conn, "lock_head", {"chain": appender.chain, "genesis": GENESIS_HASH})
            latest = await _rows(conn, "latest_reconciliation", {"invocation_id": invocation_id})
            check_supersedes(
                reconciliation,
                None
                if not latest
                else Reconciliation.from_json(_body(latest[0]["body"], "record")),
            )
            appender.add(
                "reconciliation",
                reconciliation.at,
                reconciliation.to_json(),
                "insert_reconciliation",
                {
                    "reconciliation_id": reconciliation.reconciliation_id,
                    "invocation_id": invocation_id,
                },
            )
            await appender.write(conn)

        await self._runs.run("recording a reconciliation", work)

    async def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        body = json.dumps(checkpoint.to_json(), separators=(",", ":"))
        params = {"chain": checkpoint.ledger_chain, "seq": checkpoint.seq, "body": body}

        async def work(conn: AsyncConnection[Any]) -> None:
            await conn.execute(_q("insert_checkpoint"), params)

        await self._runs.run("storing a checkpoint", work, transaction=False)

    # -- reads --------------------------------------------------------------------------
    async def _held(
        self, conn: AsyncConnection[Any], tenant_id: str, tool_id: str, key: str
    ) -> ClaimHeld | None:
        params = {"tenant_id": tenant_id, "tool_id": tool_id, "idempotency_key": key}
        rows = await _rows(conn, "claim_of", params)
        if not rows:
            return None
        row = rows[0]
        receipt = None if row["receipt"] is None else _body(row["receipt"], "receipt")
        epoch = row["run_epoch"]
        return ClaimHeld(_claim(row), receipt, None if epoch is None else int(epoch))

    async def claim_of(self, tenant_id: str, tool_id: str, key: str) -> ClaimHeld | None:
        async def work(conn: AsyncConnection[Any]) -> ClaimHeld | None:
            return await self._held(conn, tenant_id, tool_id, key)

        return await self._runs.run("reading a claim", work, transaction=False, idempotent=True)

    async def approval_for(self, run_id: str, tool_call_id: str) -> tuple[Approval, str | None]:
        rows = await self._read("approval_for", {"run_id": run_id, "tool_call_id": tool_call_id})
        if not rows:
            raise NotFound(f"no approval for call {tool_call_id} of run {run_id}")
        return Approval.from_json(_body(rows[0]["body"], "approval")), rows[0]["used_by"]

    async def load(self, invocation_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        rows = await self._read("load_invocation", {"invocation_id": invocation_id})
        if not rows:
            raise NotFound(f"no invocation {invocation_id}")
        receipt = rows[0]["receipt"]
        return _body(rows[0]["invocation"], "invocation"), (
            None if receipt is None else _body(receipt, "receipt")
        )

    async def reconciliations(self, invocation_id: str) -> list[Reconciliation]:
        rows = await self._read("reconciliations", {"invocation_ids": [invocation_id]})
        return [Reconciliation.from_json(_body(r["body"], "reconciliation")) for r in rows]

    async def receipts(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[StoredReceipt]:
        rows = await self._read(
            "list_receipts", {"run_id": run_id, "status": status, "limit": max(limit, 0)}
        )
        receipts = [_body(row["receipt"], "receipt") for row in rows]
        ids = [str(r.get("invocationId")) for r in receipts]
        notes: dict[str, list[Reconciliation]] = {}
        if ids:
            for row in await self._read("reconciliations", {"invocation_ids": ids}):
                notes.setdefault(row["invocation_id"], []).append(
                    Reconciliation.from_json(_body(row["body"], "reconciliation"))
                )
        return [
            StoredReceipt(
                _body(row["invocation"], "invocation"),
                receipt,
                tuple(notes.get(str(receipt.get("invocationId")), ())),
            )
            for row, receipt in zip(rows, receipts, strict=True)
        ]

    async def open_claims(self) -> list[Claim]:
        return [_claim(row) for row in await self._read("open_claims", {})]

    async def artifact(self, ref: str) -> bytes:
        rows = await self._read("artifact", {"ref": ref})
        if not rows:
            raise NotFound(f"no artifact {ref}")
        data = rows[0]["data"]
        data = bytes(data) if isinstance(data, bytes | memoryview) else b""
        if artifact_ref(data) != ref:
            raise IntegrityError(
                f"artifact {ref} does not match its content", code="record_corrupt"
            )
        return data

    async def chains(self) -> list[str]:
        return [str(row["chain"]) for row in await self._read("chains", {})]

    async def ledger(self, chain: str | None = None) -> list[LedgerEntry]:
        if chain is None:  # every chain, one after the other
            rows = await self._read("ledger_all", {})
        else:
            rows = await self._read("ledger_chain", {"chain": chain})
        return self._entries(rows)

    async def approval_ledger(self, run_id: str, tool_call_id: str) -> list[LedgerEntry]:
        rows = await self._read(
            "approval_ledger", {"run_id": run_id, "tool_call_id": tool_call_id}
        )
        return self._entries(rows)

    @staticmethod
    def _entries(rows: Any) -> list[LedgerEntry]:
        entries = []
        for row in rows:
            try:
                body = loads_jcs(row["body"])
            except (TypeError, ValueError, CanonicalizationError):
                body = {"unreadable": str(row["body"])}
            entries.append(
                LedgerEntry(
                    seq=row["seq"],
                    kind=row["kind"],
                    at=row["at"],
                    body=body,
                    prev_hash=row["prev_hash"],
                    entry_hash=row["entry_hash"],
                )
            )
        return entries

    async def checkpoints(self) -> list[Checkpoint]:
        checkpoints = []
        for row in await self._read("checkpoints", {}):
            try:
                data = json.loads(row["body"])
            except (TypeError, ValueError):
                raise IntegrityError(
                    "a stored checkpoint is not JSON", code="checkpoint_invalid"
                ) from None
            checkpoints.append(Checkpoint.from_json(data))
        return checkpoints
