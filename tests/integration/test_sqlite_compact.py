"""Schema version 3 of the SQLite store: the documents of runs at rest compressed, events
that name their run by number, fewer indexes; and the migration of a version-2 file that
holds runs, events and governance records, which must keep every one of them readable,
the ledger verifiable, and the file writable."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from helpers import echo, echo_agent
from oarlock.engine import Agent, Runner
from oarlock.errors import IntegrityError
from oarlock.formats import dump_json
from oarlock.formats._time import now_rfc3339
from oarlock.governance import generate_key, sign_checkpoint, verify_chain
from oarlock.models import ScriptedModel
from oarlock.store import Event, SQLiteStore, _sqlite, _sqlite_rows

KEY = generate_key()


def agent(calls: int, *, pay_last: bool = False) -> Agent:
    return echo_agent("compact", calls, pay_last=pay_last)


async def fill(path: Path) -> tuple[str, str]:
    """A tagged run of three reads, and a run that pays after an approval; a checkpoint of
    the ledger's head. The two run ids."""
    async with SQLiteStore(path) as store:
        reads = await Runner(agent(3), store).start("go", tags={"team": "a"}, agent_ref="m:a")
        runner = Runner(agent(1, pay_last=True), store)
        paid = await runner.start("pay")
        assert paid.status == "waiting_approval"
        await runner.decide(paid.id, paid.pending_approvals[0].tool_call_id, "approved")
        assert (await runner.resume(paid.id)).status == "completed"
        governance = store.governance()
        head = (await governance.ledger())[-1]
        await governance.add_checkpoint(sign_checkpoint(head, KEY, now_rfc3339()))
    return reads.id, paid.id


def contents(path: Path) -> dict[str, Any]:
    """Everything the store gives back, read through its methods."""

    async def go() -> dict[str, Any]:
        async with SQLiteStore(path) as store:
            runs = await store.list_runs()
            governance = store.governance()
            stored = {r.id: await store.load(r.id) for r in runs}
            return {
                "runs": runs,
                "tagged": await store.list_runs(tags={"team": "a"}),
                "documents": {i: store.read_document(i) for i in stored},
                "stored": {
                    i: (dump_json(s.document), s.version, s.agent_ref) for i, s in stored.items()
                },
                "events": {i: await store.events(i) for i in stored},
                "ledger": await governance.ledger(),
                "receipts": await governance.receipts(),
                "open_claims": await governance.open_claims(),
                "checkpoints": await governance.checkpoints(),
            }

    return asyncio.run(go())


def as_version_2(source: Path, target: Path) -> None:
    """Write into ``target`` the data of ``source`` laid out as a version-2 store wrote it:
    the schema of migrations 1 and 2, events keyed by their run's id, documents and event
    data as JSON."""
    conn = sqlite3.connect(target)
    for _, script in _sqlite._migrations()[:2]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("ATTACH DATABASE ? AS v3", (str(source),))
    with conn:
        conn.execute(
            "INSERT INTO runs SELECT id, agent, status, turns, tags, created_at, "
            "updated_at, version, agent_ref, document FROM v3.runs ORDER BY num"
        )
        conn.execute(
            "INSERT INTO events SELECT r.id, e.seq, e.kind, e.at, e.data "
            "FROM v3.events AS e JOIN v3.runs AS r ON r.num = e.run_num"
        )
        conn.execute(  # the claims of version 2 name no run and no lease epoch
            "INSERT INTO claims SELECT tenant_id, tool_id, idempotency_key, invocation_id, "
            "arguments_hash, owner, claimed_at, lease_until FROM v3.claims"
        )
        for table in (
            "run_tags",
            "ledger",
            "invocations",
            "approvals",
            "receipts",
            "reconciliations",
            "artifacts",
            "checkpoints",
        ):
            conn.execute(f"INSERT INTO {table} SELECT * FROM v3.{table}")
        for run_id, document in conn.execute("SELECT id, document FROM runs").fetchall():
            conn.execute(
                "UPDATE runs SET document = ? WHERE id = ?", (zlib.decompress(document), run_id)
            )
        packed = "SELECT run_id, seq, data FROM events WHERE typeof(data) = 'blob'"
        for run_id, seq, data in conn.execute(packed).fetchall():  # JSON text, as then
            text = _sqlite._compact(_sqlite_rows._event_data(run_id, seq, data))
            conn.execute(
                "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?", (text, run_id, seq)
            )
    conn.execute("DETACH DATABASE v3")
    conn.close()


def column(path: Path, sql: str, *params: Any) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute(sql, params)]
    finally:
        conn.close()


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "v3.db"
    asyncio.run(fill(path))
    return path


def test_documents_are_compressed_at_rest_and_read_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    model = ScriptedModel(
        [{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "done"}]
    )
    stored: list[bytes] = []

    async def go() -> None:
        async with SQLiteStore(path) as store:
            runner = Runner(Agent("compact", model, tools=[echo]), store)
            doc, _ = await runner.create("go")
            (running,) = column(path, "SELECT document FROM runs")
            stored.append(running)
            done = await runner.resume(doc.id)
            assert done.status == "completed"
            loaded = await store.load(doc.id)
            assert dump_json(loaded.document) == dump_json(done)
            assert store.read_document(doc.id) == json.loads(dump_json(done))

    asyncio.run(go())
    (at_rest,) = column(path, "SELECT document FROM runs")
    assert stored[0].startswith(b"{")  # a running document is JSON
    assert not at_rest.startswith(b"{")
    assert zlib.decompress(at_rest).startswith(b'{"format":')


