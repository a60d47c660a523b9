"""SQLiteStore with real processes and real files: races, durability, corruption, schema."""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing as mp
import os
import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from oarlock.errors import ConflictError, IntegrityError, StoreError
from oarlock.formats import RunDocument, dump_json, dump_run, parse_run
from oarlock.store import Event, SQLiteStore, _sqlite, default_db_path

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
RUN_ID = "race-run"
SPAWN = mp.get_context("spawn")
WAIT = 60


def make_doc(run_id: str = RUN_ID, **members: Any) -> RunDocument:
    return parse_run({**dump_run(parse_run(EXAMPLE.read_bytes())), "id": run_id, **members})


def event_rows(events: list[Event]) -> list[tuple[int, str, str, dict[str, Any]]]:
    return [(e.seq, e.kind, e.at, e.data) for e in events]


def create(path: Path, doc: RunDocument, events: list[Event], agent_ref: str | None) -> None:
    async def go() -> None:
        async with SQLiteStore(path) as store:
            await store.create(doc, events, agent_ref=agent_ref)

    asyncio.run(go())


def snapshot(path: Path, run_id: str = RUN_ID) -> tuple[bytes, int, str | None, list[Any]]:
    async def go() -> tuple[bytes, int, str | None, list[Any]]:
        async with SQLiteStore(path) as store:
            stored = await store.load(run_id)
            events = event_rows(await store.events(run_id))
            return dump_json(stored.document), stored.version, stored.agent_ref, events

    return asyncio.run(go())


def run_in_process(target: Any, *args: Any) -> None:
    proc = SPAWN.Process(target=target, args=args)
    proc.start()
    proc.join(WAIT)
    assert proc.exitcode == 0, f"{target.__name__} exited with {proc.exitcode}"


# --- workers (module level, so the spawn context can import them) ---------------------

def race_worker(path: str, name: str, rounds: int, barrier: Any, results: Any) -> None:
    async def go() -> None:
        async with SQLiteStore(path) as store:
            for n in range(rounds):
                stored = await store.load(RUN_ID)
                mine = make_doc(result=f"{name}-{n}", turns=n + 1)
                barrier.wait()
                try:
                    event = Event("status_changed", f"t{n}", {"writer": name, "round": n})
                    version = await store.save(mine, stored.version, [event])
                    results.put((n, name, "won", version))
                except ConflictError as exc:
                    results.put((n, name, "conflict", str(exc)))
                barrier.wait()

    asyncio.run(go())


def write_and_die(path: str) -> None:
    """Writes, then exits without closing: only what was committed may survive."""
    async def go() -> None:
        store = SQLiteStore(path)
        await store.create(make_doc(), [Event("run_created", "t0", {"by": "child"})],
                           agent_ref="agents/refund.yaml")
        await store.save(make_doc(turns=5), 1, [Event("model_responded", "t1", {"n": 1})])
        await store.save(make_doc(turns=6, result="done"), 2, [])

    asyncio.run(go())
    os._exit(0)


def read_back(path: str, results: Any) -> None:
    results.put(snapshot(Path(path)))


# --- races and durability ---------------------------------------------------------------

def test_racing_saves_from_two_processes_one_wins(tmp_path: Path) -> None:
    path, rounds = tmp_path / "race.db", 8
    create(path, make_doc(), [Event("run_created", "t", {})], None)
    barrier, results = SPAWN.Barrier(2, timeout=WAIT), SPAWN.Queue()
    procs = [SPAWN.Process(target=race_worker, args=(str(path), name, rounds, barrier, results))
             for name in ("alpha", "beta")]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=WAIT) for _ in range(2 * rounds)]
    for proc in procs:
        proc.join(WAIT)
        assert proc.exitcode == 0
    winners = []
    for n in range(rounds):
        this_round = sorted((o for o in outcomes if o[0] == n), key=lambda o: o[2])
        assert [o[2] for o in this_round] == ["conflict", "won"], this_round
        (_, _, _, message), (_, winner, _, version) = this_round
        assert version == n + 2
        assert f"stored version {n + 2}, expected {n + 1}" in message
        winners.append(winner)
    document, version, _, events = snapshot(path)
    assert document == dump_json(make_doc(result=f"{winners[-1]}-{rounds - 1}", turns=rounds))
    assert version == rounds + 1
    assert events == [(1, "run_created", "t", {})] + [
        (n + 2, "status_changed", f"t{n}", {"writer": w, "round": n})
        for n, w in enumerate(winners)]


