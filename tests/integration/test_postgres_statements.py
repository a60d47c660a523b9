"""What one durable run costs on PostgreSQL, pinned: a 10-turn run of one read tool sends
23 statements, each its own round trip and, where it writes, its own transaction (the
run's creation, 21 saves, the lease taken; the last save gives the lease back; each read,
run before it was claimed, is recorded by its step's save: its claim, invocation and
receipt); and its commits wait for the disk as the store's documentation says: the 11
saves of a model response and the lease's claim with ``synchronous_commit`` on, the
creation and the saves of the 10 steps' results (with their reads' records) with it off
(11). A save whose records its statement cannot write (an entry hashed in Python) writes
them, then the run, in one transaction.

The one-statement claim and receipt (migrations 0003 and 0004) leave to the transaction of several
statements what they do not do: an entry time that needs escaping in JSON (its hash
written in Python), a claim held, a receipt there already; the ledger verifies either
way. A version-2 database is migrated and its chain continued by them."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgtest
from helpers import invocation_record
from oarlock.errors import ConflictError
from oarlock.formats._jcs import digest
from oarlock.governance._ledger import entry_hash, verify_chains
from oarlock.governance._records import Claim
from oarlock.store._postgres import PostgresStore

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def url() -> str:
    return pgtest.new_database()


@pytest.fixture
def empty() -> str:
    return pgtest.empty_database()


def raw(url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


@contextlib.contextmanager
def counted() -> Iterator[collections.Counter[str]]:
    """Count the statements psycopg sends from now on (by their name in the store's SQL
    files, else their text), and the round trips (a statement outside a pipeline, or a
    pipeline) under ``"round trips"``."""
    from oarlock.store._postgres_base import pg_queries

    names = {
        text: name
        for filename in ("postgres_queries.sql", "postgres_governance.sql")
        for name, text in pg_queries(filename).items()
    }
    counts: collections.Counter[str] = collections.Counter()
    real_execute = psycopg.AsyncCursor.execute
    real_pipeline = psycopg.AsyncConnection.pipeline

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counts[names.get(query, str(query))] += 1
        counts["statements"] += 1
        if self.connection._pipeline is None:
            counts["round trips"] += 1
        return await real_execute(self, query, *args, **kwargs)

    @contextlib.asynccontextmanager
    async def pipeline(self: Any) -> Any:
        outer = self._pipeline is None
        async with real_pipeline(self) as p:
            yield p
        if outer:
            counts["round trips"] += 1

    mp = pytest.MonkeyPatch()
    mp.setattr(psycopg.AsyncCursor, "execute", execute)
    mp.setattr(psycopg.AsyncConnection, "pipeline", pipeline)
    try:
        yield counts
    finally:
        mp.undo()


def log_commits(url: str) -> None:
    """Record, in commit_log, the transaction and its synchronous_commit setting as it
    commits (a deferred trigger fires just before the commit) of every write to the
    tables a run and its calls write."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE commit_log (xid bigint, mode text)")
        conn.execute(
            "CREATE FUNCTION log_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO commit_log VALUES (txid_current(), "
            "current_setting('synchronous_commit')); RETURN NULL; END $$"
        )
        for table in ("runs", "events", "claims", "invocations", "receipts", "ledger"):
            conn.execute(
                f"CREATE CONSTRAINT TRIGGER log_{table} AFTER INSERT OR UPDATE ON {table} "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION log_commit()"
            )


async def test_a_ten_turn_run_sends_one_statement_per_write_and_keeps_its_commit_modes(
    url: str,
) -> None:
    from helpers import echo_agent
    from oarlock.engine import Runner

    async with PostgresStore(url) as store:
        await Runner(echo_agent("warm", 1), store).start("go")  # the pool, the plans
        log_commits(url)
        with counted() as counts:
            doc = await Runner(echo_agent("counts", 10), store).start("go")
        assert doc.status == "completed" and doc.turns == 11
    assert counts["statements"] == 23, counts
    assert counts["round trips"] == 23, counts
    assert {name: counts[name] for name in ("create_run", "save_run", "claim_of",
            "begin_fast", "finish_fast", "record_fast", "claim_run", "release")} == {
        "create_run": 1, "save_run": 21, "claim_of": 0, "begin_fast": 0,
        "finish_fast": 0, "record_fast": 0, "claim_run": 1, "release": 0}  # fmt: skip
    modes = raw(url, "SELECT mode, count(DISTINCT xid) FROM commit_log GROUP BY mode")
    assert dict(modes) == {"on": 12, "off": 11}
    # the 10 reads, and the warm-up run's one
    assert raw(url, "SELECT count(*) FROM receipts WHERE status = 'Succeeded'") == [(11,)]
    assert raw(url, "SELECT count(*) FROM claims") == [(11,)]
    assert raw(url, "SELECT lease_owner, lease_until, ready_at FROM runs WHERE id = %s",
               [doc.id]) == [(None, None, None)]  # fmt: skip