@pytest.mark.parametrize("damage", ["flipped-byte", "truncated", "other-stream"])
def test_a_damaged_compressed_document_is_an_integrity_error(filled: Path, damage: str) -> None:
    conn = sqlite3.connect(filled)
    run_id, document = conn.execute("SELECT id, document FROM runs LIMIT 1").fetchone()
    damaged = {
        "flipped-byte": document[:20] + bytes([document[20] ^ 0x10]) + document[21:],
        "truncated": document[:-5],
        "other-stream": zlib.compress(b'{"format": "oar/0.2"}'),
    }[damage]
    with conn:
        conn.execute("UPDATE runs SET document = ? WHERE id = ?", (damaged, run_id))
    conn.close()

    async def go() -> None:
        async with SQLiteStore(filled) as store:
            with pytest.raises(IntegrityError, match=run_id):
                await store.load(run_id)
            with pytest.raises(IntegrityError, match=run_id):
                store.read_document(run_id)

    asyncio.run(go())


def test_a_new_file_has_no_free_pages_and_reads_receipts_through_an_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    asyncio.run(SQLiteStore(path).close())
    assert column(path, "PRAGMA freelist_count") == [0]  # the pages 0003 freed went back
    sql = _sqlite.named_queries("sqlite_governance.sql")["list_receipts"]
    conn = sqlite3.connect(path)
    params = dict.fromkeys(re.findall(r":(\w+)", sql))
    plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    conn.close()
    assert "sqlite_autoindex_receipts" in plan  # newest first through UNIQUE (ledger_seq)
    assert "TEMP B-TREE" not in plan  # rather than sorting every receipt


def test_a_file_with_tables_of_its_own_gets_the_schema_and_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
    conn.close()
    asyncio.run(fill(path))
    assert column(path, "SELECT body FROM notes") == ["kept"]
    assert column(path, "PRAGMA user_version") == [_sqlite.schema_version()]
    assert len(contents(path)["runs"]) == 2


def test_a_version_2_database_is_migrated_keeping_its_runs_events_and_ledger(
    filled: Path, tmp_path: Path
) -> None:
    old = tmp_path / "v2.db"
    as_version_2(filled, old)
    assert column(old, "PRAGMA user_version") == [2]
    expected = contents(filled)

    got = contents(old)  # opened by the code that knows every migration

    assert column(old, "PRAGMA user_version") == [_sqlite.schema_version()]
    assert got == expected
    assert len(got["runs"]) == 2 and len(got["tagged"]) == 1
    assert all(got["events"].values()) and got["receipts"] and got["checkpoints"]
    report = verify_chain(got["ledger"], got["checkpoints"], [KEY.public_key()])
    assert report.ok, report.problems
    assert report.entries == len(expected["ledger"]) > 0
    assert report.checkpoints_checked == 1
    # migrated in place: the rows keep their values, the events name their run by number
    assert all(d.startswith(b"{") for d in column(old, "SELECT document FROM runs"))
    assert column(old, "SELECT DISTINCT run_num FROM events ORDER BY run_num") == [1, 2]
    assert column(old, "PRAGMA foreign_key_check") == []


def test_a_migrated_database_takes_new_runs_events_and_records(
    filled: Path, tmp_path: Path
) -> None:
    old = tmp_path / "v2.db"
    as_version_2(filled, old)
    before = contents(old)
    run_id = before["runs"][-1].id

    async def go() -> str:
        async with SQLiteStore(old) as store:
            stored = await store.load(run_id)
            await store.save(stored.document, stored.version, [Event("status_changed", "t")])
            return (await Runner(agent(2), store).start("again", tags={"team": "a"})).id

    new_id = asyncio.run(go())
    after = contents(old)
    seqs = [e.seq for e in after["events"][run_id]]
    assert seqs == list(range(1, len(before["events"][run_id]) + 2))
    assert after["events"][run_id][-1].kind == "status_changed"
    assert after["documents"][new_id]["status"] == "completed"
    assert [r.id for r in after["tagged"]] == [new_id, *(r.id for r in before["tagged"])]
    assert len(after["ledger"]) > len(before["ledger"])
    report = verify_chain(after["ledger"], after["checkpoints"], [KEY.public_key()])
    assert report.ok, report.problems
    assert column(old, "SELECT num FROM runs WHERE id = ?", new_id) == [3]


def test_a_version_2_database_whose_ledger_lost_a_row_still_opens_and_shows_it(
    filled: Path, tmp_path: Path
) -> None:
    """The migration does not refuse a file with a dangling key (an index row naming a
    removed ledger entry): the verifier must be able to read it and name the gap."""
    old = tmp_path / "v2.db"
    as_version_2(filled, old)
    conn = sqlite3.connect(old)
    with conn:
        conn.execute("DELETE FROM ledger WHERE seq = 2")
    conn.close()
    ledger = contents(old)["ledger"]
    assert [(p.seq, p.code) for p in verify_chain(ledger).problems] == [(2, "seq_gap")]