def test_committed_writes_survive_the_process_and_reopen_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "durable.db"
    run_in_process(write_and_die, str(path))
    results = SPAWN.Queue()
    run_in_process(read_back, str(path), results)
    document, version, agent_ref, events = results.get(timeout=WAIT)
    assert document == dump_json(make_doc(turns=6, result="done"))
    assert (version, agent_ref) == (3, "agents/refund.yaml")
    assert events == [(1, "run_created", "t0", {"by": "child"}),
                      (2, "model_responded", "t1", {"n": 1})]
    assert snapshot(path) == (document, version, agent_ref, events)


# --- corruption ---------------------------------------------------------------------------

def tamper(path: Path, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.close()


@pytest.mark.parametrize("garbage", [
    b"\x00\xff\xfe garbage", b'{"format": "oar/0.2", "id": "race-r', b'{"a": 1}', b"[]", 42,
    dump_json(make_doc("someone-else")),
], ids=["bytes", "truncated", "not-a-run", "array", "integer", "other-run"])
def test_corrupt_document_raises_integrity_error(tmp_path: Path, garbage: object) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [], None)
    tamper(path, "UPDATE runs SET document = ? WHERE id = ?", garbage, RUN_ID)
    with pytest.raises(IntegrityError, match=RUN_ID) as info:
        snapshot(path)
    assert info.value.code == "integrity"


def test_corrupt_event_data_raises_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [Event("run_created", "t", {"a": 1})], None)
    tamper(path, "UPDATE events SET data = '{oops' "
                 "WHERE run_num = (SELECT num FROM runs WHERE id = ?)", RUN_ID)
    with pytest.raises(IntegrityError, match=RUN_ID):
        snapshot(path)


# --- schema ---------------------------------------------------------------------------------

def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_existing_database_with_newer_schema_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [Event("run_created", "t", {})], None)
    newer = _sqlite.schema_version() + 1
    tamper(path, f"PRAGMA user_version = {newer}")
    before = digest(path)
    with pytest.raises(StoreError, match=f"schema version {newer}") as info:
        SQLiteStore(path)
    assert info.value.code == "schema_too_new"
    assert digest(path) == before