async def test_a_save_writes_its_records_in_its_statement_or_else_in_one_transaction(
    url: str,
) -> None:
    from oarlock.formats import dump_run, parse_run
    from oarlock.formats._jcs import canonicalize
    from oarlock.governance._store import Recorded

    def record(key: str, finished: str) -> Recorded:
        inv = invocation(key)
        receipt = {**receipt_for(inv), "finishedAt": finished}
        return Recorded(inv, claim_for(inv), receipt, None, NOW, canonicalize(receipt))

    odd = 'at "quoted" \\ and é'  # the receipt's entry is hashed in Python
    example = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
    data = dump_run(parse_run(example.read_bytes()))
    data.update(id="run-r", status="running", pendingApprovals=[])
    doc = parse_run(data)
    async with PostgresStore(url) as store:
        await store.create(doc, [])
        with counted() as plain:
            assert await store.save(doc, 1, [], records=[record("k1", NOW)]) == 2
        with counted() as apart:
            assert await store.save(doc, 2, [], records=[record("k2", NOW), record("k3", odd)]) == 3
        entries = await store.governance().ledger("acme")
    assert plain["statements"] == plain["save_run"] == 1, plain
    # the statement, rolled back by OA001; then in one transaction the records' claims,
    # ledger heads and entries, and the save
    assert apart["save_run"] == 2 and apart["insert_claim"] == 2, apart
    assert verify_chains({"acme": entries})["acme"].ok
    assert [e.kind for e in entries] == ["invocation", "receipt"] * 3
    assert entries[5].at == odd
    assert raw(url, "SELECT version FROM runs WHERE id = %s", [doc.id]) == [(3,)]


def invocation(key: str, tenant: str = "acme") -> dict[str, Any]:
    return invocation_record(key, arguments={"order_id": key}, tenant=tenant, at=NOW)


def claim_for(inv: dict[str, Any]) -> Claim:
    return Claim(
        tenant_id="acme",
        tool_id=inv["toolId"],
        idempotency_key=inv["idempotencyKey"],
        invocation_id=inv["invocationId"],
        arguments_hash=inv["argumentsHash"],
        owner="h:1:1",
        claimed_at=NOW,
        lease_until=0.0,
    )


