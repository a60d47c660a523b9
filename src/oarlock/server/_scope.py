"""Reads scoped by tenant: whose a run is, a tenant's runs a page at a time, and the
verification of the ledger chain that holds a tenant's records (:func:`verify`).

The run stores list runs newest first up to a limit; the server pages through them with a
cursor (the last run's creation time and id, newest first), by keyset: each page is one
indexed query, however deep. These two reads are the server's own SQL over the stores'
``runs`` table (and SQLite's ``run_tags``); everything else goes through the stores."""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any

from oarlock.errors import UsageError

__all__ = ["Cursor", "RunPage", "list_runs", "tenant_of", "verify"]


@dataclass(frozen=True, slots=True)
class Cursor:
    created_at: str
    id: str

    def encode(self) -> str:
        raw = json.dumps([self.created_at, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            value = json.loads(raw.decode("utf-8"))
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise UsageError(
                "the cursor is not one this server gave", code="invalid_cursor"
            ) from None
        if not (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, str) and len(v) <= 256 for v in value)
        ):
            raise UsageError("the cursor is not one this server gave", code="invalid_cursor")
        return cls(value[0], value[1])


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[dict[str, Any]]
    next: Cursor | None
    versions: dict[str, int]  # each run's version (what its document is at)


async def tenant_of(store: object, run_id: str) -> str | None:
    """The tenant of a run; None when there is no such run."""
    from oarlock.store._sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        row = store.db().execute("SELECT tenant FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])
    from oarlock.store._postgres import PostgresStore

    if isinstance(store, PostgresStore):
        rows = await store.fetch(
            f"reading the tenant of run {run_id}",
            "SELECT tenant FROM runs WHERE id = %(id)s",
            {"id": run_id},
        )
        return None if not rows else str(rows[0]["tenant"])
    raise UsageError("the server needs an SQLite or a PostgreSQL store")


_SQLITE_PAGE = """
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant, version,
       CASE WHEN lease_until > :now THEN lease_owner END AS holder
FROM runs
WHERE tenant = :tenant
  AND (:status IS NULL OR status = :status)
  AND (:agent IS NULL OR agent = :agent)
  AND (:c_at IS NULL OR created_at < :c_at OR (created_at = :c_at AND id < :c_id))
  AND :tag_count = (SELECT count(*) FROM json_each(:tags) AS j
                    JOIN run_tags AS t
                      ON t.run_id = runs.id AND t.key = j.key AND t.value = j.value)
ORDER BY created_at DESC, id DESC
LIMIT :limit
"""

_PG_PAGE = """
SELECT id, agent, status, tags, turns, created_at, updated_at, tenant, version,
       CASE WHEN lease_until >= extract(epoch FROM statement_timestamp())
            THEN lease_owner END AS holder
FROM runs
WHERE tenant = %(tenant)s::text
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(agent)s::text IS NULL OR agent = %(agent)s::text)
  AND (%(c_at)s::text IS NULL OR created_at < %(c_at)s::text
       OR (created_at = %(c_at)s::text AND id < %(c_id)s::text))
  AND tags @> %(tags)s::jsonb
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s
"""


def _summary(row: Any) -> dict[str, Any]:
    tags = row["tags"]
    if isinstance(tags, str | bytes):
        tags = json.loads(tags)
    return {
        "id": row["id"],
        "agent": row["agent"],
        "status": row["status"],
        "tags": tags,
        "turns": row["turns"],
        "createdAt": row["created_at"],
        "updatedAt": row["updated_at"],
        "holder": row["holder"],
    }


async def list_runs(
    store: object,
    *,
    tenant: str,
    limit: int,
    status: str | None = None,
    agent: str | None = None,
    tags: dict[str, str] | None = None,
    after: Cursor | None = None,
) -> RunPage:
    """One page of the tenant's runs, newest first, and the cursor of the next (None at
    the end)."""
    from oarlock.store._sqlite import SQLiteStore

    tag_text = json.dumps(tags or {}, separators=(",", ":"), ensure_ascii=False)
    params: dict[str, Any] = {
        "tenant": tenant,
        "status": status,
        "agent": agent,
        "c_at": None if after is None else after.created_at,
        "c_id": None if after is None else after.id,
        "tags": tag_text,
        "limit": limit + 1,
    }
    if isinstance(store, SQLiteStore):
        params |= {"tag_count": len(tags or {}), "now": time.time()}
        rows = store.db().execute(_SQLITE_PAGE, params).fetchall()
    else:
        from oarlock.store._postgres import PostgresStore

        if not isinstance(store, PostgresStore):
            raise UsageError("the server needs an SQLite or a PostgreSQL store")
        rows = await store.fetch("listing runs", _PG_PAGE, params)
    runs = [_summary(r) for r in rows[:limit]]
    versions = {r["id"]: int(r["version"]) for r in rows[:limit]}
    more = len(rows) > limit
    last = runs[-1] if runs and more else None
    cursor = None if last is None else Cursor(last["createdAt"], last["id"])
    return RunPage(runs, cursor, versions)


def _entries_of(entries: list[Any], tenant: str) -> set[int]:
    """The sequence numbers of the entries of ``tenant``'s records: its invocations and
    approvals by their scope, receipts and reconciliations by their invocation's."""
    invocations: dict[Any, Any] = {}
    mine: set[int] = set()
    for entry in entries:
        body = entry.body if isinstance(entry.body, dict) else {}
        if entry.kind in ("invocation", "approval"):
            scope = body.get("scope")
            owner = scope.get("tenantId") if isinstance(scope, dict) else None
            if entry.kind == "invocation" and isinstance(body.get("invocationId"), str):
                invocations[body["invocationId"]] = owner
        else:
            ref = body.get("invocationId")
            owner = invocations.get(ref) if isinstance(ref, str) else None
        if owner == tenant:
            mine.add(entry.seq)
    return mine


async def verify(store: Any, tenant: str) -> dict[str, Any]:
    """Verify the ledger chain that holds ``tenant``'s records, against the stored
    checkpoints. A chain of its own (PostgreSQL) is told whole. A chain it shares with
    other tenants (SQLite's one chain) is verified whole too (the tenant's entries hang on
    the others'), but only what is the tenant's is told: whether the chain holds, how many
    entries are the tenant's, the problems at those (any others counted in one problem
    that names no entry); neither the chain's head nor its checkpoints, which move with
    other tenants' calls."""
    from oarlock.governance._ledger import DEFAULT_CHAIN, verify_chains

    gov = store.governance()
    chains = await gov.chains()
    name = tenant if tenant in chains else DEFAULT_CHAIN
    entries = await gov.ledger(name) if name in chains else []
    checkpoints = [c for c in await gov.checkpoints() if c.ledger_chain == name]
    report = verify_chains({name: entries}, checkpoints, ())[name]
    problems = [{"seq": p.seq, "code": p.code, "message": p.message} for p in report.problems]
    if name == tenant:
        return {
            "ok": report.ok,
            "chain": name,
            "shared": False,
            "entries": report.entries,
            "headSeq": report.head_seq,
            "headHash": report.head_hash,
            "checkpointsChecked": report.checkpoints_checked,
            "latestCheckpoint": None if not checkpoints else checkpoints[-1].to_json(),
            "problems": problems,
        }
    mine = _entries_of(entries, tenant)
    own = [p for p in problems if p["seq"] in mine]
    if len(own) < len(problems):
        others = len(problems) - len(own)
        own.append(
            {
                "seq": None,
                "code": "elsewhere",
                "message": f"{others} problem{'s' if others > 1 else ''} in entries of the "
                "shared chain that are not this tenant's",
            }
        )
    return {
        "ok": report.ok,
        "chain": name,
        "shared": True,
        "entries": len(mine),
        "headSeq": None,
        "headHash": None,
        "checkpointsChecked": report.checkpoints_checked,
        "latestCheckpoint": None,
        "problems": own,
    }