def test_foreign_database_with_newer_schema_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = digest(path)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert info.value.code == "schema_too_new"
    assert digest(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    conn.close()


def schema(path: Path) -> dict[str, set[str]]:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    found: dict[str, set[str]] = {}
    for kind, name in rows:
        found.setdefault(kind, set()).add(name)
    conn.close()
    return found


RUN_TABLES = {"runs", "events", "run_tags"}
GOVERNANCE_TABLES = {"ledger", "invocations", "claims", "approvals", "receipts",
                     "reconciliations", "artifacts", "checkpoints"}
QUEUE_TABLES = {"workers", "leaders"}
ALL_TABLES = RUN_TABLES | GOVERNANCE_TABLES | QUEUE_TABLES | {"messages"}


def query_plans(conn: sqlite3.Connection, queries: Mapping[str, str]) -> dict[str, str]:
    """Each named query's plan, one line; compiling it proves its tables and columns exist."""
    plans = {}
    for name, sql in queries.items():
        params = dict.fromkeys(re.findall(r":(\w+)", sql))
        conn.execute("EXPLAIN " + sql, params).fetchall()
        plans[name] = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    return plans


def test_migrations_create_what_every_named_query_needs(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    asyncio.run(SQLiteStore(path).close())
    assert schema(path) == {
        "table": ALL_TABLES,
        "index": {"runs_by_created", "runs_by_status", "run_tags_by_value",
                  "reconciliations_by_invocation", "runs_runnable", "runs_served",
                  "runs_by_holder", "runs_approval_due"},
        "trigger": {"runs_tags_created", "runs_tags_changed"},
    }
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite.schema_version() >= 2
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    queries = _sqlite.named_queries()
    assert {"create_run", "load_run", "save_run", "append_event", "list_runs"} <= set(queries)
    plans = query_plans(conn, queries)
    conn.close()
    assert "runs_by_status" in plans["list_runs_by_status"]
    assert "runs_by_created" in plans["list_runs"]
    assert "run_tags_by_value" in plans["list_runs_by_tags"]
    assert "SCAN runs" not in plans["list_runs_by_tags"]


def test_migrations_create_what_every_governance_query_needs(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    asyncio.run(SQLiteStore(path).close())
    conn = sqlite3.connect(path)
    queries = _sqlite.named_queries("sqlite_governance.sql")
    assert {"ledger_append", "insert_claim", "claim_of", "approval_for", "use_approval",
            "insert_receipt", "list_receipts", "open_claims"} <= set(queries)
    plans = query_plans(conn, queries)
    conn.close()
    # the look-ups made for every tool call search by key, never scan
    assert "PRIMARY KEY" in plans["claim_of"]
    assert "SCAN" not in plans["claim_of"]
    assert "SCAN" not in plans["approval_for"]
    assert "SCAN" not in plans["load_invocation"]
    assert "reconciliations_by_invocation" in plans["reconciliations"]
    # the fence of every governed write reads one run by its id
    assert "SCAN" not in plans["run_epoch"]


def test_migrations_create_what_every_queue_query_needs(tmp_path: Path) -> None:
    """The claim walks runs_runnable (never the table, whatever the queue holds); the
    lookups of one run, of the leases held, of a tenant's last claim and of lapsed
    approvals each go through an index."""
    path = tmp_path / "x.db"
    asyncio.run(SQLiteStore(path).close())
    conn = sqlite3.connect(path)
    queries = _sqlite.named_queries("sqlite_queue.sql")
    assert {"claim", "claim_run", "renew", "release", "heartbeat", "workers", "leases",
            "lead", "lapsed_approvals", "runnable"} <= set(queries)
    plans = query_plans(conn, queries)
    conn.close()
    claim = plans["claim"]
    for runs in ("runs", "r", "n", "s"):  # the aliases of runs in the claim
        assert f"SCAN {runs} " not in claim + " ", claim
    assert "runs_runnable (queue=? AND tenant=? AND ready_at<?)" in claim
    assert "runs_runnable (queue=? AND tenant>?)" in claim
    assert "runs_served (tenant=?" in claim
    assert "runs_by_holder" in plans["leases"]
    assert "runs_approval_due" in plans["lapsed_approvals"]
    for name in ("claim_run", "renew", "release", "lease_of"):
        assert "SCAN" not in plans[name], (name, plans[name])


def test_reopening_migrates_nothing_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [Event("run_created", "t", {})], "m:a")
    first = snapshot(path)
    assert snapshot(path) == first
    assert schema(path)["table"] == ALL_TABLES


def test_a_version_1_database_is_migrated_to_the_governance_schema_keeping_its_runs(
    tmp_path: Path,
) -> None:
    path, doc = tmp_path / "x.db", make_doc()
    conn = sqlite3.connect(path)  # the schema and rows of a version-1 store
    conn.executescript(_sqlite._migrations()[0][1])
    conn.execute("PRAGMA user_version = 1")
    with conn:
        conn.execute(
            "INSERT INTO runs (id, agent, status, turns, created_at, updated_at, version, "
            "agent_ref, document) VALUES (?, ?, ?, ?, ?, ?, 1, 'm:a', ?)",
            (RUN_ID, doc.agent, doc.status, doc.turns, doc.created_at, doc.updated_at,
             dump_json(doc)))
        conn.execute("INSERT INTO events VALUES (?, 1, 'run_created', 't', '{}')", (RUN_ID,))
    conn.close()
    assert schema(path)["table"] == RUN_TABLES
    after = snapshot(path)  # opened by the code that knows every migration
    assert schema(path)["table"] == ALL_TABLES
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite.schema_version()
    conn.close()
    assert after == (dump_json(doc), 1, "m:a", [(1, "run_created", "t", {})])


def test_failed_migration_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = (*_sqlite._migrations(), (_sqlite.schema_version() + 1,
                                        "CREATE TABLE later (a);\nTHIS IS NOT SQL;\n"))
    monkeypatch.setattr(_sqlite, "_migrations", lambda: broken)
    path = tmp_path / "x.db"
    with pytest.raises(StoreError, match="migrating"):
        SQLiteStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    conn.close()


# --- lifecycle and paths ------------------------------------------------------------------

def test_close_is_idempotent_and_a_closed_store_refuses_work(tmp_path: Path) -> None:
    async def go() -> None:
        store = SQLiteStore(tmp_path / "x.db")
        await store.close()
        await store.close()
        with pytest.raises(StoreError) as info:
            await store.load(RUN_ID)
        assert info.value.code == "store_closed"

    asyncio.run(go())


def test_event_data_that_is_not_json_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    create(path, make_doc(), [], None)
    before = snapshot(path)

    async def go() -> None:
        async with SQLiteStore(path) as store:
            with pytest.raises(StoreError, match="not JSON"):
                await store.save(make_doc(turns=9), 1, [Event("x", "t", {"bad": object()})])

    asyncio.run(go())
    assert snapshot(path) == before


def test_default_db_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OARLOCK_DB", str(tmp_path / "explicit.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "explicit.db"
    monkeypatch.delenv("OARLOCK_DB")
    assert default_db_path() == tmp_path / "xdg" / "oarlock" / "oarlock.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "oarlock" / "oarlock.db"
