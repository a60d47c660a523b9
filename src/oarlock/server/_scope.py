"""Reads scoped by tenant: whose a run is, and a tenant's runs a page at a time.

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

__all__ = ["Cursor", "RunPage", "list_runs", "tenant_of"]


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