def receipt_for(inv: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"invocationId": inv["invocationId"], "status": "Succeeded",
                            "startedAt": NOW}  # fmt: skip
    body["receiptHash"] = digest(body)
    return body


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Which one-statement writes wrote (True) or left it to the transaction (False)."""
    from oarlock.store import _postgres_governance as gov

    taken: list[tuple[str, bool]] = []
    real = gov._fast

    async def fast(conn: Any, name: str, params: dict[str, Any]) -> bool:
        wrote = await real(conn, name, params)
        taken.append((name, wrote))
        return wrote

    monkeypatch.setattr(gov, "_fast", fast)
    return taken


async def test_what_one_statement_does_not_do_the_transaction_does(
    url: str, paths: list[tuple[str, bool]]
) -> None:
    odd = 'at "quoted" \\ and é'  # not its own JSON string: hashed in Python
    async with PostgresStore(url) as store:
        gov = store.governance()
        first, second, third = invocation("k1"), invocation("k2"), invocation("k1")
        assert await gov.begin(first, claim_for(first), approval_id=None, grant=None,
                               at=NOW) is None  # fmt: skip
        await gov.finish(receipt_for(first), result=b"out", at=odd)
        assert await gov.begin(second, claim_for(second), approval_id=None, grant=None,
                               at=odd) is None  # fmt: skip
        await gov.finish(receipt_for(second), result=None, at=NOW)
        held = await gov.begin(third, claim_for(third), approval_id=None, grant=None, at=NOW)
        assert held is not None and held.claim.invocation_id == first["invocationId"]
        with pytest.raises(ConflictError) as info:
            await gov.finish(receipt_for(first), result=None, at=NOW)
        assert info.value.code == "receipt_exists"
        entries = await gov.ledger("acme")
        assert verify_chains({"acme": entries})["acme"].ok
        assert [(e.kind, e.at) for e in entries] == [
            ("invocation", NOW),
            ("receipt", odd),
            ("invocation", odd),
            ("receipt", NOW),
        ]
        assert await gov.artifact(digest_ref(b"out")) == b"out"
    assert paths == [
        ("begin_fast", True),
        ("finish_fast", False),
        ("begin_fast", False),
        ("finish_fast", True),
        ("begin_fast", False),
        ("finish_fast", False),
    ]
    assert raw(url, "SELECT count(*) FROM claims") == [(2,)]


async def test_a_record_the_statement_does_not_write_the_transaction_does(
    url: str, paths: list[tuple[str, bool]]
) -> None:
    odd = 'at "quoted" \\ and é'
    async with PostgresStore(url) as store:
        gov = store.governance()
        first, second, third = invocation("k1"), invocation("k2"), invocation("k1")
        finished = {**receipt_for(second), "finishedAt": odd}
        assert await gov.record(first, claim_for(first), {**receipt_for(first),
                                "finishedAt": NOW}, result=b"out", at=NOW) is None  # fmt: skip
        assert await gov.record(second, claim_for(second), finished, result=None,
                                at=NOW) is None  # fmt: skip
        held = await gov.record(third, claim_for(third), {**receipt_for(third),
                                "finishedAt": NOW}, result=b"again", at=NOW)  # fmt: skip
        assert held is not None and held.claim.invocation_id == first["invocationId"]
        assert held.receipt is not None and held.receipt["invocationId"] == first["invocationId"]
        entries = await gov.ledger("acme")
        assert verify_chains({"acme": entries})["acme"].ok
        assert [(e.kind, e.at, e.body["invocationId"]) for e in entries] == [
            ("invocation", NOW, first["invocationId"]),
            ("receipt", NOW, first["invocationId"]),
            ("invocation", NOW, second["invocationId"]),
            ("receipt", odd, second["invocationId"]),
        ]
        assert await gov.artifact(digest_ref(b"out")) == b"out"
    # the odd time is the receipt's: the statement's begin wrote, its finish could not,
    # and both rolled back; the held key wrote nothing either way
    assert paths == [("record_fast", True), ("record_fast", False), ("record_fast", False)]
    assert raw(url, "SELECT count(*) FROM claims") == [(2,)]
    assert raw(url, "SELECT count(*) FROM artifacts") == [(1,)]


def digest_ref(data: bytes) -> str:
    from oarlock.governance._store import artifact_ref

    return artifact_ref(data)


async def test_a_version_2_database_is_migrated_and_its_chain_goes_on(empty: str) -> None:
    from oarlock.store._postgres_base import _migrations, pg_queries, pg_schema_version

    url = empty
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pg_queries("postgres_queries.sql")["schema_table"])
        for version, script in _migrations()[:2]:
            conn.execute(script.encode("utf-8"))
            conn.execute("INSERT INTO oarlock_schema (version) VALUES (%s)", (version,))
        # one entry, as version 2's store wrote it
        body = '{"note":"before"}'
        first = entry_hash(1, "invocation", NOW, {"note": "before"}, "sha256:" + "0" * 64)
        conn.execute(
            "INSERT INTO ledger VALUES ('acme', 1, 'invocation', %s, %s, %s, %s)",
            (NOW, body, "sha256:" + "0" * 64, first),
        )
        conn.execute("INSERT INTO ledger_heads VALUES ('acme', 1, %s)", (first,))
    async with PostgresStore(url) as store:
        gov = store.governance()
        inv = invocation("k1")
        assert await gov.begin(inv, claim_for(inv), approval_id=None, grant=None, at=NOW) is None
        await gov.finish(receipt_for(inv), result=None, at=NOW)
        entries = await gov.ledger("acme")
    assert [e.seq for e in entries] == [1, 2, 3] and entries[1].prev_hash == first
    assert verify_chains({"acme": entries})["acme"].ok
    versions = raw(url, "SELECT version FROM oarlock_schema ORDER BY version")
    assert [v for (v,) in versions] == list(range(1, pg_schema_version() + 1))
