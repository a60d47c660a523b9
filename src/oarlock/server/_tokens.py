"""API tokens: who calls the server, for which tenant, in which role.

A token is ``oat_`` and 43 characters of a random 32 bytes; it is shown once, when it is
made, and only its SHA-256 is stored (the token has 256 bits of entropy: a plain hash is
as strong as a slow one here, and lets a request be checked in one indexed look-up). A
token carries a name (the principal every decision it makes is recorded under), a tenant
and a role, and may expire or be revoked.

The tokens live in the run database, in a table of their own (``api_tokens``) made by this
module's own migrations (``sql/sqlite/`` and ``sql/postgres/``, one numbered file per
version), recorded in a ``server_schema`` table under the component ``tokens``, so that
the run store's schema and its version are left as they are."""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from oarlock.errors import NotFound, StoreError, UsageError

if TYPE_CHECKING:
    from oarlock.store._postgres import PostgresStore
    from oarlock.store._sqlite import SQLiteStore

__all__ = [
    "ROLES",
    "Principal",
    "Role",
    "TokenInfo",
    "TokenStore",
    "hash_token",
    "token_store",
]

Role = Literal["viewer", "operator", "approver", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "approver", "admin")
# what each role may do: read, operate (start, cancel, resume runs), decide, administer
PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "operate"}),
    "approver": frozenset({"read", "decide"}),
    "admin": frozenset({"read", "operate", "decide", "admin"}),
}
_PREFIX = "oat_"
_TOKEN = re.compile(r"^oat_[A-Za-z0-9_-]{43}$")
# a name or tenant: it is recorded as a principal and shown in pages and on terminals
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")
_SQL = Path(__file__).with_name("sql")
_COMPONENT = "tokens"
MAX_EXPIRES_IN = 366 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: a token's name, tenant and role."""

    name: str
    tenant: str
    role: Role
    token_id: str

    def may(self, permission: str) -> bool:
        return permission in PERMISSIONS[self.role]


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A stored token, without its secret."""

    id: str
    name: str
    tenant: str
    role: Role
    created_at: float
    expires_at: float | None
    revoked_at: float | None

    def live(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def to_json(self) -> dict[str, Any]:
        from datetime import UTC, datetime

        def when(t: float | None) -> str | None:
            if t is None:
                return None
            return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        return {
            "id": self.id,
            "name": self.name,
            "tenant": self.tenant,
            "role": self.role,
            "createdAt": when(self.created_at),
            "expiresAt": when(self.expires_at),
            "revokedAt": when(self.revoked_at),
        }


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def well_formed(token: str) -> bool:
    return bool(_TOKEN.match(token))


def check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise UsageError(
            f"a token's {what} is 1 to 128 letters, digits and . _ : @ + - (starting with a "
            "letter or digit)",
        )
    return value


def check_role(value: str) -> Role:
    for role in ROLES:
        if value == role:
            return role
    raise UsageError(f"a token's role is one of {', '.join(ROLES)}")


def check_expiry(seconds: float | None) -> float | None:
    if seconds is None:
        return None
    if (
        isinstance(seconds, bool)
        or not (isinstance(seconds, int | float) and math.isfinite(seconds))
        or not 0 < seconds <= MAX_EXPIRES_IN
    ):
        raise UsageError(
            f"a token's lifetime is more than 0 and at most {MAX_EXPIRES_IN:g} seconds"
        )
    return float(seconds)


def _migrations(dialect: str) -> list[tuple[int, str]]:
    found = []
    for entry in sorted((_SQL / dialect).iterdir()):
        if m := _MIGRATION.match(entry.name):
            found.append((int(m.group(1)), entry.read_text("utf-8")))
    return found


def _row(row: Any) -> TokenInfo:
    return TokenInfo(
        id=row["id"],
        name=row["name"],
        tenant=row["tenant"],
        role=check_role(row["role"]),
        created_at=float(row["created_at"]),
        expires_at=None if row["expires_at"] is None else float(row["expires_at"]),
        revoked_at=None if row["revoked_at"] is None else float(row["revoked_at"]),
    )


class TokenStore:
    """The tokens of one run database (SQLite or PostgreSQL)."""

    async def prepare(self) -> None:
        """Make or migrate the tokens' table."""
        raise NotImplementedError

    async def made(self) -> bool:
        """Whether the database has the tokens' table (a command that only reads or
        revokes makes none)."""
        raise NotImplementedError

    async def _insert(self, info: TokenInfo, token_hash: str) -> None:
        raise NotImplementedError

    async def _select(self, where: str, params: dict[str, Any]) -> list[TokenInfo]:
        raise NotImplementedError

    async def _revoke(self, token_id: str, tenant: str | None, now: float) -> int:
        raise NotImplementedError

    async def create(
        self, *, name: str, tenant: str, role: str, expires_in: float | None = None
    ) -> tuple[str, TokenInfo]:
        """A new token (shown to the caller once) and what is stored of it."""
        now = time.time()
        lifetime = check_expiry(expires_in)
        info = TokenInfo(
            id=uuid.uuid4().hex[:16],
            name=check_name(name, "name"),
            tenant=check_name(tenant, "tenant"),
            role=check_role(role),
            created_at=now,
            expires_at=None if lifetime is None else now + lifetime,
            revoked_at=None,
        )
        token = _PREFIX + secrets.token_urlsafe(32)
        await self._insert(info, hash_token(token))
        return token, info

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of a live token; None for any other string."""
        if not well_formed(token):
            return None
        found = await self._select("token_hash = :hash", {"hash": hash_token(token)})
        if not found or not found[0].live(time.time()):
            return None
        t = found[0]
        return Principal(t.name, t.tenant, t.role, t.id)

    async def list(self, tenant: str | None = None) -> list[TokenInfo]:
        if tenant is None:
            return await self._select("1 = 1", {})
        return await self._select("tenant = :tenant", {"tenant": tenant})

    async def revoke(self, token_id: str, *, tenant: str | None = None) -> None:
        """Revoke a token (of ``tenant``, if given); NotFound if there is no live one."""
        if await self._revoke(token_id, tenant, time.time()) == 0:
            raise NotFound(f"no live token {token_id}", code="no_token")


class SQLiteTokens(TokenStore):
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def made(self) -> bool:
        row = self.store.db().execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'api_tokens'"
        ).fetchone()
        return row is not None

    async def prepare(self) -> None:
        from oarlock.store._sqlite import _statements

        conn = self.store.db()
        with self.store.transaction("migrating the tokens' schema"):
            conn.execute(
                "CREATE TABLE IF NOT EXISTS server_schema "
                "(component TEXT NOT NULL PRIMARY KEY, version INTEGER NOT NULL)"
            )
            row = conn.execute(
                "SELECT version FROM server_schema WHERE component = ?", (_COMPONENT,)
            ).fetchone()
            current = 0 if row is None else int(row[0])
            known = _migrations("sqlite")
            if current > len(known):
                raise StoreError(
                    f"the tokens' schema is at version {current}; this oarlock knows up to "
                    f"{len(known)}: upgrade oarlock",
                    code="schema_too_new",
                )
            for version, script in known[current:]:
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO server_schema (component, version) VALUES (?, ?) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    (_COMPONENT, version),
                )

    async def _insert(self, info: TokenInfo, token_hash: str) -> None:
        with self.store.transaction("storing a token"):
            self.store.db().execute(
                "INSERT INTO api_tokens (id, name, tenant, role, token_hash, created_at, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (info.id, info.name, info.tenant, info.role, token_hash, info.created_at,
                 info.expires_at),
            )  # fmt: skip

    async def _select(self, where: str, params: dict[str, Any]) -> list[TokenInfo]:
        rows = self.store.db().execute(
            "SELECT id, name, tenant, role, created_at, expires_at, revoked_at "
            f"FROM api_tokens WHERE {where} ORDER BY created_at, id",
            params,
        )
        return [_row(r) for r in rows.fetchall()]

    async def _revoke(self, token_id: str, tenant: str | None, now: float) -> int:
        with self.store.transaction("revoking a token"):
            cur = self.store.db().execute(
                "UPDATE api_tokens SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL "
                "AND (:tenant IS NULL OR tenant = :tenant)",
                {"now": now, "id": token_id, "tenant": tenant},
            )
            return int(cur.rowcount)


def _pg(sql: str) -> str:
    """A query of :class:`SQLiteTokens`'s ``:name`` style in psycopg's ``%(name)s``."""
    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)


class PostgresTokens(TokenStore):
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def made(self) -> bool:
        rows = await self.store.fetch(
            "looking for the tokens' table",
            "SELECT to_regclass('api_tokens') IS NOT NULL AS made",
        )
        return bool(rows and rows[0]["made"])

    async def prepare(self) -> None:
        from psycopg import AsyncConnection

        async def work(conn: AsyncConnection[Any]) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(7420130001)")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS server_schema "
                "(component TEXT NOT NULL PRIMARY KEY, version INTEGER NOT NULL)"
            )
            cur = await conn.execute(
                "SELECT version FROM server_schema WHERE component = %s", (_COMPONENT,)
            )
            row = await cur.fetchone()
            current = 0 if row is None else int(row[0])
            known = _migrations("postgres")
            if current > len(known):
                raise StoreError(
                    f"the tokens' schema is at version {current}; this oarlock knows up to "
                    f"{len(known)}: upgrade oarlock",
                    code="schema_too_new",
                )
            for version, script in known[current:]:
                await conn.execute(script.encode("utf-8"))
                await conn.execute(
                    "INSERT INTO server_schema (component, version) VALUES (%s, %s) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    (_COMPONENT, version),
                )

        await self.store.run("migrating the tokens' schema", work)

    async def _insert(self, info: TokenInfo, token_hash: str) -> None:
        from psycopg import AsyncConnection

        async def work(conn: AsyncConnection[Any]) -> None:
            await conn.execute(
                "INSERT INTO api_tokens (id, name, tenant, role, token_hash, created_at, "
                "expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (info.id, info.name, info.tenant, info.role, token_hash, info.created_at,
                 info.expires_at),
            )  # fmt: skip

        await self.store.run("storing a token", work)

    async def _select(self, where: str, params: dict[str, Any]) -> list[TokenInfo]:
        rows = await self.store.fetch(
            "reading tokens",
            _pg(
                "SELECT id, name, tenant, role, created_at, expires_at, revoked_at "
                f"FROM api_tokens WHERE {where} ORDER BY created_at, id"
            ),
            params,
        )
        return [_row(r) for r in rows]

    async def _revoke(self, token_id: str, tenant: str | None, now: float) -> int:
        from psycopg import AsyncConnection

        async def work(conn: AsyncConnection[Any]) -> int:
            cur = await conn.execute(
                _pg(
                    "UPDATE api_tokens SET revoked_at = :now WHERE id = :id "
                    "AND revoked_at IS NULL AND (:tenant::text IS NULL OR tenant = :tenant)"
                ),
                {"now": now, "id": token_id, "tenant": tenant},
            )
            return int(cur.rowcount)

        return await self.store.run("revoking a token", work)


def token_store(store: object) -> TokenStore:
    """The tokens kept beside ``store`` (an SQLite or a PostgreSQL store)."""
    from oarlock.store._sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        return SQLiteTokens(store)
    from oarlock.store._postgres import PostgresStore

    if isinstance(store, PostgresStore):
        return PostgresTokens(store)
    raise UsageError("the server keeps its tokens in an SQLite or a PostgreSQL database")
